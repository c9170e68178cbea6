"""The size cap on one batch's replies: the first replies in full, the rest a clear error, one valid line."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from sysmcp.protocol.context import RequestContext
from sysmcp.protocol.failures import ProtocolError
from sysmcp.protocol.framing import encode
from sysmcp.protocol.jsonrpc import Notification, Request, error_message, result_message
from sysmcp.protocol.session import RESULT_TOO_LARGE, Session
from tests.memory_transport import MemoryTransport

pytestmark = pytest.mark.anyio

BLOB = 1000  # characters in each ``big`` result


class Handler:
    """``big`` answers a fixed-size result at once, ``later`` the same from a task, ``refused`` fails admission."""

    def batching_allowed(self) -> bool:
        return True

    def admit(self, request: Request, ctx: RequestContext) -> None:
        if request.method == "refused":
            raise ProtocolError(-32602, "Invalid params: refused")

    def answers_at_once(self, request: Request) -> bool:
        return request.method != "later"

    async def handle_request(self, request: Request, ctx: RequestContext) -> dict[str, Any]:
        if request.method in ("big", "later"):
            return {"blob": "x" * BLOB}
        return {}

    async def handle_notification(self, notification: Notification) -> None:
        return None


def call(msg_id: Any, method: str = "big") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "method": method}


def reply_size(msg_id: Any) -> int:
    """The bytes one ``big`` reply takes in a batch's line (without its newline)."""
    return len(encode(result_message(msg_id, {"blob": "x" * BLOB}))) - 1


class Peer:
    """Sends lines; returns every line written up to the answer of a ping sent after them."""

    def __init__(self, transport: MemoryTransport) -> None:
        self.transport = transport
        self.barriers = 0

    async def exchange(self, *messages: Any) -> list[bytes]:
        """Send ``messages`` (a list is a batch), then a ping; the raw lines written before its answer."""
        self.barriers += 1
        barrier = f"barrier-{self.barriers}"
        before = len(self.transport.written)
        data = b"".join(json.dumps(m).encode() + b"\n" for m in messages)
        self.transport.feed(data + json.dumps(call(barrier, "ping")).encode() + b"\n")
        with anyio.fail_after(5):  # a guard against a hang, not a timing assertion
            while True:
                lines = bytes(self.transport.written[before:]).split(b"\n")[:-1]
                if lines and json.loads(lines[-1]).get("id") == barrier:
                    return lines[:-1]
                await self.transport.wrote.wait()

    async def send_and_read_one(self, message: Any) -> bytes:
        """Send one line and return the next line written (for members that run in tasks)."""
        before = len(self.transport.written)
        self.transport.feed(json.dumps(message).encode() + b"\n")
        with anyio.fail_after(5):  # a guard against a hang, not a timing assertion
            while b"\n" not in self.transport.written[before:]:
                await self.transport.wrote.wait()
        return bytes(self.transport.written[before:]).split(b"\n")[0]


@asynccontextmanager
async def running(max_result: int | None = None) -> AsyncIterator[Peer]:
    transport = MemoryTransport()
    session = Session(Handler(), transport)
    if max_result is not None:
        session.max_result = max_result
    async with anyio.create_task_group() as group:
        group.start_soon(session.run)
        yield Peer(transport)
        transport.feed(b"")


def one_batch(lines: list[bytes]) -> list[dict[str, Any]]:
    assert len(lines) == 1, lines
    replies = json.loads(lines[0])  # the whole line is valid JSON
    assert isinstance(replies, list)
    return replies


async def test_a_batch_over_the_cap_gets_its_first_replies_in_full_and_the_rest_as_errors_with_their_ids() -> (
    None
):
    cap = 3 + reply_size(1) + 1 + reply_size(2) + 1 + reply_size(3) + 100  # room for three, not four
    async with running(max_result=cap) as peer:
        lines = await peer.exchange([call(i) for i in range(1, 7)])
    replies = one_batch(lines)
    assert [r["id"] for r in replies] == [1, 2, 3, 4, 5, 6]  # answered at once: in arrival order
    assert [r["result"] for r in replies[:3]] == [{"blob": "x" * BLOB}] * 3
    for reply in replies[3:]:
        assert reply["error"]["code"] == RESULT_TOO_LARGE == -32001
        assert "exceed" in reply["error"]["message"] and "on its own" in reply["error"]["message"]
        assert "result" not in reply
    too_large = len(encode(replies[3])) - 1
    assert len(lines[0]) + 1 <= cap + 3 * (too_large + 1)  # bounded by the cap, plus the small errors


