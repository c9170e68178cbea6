"""The client half of MCP on anyio: one session over a pair of byte streams (a spawned server's stdio).

``RequestTable`` is the I/O-free part: it issues ids, keeps the table of requests awaiting an answer
and sorts every incoming line into what it is (a reply to one of ours, progress for one of ours, a
request or notification from the server), so its tests need no event loop. ``ClientSession`` puts it
on anyio: concurrent requests matched by id, progress routed to a per-request callback,
``notifications/cancelled`` when a caller gives up, answers to the server's own requests (``ping``),
and the peer's death turned into ``PeerGone`` for every caller still waiting.

The fleet and ``sysmcp call`` speak through it (one client half). ``sysmcp trace`` needs none: it is
a transparent proxy that relays bytes and records them, and never matches requests to answers.
"""

from __future__ import annotations

import itertools
import math
import reprlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from sysmcp import __version__
from sysmcp.logconfig import get_logger
from sysmcp.protocol.framing import LineDecoder, OversizedLine, encode
from sysmcp.protocol.jsonrpc import (
    ErrorCode,
    Invalid,
    Notification,
    Request,
    RequestId,
    Response,
    TooComplex,
    decode_json,
    error_message,
    notification_message,
    parse_decoded,
    request_message,
    result_message,
)
from sysmcp.protocol.linebudget import LineBudget

log = get_logger("sysmcp.cli.call")

DEFAULT_VERSION = "2025-11-25"
CLIENT_INFO = {"name": "sysmcp-client", "version": __version__}
#: A server's line may be a big result (its own cap is 80 MiB): read lines up to that; a longer one ends the session.
MAX_REPLY_LINE = 96 << 20
#: JSON values one line may hold: this many, or one in ``REPLY_CHARS_PER_VALUE`` characters of a longer
#: line. Most answers are summaries of a few thousand values (``tools/list`` the largest, ~3,000), and a
#: text of any length (a manifest read) is one; but ``reclaim_plan`` lists every item of its plan, ~22
#: values each (12,000 duplicate groups: 9 MB, 264,000 values), bounded only by the server's 80 MiB
#: result cap. No answer is denser than ~26 characters a value (``tools/list``; a plan ~35), and parsed
#: takes some twice its length. What the bound stops: ``[{},{},…]`` is 1.5 characters a value and ~66
#: bytes each parsed (80 MiB of it: 2 GiB); under it a line costs at most ~17 MiB or ~4 times its length.
MAX_REPLY_VALUES = 1 << 18
REPLY_CHARS_PER_VALUE = 16
#: Messages a server may send that answer none of our requests (progress, notifications, its own
#: requests, answers to requests given up): ``CHATTER_RATE`` a second for each request waiting (and
#: one request's worth while none waits), with a burst of ``CHATTER_BURST``. A sysmcp sends at most
#: ~10 progress notifications a second for a request (``PROGRESS_INTERVAL``), one ``list_changed`` for a
#: call and, as a gateway itself, some 200 progress steps for a fan-out; 2,000 is 200 s of progress
#: queued while this side was busy. A flood of tiny lines (millions of ``{"jsonrpc":…}`` a second) cost
#: the reader a parse each, on the event loop every host's session shares: past the budget the peer is broken.
CHATTER_RATE = 50.0
CHATTER_BURST = 2_000

ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None]]
#: Sees every line on the wire: ``("sent", line)`` before it is written, ``("received", line)`` as read.
WireHook = Callable[[str, bytes], None]


class RemoteError(Exception):
    """The server answered one of our requests with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data


def remote_error(error: dict[str, Any]) -> RemoteError:
    """The peer's JSON-RPC error object as ``RemoteError``, whatever its shape: a ``code`` that is no
    integer (``"E42"``, null, 1.5) or a ``message`` that is no string is still what the peer answered,
    and reading it must not raise (the fleet took such a host for unreachable). Such a code is 0 and
    said in the message; a message that is no string is its (bounded) ``repr``."""
    code, message = error.get("code"), error.get("message", "")
    text = message if isinstance(message, str) else reprlib.repr(message)
    if isinstance(code, int) and not isinstance(code, bool):
        return RemoteError(code, text, error.get("data"))
    return RemoteError(0, f"{text} [its error code: {reprlib.repr(code)}]".lstrip(), error.get("data"))


class PeerGone(Exception):
    """The server's output ended (it exited, or the connection to it broke) before it answered."""


