"""The JSON Schema frames every tool's input schema repeats, built one way (output schemas come
from the typed result: ``typed.schema_of``). A tool's input schema stays in its module, readable as
the data it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def typed(
    kind: str | list[str], description: str | None = None, *, null: bool = False, **keywords: Any
) -> dict[str, Any]:
    """A value of JSON type ``kind`` (a list: any of them; or null, with ``null``): its other keywords
    in the order given, then its description, if any."""
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
