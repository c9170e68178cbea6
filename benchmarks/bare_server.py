"""The floor of the round-trip benchmark: the least a Python stdio server can do per call.

Why it exists: ``protocol_bench.py`` divides sysmcp's time by the SDK server's, and part of every round
trip is neither server's doing (the client, two pipe hops, two wake-ups). This server shows that part:
an asyncio loop that reads stdin, decodes each line, answers ``tools/call`` of ``disk_usage`` with one
``shutil.disk_usage`` and everything else with an empty result. It has no MCP rules at all (no
lifecycle, version negotiation, validation, cancellation, error replies or paths checks), so it is not
a server anyone should use, only a measuring stick.

Run: ``python benchmarks/bare_server.py``; with the benchmark:
``uv run python benchmarks/protocol_bench.py --server bare="python benchmarks/bare_server.py"
--server sysmcp="python -m sysmcp" --server sdk="python benchmarks/sdk_server.py"``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from typing import Any


def answer(message: dict[str, Any]) -> dict[str, Any]:
    """The result for one request: disk usage of the asked path, or nothing."""
    params = message.get("params") or {}
    if message.get("method") == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "bare", "version": "0"},
        }
    if message.get("method") != "tools/call":
        return {}
    usage = shutil.disk_usage(params.get("arguments", {}).get("path", "/"))
    percent = round(usage.used * 100 / usage.total, 1) if usage.total else 0.0
    return {
        "content": [{"type": "text", "text": f"{percent}% used, {usage.free} bytes free"}],
        "structuredContent": {"total": usage.total, "used": usage.used, "free": usage.free},
        "isError": False,
    }


async def serve(read_fd: int, write_fd: int) -> None:
    loop = asyncio.get_running_loop()
    readable = asyncio.Event()
    loop.add_reader(read_fd, readable.set)
    reader = Reader(read_fd)
    while not reader.ended:
        await readable.wait()
        readable.clear()
        for message in reader.requests():
            reply(write_fd, message, answer(message))


class Reader:
    """The requests read from a non-blocking descriptor, line by line (notifications dropped)."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.pending = b""
        self.ended = False

    def requests(self) -> list[dict[str, Any]]:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return []
        self.ended = not chunk
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        return [message for message in map(json.loads, lines) if "id" in message and "method" in message]


def reply(write_fd: int, message: dict[str, Any], result: dict[str, Any]) -> None:
    os.write(write_fd, json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode() + b"\n")


if __name__ == "__main__":
    asyncio.run(serve(0, 1))
