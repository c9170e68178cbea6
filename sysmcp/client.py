"""A minimal stdio MCP client for ``sysmcp call``: spawn, handshake, one call, print.

It is the CLI's client, so it may write to stdout.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import anyio
from anyio.abc import Process

from sysmcp import __version__
from sysmcp.protocol.framing import LineDecoder, OversizedLine, encode


class StdioClient:
    """Speaks JSON-RPC to a child process; shows the raw traffic on request."""

    def __init__(self, process: Process, raw: bool) -> None:
        self.process = process
        self.raw = raw
        self.decoder = LineDecoder()
        self.pending: list[dict[str, Any]] = []
        self.ids = itertools.count(1)

    async def send(self, message: dict[str, Any]) -> None:
        data = encode(message)
        if self.raw:
            print("→ " + data.decode().rstrip("\n"), flush=True)
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while not self.pending:
            try:
                chunk = await self.process.stdout.receive()
            except anyio.EndOfStream:
                raise SystemExit("sysmcp call: the server closed its output") from None
            for frame in self.decoder.feed(chunk):
                if isinstance(frame, OversizedLine) or not frame.strip():
                    continue
                if self.raw:
                    print("← " + frame.decode("utf-8", "replace"), flush=True)
                self.pending.append(json.loads(frame))
        return self.pending.pop(0)

    async def request(self, method: str, params: dict[str, Any], on_note: Any = None) -> dict[str, Any]:
        msg_id = next(self.ids)
        await self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        while True:
            message = await self.receive()
            if message.get("id") == msg_id and "method" not in message:
                return message
            if on_note is not None and "method" in message:
                on_note(message)


def _show_progress(message: dict[str, Any]) -> None:
    if message.get("method") != "notifications/progress":
        return
    params = message.get("params", {})
    done, total, text = params.get("progress"), params.get("total"), params.get("message")
    share = f" ({100 * done / total:.0f}%)" if total else ""
    print(f"progress: {text or done}{share}", file=sys.stderr, flush=True)


async def _call(
    tool: str, arguments: dict[str, Any], raw: bool, version: str, server_args: Sequence[str]
) -> int:
    command = [sys.executable, "-m", "sysmcp", *server_args]
    async with await anyio.open_process(command, stderr=None if raw else subprocess.DEVNULL) as process:
        client = StdioClient(process, raw)
        init = await client.request(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "sysmcp-call", "version": __version__},
            },
        )
        if "error" in init:
            print(f"sysmcp call: initialize failed: {init['error'].get('message')}", file=sys.stderr)
            return 2
        await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        params = {"name": tool, "arguments": arguments, "_meta": {"progressToken": "call"}}
        reply = await client.request("tools/call", params, on_note=None if raw else _show_progress)
        assert process.stdin is not None
        await process.stdin.aclose()
        await process.wait()
    if "error" in reply:
        print(f"sysmcp call: {reply['error'].get('message')}", file=sys.stderr)
        return 2
    result = reply.get("result", {})
    if not raw:
        for block in result.get("content", []):
            if block.get("type") == "text":
                print(block["text"])
            elif block.get("type") == "resource_link":
                print(f"[full result: {block.get('uri')}]")
    return 1 if result.get("isError") else 0


def run_call(
    tool: str, arguments: dict[str, Any], *, raw: bool, version: str, server_args: Sequence[str]
) -> int:
    return anyio.run(_call, tool, arguments, raw, version, server_args)
