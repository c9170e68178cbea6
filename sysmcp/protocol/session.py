"""The session: read loop, one task per request, cancellation, and a request's exceptions made JSON-RPC
error replies; every line goes out through ``protocol.outbox`` (the one writer), and tool errors are
worded before they get here (``Server._run_tool``).

It knows JSON-RPC and the few MCP notifications that are about requests themselves
(``notifications/cancelled``); everything else is the handler's business.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from sysmcp.logconfig import get_logger
from sysmcp.protocol.context import RequestContext
from sysmcp.protocol.failures import ProtocolError
from sysmcp.protocol.framing import DEFAULT_MAX_LINE, LineDecoder, OversizedLine, encode
from sysmcp.protocol.jsonrpc import (
    ErrorCode,
    Invalid,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    error_message,
    notification_message,
    parse_line,
    request_id,
    request_id_in_head,
    request_message,
    result_message,
)
from sysmcp.protocol.outbox import Outbox, WireWriter

log = get_logger("sysmcp.session")

DEFAULT_MAX_IN_FLIGHT = 512
MAX_RESULT = 80 << 20  # bytes: tools bound their output (big results go to the 64 MiB store); more is a bug
EOF_GRACE = 0.5  # seconds in-flight requests may still finish after the client closed stdin
#: After stdin closed, replies already made are still written while the client reads them; only a client
#: that takes nothing for this long loses the rest.
WRITE_STALL = 5.0
SERVER_BUSY = -32000
RESULT_TOO_LARGE = -32001  # a batch member whose reply would take the batch's line over ``max_result``


class Transport(WireWriter, Protocol):
    async def receive(self) -> bytes:
        """The next chunk of bytes; ``b""`` at end of stream."""
        ...


class Handler(Protocol):
    """The MCP method table the session dispatches to."""

    def batching_allowed(self) -> bool: ...

    def answers_at_once(self, request: Request) -> bool:
        """True when the request cannot wait on anything (no I/O that may hang, no client reply)."""
        ...

    def admit(self, request: Request, ctx: RequestContext) -> None:
        """Accept the request or raise ``ProtocolError``; called in arrival order, before any work."""
        ...

    async def handle_request(self, request: Request, ctx: RequestContext) -> dict[str, Any]: ...

    async def handle_notification(self, notification: Notification) -> None: ...


@dataclass
class _Batch:
    """Replies to the elements of one JSON-RPC batch, sent together when the last one is done.

    Each reply is kept as it was encoded (without its newline), so the batch's line is one join, and
    ``size`` is that line's length so far: what the cap on the whole batch is checked against.
    """

    outbox: Outbox
    limit: int
    pending: int
    parts: list[memoryview] = field(default_factory=list)
    size: int = len(b"[]\n")

    def add(self, msg_id: RequestId | None, data: bytes) -> None:
        """A member's reply (``encode``'s output), or its error when it would take the line over the cap."""
        part = memoryview(data)[:-1]  # the newline goes; a view, not a copy
        added = len(part) + (1 if self.parts else 0)  # and a comma before all but the first
        if self.size + added > self.limit:
            log.warning("batch reply over the size cap", size=self.size + added, limit=self.limit)
            alone = f"Server error: the replies to this batch would exceed {_size(self.limit)} in all;"
            alone += " send this request on its own"
            part = memoryview(encode(error_message(msg_id, RESULT_TOO_LARGE, alone)))[:-1]
            added = len(part) + (1 if self.parts else 0)
        self.parts.append(part)
        self.size += added

    async def settle(self) -> None:
        """One member is done: the last one sends the batch's line."""
        self.pending -= 1
        if self.pending == 0 and self.parts:
            pieces: list[bytes | memoryview] = [b"["]
            for part in self.parts:
                pieces += (part, b",")
            pieces[-1] = b"]\n"  # the last comma
            self.parts = []
            await self.outbox.put(b"".join(pieces))  # one copy: the line, at most the cap (and errors)


class ClientRequestError(Exception):
    """The client answered one of our requests with an error, or not in time."""


