"""What a model pays for sysmcp's tool definitions on every turn, held to a budget.

A host sends each tool's name, description and input schema with every request, so they are measured
as it sends them (compact JSON, as /work/shared/hooks/before-stop measures): at most 12,000 characters
for the default tool set, at most 1,600 for any one tool (with ``--allow-reclaim`` and with a fleet's
``hosts`` too), and at most 1,500 for the server's instructions, which name every served tool once.
Run with ``-s`` to see the table; a failure shows it too.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from sysmcp.fleet.schema import fleet_tools, hosts_property
from sysmcp.protocol.lifecycle import features_of
from sysmcp.tools import ALL_TOOLS, RECLAIM, TOOL_MODULES
from sysmcp.tools.registry import LazyTool
from tests.wire import spawn

TOTAL_BUDGET = 12_000
TOOL_BUDGET = 1_600
INSTRUCTIONS_BUDGET = 1_500
ORDER = [name for name, _ in TOOL_MODULES]


def characters(tool: dict[str, Any]) -> int:
    """Model-facing characters of one tools/list entry, exactly as the before-stop hook counts them."""
    entry = {
        "name": tool["name"],
        "description": tool.get("description", ""),
        "input_schema": tool.get("inputSchema"),
    }
    return len(json.dumps(entry, separators=(",", ":"), ensure_ascii=False))


def table(tools: list[dict[str, Any]]) -> str:
    rows = [f"{'tool':<20} {'characters':>10}"]
    rows += [f"{tool['name']:<20} {characters(tool):>10,}" for tool in tools]
    rows.append(f"{'total':<20} {sum(map(characters, tools)):>10,}")
    return "\n".join(rows)


async def served(*args: str) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """The instructions and tools/list (asked twice) of a real server started with ``args``."""
    async with spawn("--no-history", *args) as wire:
        init = await wire.initialize("2025-06-18")
        first = (await wire.request("tools/list"))["result"]["tools"]
        again = (await wire.request("tools/list"))["result"]["tools"]
    return init["result"]["instructions"], first, again


@pytest.mark.anyio
@pytest.mark.parametrize(("args", "names"), [((), ORDER), (("--allow-reclaim",), [*ORDER, RECLAIM[0]])])
async def test_tool_definitions_fit_the_budget_in_a_fixed_order(
    args: tuple[str, ...], names: list[str]
) -> None:
    instructions, tools, again = await served(*args)
    shown = table(tools)
    print(f"\nsysmcp {' '.join(args)}\n{shown}\ninstructions: {len(instructions):,} characters")
    assert [tool["name"] for tool in tools] == names, shown
    assert tools == again  # the same bytes every time: a host's prompt cache keeps them
    if not args:
        assert sum(map(characters, tools)) <= TOTAL_BUDGET, shown
    assert max(map(characters, tools)) <= TOOL_BUDGET, shown


@pytest.mark.anyio
@pytest.mark.parametrize("args", [(), ("--allow-reclaim",)])
async def test_the_instructions_fit_their_budget_and_name_every_served_tool_on_one_line(
    args: tuple[str, ...],
) -> None:
    instructions, tools, _ = await served(*args)
    assert len(instructions) <= INSTRUCTIONS_BUDGET, f"{len(instructions)} characters:\n{instructions}"
    for tool in tools:
        lines = [line for line in instructions.splitlines() if re.search(rf"\b{tool['name']}\b", line)]
        assert len(lines) == 1, (tool["name"], lines)
        assert len(re.findall(rf"\b{tool['name']}\b", instructions)) == 1, tool["name"]


def test_a_fleets_hosts_argument_keeps_every_tool_within_budget() -> None:
    tools = [*ALL_TOOLS, LazyTool(*RECLAIM).load()]
    features = features_of("2025-06-18")
    listed = [tool.describe(features) for tool in fleet_tools(tools, hosts_property(200))]
    shown = table(listed)
    print(f"\nwith a fleet of 200 hosts\n{shown}")
    assert all("hosts" in tool["inputSchema"]["properties"] for tool in listed)
    assert max(map(characters, listed)) <= TOOL_BUDGET, shown
