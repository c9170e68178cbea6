"""Drive sysmcp with the official ``mcp`` 1.x ClientSession; run in its own environment.

One environment cannot hold mcp 1.x and 2.x, so the test runs this script with
``uv run --no-project --with 'mcp>=1.30,<2' python tests/interop/sdk1_client.py PLAN.json``.
The plan (written by the test) names the server command and the arguments for every tool; the
script prints one JSON report on stdout. It imports nothing from sysmcp or the tests.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from datetime import timedelta
from typing import Any

# Imported by name: this file runs against mcp 1.x, while the type checker sees the project's mcp 2.x.
mcp: Any = importlib.import_module("mcp")
stdio: Any = importlib.import_module("mcp.client.stdio")


async def run(plan: dict[str, Any]) -> dict[str, Any]:
    params = mcp.StdioServerParameters(command=plan["command"][0], args=plan["command"][1:], cwd=plan["cwd"])
    report: dict[str, Any] = {"calls": {}, "logs": []}

    async def on_log(params: Any) -> None:
        report["logs"].append(params.level)

    async with (
        stdio.stdio_client(params) as (read, write),
        mcp.ClientSession(
            read, write, logging_callback=on_log, read_timeout_seconds=timedelta(seconds=30)
        ) as s,
    ):
        init = await s.initialize()
        report["protocolVersion"] = init.protocolVersion
        report["serverInfo"] = init.serverInfo.name
        report["capabilities"] = init.capabilities.model_dump(exclude_none=True)
        await s.set_logging_level("debug")
        await s.send_ping()
        listed = (await s.list_tools()).tools
        report["tools"] = [tool.name for tool in listed]
        for name, arguments in plan["tools"].items():
            progress: list[float] = []

            async def on_progress(
                value: float, total: float | None, message: str | None, seen: Any = progress
            ) -> None:
                seen.append(value)

            result = await s.call_tool(name, arguments, progress_callback=on_progress)
            report["calls"][name] = {
                "isError": result.isError,
                "structured": result.structuredContent is not None,
                "progress": progress,
                "text": [block.text for block in result.content if block.type == "text"][:1],
            }
    return report


def main() -> None:
    with open(sys.argv[1]) as handle:
        plan = json.load(handle)
    print(json.dumps(asyncio.run(run(plan))))


if __name__ == "__main__":
    main()
