"""Worker threads a cancelled request may leave behind, but never waits on for ever.

A worker stops at its next ``meter.cancel()`` once its request is cancelled: within one chunk or
one directory, normally milliseconds. A read blocked in the kernel (a dead network mount) reaches no
checkpoint until the kernel returns, which may be never. Waiting for it would keep the request's
worker slot taken for good and keep the server from exiting, so after a short grace the request lets
go: the thread carries on alone and stops at its next checkpoint, while the slot is free again and
shutdown is not held up. Threads left behind are counted, and past a bound new work is refused rather
than piling up threads that may never return.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

from sysmcp.logconfig import get_logger
from sysmcp.protocol.failures import ToolError

log = get_logger("sysmcp.threads")

A = TypeVar("A")
T = TypeVar("T")

GRACE = 0.25  # seconds a cancelled worker gets to reach its next checkpoint before it is left behind
POLL = 0.005  # seconds between looks at a cancelled worker during the grace (only ever after a cancel)
MAX_LEFT_BEHIND = 32  # threads still stuck after their request was cancelled; beyond it, refuse new work


class LeftBehind:
    """How many cancelled requests' threads are still running (stuck, most likely, in the kernel)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0


LEFT_BEHIND = LeftBehind()


class _Run:
    """One worker call: whether its thread has started and finished, and whether its request let go."""

    __slots__ = ("finished", "let_go", "started")

    def __init__(self) -> None:
        self.started = False
        self.finished = False
        self.let_go = False

    def finish(self) -> None:
        """In the thread, whatever the outcome."""
        with LEFT_BEHIND.lock:
            self.finished = True
            if self.let_go:
                LEFT_BEHIND.count -= 1

    def release(self) -> bool:
        """On the event loop, after the grace: let go of the thread if it is still running.

        A call cancelled before its thread started leaves nothing behind and is not counted.
        """
        with LEFT_BEHIND.lock:
            if self.finished or not self.started:
                return False
            self.let_go = True
            LEFT_BEHIND.count += 1
            return True


async def run_in_thread(
    work: Callable[[A], T],
    argument: A,
    limiter: anyio.CapacityLimiter | None,
    *,
    max_left_behind: int = MAX_LEFT_BEHIND,
) -> T:
    """``work(argument)`` in a worker thread under ``limiter``; cancellable even if the thread is stuck.
    ``max_left_behind``: how many left-behind threads refuse new work."""
    if LEFT_BEHIND.count >= max_left_behind:
        raise ToolError(
            f"{LEFT_BEHIND.count} earlier cancelled calls are still blocked in the kernel (a hung network "
            "mount?), so no new file or tree work is started until some return; restart sysmcp to clear them"
        )
    run = _Run()

    def in_thread(value: A) -> T:
        run.started = True  # a plain store: ``release`` only reads it
        try:
            return work(value)
        finally:
            run.finish()

    try:
        return await anyio.to_thread.run_sync(in_thread, argument, abandon_on_cancel=True, limiter=limiter)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True), anyio.move_on_after(GRACE):
            while run.started and not run.finished:  # not started: cancelled before it was handed over
                await anyio.sleep(POLL)
        if run.release():
            log.warning("worker left behind after cancellation", still_blocked=LEFT_BEHIND.count)
        raise
