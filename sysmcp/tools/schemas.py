"""The JSON Schema frames every tool's input schema repeats, built one way (output schemas come
from the typed result: ``typed.schema_of``). A tool's input schema stays in its module, readable as
the data it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class TimeBudget:
    """The ``timeout_s`` of a tool that stops at a time budget with a partial result (the server's
    instructions say what a partial answer is, once): its schema property and the capped seconds."""

    default: float
    maximum: float

    def property(self, description: str | None = None) -> dict[str, Any]:
        return number(description, minimum=0.001, maximum=_plain(self.maximum), default=_plain(self.default))

    def of(self, args: dict[str, Any]) -> float:
        return min(float(args.get("timeout_s", self.default)), self.maximum)


def _plain(seconds: float) -> float | int:
    """A whole number of seconds as an integer, so the schema reads 300 rather than 300.0."""
    return int(seconds) if float(seconds).is_integer() else seconds


def arguments(properties: dict[str, Any], *, required: Iterable[str] | None = ("path",)) -> dict[str, Any]:
    """An input schema: these properties, ``required`` among them (None: every one optional), no
    other argument accepted."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        schema["required"] = list(required)
    schema["additionalProperties"] = False
    return schema


def with_exact_bytes(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's output schema with ``exact_bytes`` (``sysmcp.engine.paths.in_json``), which any
    result carries when a name in it is not UTF-8: pointers to the strings showing such names, each
    with its exact bytes in base64 (its description: ``descriptions.COMMON``)."""
    properties = {**schema.get("properties", {}), "exact_bytes": EXACT_BYTES_SCHEMA}
    return {**schema, "properties": properties}


EXACT_BYTES_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
