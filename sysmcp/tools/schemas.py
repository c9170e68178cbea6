"""The JSON Schema shapes every tool's input and output schemas repeat, built one way.

A tool's schema stays in its module, readable as the data it is; these spare it the frames every
tool writes again: an object of named properties (which are required, whether others are allowed),
a typed value with its description (nullable where null is a value), a list of names, counts by
reason, and the ``path`` argument. Each call builds a fresh dict: schemas are described in place
(``descriptions.describe_paths``), so no fragment may be shared between two properties.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = [
    "arguments",
    "boolean",
    "counts",
    "integer",
    "names",
    "number",
    "objects",
    "path_argument",
    "path_errors",
    "record",
    "result",
    "string",
    "top_n_argument",
    "typed",
]


def typed(
    kind: str, description: str | None = None, *, null: bool = False, **keywords: Any
) -> dict[str, Any]:
    """A value of JSON type ``kind`` (or null, with ``null``): its other keywords in the order given,
    then its description (none: the common one of ``descriptions.COMMON`` may be filled in)."""
    schema: dict[str, Any] = {"type": [kind, "null"] if null else kind, **keywords}
    if description is not None:
        schema["description"] = description
    return schema


def integer(description: str | None = None, *, null: bool = False, **keywords: Any) -> dict[str, Any]:
    return typed("integer", description, null=null, **keywords)


def number(description: str | None = None, *, null: bool = False, **keywords: Any) -> dict[str, Any]:
    return typed("number", description, null=null, **keywords)


def string(description: str | None = None, *, null: bool = False, **keywords: Any) -> dict[str, Any]:
    return typed("string", description, null=null, **keywords)


def boolean(description: str | None = None, **keywords: Any) -> dict[str, Any]:
    return typed("boolean", description, **keywords)


def names(description: str | None = None) -> dict[str, Any]:
    """A list of strings (paths, names, lines)."""
    return typed("array", description, items=string())


def counts(description: str | None = None) -> dict[str, Any]:
    """Counts by name, e.g. the entries a walk skipped by reason."""
    return typed("object", description, additionalProperties=integer())


def path_argument(description: str | None = None) -> dict[str, Any]:
    """The ``path`` argument most tools take: a non-empty string."""
    return string(description, minLength=1)


def top_n_argument(description: str | None = None, *, maximum: int, default: int) -> dict[str, Any]:
    """How many items a list shows (1 to ``maximum``); the rest are counted, not listed."""
    return integer(description, minimum=1, maximum=maximum, default=default)


def arguments(properties: dict[str, Any], *, required: Iterable[str] | None = ("path",)) -> dict[str, Any]:
    """An input schema: these properties, ``required`` among them (None: every one optional), no
    other argument accepted."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        schema["required"] = list(required)
    schema["additionalProperties"] = False
    return schema


def record(
    properties: dict[str, Any],
    description: str | None = None,
    *,
    optional: Iterable[str] = (),
    required: Iterable[str] | None = None,
    closed: bool = True,
    null: bool = False,
) -> dict[str, Any]:
    """An object that always carries its ``properties`` but the ``optional`` ones (or only the
    ``required`` ones, where fewer are); ``closed``: and no others; ``null``: or null instead."""
    left_out = set(optional) if required is None else set(properties) - set(required)
    schema: dict[str, Any] = {"type": ["object", "null"] if null else "object"}
    if description is not None:
        schema["description"] = description
    schema["properties"] = properties
    schema["required"] = [name for name in properties if name not in left_out]
    if closed:
        schema["additionalProperties"] = False
    return schema


def result(properties: dict[str, Any], *, optional: Iterable[str] = ()) -> dict[str, Any]:
    """An output schema: every property is always there but the ``optional`` ones, and nothing else."""
    return record(properties, optional=optional)


def objects(properties: dict[str, Any], *, description: str | None = None) -> dict[str, Any]:
    """An array of objects that each carry every one of ``properties``."""
    return typed("array", description, items=record(properties, closed=False))


def path_errors(description: str | None = None) -> dict[str, Any]:
    """Files that could not be read or hashed, each with the reason."""
    return objects({"path": string(), "error": string()}, description=description)
