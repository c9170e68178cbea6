"""Requests are admitted in arrival order, whether they then run inline or in a task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from sysmcp.protocol.session import Session
from sysmcp.server import build_server
from sysmcp.tools import ALL_TOOLS
from tests.e2e.modern import envelope
from tests.memory_transport import MemoryTransport

pytestmark = pytest.mark.anyio


async def exchange(lines: list[dict[str, Any]], chunk: int | None) -> dict[Any, dict[str, Any]]:
    transport = MemoryTransport()
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    pieces = [data] if chunk is None else [data[i : i + chunk] for i in range(0, len(data), chunk)]
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(Session(build_server(ALL_TOOLS), transport).run)
            for piece in pieces:
                transport.feed(piece)
                await anyio.lowlevel.checkpoint()  # let the reader take each piece as it comes
            transport.feed(b"")
    replies = [json.loads(line) for line in bytes(transport.written).splitlines()]
    return {reply["id"]: reply for reply in replies if "id" in reply}


@pytest.mark.parametrize("chunk", [None, 1, 7])
async def test_a_modern_call_that_runs_in_a_task_still_decides_the_era_before_a_later_initialize(
    tmp_path: Path, chunk: int | None
) -> None:
    (tmp_path / "f").write_bytes(b"x")
    lines = [
        {
            "jsonrpc": "2.0",
            "id": "scan",
            "method": "tools/call",
            "params": {"name": "dir_usage", "arguments": {"path": str(tmp_path)}, "_meta": envelope()},
        },
        {
            "jsonrpc": "2.0",
            "id": "init",
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
    ]
    replies = await exchange(lines, chunk)
    assert replies["scan"]["result"]["isError"] is False
    assert replies["scan"]["result"]["resultType"] == "complete"
    assert replies["init"]["error"]["code"] == -32022
