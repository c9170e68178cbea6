"""The ``hosts`` argument and the fleet's answer shape, added to every tool's schemas when a fleet is
configured. Pure data: the registry never knows about fleets; the gateway hands it tools already
carrying ``hosts`` (``fleet_tools``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from sysmcp.render import plural
from sysmcp.tools.merging import STATUSES
from sysmcp.tools.registry import Tool

HOST_ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "host": {"type": "string"},
        "status": {"type": "string", "enum": list(STATUSES)},
        "seconds": {"type": "number"},
        "result": {"type": "object", "description": "The host's own structured answer (status ok)."},
        "reason": {"type": "string", "description": "One line: why there is no result."},
    },
    "required": ["host", "status", "seconds"],
}

FLEET_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "hosts": {"type": "array", "items": HOST_ENTRY_SCHEMA, "description": "One entry per host asked."},
        "asked": {"type": "integer"},
        "answered": {"type": "integer"},
        "pending": {
            "type": "integer",
            "description": "Hosts still connecting or running when the fleet deadline passed.",
        },
        "view": {"type": "object", "description": "The tool's merged view across the hosts that answered."},
    },
    "required": ["hosts", "asked", "answered", "view"],
}


def hosts_property(count: int) -> dict[str, Any]:
    """The ``hosts`` argument every tool gains when a fleet of ``count`` hosts is configured: the same
    few words however many groups there are (the instructions name the groups, once for every tool)."""
    return {
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "minItems": 1,
        "description": f"Hosts, groups, globs or 'all' ({plural(count, 'host')}) to run on instead; answers merged.",
    }


def with_hosts(
    input_schema: dict[str, Any], output_schema: dict[str, Any], hosts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A tool's schemas with ``hosts`` added: its own answer, or the fleet's."""
    properties = {**input_schema.get("properties", {}), "hosts": hosts}
    return {**input_schema, "properties": properties}, {
        "type": "object",
        "anyOf": [output_schema, FLEET_OUTPUT_SCHEMA],
    }


def fleet_tools(tools: Iterable[Tool], hosts: dict[str, Any]) -> list[Tool]:
    """Every tool with ``hosts`` in its input schema and the fleet's answer in its output schema."""
    made = []
    for tool in tools:
        input_schema, output_schema = with_hosts(tool.input_schema, tool.output_schema, hosts)
        made.append(replace(tool, input_schema=input_schema, output=output_schema))
    return made


__all__ = ["FLEET_OUTPUT_SCHEMA", "HOST_ENTRY_SCHEMA", "fleet_tools", "hosts_property", "with_hosts"]
