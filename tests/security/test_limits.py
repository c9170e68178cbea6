"""Resource limits: each bound gives a clear answer instead of a queue or a buffer that grows."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from sysmcp.protocol.context import RequestContext
from sysmcp.protocol.jsonrpc import Notification, Request
from sysmcp.protocol.session import Session
from sysmcp.server import build_server
from sysmcp.tools import ALL_TOOLS
from tests.memory_transport import MemoryTransport

pytestmark = pytest.mark.anyio


class Gate:
    """A method table whose ``block`` requests wait until the test opens the gate."""

    def __init__(self) -> None:
        self.open = anyio.Event()
        self.entered = 0
        self.both_in = anyio.Event()

    def batching_allowed(self) -> bool:
        return False

    def admit(self, request: Request, ctx: RequestContext) -> None:
        return None

    def answers_at_once(self, request: Request) -> bool:
        return request.method != "block"

    async def handle_request(self, request: Request, ctx: RequestContext) -> dict[str, Any]:
        if request.method == "block":
            self.entered += 1
            if self.entered == 2:
                self.both_in.set()
            await self.open.wait()
        return {"method": request.method}

    async def handle_notification(self, notification: Notification) -> None:
        return None


def line(msg_id: Any, method: str, params: dict[str, Any] | None = None) -> bytes:
    message = {"jsonrpc": "2.0", "id": msg_id, "method": method, **({"params": params} if params else {})}
    return json.dumps(message).encode() + b"\n"


def replies(transport: MemoryTransport) -> dict[Any, dict[str, Any]]:
    return {m["id"]: m for m in map(json.loads, bytes(transport.written).splitlines()) if "id" in m}


async def test_requests_beyond_the_in_flight_limit_are_refused_at_once_not_queued() -> None:
    gate = Gate()
    transport = MemoryTransport()
    session = Session(gate, transport, max_in_flight=2)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(session.run)
            transport.feed(line(1, "block") + line(2, "block"))
            await gate.both_in.wait()
            transport.feed(line(3, "block") + line(4, "ping"))
            while 4 not in replies(transport):
                await transport.wrote.wait()
            busy = replies(transport)
            assert busy[3]["error"]["code"] == -32000 and "busy" in busy[3]["error"]["message"]
            assert busy[4]["result"] == {"method": "ping"}  # answered from memory: no slot, never refused
            gate.open.set()
            transport.feed(b"")
    done = replies(transport)
    assert done[1]["result"] == {"method": "block"} and done[2]["result"] == {"method": "block"}


async def test_a_result_over_the_size_cap_becomes_an_error_and_the_session_goes_on() -> None:
    transport = MemoryTransport()
    session = Session(build_server(ALL_TOOLS), transport)
    session.max_result = 1000  # tools/list is bigger than this
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    transport.feed(
        line(1, "initialize", init)
        + b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
        + line(2, "tools/list")
        + line(3, "ping")
    )
    transport.feed(b"")
    with anyio.fail_after(10):
        await session.run()
    answers = replies(transport)
    assert answers[2]["error"] == {"code": -32603, "message": "Internal error"}
    assert answers[3]["result"] == {}
    assert all(len(raw) <= 1000 for raw in bytes(transport.written).splitlines()[1:])


async def test_an_over_long_line_is_refused_without_being_buffered() -> None:
    transport = MemoryTransport()
    session = Session(build_server(ALL_TOOLS), transport, max_line=1 << 10)
    transport.feed(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"a" * 5000 + b'"}}\n')
    transport.feed(line(2, "ping"))
    transport.feed(b"")
    with anyio.fail_after(10):
        await session.run()
    written = [json.loads(raw) for raw in bytes(transport.written).splitlines()]
    assert written[0]["error"]["code"] == -32600 and "limit" in written[0]["error"]["message"]
    assert written[1] == {"jsonrpc": "2.0", "id": 2, "result": {}}
