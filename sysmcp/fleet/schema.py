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
from sysmcp.tools.schemas import EXACT_BYTES_SCHEMA

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
        "exact_bytes": EXACT_BYTES_SCHEMA,
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


def fleet_tools(tools: Iterable[Tool], hosts: dict[str, Any]) -> list[Tool]:
    """Every tool with ``hosts`` in its input schema and the fleet's answer in its output schema (its
    own answer, or the fleet's)."""
    return [
        replace(
            tool,
            input_schema={
                **tool.input_schema,
                "properties": {**tool.input_schema.get("properties", {}), "hosts": hosts},
            },
            output={"type": "object", "anyOf": [tool.output_schema, FLEET_OUTPUT_SCHEMA]},
        )
        for tool in tools
    ]


__all__ = ["FLEET_OUTPUT_SCHEMA", "HOST_ENTRY_SCHEMA", "fleet_tools", "hosts_property"]
