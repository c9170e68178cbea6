"""``RequestContext``: everything a tool ever sees of the protocol.

Tools report progress and logs through it and hand blocking work to ``run_in_worker``; they never
see the wire, the session or JSON-RPC ids.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread

from sysmcp.protocol.jsonrpc import RequestId
from sysmcp.protocol.lifecycle import LATEST_LEGACY, LOG_LEVELS, Features, features_of
from sysmcp.protocol.threads import run_in_thread

T = TypeVar("T")

DEFAULT_FEATURES = features_of(LATEST_LEGACY)  # immutable, so one default serves every context
PROGRESS_INTERVAL = 0.1  # seconds: about ten progress notifications a second, at most


_RANKS = {level: rank for rank, level in enumerate(LOG_LEVELS)}  # checked on every call: a lookup, not a scan


class Peer(Protocol):
    """The session side a context talks through."""

    async def notify(self, method: str, params: dict[str, Any]) -> None: ...


class ClientDeclined(Exception):
    """A request to the client got no usable answer."""


class Meter:
    """Counters a worker thread bumps cheaply; the event loop turns them into progress notifications.

    Plain attribute writes from the worker: no locks, no loop hops per chunk, so progress costs
    nearly nothing however fast the work goes.
    """

    __slots__ = ("done", "total")

    def __init__(self, total: float | None = None) -> None:
        self.done: float = 0
        self.total: float | None = total

    @staticmethod
    def cancel() -> None:
        """Raise if the request was cancelled; call it between chunks or entries."""
        anyio.from_thread.check_cancelled()

    def report(self, done: float, total: float | None = None) -> None:
        """Work done so far (and the total, once known): an engine's ``progress``."""
        self.done = done
        if total is not None:
            self.total = total


Describe = Callable[[Meter, float], str | None]


@dataclass
class RequestContext:
    request_id: RequestId
    method: str
    peer: Peer
    progress_token: RequestId | None = None
    features: Features = DEFAULT_FEATURES
    log_level: str | None = "warning"  # None: the client asked for no log messages
    limiter: anyio.CapacityLimiter | None = None
    #: What the client declared it can do (``initialize``, or this request's envelope in 2026-07-28).
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    _last_progress: float = -math.inf
    _last_sent_at: float = -math.inf

    async def progress(
        self, done: float, total: float | None = None, message: str | None = None, *, final: bool = False
    ) -> None:
        """Send ``notifications/progress`` if asked for, strictly increasing, throttled unless ``final``;
        its total only while the work has not passed it (a client's bar never stands past 100 %)."""
        if self.progress_token is None or not done > self._last_progress:
            return
        now = anyio.current_time()
        if not final and now - self._last_sent_at < PROGRESS_INTERVAL:
            return
        self._last_progress, self._last_sent_at = done, now
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": done}
        if total is not None and done <= total:  # a total is an estimate; one the work has passed is none
            params["total"] = total
        if message and self.features.progress_message:
            params["message"] = message
        await self.peer.notify("notifications/progress", params)

    def wants_log(self, level: str) -> bool:
        """True if the client's level lets a message of ``level`` through (check before building one)."""
        return self.log_level is not None and _RANKS[level] >= _RANKS[self.log_level]

    async def log(self, level: str, data: Any, logger: str = "sysmcp") -> None:
        """Send ``notifications/message`` if the client's level lets it through."""
        if not self.wants_log(level):
            return
        await self.peer.notify("notifications/message", {"level": level, "logger": logger, "data": data})

    def can_elicit(self) -> bool:
        """Whether the client declared form-mode elicitation and this request may ask it something."""
        declared = self.client_capabilities.get("elicitation")
        if not isinstance(declared, dict) or self.features.modern:
            return False
        return not declared or isinstance(declared.get("form"), dict)  # {} is form mode (2025-06-18)

    async def ask(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send the client a request (``elicitation/create``) and return its result, or raise
        ``ClientDeclined`` when it answers with an error, cannot be asked, or says nothing in time."""
        request = getattr(self.peer, "request", None)
        if request is None:
            raise ClientDeclined("this connection cannot carry requests to the client")
        try:
            response = await request(method, params, timeout=timeout)
        except Exception as exc:  # ClientRequestError (a timeout) or a closed wire
            raise ClientDeclined(str(exc)) from exc
        if response.error is not None or not isinstance(response.result, dict):
            raise ClientDeclined(str((response.error or {}).get("message", "no result")))
        return dict(response.result)

    async def run_in_worker(
        self, work: Callable[[Meter], T], *, total: float | None = None, describe: Describe | None = None
    ) -> T:
        """Run blocking ``work(meter)`` in a worker thread while reporting the meter as progress.

        The worker must call ``meter.cancel()`` between chunks: that is where a cancelled
        request stops. A cancelled request waits for that, but only briefly: a thread blocked in the
        kernel (a dead mount) is left to finish alone (see ``threads``).
        """
        meter = Meter(total)
        started = anyio.current_time()

        async def report(final: bool) -> None:
            if meter.done > 0 or final:
                message = describe(meter, anyio.current_time() - started) if describe else None
                await self.progress(meter.done, meter.total, message, final=final)

        async def tick() -> None:
            while True:
                await anyio.sleep(PROGRESS_INTERVAL)
                await report(final=False)

        if self.progress_token is None:
            return await run_in_thread(work, meter, self.limiter)
        failure: Exception | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(tick)
            try:
                result = await run_in_thread(work, meter, self.limiter)
            except Exception as exc:  # re-raised below as itself, not wrapped in an ExceptionGroup
                failure = exc
            finally:
                group.cancel_scope.cancel()
        if failure is not None:
            raise failure
        await report(final=True)
        return result
