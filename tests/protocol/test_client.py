"""The client session: the I/O-free request table, a scripted peer in memory, and the real server."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import pytest

from sysmcp.protocol.client import (
    MAX_REPLY_VALUES,
    REPLY_CHARS_PER_VALUE,
    ChatterBudget,
    ClientSession,
    Garbage,
    PeerGone,
    ProgressNote,
    RemoteError,
    Reply,
    RequestTable,
    Unattributed,
    answer_server_request,
    connect,
)
from sysmcp.protocol.jsonrpc import Notification, Request, TooComplex

pytestmark = pytest.mark.anyio


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


# -- I/O-free -----------------------------------------------------------------------------------


def test_requests_get_distinct_ids_and_a_progress_token_when_asked() -> None:
    table = RequestTable()
    first, message = table.open("tools/call", {"name": "x"}, progress=True)
    second, plain = table.open("ping")
    assert first != second
    assert message["params"]["_meta"]["progressToken"] == first
    assert "params" in plain and "_meta" not in plain["params"]
    assert table.waiting == [first, second]


def test_a_reply_is_matched_to_its_request_and_a_late_one_is_dropped() -> None:
    table = RequestTable()
    msg_id, _ = table.open("ping")
    assert table.classify(line({"jsonrpc": "2.0", "id": msg_id, "result": {}})) == [Reply(msg_id, {}, None)]
    table.forget(msg_id)
    assert table.classify(line({"jsonrpc": "2.0", "id": msg_id, "result": {}})) == []


def test_progress_is_routed_by_token_only_while_the_request_waits() -> None:
    table = RequestTable()
    msg_id, _ = table.open("tools/call", progress=True)
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": msg_id, "progress": 3, "total": 10, "message": "3 of 10"},
    }
    assert table.classify(line(note)) == [ProgressNote(msg_id, 3.0, 10.0, "3 of 10")]
    cancel = table.cancel_message(msg_id)
    assert cancel["method"] == "notifications/cancelled" and cancel["params"]["requestId"] == msg_id
    assert table.classify(line(note)) == []


def test_server_requests_notifications_and_garbage_are_told_apart() -> None:
    table = RequestTable()
    assert table.classify(line({"jsonrpc": "2.0", "id": "s1", "method": "ping"})) == [Request("s1", "ping")]
    assert table.classify(line({"jsonrpc": "2.0", "method": "notifications/message", "params": {}})) == [
        Notification("notifications/message")
    ]
    (garbage,) = table.classify(b"Welcome to Ubuntu 24.04 LTS")
    assert isinstance(garbage, Garbage)


def plan_item(n: int) -> dict[str, Any]:
    """One item of a reclaim_plan answer, as the tool gives it (a duplicate group)."""
    kept = f"/srv/photos/2024/{n:05d}/IMG_{n:05d}.jpg"
    return {
        "action": "delete",
        "bytes": 1818624,
        "class": "duplicate",
        "command": None,
        "cost": "the extra copies are gone; whoever used them by name must use the kept copy",
        "files": 2,
        "holders": [],
        "id": f"duplicate-{n:08x}",
        "kept_copy": kept,
        "kept_owner": "alice",
        "link_id": f"duplicate-{n:08x}:link",
        "method": "blocks of the extra copies (identical content, confirmed by find_duplicates)",
        "no_link": None,
        "note": f"or replace each extra by a hard link to {kept}",
        "owners": ["alice"],
        "paths": [f"/srv/backup/photos/2024/{n:05d}/IMG_{n:05d}.jpg"],
        "safety": "review",
        "shared_bytes": 0,
    }


def test_a_reclaim_plan_of_many_items_is_read_as_any_answer() -> None:
    """reclaim_plan lists every item in its structured result, some 22 JSON values each: a home of
    twelve thousand duplicate groups is a 9 MiB line, far under the server's own 80 MiB cap. It was
    refused as "too large/complex" (``sysmcp call``, a fleet's host), the bound set for 3,000 values.
    The same number of values packed as tightly as ``[{},{},…]`` is still refused."""
    table = RequestTable(max_values=MAX_REPLY_VALUES, chars_per_value=REPLY_CHARS_PER_VALUE)
    msg_id, _ = table.open("tools/call")
    result = {
        "content": [{"type": "text", "text": "Reclaim plan ..."}],
        "structuredContent": {"plan_id": "ab12", "items": [plan_item(n) for n in range(12_000)]},
    }
    assert table.classify(line({"jsonrpc": "2.0", "id": msg_id, "result": result})) == [
        Reply(msg_id, result, None)
    ]
    head = f'{{"jsonrpc": "2.0", "id": {json.dumps(msg_id)}, "result": {{"structuredContent": {{"items": ['
    packed = head.encode() + b"{}," * 264_000 + b"{}]}}}"
    assert table.classify(packed) == [TooComplex(MAX_REPLY_VALUES, len(packed))]


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


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        ({"code": "E42", "message": "no"}, 0, "no [its error code: 'E42']"),
        ({"code": None, "message": "no"}, 0, "no [its error code: None]"),
        ({"code": 1.5, "message": "no"}, 0, "no [its error code: 1.5]"),
        ({"code": True, "message": "no"}, 0, "no [its error code: True]"),
        ({"code": -1, "message": ["n", "o"]}, -1, "['n', 'o']"),
        ({}, 0, "[its error code: None]"),
    ],
)
async def test_an_error_object_in_any_shape_is_the_peers_remote_error(
    error: dict[str, Any], code: int, message: str
) -> None:
    peer = Peer()
    async with connect(peer.client_writes, peer.client_reads) as session, anyio.create_task_group() as group:

        async def ask() -> None:
            with pytest.raises(RemoteError) as caught:
                await session.request("initialize", {})
            assert (caught.value.code, caught.value.message) == (code, message)

        group.start_soon(ask)
        request = await peer.read()
        await peer.write({"jsonrpc": "2.0", "id": request["id"], "error": error})


async def test_the_first_answer_to_a_request_is_its_answer_and_a_second_is_dropped() -> None:
    """A broken peer answers one request twice, in one read: the answer must not depend on how its
    bytes were cut into reads (the second won when both came in one, the first otherwise)."""
    peer = Peer()
    async with connect(peer.client_writes, peer.client_reads) as session, anyio.create_task_group() as group:

        async def ask() -> None:
            assert await session.request("tools/call", {}) == {"answer": 1}
            assert await session.request("ping") == {}
            assert session.alive

        group.start_soon(ask)
        request = await peer.read()
        first, second = ({"jsonrpc": "2.0", "id": request["id"], "result": {"answer": n}} for n in (1, 2))
        await peer.to_client.send(line(first) + b"\n" + line(second) + b"\n")
        ping = await peer.read()
        await peer.write({"jsonrpc": "2.0", "id": ping["id"], "result": {}})


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


async def test_a_cancelled_initialize_is_not_cancelled_on_the_server() -> None:
    """Every schema: a client MUST NOT attempt to cancel its initialize request. Ctrl-C on ``sysmcp call``
    during the handshake (a cold start, a fleet's inventory) sent notifications/cancelled for it."""
    peer = Peer()
    async with connect(peer.client_writes, peer.client_reads) as session:
        async with anyio.create_task_group() as group:
            scope = anyio.CancelScope()

            async def handshake() -> None:
                with scope:
                    await session.initialize()

            group.start_soon(handshake)
            assert (await peer.read())["method"] == "initialize"
            scope.cancel()
        async with anyio.create_task_group() as group:

            async def answer() -> None:
                ping = await peer.read()  # the next line on the wire: no notifications/cancelled before it
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


# -- what a broken or hostile server sends ---------------------------------------------------------


def test_an_error_without_an_id_answers_the_one_request_waiting() -> None:
    """JSON-RPC answers a request it could not read (not JSON, too long) with ``"id": null``."""
    table = RequestTable()
    error: dict[str, Any] = {"code": -32700, "message": "Parse error"}
    refused = {"jsonrpc": "2.0", "id": None, "error": error}
    assert table.classify(line(refused)) == []  # nothing waits: nothing to answer
    msg_id, _ = table.open("tools/call")
    assert table.classify(line(refused)) == [Reply(msg_id, None, error)]


def test_an_error_without_an_id_is_unattributed_when_another_request_could_be_the_one() -> None:
    error: dict[str, Any] = {"code": -32700, "message": "Parse error"}
    refused = {"jsonrpc": "2.0", "id": None, "error": error}
    two = RequestTable()
    two.open("tools/call")
    two.open("tools/call")
    assert two.classify(line(refused)) == [Unattributed(error, 2)]
    given_up = RequestTable()  # one waits, and one was given up: the server may be reading that one
    first, _ = given_up.open("tools/call")
    given_up.cancel_message(first)
    given_up.open("tools/call")
    assert given_up.classify(line(refused)) == [Unattributed(error, 1)]
    answered = RequestTable()  # one answered before: it cannot be the one refused
    first, _ = answered.open("ping")
    answered.answered(first)
    second, _ = answered.open("tools/call")
    assert answered.classify(line(refused)) == [Reply(second, None, error)]


async def test_an_error_without_an_id_fails_the_request_at_once_or_ends_the_session() -> None:
    refused = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
    peer = Peer()
    async with connect(peer.client_writes, peer.client_reads) as session:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:

                async def refused_call() -> None:
                    with pytest.raises(RemoteError, match="Parse error"):
                        await session.request("tools/call", {})

                group.start_soon(refused_call)
                await peer.read()
                await peer.write(refused)
            assert session.alive
            async with anyio.create_task_group() as group:

                async def unknown() -> None:
                    with pytest.raises(PeerGone):
                        await session.request("tools/call", {})

                group.start_soon(unknown)
                group.start_soon(unknown)
                await peer.read(), await peer.read()
                await peer.write(refused)
    assert (
        session.ended_here
        and "it refused a request it could not read ('Parse error'" in session.closed_reason
    )


def test_the_chatter_budget_refills_with_time_and_with_the_requests_waiting() -> None:
    budget = ChatterBudget(rate=50, burst=2_000)
    assert budget.spend(2_000, now=0.0, waiting=0)
    assert budget.spend(50, now=1.0, waiting=0)  # a second while idle: one request's worth back
    assert budget.spend(150, now=2.0, waiting=3)  # and three requests' worth while three wait
    assert not budget.spend(1, now=2.0, waiting=3)


async def test_a_flood_of_messages_answering_nothing_ends_the_session() -> None:
    """Each message costs a parse on the reader every session shares: past the budget the peer is
    broken (the clock stands still here: no refill)."""
    note = line({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}) + b"\n"
    peer = Peer()
    session = ClientSession(peer.client_writes, peer.client_reads, clock=lambda: 0.0)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(session.run)
            await peer.to_client.send(note * 2_000)
            await peer.to_client.send(b"\n" * 10)
            await session.closed.wait()
    assert session.ended_here and "it flooded the session: more than 2,000 messages" in session.closed_reason


async def test_an_unfinished_line_while_no_request_waits_is_bounded() -> None:
    peer = Peer()
    session = ClientSession(peer.client_writes, peer.client_reads, max_idle_line=1 << 20)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(session.run)
            await peer.to_client.send(b'{"jsonrpc":"2.0","method":"x","params":{"a":"' + b"x" * (1 << 20))
            await session.closed.wait()
    assert session.unfinished == 0 and "no request of ours was waiting" in session.closed_reason


async def test_a_request_line_the_real_server_cannot_read_is_refused_at_once() -> None:
    """A request line past the server's 4 MiB: it answers with ``"id": null``, which was ignored, and
    the request waited for ever."""
    async with await anyio.open_process([sys.executable, "-m", "sysmcp"]) as process:
        assert process.stdin is not None and process.stdout is not None
        session = ClientSession(process.stdin, process.stdout)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(session.run)
                await session.initialize()
                with pytest.raises(RemoteError) as refused:
                    await session.call_tool("file_sha256", {"path": "x" * (5 << 20)})
                assert refused.value.code == -32600 and session.alive
                await process.stdin.aclose()
                await session.closed.wait()
                group.cancel_scope.cancel()


def test_a_request_given_up_long_ago_no_longer_makes_an_error_without_an_id_unattributed() -> None:
    """A peer reads its lines in order: once it answered a request sent after the one given up (or
    that one itself, late), it has read that one's line, and an error without an id can only be the
    one request waiting. Before, one call that ran out of time left the session unable, for the rest
    of its life, to take any such refusal as its call's: the session was ended instead."""
    error: dict[str, Any] = {"code": -32700, "message": "Parse error"}
    refused = {"jsonrpc": "2.0", "id": None, "error": error}
    table = RequestTable()
    slow, _ = table.open("tools/call")
    table.forget(slow)  # its deadline passed
    later, _ = table.open("tools/call")
    table.answered(later)  # answered: the line of the one given up, sent before, was read too
    waiting, _ = table.open("tools/call")
    assert table.classify(line(refused)) == [Reply(waiting, None, error)]
    late = RequestTable()
    slow, _ = late.open("tools/call")
    late.forget(slow)
    assert late.classify(line({"jsonrpc": "2.0", "id": slow, "result": {}})) == []  # its late answer
    waiting, _ = late.open("tools/call")
    assert late.classify(line(refused)) == [Reply(waiting, None, error)]
    still = RequestTable()  # given up after the one answered: it may still be the one being read
    answered, _ = still.open("ping")
    slow, _ = still.open("tools/call")
    still.forget(slow)
    still.answered(answered)
    still.open("tools/call")
    assert still.classify(line(refused)) == [Unattributed(error, 1)]
