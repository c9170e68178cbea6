"""The session in memory: dispatch, cancellation, limits and the writer, without a process."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from sysmcp.protocol.context import Meter, RequestContext
from sysmcp.protocol.failures import ProtocolError
from sysmcp.protocol.jsonrpc import Notification, Request
from sysmcp.protocol.session import ClientRequestError, Session
from tests.mcp_schema import check_server_message
from tests.memory_transport import MemoryTransport

pytestmark = pytest.mark.anyio


class Handler:
    """A tiny method table: ``block`` waits for a release, ``work`` runs a worker with progress, ``boom`` fails."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.started = anyio.Event()
        self.notifications: list[Notification] = []

    def batching_allowed(self) -> bool:
        return False

    def admit(self, request: Request, ctx: RequestContext) -> None:
        return None

    def answers_at_once(self, request: Request) -> bool:
        return request.method in ("ping", "boom", "bad")

    async def handle_request(self, request: Request, ctx: RequestContext) -> dict[str, Any]:
        if request.method == "block":
            self.started.set()
            await self.release.wait()
            return {"released": True}
        if request.method == "work":
            steps = int(request.params.get("steps", 3))

            def work(meter: Meter) -> int:
                for step in range(1, steps + 1):
                    meter.cancel()
                    meter.done = step
                return steps

            return {"steps": await ctx.run_in_worker(work, total=steps)}
        if request.method == "boom":
            raise RuntimeError("secret internals /etc/shadow")
        if request.method == "bad":
            raise ProtocolError(-32602, "Invalid params: nope")
        return {}

    async def handle_notification(self, notification: Notification) -> None:
        self.notifications.append(notification)


class Peer:
    def __init__(self, transport: MemoryTransport) -> None:
        self.transport = transport
        self.seen = 0

    def send(self, message: dict[str, Any]) -> None:
        self.transport.feed(json.dumps(message).encode() + b"\n")

    async def next(self) -> dict[str, Any]:
        with anyio.fail_after(5):
            while True:
                lines = bytes(self.transport.written).split(b"\n")[:-1]
                if len(lines) > self.seen:
                    self.seen += 1
                    value: dict[str, Any] = json.loads(lines[self.seen - 1])
                    return value
                await self.transport.wrote.wait()


@asynccontextmanager
async def running(handler: Handler, **options: Any) -> AsyncIterator[Peer]:
    transport = MemoryTransport()
    session = Session(handler, transport, **options)
    async with anyio.create_task_group() as group:
        group.start_soon(session.run)
        yield Peer(transport)
        transport.feed(b"")


async def test_internal_errors_hide_their_details() -> None:
    async with running(Handler()) as peer:
        peer.send({"jsonrpc": "2.0", "id": 1, "method": "boom"})
        reply = await peer.next()
        assert reply["error"] == {"code": -32603, "message": "Internal error"}


async def test_protocol_errors_keep_their_code_and_message() -> None:
    async with running(Handler()) as peer:
        peer.send({"jsonrpc": "2.0", "id": 1, "method": "bad"})
        assert (await peer.next())["error"] == {"code": -32602, "message": "Invalid params: nope"}


async def test_a_cancelled_request_gets_no_response() -> None:
    handler = Handler()
    async with running(handler) as peer:
        peer.send({"jsonrpc": "2.0", "id": "slow", "method": "block"})
        await handler.started.wait()
        peer.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "slow"}})
        peer.send({"jsonrpc": "2.0", "id": "next", "method": "ping"})
        assert (await peer.next())["id"] == "next"
        handler.release.set()
        peer.send({"jsonrpc": "2.0", "id": "last", "method": "ping"})
        assert (await peer.next())["id"] == "last"


