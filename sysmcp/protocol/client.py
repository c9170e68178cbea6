"""The client half of MCP on anyio: one session over a pair of byte streams (a spawned server's stdio).

``ClientSession`` keeps one table of the requests awaiting an answer, keyed by id: concurrent
requests matched by id, progress routed by its token (the request's id) to a per-request callback,
``notifications/cancelled`` when a caller gives up (a late answer then finds no one waiting and is
dropped), answers to the server's own requests (``ping``), and the peer's death turned into
``PeerGone`` for every caller still waiting.

The fleet and ``sysmcp call`` speak through it (one client half). ``sysmcp trace`` needs none: it is
a transparent proxy that relays bytes and records them, and never matches requests to answers.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
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
    error_message,
    notification_message,
    parse_line,
    request_message,
    result_message,
)

log = get_logger("sysmcp.cli.call")

DEFAULT_VERSION = "2025-11-25"
CLIENT_INFO = {"name": "sysmcp-client", "version": __version__}
#: A server's line may be a big result (its own cap is 80 MiB): read lines up to that, drop longer ones.
MAX_REPLY_LINE = 96 << 20

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


class PeerGone(Exception):
    """The server's output ended (it exited, or the connection to it broke) before it answered."""


class NotMcp(Exception):
    """The peer wrote something that is not JSON-RPC: whatever runs there is not an MCP server."""


async def _report_progress(on_progress: ProgressCallback, params: dict[str, Any]) -> None:
    done, total, text = params.get("progress"), params.get("total"), params.get("message")
    await on_progress(
        float(done) if isinstance(done, (int, float)) else 0.0,
        float(total) if isinstance(total, (int, float)) else None,
        text if isinstance(text, str) else None,
    )


def answer_server_request(request: Request) -> dict[str, Any]:
    """What a client that offers no capabilities says to a server's request: pong to ``ping``, an empty
    ``roots/list`` (we declared no roots, so a server should not ask), and method-not-found otherwise."""
    if request.method == "ping":
        return result_message(request.id, {})
    if request.method == "roots/list":
        return result_message(request.id, {"roots": []})
    return error_message(request.id, ErrorCode.METHOD_NOT_FOUND, f"Method not found: {request.method}")


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
    reply: Response | None = None


class ClientSession:
    """One MCP client session over a byte stream pair. ``run()`` is its reader: the owner runs it in a
    task group that outlives the requests (``connect`` does that for the simple case)."""

    def __init__(self, send: ByteSender, receive: ByteReceiver, *, name: str = "server") -> None:
        self.name = name
        self._sender = send
        self._receiver = receive
        self._ids = itertools.count(1)
        self._waiters: dict[RequestId, _Waiter] = {}
        self._write_lock = anyio.Lock()
        self._decoder = LineDecoder(MAX_REPLY_LINE)
        self.closed = anyio.Event()
        self.closed_reason = ""
        self.not_mcp = False  # the peer wrote something that is not JSON-RPC
        self.notifications: Callable[[Notification], Awaitable[None]] | None = None
        self.on_wire: WireHook | None = None  # a raw view of the traffic (``sysmcp call --raw``)
        self.cancel_reason = "cancelled by the client"  # the reason our notifications/cancelled give

    @property
    def alive(self) -> bool:
        return not self.closed.is_set()

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
                frames = self._decoder.feed(chunk) if chunk else self._decoder.finish()
                for frame in frames:
                    if isinstance(frame, OversizedLine):
                        log.warning(
                            "oversized line from server dropped", server=self.name, length=frame.length
                        )
                        continue
                    if frame.strip():
                        if self.on_wire is not None:
                            self.on_wire("received", frame)
                        garbage = await self._on_line(frame)
                        if garbage is not None:
                            reason = f"not an MCP server: it wrote {garbage}"
                            self.not_mcp = True
                            return
                if not chunk:
                    return
        finally:
            self._close(reason)

    def _close(self, reason: str) -> None:
        if self.closed.is_set():
            return
        self.closed_reason = reason
        self.closed.set()
        for waiter in self._waiters.values():
            waiter.done.set()

    async def _on_line(self, line: bytes) -> str | None:
        parsed = parse_line(line)
        for message in parsed if isinstance(parsed, list) else [parsed]:
            if isinstance(message, Invalid):
                return _quote(line)
            if isinstance(message, Response):
                waiter = self._waiters.get(message.id) if message.id is not None else None
                if waiter is not None:
                    waiter.reply = message
                    waiter.done.set()
            elif isinstance(message, Request):
                with suppress(PeerGone):  # the peer is gone: the read loop sees its end next
                    await self._write(answer_server_request(message))
            elif message.method == "notifications/progress":
                token = message.params.get("progressToken")
                waiter = self._waiters.get(token) if isinstance(token, (str, int)) else None
                if waiter is not None and waiter.on_progress is not None:
                    try:
                        await _report_progress(waiter.on_progress, message.params)
                    except Exception:
                        log.exception("progress callback failed", server=self.name)
            elif self.notifications is not None:
                try:
                    await self.notifications(message)
                except Exception:
                    log.exception("notification callback failed", server=self.name)
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
        """Send a request and wait for its result. A JSON-RPC error raises ``RemoteError``, the peer's death
        ``PeerGone``; if the caller is cancelled the server is told (``notifications/cancelled``)."""
        if self.closed.is_set():
            raise PeerGone(self.closed_reason)
        msg_id: RequestId = next(self._ids)
        params = dict(params or {})
        if on_progress is not None:  # the request's id is its progress token
            params["_meta"] = {**(params.get("_meta") or {}), "progressToken": msg_id}
        waiter = self._waiters[msg_id] = _Waiter(anyio.Event(), on_progress)
        sent = False
        try:
            await self._write(request_message(msg_id, method, params))
            sent = True
            await waiter.done.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                if sent and waiter.reply is None and self.alive:
                    del self._waiters[msg_id]  # a late answer is dropped
                    cancel = {"requestId": msg_id, "reason": self.cancel_reason}
                    with suppress(PeerGone):
                        await self._write(notification_message("notifications/cancelled", cancel))
            raise
        finally:
            self._waiters.pop(msg_id, None)
        reply = waiter.reply
        if reply is None:
            raise PeerGone(self.closed_reason)
        if reply.error is not None:
            error = reply.error
            raise RemoteError(int(error.get("code", 0)), str(error.get("message", "")), error.get("data"))
        return reply.result or {}

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
    "ClientSession",
    "NotMcp",
    "PeerGone",
    "RemoteError",
    "WireHook",
    "answer_server_request",
    "connect",
]