class Session:
    def __init__(
        self,
        handler: Handler,
        transport: Transport,
        *,
        max_line: int = DEFAULT_MAX_LINE,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        limiter: anyio.CapacityLimiter | None = None,
        eof_grace: float = EOF_GRACE,
        write_stall: float = WRITE_STALL,
    ) -> None:
        self.handler = handler
        self.transport = transport
        self.decoder = LineDecoder(max_line)
        self.max_in_flight = max_in_flight
        self.max_result = MAX_RESULT
        self.limiter = limiter or anyio.CapacityLimiter(4)
        self.eof_grace = eof_grace
        self.write_stall = write_stall
        self._in_flight: dict[RequestId, anyio.CancelScope] = {}
        self._pending: dict[RequestId, tuple[anyio.Event, list[Response]]] = {}
        self._ids = itertools.count(1)
        self._outbox = Outbox(transport)
        self._idle = anyio.Event()

    # -- the outside world ------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until the client closes its end (or the caller cancels us)."""
        async with anyio.create_task_group() as outer:

            async def stop_when_client_stops_reading() -> None:
                await self._outbox.broken.wait()
                outer.cancel_scope.cancel()

            outer.start_soon(stop_when_client_stops_reading)
            writer_done = anyio.Event()

            async def write() -> None:
                try:
                    await self._outbox.run()
                finally:
                    writer_done.set()

            outer.start_soon(write)
            async with anyio.create_task_group() as requests:
                await self._read_loop(requests)
                if self._in_flight:  # requests already running get a moment to finish; the rest are cancelled
                    self._idle = anyio.Event()
                    with anyio.move_on_after(self.eof_grace):
                        await self._idle.wait()
                requests.cancel_scope.cancel()
            self._outbox.close()
            if not await self._outbox.finish(self.write_stall):
                log.warning("the client stopped reading after closing stdin: unwritten replies dropped")
            with anyio.move_on_after(self.eof_grace):
                await writer_done.wait()
            outer.cancel_scope.cancel()

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self._send(notification_message(method, params))

    async def request(
        self, method: str, params: dict[str, Any] | None = None, timeout: float = 10
    ) -> Response:
        """Send a request to the client and wait for its response; one given up on (no answer in time,
        or the caller cancelled) is cancelled on the client too (``notifications/cancelled``)."""
        msg_id: RequestId = f"sysmcp-{next(self._ids)}"
        done = anyio.Event()
        slot: list[Response] = []
        self._pending[msg_id] = (done, slot)
        reason = "the request that needed the answer was cancelled"
        try:
            await self._send(request_message(msg_id, method, params))
            with anyio.fail_after(timeout):
                await done.wait()
        except TimeoutError as exc:
            reason = f"no answer within {timeout:g} s"
            raise ClientRequestError(f"the client did not answer {method} within {timeout:g} s") from exc
        finally:
            self._pending.pop(msg_id, None)
            if not done.is_set():
                # shielded, and bounded: a client that stops reading must not keep a cancelled caller
                with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                    await self.notify("notifications/cancelled", {"requestId": msg_id, "reason": reason})
        return slot[0]

    # -- reading ----------------------------------------------------------------------------

    async def _read_loop(self, tasks: TaskGroup) -> None:
        while True:
            # Input always ready and served without waiting never lets a cancellation (SIGTERM) land in
            # ``receive``: one is taken here, at no cost while nothing is cancelled.
            await anyio.lowlevel.checkpoint_if_cancelled()
            chunk = await self.transport.receive()
            frames = self.decoder.feed(chunk) if chunk else self.decoder.finish()
            for frame in frames:
                await self._on_frame(frame, tasks)
            if not chunk:
                return

    async def _on_frame(self, frame: bytes | OversizedLine, tasks: TaskGroup) -> None:
        if isinstance(frame, OversizedLine):
            log.warning("oversized line discarded", length=frame.length, limit=self.decoder.max_line)
            why = f"Invalid Request: message of {frame.length} bytes exceeds the {self.decoder.max_line} byte limit"
            # Answered by its id when its start names one, else the client's request waits for ever.
            await self._send(error_message(request_id_in_head(frame.head), ErrorCode.INVALID_REQUEST, why))
            return
        if not frame.strip():
            return
        parsed = parse_line(frame)
        if isinstance(parsed, list):
            await self._on_batch(parsed, tasks)
        else:
            await self._on_message(parsed, tasks, None)

    async def _on_batch(self, messages: list[Message], tasks: TaskGroup) -> None:
        if not self.handler.batching_allowed():
            # Each request in it is refused by its id: one error with id null answers none of them,
            # and the client would wait for their answers until its own timeout.
            why = "Invalid Request: this protocol version has no batches: send each message on its own line"
            ids = [m.id for m in messages if isinstance(m, (Request, Invalid)) and m.id is not None]
            for msg_id in ids:
                await self._send(error_message(msg_id, ErrorCode.INVALID_REQUEST, why))
            if not ids:
                await self._send(error_message(None, ErrorCode.INVALID_REQUEST, why))
            return
        if not messages:
            await self._refuse_line("empty batch")
            return
        batch = _Batch(self._outbox, self.max_result, pending=len(messages))
        for message in messages:
            await self._on_message(message, tasks, batch)

    async def _on_message(
        self,
        message: Message,
        tasks: TaskGroup,
        batch: _Batch | None,
    ) -> None:
        if isinstance(message, Request):
            if await self._start_request(message, tasks, batch):
                return  # served: its batch is settled
        elif isinstance(message, Invalid):
            await self._deliver(
                batch, message.id, encode(error_message(message.id, message.code, message.message))
            )
        elif isinstance(message, Notification):
            await self._on_notification(message)
        elif isinstance(message, Response):
            self._on_response(message)
        if batch is not None:
            await batch.settle()

    async def _on_notification(self, notification: Notification) -> None:
        if notification.method == "notifications/cancelled":
            cancelled = request_id(notification.params.get("requestId"))
            scope = self._in_flight.get(cancelled) if cancelled is not None else None
            if scope is not None:
                log.debug("request cancelled by client", request_id=cancelled)
                scope.cancel()
            return
        try:
            await self.handler.handle_notification(notification)
        except Exception:
            log.exception("notification handler failed", method=notification.method)

    def _on_response(self, response: Response) -> None:
        pending = self._pending.get(response.id) if response.id is not None else None
        if pending is None:
            log.debug("response to no request of ours ignored", id=response.id)
            return
        done, slot = pending
        slot.append(response)
        done.set()

    async def _start_request(
        self,
        request: Request,
        tasks: TaskGroup,
        batch: _Batch | None,
    ) -> bool:
        """Answer, refuse or start a request; True when it is served (or a task now serves it), which
        settles its batch."""
        # A request answered from memory (ping, initialize, tools/list …) is served before the next line
        # is read and never holds an in-flight slot: the limit below cannot refuse or delay it.
        at_once = self.handler.answers_at_once(request)
        if request.id in self._in_flight:
            refusal = ProtocolError(
                ErrorCode.INVALID_REQUEST, "Invalid Request: a request with this id is in flight"
            )
        elif len(self._in_flight) >= self.max_in_flight and not at_once:
            refusal = ProtocolError(
                SERVER_BUSY,
                f"Server busy: {self.max_in_flight} requests already in flight; retry when some finish",
            )
        else:
            ctx = RequestContext(
                request_id=request.id,
                method=request.method,
                peer=self,
                progress_token=_progress_token(request.params),
                limiter=self.limiter,
            )
            try:
                self.handler.admit(request, ctx)
            except ProtocolError as exc:
                refusal = exc
            else:
                if at_once:
                    # Nothing to wait for: a task (or a cancel scope) would only add its cost, the bulk of a
                    # small call's time. It is done before the next message is read, so nothing can cancel it.
                    await self._serve(request, ctx, None, batch)
                    return True
                scope = anyio.CancelScope()
                self._in_flight[request.id] = scope
                tasks.start_soon(self._serve, request, ctx, scope, batch)
                return True
        refused = error_message(request.id, refusal.code, refusal.message, refusal.data)
        await self._deliver(batch, request.id, encode(refused))
        return False

    # -- the error boundary -----------------------------------------------------------------

    async def _serve(
        self,
        request: Request,
        ctx: RequestContext,
        scope: anyio.CancelScope | None,
        batch: _Batch | None,
    ) -> None:
        """The one place exceptions become replies; a cancelled request leaves with nothing to send."""
        data = b""
        try:
            with scope if scope is not None else contextlib.nullcontext():
                try:
                    result = await self.handler.handle_request(request, ctx)
                    # an unencodable result is our bug: found here, inside the boundary
                    data = encode(result_message(request.id, result))
                    if len(data) > self.max_result:
                        log.error("result over the size cap", method=request.method, size=len(data))
                        data = encode(error_message(request.id, ErrorCode.INTERNAL_ERROR, "Internal error"))
                except ProtocolError as exc:
                    data = encode(error_message(request.id, exc.code, exc.message, exc.data))
                except Exception:
                    log.exception("request failed", method=request.method)
                    data = encode(error_message(request.id, ErrorCode.INTERNAL_ERROR, "Internal error"))
            if data and not (scope is not None and scope.cancel_called):
                await self._deliver(batch, request.id, data)
        finally:
            if scope is not None:
                self._in_flight.pop(request.id, None)
                if not self._in_flight:
                    self._idle.set()
            if batch is not None:
                # Cancelled too (the end of input), it is done: the replies its batch holds go out, for
                # as long as the client keeps reading (as replies made before the end do).
                with anyio.CancelScope(shield=True), anyio.move_on_after(self.write_stall):
                    await batch.settle()

    # -- writing ----------------------------------------------------------------------------

    async def _deliver(self, batch: _Batch | None, msg_id: RequestId | None, data: bytes) -> None:
        """Answer a request: on the wire, or into its batch's line (always encoded, to count its size)."""
        if batch is None:
            await self._outbox.put(data)
        else:
            batch.add(msg_id, data)

    async def _send(self, message: dict[str, Any]) -> None:
        await self._outbox.put(encode(message))

    async def _refuse_line(self, why: str) -> None:
        """A line refused as a whole: its error can name no request."""
        await self._send(error_message(None, ErrorCode.INVALID_REQUEST, f"Invalid Request: {why}"))


def _size(limit: int) -> str:
    """``80 MiB`` for the real cap; exact bytes for a cap that is no whole number of MiB (tests)."""
    return f"{limit >> 20} MiB" if limit and limit % (1 << 20) == 0 else f"{limit} bytes"


def _progress_token(params: dict[str, Any]) -> RequestId | None:
    meta = params.get("_meta")
    if isinstance(meta, dict):
        return request_id(meta.get("progressToken"))  # the same type as a request's id
    return None


__all__ = ["ClientRequestError", "Handler", "Session", "Transport"]
