"""The JSON Schema shapes every tool's input and output schemas repeat, built one way.

A tool's schema stays in its module, readable as the data it is; these only spare it the frame
(an object of named properties, which are required, no others allowed) and the ``path`` argument.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["arguments", "objects", "path_argument", "result"]


def path_argument(description: str) -> dict[str, Any]:
    """The ``path`` argument most tools take: a non-empty string."""
    return {"type": "string", "minLength": 1, "description": description}


def arguments(properties: dict[str, Any], *, required: Iterable[str] = ("path",)) -> dict[str, Any]:
    """An input schema: these properties, ``required`` among them, no other argument accepted."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def result(properties: dict[str, Any], *, optional: Iterable[str] = ()) -> dict[str, Any]:
    """An output schema: every property is always there but the ``optional`` ones, and nothing else."""
    left_out = set(optional)
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in left_out],
        "additionalProperties": False,
    }


def objects(properties: dict[str, Any], *, description: str | None = None) -> dict[str, Any]:
    """An array of objects that each carry every one of ``properties``."""
    schema: dict[str, Any] = {
        "type": "array",
        "items": {"type": "object", "properties": properties, "required": list(properties)},
    }
    if description is not None:
        schema["description"] = description
    return schema