async def test_an_integer_request_id_and_progress_token_written_as_floats_are_those_integers() -> None:
    """7.0 is an integer to MCP's schema (``RequestId``, ``ProgressToken``): the request is answered as 7,
    its progress carries its token, and a cancellation naming 7.0 cancels it."""
    handler = Handler()
    async with running(handler) as peer:
        work = {"steps": 2, "_meta": {"progressToken": 5.0}}
        peer.send({"jsonrpc": "2.0", "id": 3.0, "method": "work", "params": work})  # json writes 3.0
        messages = [await peer.next()]
        while "id" not in messages[-1]:
            messages.append(await peer.next())
        assert messages[0]["params"]["progressToken"] == 5 and messages[-1]["id"] == 3
        peer.send({"jsonrpc": "2.0", "id": 7.0, "method": "block"})
        await handler.started.wait()
        peer.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7.0}})
        peer.send({"jsonrpc": "2.0", "id": "next", "method": "ping"})
        assert (await peer.next())["id"] == "next"
        handler.release.set()
        peer.send({"jsonrpc": "2.0", "id": "last", "method": "ping"})
        assert (await peer.next())["id"] == "last"  # nothing for 7: it was cancelled


async def test_an_id_and_a_token_written_as_floats_come_back_as_written_not_retyped() -> None:
    """JSON-RPC: a response's id is the request's. 3.0 came back as 3: the same number to JavaScript
    and Python, but not to a client that keeps ids as JSON values (serde_json's ``Number`` 3.0 is not
    3), which then matched neither the answer nor the progress to its request."""
    handler = Handler()
    async with running(handler) as peer:
        work = {"steps": 2, "_meta": {"progressToken": 5.0}}
        peer.send({"jsonrpc": "2.0", "id": 3.0, "method": "work", "params": work})
        messages = [await peer.next()]
        while "id" not in messages[-1]:
            messages.append(await peer.next())
        token, answered = messages[0]["params"]["progressToken"], messages[-1]["id"]
        assert isinstance(token, float) and token == 5.0
        assert isinstance(answered, float) and answered == 3.0


async def test_a_duplicate_id_in_flight_is_refused() -> None:
    handler = Handler()
    async with running(handler) as peer:
        peer.send({"jsonrpc": "2.0", "id": 7, "method": "block"})
        await handler.started.wait()
        peer.send({"jsonrpc": "2.0", "id": 7, "method": "ping"})
        refused = await peer.next()
        assert refused["id"] == 7 and refused["error"]["code"] == -32600
        handler.release.set()
        assert (await peer.next())["result"] == {"released": True}


@pytest.mark.parametrize(
    "malformed",
    [
        {"jsonrpc": "2.0", "id": 7, "result": "done"},
        {"jsonrpc": "2.0", "id": 7, "error": 1},
        {"id": 7, "result": {}},
    ],
    ids=["result not an object", "error not an object", "no jsonrpc"],
)
async def test_a_malformed_response_is_refused_without_the_id_so_a_request_of_that_id_gets_one_reply(
    malformed: dict[str, Any],
) -> None:
    handler = Handler()
    async with running(handler) as peer:
        peer.send({"jsonrpc": "2.0", "id": 7, "method": "block"})
        await handler.started.wait()
        peer.send(malformed)  # a response's id is the server's: nothing of the client's
        refused = await peer.next()
        assert refused["id"] is None and refused["error"]["code"] == -32600
        handler.release.set()
        assert await peer.next() == {"jsonrpc": "2.0", "id": 7, "result": {"released": True}}


async def test_requests_beyond_the_in_flight_limit_get_a_busy_error() -> None:
    handler = Handler()
    async with running(handler, max_in_flight=2) as peer:
        for msg_id in (1, 2, 3):
            peer.send({"jsonrpc": "2.0", "id": msg_id, "method": "block"})
        busy = await peer.next()
        assert busy["id"] == 3 and busy["error"]["code"] == -32000 and "busy" in busy["error"]["message"]
        handler.release.set()
        assert {(await peer.next())["id"], (await peer.next())["id"]} == {1, 2}


async def test_worker_progress_ends_with_a_final_event_before_the_result() -> None:
    async with running(Handler()) as peer:
        peer.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "work",
                "params": {"steps": 5, "_meta": {"progressToken": "p"}},
            }
        )
        messages = [await peer.next()]
        while "id" not in messages[-1]:
            messages.append(await peer.next())
        progress = [m["params"] for m in messages[:-1]]
        assert progress and progress[-1] == {"progressToken": "p", "progress": 5, "total": 5}
        assert messages[-1]["result"] == {"steps": 5}


async def test_without_a_token_no_progress_is_sent() -> None:
    async with running(Handler()) as peer:
        peer.send({"jsonrpc": "2.0", "id": 1, "method": "work"})
        assert (await peer.next())["result"] == {"steps": 3}


