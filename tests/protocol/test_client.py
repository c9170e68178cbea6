"""The client session: against a scripted peer in memory, and against the real server."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import pytest

from sysmcp.protocol.client import (
    ClientSession,
    PeerGone,
    RemoteError,
    answer_server_request,
    connect,
)
from sysmcp.protocol.jsonrpc import Notification, Request

pytestmark = pytest.mark.anyio


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


# -- what the client answers itself ----------------------------------------------------------


def test_server_requests_are_answered_as_a_client_without_capabilities() -> None:
    assert answer_server_request(Request(7, "ping")) == {"jsonrpc": "2.0", "id": 7, "result": {}}
    assert answer_server_request(Request(8, "roots/list"))["result"] == {"roots": []}
    assert answer_server_request(Request(9, "sampling/createMessage"))["error"]["code"] == -32601


# -- a scripted peer in memory -------------------------------------------------------------------


class Peer:
    """The server end of two in-memory byte streams, driven by the test."""

    def __init__(self) -> None:
        self.to_client, self.client_reads = anyio.create_memory_object_stream[bytes](100)
        self.client_writes, self.from_client = anyio.create_memory_object_stream[bytes](100)
        self.buffer = b""

    async def read(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            self.buffer += await self.from_client.receive()
        one, self.buffer = self.buffer.split(b"\n", 1)
        value: dict[str, Any] = json.loads(one)
        return value

    async def write(self, message: dict[str, Any]) -> None:
        await self.to_client.send(line(message) + b"\n")


async def test_concurrent_requests_are_answered_out_of_order() -> None:
    peer = Peer()
    async with connect(peer.client_writes, peer.client_reads) as session:
        results: dict[str, Any] = {}

        async def ask(name: str) -> None:
            results[name] = await session.request("tools/call", {"name": name})

        async with anyio.create_task_group() as group:
            group.start_soon(ask, "a")
            group.start_soon(ask, "b")
            first, second = await peer.read(), await peer.read()
            await peer.write(
                {"jsonrpc": "2.0", "id": second["id"], "result": {"who": second["params"]["name"]}}
            )
            await peer.write(
                {"jsonrpc": "2.0", "id": first["id"], "result": {"who": first["params"]["name"]}}
            )
        assert results == {"a": {"who": "a"}, "b": {"who": "b"}}


async def test_requests_get_distinct_ids_and_a_progress_token_only_when_asked() -> None:
    peer = Peer()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        pass

    async with connect(peer.client_writes, peer.client_reads) as session, anyio.create_task_group() as group:
        group.start_soon(lambda: session.request("tools/call", {"name": "x"}, on_progress=on_progress))
        with_token = await peer.read()
        group.start_soon(session.request, "ping")
        plain = await peer.read()
        assert with_token["id"] != plain["id"]
        assert with_token["params"]["_meta"]["progressToken"] == with_token["id"]
        assert plain["params"] == {}
        for request in (with_token, plain):
            await peer.write({"jsonrpc": "2.0", "id": request["id"], "result": {}})


async def test_a_second_answer_to_a_request_already_answered_is_dropped() -> None:
    peer = Peer()
    async with connect(peer.client_writes, peer.client_reads) as session:
        async with anyio.create_task_group() as group:

            async def answer_twice() -> None:
                ping = await peer.read()
                for _ in range(2):
                    await peer.write({"jsonrpc": "2.0", "id": ping["id"], "result": {"n": 1}})

            group.start_soon(answer_twice)
            assert await session.request("ping") == {"n": 1}
        async with anyio.create_task_group() as group:

            async def answer() -> None:
                ping = await peer.read()
                await peer.write({"jsonrpc": "2.0", "id": ping["id"], "result": {"n": 2}})

            group.start_soon(answer)
            assert await session.request("ping") == {"n": 2}
        assert session.alive


async def test_progress_reaches_nobody_once_its_request_is_cancelled() -> None:
    peer = Peer()
    seen: list[float] = []
    first_seen = anyio.Event()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(done)
        first_seen.set()

    async with connect(peer.client_writes, peer.client_reads) as session:
        async with anyio.create_task_group() as group:
            scope = anyio.CancelScope()

            async def ask() -> None:
                with scope:
                    await session.request("tools/call", {}, on_progress=on_progress)

            group.start_soon(ask)
            request = await peer.read()
            params = {"progressToken": request["id"], "progress": 3, "total": 10, "message": "3 of 10"}
            await peer.write({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
            await first_seen.wait()
            scope.cancel()
            assert (await peer.read())["method"] == "notifications/cancelled"
        late = {**params, "progress": 4}
        await peer.write({"jsonrpc": "2.0", "method": "notifications/progress", "params": late})
        async with anyio.create_task_group() as group:

            async def answer() -> None:
                ping = await peer.read()
                await peer.write({"jsonrpc": "2.0", "id": ping["id"], "result": {}})

            group.start_soon(answer)
            assert await session.request("ping") == {}  # read after the late progress note
    assert seen == [3.0]


async def test_server_notifications_reach_the_notification_callback() -> None:
    peer = Peer()
    heard: list[Notification] = []

    async def hear(notification: Notification) -> None:
        heard.append(notification)

    async with connect(peer.client_writes, peer.client_reads) as session:
        session.notifications = hear
        await peer.write({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}})
        await peer.write({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})
        assert await peer.read() == {"jsonrpc": "2.0", "id": "srv-1", "result": {}}
    assert heard == [Notification("notifications/message", {"level": "info"})]


async def test_progress_reaches_the_callback_and_errors_raise() -> None:
    peer = Peer()
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    async with connect(peer.client_writes, peer.client_reads) as session, anyio.create_task_group() as group:

        async def ask() -> None:
            with pytest.raises(RemoteError) as caught:
                await session.request("tools/call", {}, on_progress=on_progress)
            assert caught.value.code == -32602

        group.start_soon(ask)
        request = await peer.read()
        token = request["params"]["_meta"]["progressToken"]
        await peer.write(
            {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 1},
            }
        )
        await peer.write({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32602, "message": "bad"}})
    assert seen == [(1.0, None, None)]


async def test_a_cancelled_request_tells_the_server_and_the_session_goes_on() -> None:
    peer = Peer()
    async with connect(peer.client_writes, peer.client_reads) as session:
        async with anyio.create_task_group() as group:
            scope = anyio.CancelScope()

            async def ask() -> None:
                with scope:
                    await session.request("tools/call", {"name": "slow"})

            group.start_soon(ask)
            request = await peer.read()
            scope.cancel()
            cancel = await peer.read()
        assert cancel == {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request["id"], "reason": "cancelled by the client"},
        }
        await peer.write({"jsonrpc": "2.0", "id": request["id"], "result": {"late": True}})  # ignored
        async with anyio.create_task_group() as group:

            async def answer() -> None:
                ping = await peer.read()
                await peer.write({"jsonrpc": "2.0", "id": ping["id"], "result": {}})

            group.start_soon(answer)
            assert await session.request("ping") == {}


async def test_the_wire_hook_sees_every_line_both_ways_including_the_cancellation() -> None:
    peer = Peer()
    wire: list[tuple[str, dict[str, Any]]] = []
    async with connect(peer.client_writes, peer.client_reads) as session:
        session.on_wire = lambda direction, data: wire.append((direction, json.loads(data)))
        session.cancel_reason = "interrupted by the user"
        async with anyio.create_task_group() as group:

            async def answer() -> None:
                ping = await peer.read()
                await peer.write({"jsonrpc": "2.0", "id": ping["id"], "result": {}})

            group.start_soon(answer)
            assert await session.request("ping") == {}
        async with anyio.create_task_group() as group:
            scope = anyio.CancelScope()

            async def ask() -> None:
                with scope:
                    await session.request("tools/call", {"name": "slow"})

            group.start_soon(ask)
            call = await peer.read()
            scope.cancel()
            cancel = await peer.read()
    assert cancel["params"] == {"requestId": call["id"], "reason": "interrupted by the user"}
    assert [(direction, m.get("method")) for direction, m in wire] == [
        ("sent", "ping"),
        ("received", None),
        ("sent", "tools/call"),
        ("sent", "notifications/cancelled"),
    ]


async def test_server_ping_is_answered_and_the_peers_death_fails_every_waiter() -> None:
    peer = Peer()
    async with connect(peer.client_writes, peer.client_reads) as session:
        await peer.write({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})
        assert await peer.read() == {"jsonrpc": "2.0", "id": "srv-1", "result": {}}
        async with anyio.create_task_group() as group:

            async def ask() -> None:
                with pytest.raises(PeerGone):
                    await session.request("tools/call", {})

            group.start_soon(ask)
            await peer.read()
            await peer.to_client.aclose()
        assert not session.alive
        with pytest.raises(PeerGone):
            await session.request("ping")


async def test_a_peer_that_is_no_mcp_server_is_recognised() -> None:
    peer = Peer()
    async with connect(peer.client_writes, peer.client_reads) as session, anyio.create_task_group() as group:

        async def ask() -> None:
            with pytest.raises(PeerGone):
                await session.initialize()

        group.start_soon(ask)
        await peer.read()
        await peer.to_client.send(b"Last login: Mon Nov 30 from 10.0.0.1\n")
    assert session.not_mcp and "not an MCP server" in session.closed_reason


# -- the real server -------------------------------------------------------------------------------


async def test_the_real_server_answers_concurrent_calls() -> None:
    async with await anyio.open_process([sys.executable, "-m", "sysmcp"]) as process:
        assert process.stdin is not None and process.stdout is not None
        session = ClientSession(process.stdin, process.stdout)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(session.run)
                init = await session.initialize()
                assert init["serverInfo"]["name"] == "sysmcp"
                answers: list[dict[str, Any]] = []

                async def call() -> None:
                    answers.append(await session.call_tool("disk_usage", {"path": "/"}))

                async with anyio.create_task_group() as calls:
                    for _ in range(5):
                        calls.start_soon(call)
                assert len(answers) == 5 and all(not a["isError"] for a in answers)
                await process.stdin.aclose()
                await session.closed.wait()
                group.cancel_scope.cancel()