class NotMcp(Exception):
    """The peer wrote something that is not JSON-RPC: whatever runs there is not an MCP server."""


# -- the I/O-free part --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to a request of ours; ``size``: the bytes of the line it came in, its newline included
    (what a gateway charges its memory budget for keeping it)."""

    id: RequestId
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    size: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class ProgressNote:
    """``notifications/progress`` for a request of ours still waiting."""

    id: RequestId
    progress: float
    total: float | None
    message: str | None


@dataclass(frozen=True, slots=True)
class Garbage:
    """A line that is not a JSON-RPC message at all."""

    reason: str


@dataclass(frozen=True, slots=True)
class Unattributed:
    """An error with no id (``"id": null``: the server could not read a request's id, its line was not
    JSON or too long) while more than one request of ours could be the one it refused."""

    error: dict[str, Any]
    waiting: int


Incoming = Reply | ProgressNote | Request | Notification | Garbage | TooComplex | Unattributed


@dataclass
class ChatterBudget:
    """How many messages answering none of our requests a peer may still send: a token bucket refilled
    at ``rate`` a second for each request waiting (and for one while none waits), holding ``burst``."""

    rate: float = CHATTER_RATE
    burst: float = CHATTER_BURST
    _left: float = CHATTER_BURST
    _at: float | None = None

    def spend(self, count: int, now: float, waiting: int) -> bool:
        """Take ``count`` messages read at ``now``; False once the peer has sent more than it may."""
        if self._at is not None:
            self._left = min(self.burst, self._left + (now - self._at) * self.rate * max(1, waiting))
        self._at = now
        self._left -= count
        return self._left >= 0


@dataclass
class RequestTable:
    """Ids, the requests awaiting an answer, and what each incoming line means for them."""

    max_values: int | None = None  # a line that may hold more values is TooComplex, never parsed
    chars_per_value: int = 0  # a longer line may hold one value in this many characters, if more
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _pending: dict[RequestId, str] = field(default_factory=dict)  # id → method
    _tokens: dict[RequestId, RequestId] = field(default_factory=dict)  # progress token → id
    #: Requests forgotten unanswered, by the order they were sent: the peer may still be reading one of
    #: them, until it answers one of them or one sent after them (it reads its lines in order).
    _given_up: dict[RequestId, int] = field(default_factory=dict)
    _sent: dict[RequestId, int] = field(default_factory=dict)  # each waiting request's place in the order
    chatter: int = 0  # messages read that answered no request waiting (``ChatterBudget`` spends them)

    def open(
        self, method: str, params: dict[str, Any] | None = None, *, progress: bool = False
    ) -> tuple[RequestId, dict[str, Any]]:
        """A new request: its id and the message to send. With ``progress`` it carries a progress token."""
        msg_id = next(self._ids)
        params = dict(params or {})
        if progress:
            params["_meta"] = {**(params.get("_meta") or {}), "progressToken": msg_id}
            self._tokens[msg_id] = msg_id
        self._pending[msg_id] = method
        self._sent[msg_id] = msg_id
        return msg_id, request_message(msg_id, method, params)

    def forget(self, msg_id: RequestId) -> None:
        """Stop waiting for a request (cancelled or given up): a late answer is then ignored."""
        if self._pending.pop(msg_id, None) is not None:
            self._given_up[msg_id] = self._sent[msg_id]
        self._sent.pop(msg_id, None)
        self._tokens.pop(msg_id, None)

    def answered(self, msg_id: RequestId) -> None:
        """A request has its answer: a second answer to it is then ignored. The peer has read its line,
        and so every line sent before it: a request given up before it is no longer one it may be reading."""
        if (number := self._sent.pop(msg_id, None)) is not None:
            self._given_up = {i: n for i, n in self._given_up.items() if n > number}
        self._pending.pop(msg_id, None)
        self._tokens.pop(msg_id, None)

    @property
    def waiting(self) -> list[RequestId]:
        return list(self._pending)

    def cancel_message(self, msg_id: RequestId, reason: str = "cancelled by the client") -> dict[str, Any]:
        """The ``notifications/cancelled`` for one of ours, which is forgotten at once."""
        self.forget(msg_id)
        return notification_message("notifications/cancelled", {"requestId": msg_id, "reason": reason})

    def classify(self, line: bytes) -> list[Incoming]:
        """Every message one line holds (a batch is several), each sorted into what it is.

        Replies and progress for requests no longer waiting are dropped here: a late answer to a
        cancelled request must never reach anyone. Every message but a reply to a request waiting
        adds to ``chatter``.
        """
        value = decode_json(line, self.max_values, self.chars_per_value)
        if isinstance(value, TooComplex):
            return [value]
        parsed = parse_decoded(value)
        found: list[Incoming] = []
        messages = parsed if isinstance(parsed, list) else [parsed]
        self.chatter += max(1, len(messages))  # an empty batch is a line read too
        for message in messages:
            if isinstance(message, Invalid):
                found.append(Garbage(message.message))
            elif isinstance(message, Response):
                if message.id is not None and message.id in self._pending:
                    self.chatter -= 1
                    found.append(Reply(message.id, message.result, message.error, len(line) + 1))
                elif message.id is not None:  # a late answer to one given up: its line was read
                    self._given_up.pop(message.id, None)
                elif message.id is None and message.error is not None and self._pending:
                    found.append(self._unread(message.error))
            elif isinstance(message, Notification) and message.method == "notifications/progress":
                token = message.params.get("progressToken")
                msg_id = self._tokens.get(token) if isinstance(token, (str, int)) else None
                if msg_id is not None and msg_id in self._pending:
                    found.append(_progress(msg_id, message.params))
            else:
                found.append(message)
        return found

    def _unread(self, error: dict[str, Any]) -> Reply | Unattributed:
        """An error without an id: JSON-RPC's answer to a request whose id the server could not read
        (its line was no JSON, or longer than it reads). It answers our one request waiting when that
        is the only line the server can have failed to read: no other request waits, and none was given
        up unanswered that it may be reading still (it has answered neither that one nor one sent after). Otherwise which request it
        refused is unknown: ``Unattributed``, and the session cannot be trusted to answer any of them
        (each would wait for its deadline, or take another's refusal as its own). A notification of
        ours is never the one: each is a few hundred bytes of well-formed JSON."""
        if len(self._pending) == 1 and not self._given_up:
            (only,) = self._pending
            self.chatter -= 1
            return Reply(only, None, error)
        return Unattributed(error, len(self._pending))


def _progress(msg_id: RequestId, params: dict[str, Any]) -> ProgressNote:
    done, total, text = params.get("progress"), params.get("total"), params.get("message")
    return ProgressNote(msg_id, _number(done) or 0.0, _number(total), text if isinstance(text, str) else None)


def _number(value: Any) -> float | None:
    """A JSON number as a float; None for anything else, 10**400 included (valid JSON, no float): the
    reader that parses it serves the session, and must not raise."""
    if not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def answer_server_request(request: Request) -> dict[str, Any]:
    """What a client that offers no capabilities says to a server's request: pong to ``ping``, an empty
    ``roots/list`` (we declared no roots, so a server should not ask), and method-not-found otherwise."""
    if request.method == "ping":
        return result_message(request.id, {})
    if request.method == "roots/list":
        return result_message(request.id, {"roots": []})
    return error_message(request.id, ErrorCode.METHOD_NOT_FOUND, f"Method not found: {request.method}")


# -- on anyio -----------------------------------------------------------------------------------


class ByteSender(Protocol):
    async def send(self, item: bytes) -> None: ...


class ByteReceiver(Protocol):
    async def receive(self) -> bytes:
        """The next chunk; raises ``anyio.EndOfStream`` (or returns ``b""``) at the end."""
        ...


@dataclass
class _Waiter:
    done: anyio.Event
    on_progress: ProgressCallback | None
    reply: Reply | None = None


class ClientSession:
    """One MCP client session over a byte stream pair. ``run()`` is its reader: the owner runs it in a
    task group that outlives the requests (``connect`` does that for the simple case)."""

    def __init__(
        self,
        send: ByteSender,
        receive: ByteReceiver,
        *,
        name: str = "server",
        max_line: int = MAX_REPLY_LINE,
        max_values: int = MAX_REPLY_VALUES,
        chars_per_value: int = REPLY_CHARS_PER_VALUE,
        max_idle_line: int | None = None,
        clock: Callable[[], float] = anyio.current_time,
        line_budget: LineBudget | None = None,
    ) -> None:
        self.name = name
        self._sender = send
        self._receiver = receive
        self._table = RequestTable(max_values=max_values, chars_per_value=chars_per_value)
        self._waiters: dict[RequestId, _Waiter] = {}
        self._write_lock = anyio.Lock()
        self._decoder = LineDecoder(max_line)  # a longer line is dropped as it comes, never held
        #: The longest part of a line held while no request waits: nothing is owed then, and a sysmcp
        #: sends nothing unasked. A host that stalls mid-line between calls would hold it for ever.
        self.max_idle_line = max_line if max_idle_line is None else max_idle_line
        self._clock = clock
        #: Shared with the gateway's other sessions: what this one holds of an unfinished line is
        #: claimed there before it is kept, and released when the line ends or the session does.
        self._line_budget = line_budget
        self._chatter = ChatterBudget()
        self.closed = anyio.Event()
        self.closed_reason = ""
        self.not_mcp = False  # the peer wrote something that is not JSON-RPC
        #: This side ended the session at the peer's fault: a line longer than max_line or of more than
        #: max_values values, a flood of messages, a refusal of a request it cannot name.
        self.ended_here = False
        self.cut_short = False  # the peer's output ended in the middle of a message
        self.notifications: Callable[[Notification], Awaitable[None]] | None = None
        self.on_wire: WireHook | None = None  # a raw view of the traffic (``sysmcp call --raw``)
        self.cancel_reason = "cancelled by the client"  # the reason our notifications/cancelled give

    @property
    def alive(self) -> bool:
        return not self.closed.is_set()

    @property
    def waiting(self) -> int:
        """Requests of ours waiting for their answer."""
        return len(self._waiters)

    @property
    def unfinished(self) -> int:
        """Bytes held of a line the peer has begun and not ended."""
        return self._decoder.buffered

    def abandon(self, reason: str) -> None:
        """End the session from this side: what it holds of an unfinished line is freed at once, the
        reader stops at its next read, and every caller still waiting gets ``PeerGone``."""
        self.ended_here = True
        self._close(reason)

    # -- reading ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Read until the peer's output ends; then every caller still waiting gets ``PeerGone``."""
        reason = "the server closed its output"
        try:
            while True:
                try:
                    chunk = await self._receiver.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    chunk = b""
                if self.ended_here:
                    return
                if chunk and self._line_budget is not None:
                    held = self._decoder.held_after(chunk)
                    if not self._line_budget.claim(self, held, self._over_budget, host=self.name):
                        return  # refused: ended, its reason set, its bytes freed
                frames = self._decoder.feed(chunk) if chunk else self._decoder.finish()
                now = self._clock()
                for frame in frames:
                    if self.ended_here:  # abandoned (or ended at a fault): nothing more is read
                        return
                    if isinstance(frame, OversizedLine):
                        reason = self._oversized(frame.length)
                        return
                    if frame.strip():
                        if self.on_wire is not None:
                            self.on_wire("received", frame)
                        ending = await self._on_line(frame)
                    else:
                        ending, self._table.chatter = None, self._table.chatter + 1
                    if isinstance(ending, TooComplex):
                        reason = self._end_here(
                            "too complex a line from server: session ended",
                            f"its answer is too large/complex: a line of {ending.length:,} characters that "
                            f"may hold more than {ending.limit:,} JSON values, more than any answer of its "
                            "length holds",
                            length=ending.length,
                        )
                        return
                    if isinstance(ending, Unattributed):  # ``RequestTable._unread``
                        said = remote_error(ending.error)
                        reason = self._end_here(
                            "an error without an id: session ended",
                            f"it refused a request it could not read ({_quote(said.message.encode())}, code "
                            f"{said.code}) while {ending.waiting} requests or one given up could be that one: "
                            "none can be trusted to be answered",
                            waiting=ending.waiting,
                        )
                        return
                    if isinstance(ending, str):
                        if not chunk and frame.startswith(b"{"):
                            # its last line, never ended: an answer cut off, not another program's words
                            reason = (
                                f"its output ended in the middle of a message ({len(frame):,} bytes of it)"
                            )
                            self.cut_short = True
                        else:
                            reason = f"not an MCP server: it wrote {ending}"
                            self.not_mcp = True
                        return
                    chatter, self._table.chatter = self._table.chatter, 0
                    if not self._chatter.spend(chatter, now, len(self._waiters)):  # ``ChatterBudget``
                        reason = self._end_here(
                            "a flood of messages from server: session ended",
                            f"it flooded the session: more than {CHATTER_BURST:,} messages answering no "
                            f"request, faster than {CHATTER_RATE:g} a second for each request waiting (a "
                            "sysmcp sends about 10)",
                        )
                        return
                if not chunk:
                    return
                if self._decoder.overflowing:  # no need to read it to its end, if it has one
                    reason = self._oversized(self._decoder.overflowing)
                    return
                if not self._waiters and (held := self._decoder.buffered) > self.max_idle_line:
                    reason = self._end_here(
                        "an unfinished line while idle: session ended",
                        f"it sent {held:,} bytes of a line while no request of ours was waiting, more than "
                        f"the {self.max_idle_line:,} it may: it sends nothing unasked",
                        length=held,
                    )
                    return
        finally:
            self._close(reason)

    def _end_here(self, event: str, reason: str, **fields: int) -> str:
        """The session ends at the peer's fault, logged as ``event``: ``reason`` for every caller waiting."""
        log.warning(event, server=self.name, **fields)
        self.ended_here = True
        return reason

    def _oversized(self, length: int) -> str:
        """The session ends at a line longer than any reply may be: the request it answers, unknown
        (its bytes are dropped), would otherwise wait for ever."""
        return self._end_here(
            "oversized line from server: session ended",
            f"it sent a line of more than {self._decoder.max_line >> 20} MiB, longer than any answer may be",
            length=length,
        )

    def _over_budget(self, reason: str) -> None:
        """The session ends at the gateway's memory for answers: its unfinished line, the longest of
        those arriving or about to be, found no room (``LineBudget.claim``); its bytes are freed at once."""
        event = "an answer past the gateway's memory for answers in flight: session ended"
        self._close(self._end_here(event, reason, length=self._decoder.buffered))

    def _close(self, reason: str) -> None:
        self._decoder.clear()  # an unfinished line is never read now: its bytes are freed
        if self._line_budget is not None:
            self._line_budget.release(self)
        if self.closed.is_set():
            return
        self.closed_reason = reason
        self.closed.set()
        for waiter in self._waiters.values():
            waiter.done.set()

    async def _on_line(self, line: bytes) -> str | TooComplex | Unattributed | None:
        """Acts on each message of ``line``; what ends the session instead: a line that is not JSON-RPC
        (its quoted start), one too complex to parse, or an error for a request it cannot name."""
        for item in self._table.classify(line):
            if isinstance(item, Reply):
                # The first answer is the answer: a second to the same id (a broken peer) is dropped,
                # whether it came in the same read or a later one.
                self._table.answered(item.id)
                waiter = self._waiters.get(item.id)
                if waiter is not None:
                    waiter.reply = item
                    waiter.done.set()
            elif isinstance(item, ProgressNote):
                waiter = self._waiters.get(item.id)
                if waiter is not None and waiter.on_progress is not None:
                    try:
                        await waiter.on_progress(item.progress, item.total, item.message)
                    except Exception:
                        log.exception("progress callback failed", server=self.name)
            elif isinstance(item, Request):
                with suppress(PeerGone):  # the peer is gone: the read loop sees its end next
                    await self._write(answer_server_request(item))
            elif isinstance(item, Notification):
                if self.notifications is not None:
                    try:
                        await self.notifications(item)
                    except Exception:
                        log.exception("notification callback failed", server=self.name)
            elif isinstance(item, (TooComplex, Unattributed)):
                return item
            else:
                return _quote(line)
        return None

    # -- writing ------------------------------------------------------------------------------

    async def _write(self, message: dict[str, Any]) -> None:
        data = encode(message)
        async with self._write_lock:
            if self.on_wire is not None:
                self.on_wire("sent", data)
            try:
                await self._sender.send(data)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
                self._close(f"the connection to the server broke ({type(exc).__name__})")
                raise PeerGone(self.closed_reason) from None

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._write(notification_message(method, params))

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        on_progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """Send a request and wait for its result (``reply``'s)."""
        return (await self.reply(method, params, on_progress=on_progress)).result or {}

    async def reply(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        on_progress: ProgressCallback | None = None,
    ) -> Reply:
        """Send a request and wait for its answer. A JSON-RPC error raises ``RemoteError``, the peer's death
        ``PeerGone``; if the caller is cancelled the server is told (``notifications/cancelled``), but for
        ``initialize``, which is never cancelled: the server answers it and the session then ends."""
        if self.closed.is_set():
            raise PeerGone(self.closed_reason)
        msg_id, message = self._table.open(method, params, progress=on_progress is not None)
        waiter = _Waiter(anyio.Event(), on_progress)
        self._waiters[msg_id] = waiter
        sent = False
        try:
            await self._write(message)
            sent = True
            await waiter.done.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                # Not initialize: a client MUST NOT attempt to cancel it (every version's schema).
                if sent and waiter.reply is None and self.alive and method != "initialize":
                    with suppress(PeerGone):
                        await self._write(self._table.cancel_message(msg_id, self.cancel_reason))
            raise
        finally:
            self._waiters.pop(msg_id, None)
            self._table.forget(msg_id)
        reply = waiter.reply
        if reply is None:
            raise PeerGone(self.closed_reason)
        if reply.error is not None:
            raise remote_error(reply.error)
        return reply

    # -- MCP ----------------------------------------------------------------------------------

    async def initialize(
        self,
        *,
        version: str = DEFAULT_VERSION,
        client_info: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The handshake: ``initialize`` (declaring no capabilities), then ``notifications/initialized``."""
        result = await self.request(
            "initialize",
            {"protocolVersion": version, "capabilities": {}, "clientInfo": client_info or CLIENT_INFO},
        )
        if not isinstance(result.get("protocolVersion"), str):
            raise NotMcp("its initialize answer names no protocol version")
        await self.notify("notifications/initialized")
        return result

    async def call_tool(
        self, name: str, arguments: dict[str, Any], *, on_progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        return await self.request(
            "tools/call", {"name": name, "arguments": arguments}, on_progress=on_progress
        )


def _quote(line: bytes) -> str:
    text = line[:80].decode("utf-8", "replace").strip()
    return repr(text + ("…" if len(line) > 80 else ""))


@asynccontextmanager
async def connect(
    send: ByteSender, receive: ByteReceiver, *, name: str = "server"
) -> AsyncIterator[ClientSession]:
    """A session whose reader runs for the duration of the block (not yet initialized)."""
    session = ClientSession(send, receive, name=name)
    async with anyio.create_task_group() as group:
        group.start_soon(session.run)
        try:
            yield session
        finally:
            group.cancel_scope.cancel()


__all__ = [
    "ChatterBudget",
    "ClientSession",
    "NotMcp",
    "PeerGone",
    "ProgressNote",
    "RemoteError",
    "Reply",
    "RequestTable",
    "Unattributed",
    "WireHook",
    "answer_server_request",
    "connect",
    "remote_error",
]
