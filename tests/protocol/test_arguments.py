"""Tool arguments are checked against the tool's own schema, with messages a model can act on."""

from __future__ import annotations

from typing import Any

import pytest

from sysmcp.protocol.failures import ArgumentError
from sysmcp.tools import ALL_TOOLS
from sysmcp.tools.arguments import validate_arguments

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "top_n": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
        "unit": {"type": "string", "enum": ["percent", "mb"], "default": "percent"},
        "exclude": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "items": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def test_defaults_are_filled_in() -> None:
    assert validate_arguments(SCHEMA, {"path": "/"}) == {"path": "/", "top_n": 5, "unit": "percent"}


def test_integral_floats_are_accepted_as_integers() -> None:
    assert validate_arguments(SCHEMA, {"path": "/", "top_n": 3.0})["top_n"] == 3


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({}, "'path' is required"),
        ({"path": 3}, "'path' must be a string, got integer 3"),
        ({"path": ""}, "'path' must have at least 1 character"),
        ({"path": "/", "top_n": True}, "'top_n' must be an integer, got boolean True"),
        ({"path": "/", "top_n": 51}, "'top_n' must be <= 50"),
        ({"path": "/", "top_n": 2.5}, "'top_n' must be an integer"),
        ({"path": "/", "unit": "gb"}, "'unit' must be one of 'percent', 'mb'"),
        ({"path": "/", "exclude": ["a", 1]}, "'exclude'[1] must be a string"),
        ({"path": "/", "exclude": ["a", "b", "c"]}, "at most 2 items"),
        ({"path": "/", "bogus": 1}, "'bogus' is not a known argument"),
        ({"path": "/", "items": ["a", "b", "a"]}, "'items' must not repeat an item"),
    ],
)
def test_each_rule_is_named_in_the_error(arguments: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ArgumentError) as caught:
        validate_arguments(SCHEMA, arguments)
    assert fragment in caught.value.message


def test_arguments_that_are_not_an_object_are_refused() -> None:
    with pytest.raises(ArgumentError):
        validate_arguments(SCHEMA, ["/"])


@pytest.mark.parametrize("tool", ALL_TOOLS, ids=lambda tool: tool.name)
def test_every_tool_schema_is_closed_and_read_only(tool: Any) -> None:
    """An argument may go without a description where its keywords say it all (tests/test_tool_docs.py
    checks docs/tools.md names every one)."""
    schema = tool.input_schema
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert tool.annotations["readOnlyHint"] is True and tool.annotations["destructiveHint"] is False