async def test_the_server_can_ask_the_client_and_get_its_answer() -> None:
    transport = MemoryTransport()
    session = Session(Handler(), transport)
    peer = Peer(transport)
    async with anyio.create_task_group() as group:
        group.start_soon(session.run)
        answers: list[Any] = []
        answered = anyio.Event()

        async def ask() -> None:
            answers.append(await session.request("roots/list", {}))
            answered.set()

        group.start_soon(ask)
        asked = await peer.next()
        assert asked["method"] == "roots/list"
        peer.send({"jsonrpc": "2.0", "id": asked["id"], "result": {"roots": []}})
        with anyio.fail_after(5):
            await answered.wait()
        assert answers[0].result == {"roots": []}
        transport.feed(b"")


class SlowReader(MemoryTransport):
    """A client that reads one reply every ``pause`` seconds (or, with ``pause=None``, never)."""

    def __init__(self, pause: float | None) -> None:
        super().__init__()
        self.pause = pause

    def write_nowait(self, data: bytes | memoryview) -> int:
        return 0  # its pipe is full: every reply waits for the reader

    async def send(self, data: bytes) -> None:
        if self.pause is None:
            await anyio.sleep_forever()
        else:
            await anyio.sleep(self.pause)
        MemoryTransport.write_nowait(self, data)


async def test_replies_made_before_stdin_closed_all_reach_a_client_that_reads_slowly() -> None:
    """40 replies at 0.01 s each outlast twice the 0.2 s grace; none may be lost while the client reads."""
    transport = SlowReader(pause=0.01)
    session = Session(Handler(), transport, eof_grace=0.2, write_stall=2)
    transport.feed(b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i for i in range(40)))
    transport.feed(b"")
    with anyio.fail_after(30):
        await session.run()
    ids = [json.loads(line)["id"] for line in transport.written.splitlines()]
    assert ids == list(range(40))


async def test_a_client_that_stops_reading_after_closing_stdin_does_not_keep_the_server() -> None:
    transport = SlowReader(pause=None)
    session = Session(Handler(), transport, eof_grace=0.05, write_stall=0.1)
    transport.feed(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    transport.feed(b"")
    with anyio.fail_after(10):
        await session.run()
    assert transport.written == b""


class Flood(MemoryTransport):
    """A client whose next requests are always there: ``receive`` never has to wait. After ``cancel_at``
    chunks the session's caller is cancelled (a SIGTERM arriving); the flood goes on for ``length`` chunks."""

    def __init__(self, scope: anyio.CancelScope, cancel_at: int, length: int) -> None:
        super().__init__()
        self.scope, self.cancel_at, self.length = scope, cancel_at, length
        self.chunks = 0

    async def receive(self) -> bytes:
        self.chunks += 1
        if self.chunks == self.cancel_at:
            self.scope.cancel()
        return b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n' * 10 if self.chunks <= self.length else b""


async def test_a_cancelled_session_stops_reading_even_when_requests_keep_coming() -> None:
    with anyio.CancelScope() as scope:
        transport = Flood(scope, cancel_at=3, length=10_000)
        await Session(Handler(), transport).run()
    assert transport.chunks == 3  # not one more chunk read (it read all 10,000, then stopped at their end)


@pytest.mark.parametrize("gives_up", ["timeout", "caller cancelled"])
async def test_a_request_to_the_client_given_up_on_is_cancelled_on_the_client(gives_up: str) -> None:
    transport = MemoryTransport()
    session = Session(Handler(), transport)
    peer = Peer(transport)
    async with anyio.create_task_group() as group:
        group.start_soon(session.run)
        async with anyio.create_task_group() as asking:

            async def ask() -> None:
                with pytest.raises(ClientRequestError) if gives_up == "timeout" else contextlib.nullcontext():
                    await session.request("roots/list", None, timeout=0.1 if gives_up == "timeout" else 60)

            asking.start_soon(ask)
            asked = await peer.next()
            if gives_up == "caller cancelled":
                asking.cancel_scope.cancel()
        cancelled = await peer.next()
        assert cancelled["method"] == "notifications/cancelled"
        assert cancelled["params"]["requestId"] == asked["id"]
        check_server_message("2025-11-25", cancelled)
        transport.feed(b"")