async def test_a_batch_that_fills_the_cap_exactly_is_answered_in_full_and_one_byte_less_is_not() -> None:
    messages = [call(1), call(2)]
    whole = len(b"[" + encode(result_message(1, {"blob": "x" * BLOB}))[:-1] + b",") + reply_size(2) + 2
    async with running(max_result=whole) as peer:
        exact = one_batch(await peer.exchange(messages))
    async with running(max_result=whole - 1) as peer:
        short = one_batch(await peer.exchange(messages))
    assert ["result" in r for r in exact] == [True, True]
    assert ["result" in r for r in short] == [True, False]
    assert short[1]["id"] == 2 and short[1]["error"]["code"] == RESULT_TOO_LARGE


async def test_a_batch_under_the_cap_is_written_exactly_as_one_encoded_list_of_its_replies() -> None:
    messages = [
        call(1),
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
        call("two", "ping"),
        call(3, "refused"),
        {"jsonrpc": "2.0", "id": 4},  # invalid: no method
        call("ü\ud800", "ping"),  # an id that is not UTF-8: only its reply falls back to JSON escapes
    ]
    async with running() as peer:
        lines = await peer.exchange(messages)
    replies = one_batch(lines)
    assert [r["id"] for r in replies] == [1, "two", 3, 4, "ü\ud800"]
    assert replies[0]["result"] == {"blob": "x" * BLOB} and replies[1]["result"] == {}
    assert replies[2]["error"] == {"code": -32602, "message": "Invalid params: refused"}
    assert replies[3]["error"]["code"] == -32600
    lines[0].decode("utf-8")  # strict: the wire stays UTF-8
    parts = [encode(r)[:-1] for r in replies]
    assert lines[0] == b"[" + b",".join(parts) + b"]"


async def test_errors_for_invalid_and_refused_members_count_towards_the_cap() -> None:
    invalid = len(encode(error_message(9, -32600, "x"))) - 1  # a lower bound of the real error's size
    cap = 3 + reply_size(1) + 1 + invalid  # the first reply and the invalid member's error cannot both fit
    async with running(max_result=cap) as peer:
        replies = one_batch(await peer.exchange([call(1), {"jsonrpc": "2.0", "id": 9}, call(3, "refused")]))
    assert [r["id"] for r in replies] == [1, 9, 3]
    assert replies[0]["result"] == {"blob": "x" * BLOB}
    assert replies[1]["error"]["code"] == RESULT_TOO_LARGE
    assert replies[2]["error"]["code"] == RESULT_TOO_LARGE


async def test_members_served_in_tasks_are_capped_too_and_every_id_is_answered_once() -> None:
    cap = 3 + 3 * (reply_size(10) + 1) + 50  # room for three of the six
    async with running(max_result=cap) as peer:
        replies = one_batch([await peer.send_and_read_one([call(i, "later") for i in range(10, 16)])])
    assert sorted(r["id"] for r in replies) == list(range(10, 16))
    assert sum("result" in r for r in replies) == 3
    assert [r["error"]["code"] for r in replies if "error" in r] == [RESULT_TOO_LARGE] * 3


async def test_a_batch_of_notifications_gets_no_reply_and_an_empty_batch_an_invalid_request() -> None:
    note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}
    async with running(max_result=10) as peer:
        assert await peer.exchange([note, note]) == []
        (empty,) = await peer.exchange([])
    assert json.loads(empty)["error"]["code"] == -32600


async def test_the_session_goes_on_after_a_capped_batch() -> None:
    async with running(max_result=3 + reply_size(1)) as peer:
        first = one_batch(await peer.exchange([call(1), call(2)]))
        second = one_batch(await peer.exchange([call(3, "ping")]))
        single = await peer.exchange(call(4))
    assert ["result" in r for r in first] == [True, False]
    assert second == [{"jsonrpc": "2.0", "id": 3, "result": {}}]
    assert json.loads(single[0])["result"] == {
        "blob": "x" * BLOB
    }  # the cap is the batch's, not the session's
