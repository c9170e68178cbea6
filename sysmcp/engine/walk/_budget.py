"""Time budgets and cancellation for long work: the checkpoint every engine calls between steps.

A ``Budget`` is called often (per directory, per chunk) and costs a clock read; every few
milliseconds it also asks ``cancel`` (which raises to abandon the call), and past its
deadline it raises ``ScanStopped``, which ends the work cleanly with a partial result.
"""

from __future__ import annotations

import errno
import math
import resource  # imported with the walk: out of descriptors, an import could not open its file
import time
from collections.abc import Callable
from typing import TypeVar

from sysmcp import platform

T = TypeVar("T")


class ScanStopped(Exception):
    """Raised by a checkpoint to end a scan early but cleanly (a time budget ran out): the scanner
    finishes every open directory with what it has, so totals stay consistent, and records the
    reason in ``Scanner.stopped``. Any other exception (cancellation) propagates."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: What ``open`` says when no descriptor is left: the process's limit (EMFILE) or the system's table
#: (ENFILE). Nothing about the file opened: a walk that met it stops, its result partial.
NO_DESCRIPTOR_LEFT = frozenset({errno.EMFILE, errno.ENFILE})
#: How the reason of every ``OutOfDescriptors`` begins (``more_time_helps`` tells them by it: a reason is
#: a string, as it comes back from a forked child).
OUT_OF_DESCRIPTORS = "out of file descriptors"


class OutOfDescriptors(ScanStopped):
    """The walk stopped because the process (or the whole system) had no file descriptor left to open the
    next directory with: a fact about sysmcp's limits, not the tree, so it ends the walk as a deadline does
    (what was seen is kept and marked partial) instead of counting the directory unreadable or gone."""

    def __init__(self, exc: OSError) -> None:
        if exc.errno == errno.ENFILE:
            reason = f"{OUT_OF_DESCRIPTORS}, the system's table of open files is full (fs.file-max)"
        else:
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            held = "" if limit == resource.RLIM_INFINITY else f" of {limit:,}"
            reason = (
                f"{OUT_OF_DESCRIPTORS}, this process's limit{held} open files reached; raise it with "
                "ulimit -n or a service's LimitNOFILE=, or run fewer calls at once"
            )
        super().__init__(reason)


def more_time_helps(reason: str) -> bool:
    """Whether a call that stopped early for ``reason`` would get further with a larger time budget: not
    one out of descriptors, which would stop at the same directory (its reason says what to raise)."""
    return not reason.startswith(OUT_OF_DESCRIPTORS)


def out_of_descriptors(exc: OSError) -> bool:
    """Whether ``exc`` says no descriptor was left (``OutOfDescriptors``), not anything about the file.

    Why the count: EMFILE and ENFILE are also what a filesystem may answer for reasons of its own (a
    FUSE daemon out of its descriptors, a network filesystem's server): the kernel passes its errno
    through. The limit is taken to be ours unless the count shows it far off: fewer descriptors held
    than the limit less ``_near_limit`` (the system's table likewise for ENFILE). The margin covers what
    other threads close between the failure and the count; a count that cannot be taken (no
    descriptor left to list them with, no /proc) leaves the error read as ours. An error ``open_again``
    decided (by trying once more) is what it decided.
    """
    if isinstance(exc, _Decided):
        return exc.ours
    if exc.errno == errno.EMFILE:
        held = platform.descriptors_in_use()
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if held is None or limit == resource.RLIM_INFINITY:
            return True
        return held >= limit - _near_limit(limit)
    if exc.errno == errno.ENFILE:
        table = platform.open_files_in_system()
        return table is None or table[0] >= table[1] - _near_limit(table[1])
    return False


class _Decided(OSError):
    """An EMFILE or ENFILE that ``open_again`` has told apart: ``ours`` (no descriptor left to this
    process, or the system) or the filesystem's own (a FUSE daemon's limit)."""

    ours = True


class _NoDescriptorLeft(_Decided):
    ours = True


class _RefusedByFilesystem(_Decided):
    ours = False


def open_again(exc: OSError, call: Callable[[], T]) -> T:
    """After ``call`` (which takes a descriptor: an open, a listing) failed with ``exc``: ``exc`` raised
    again, unless it is an EMFILE or ENFILE the count (``out_of_descriptors``) calls the filesystem's.
    Then ``call`` once more, its result returned: a descriptor got now means the first failure was this
    process's, the count taken after other threads closed theirs. A second such failure with room still
    left is the filesystem's. Either way the error raised is decided: ``out_of_descriptors`` of it does
    not count again (a count taken later could say otherwise)."""
    if exc.errno not in NO_DESCRIPTOR_LEFT:
        raise exc
    if out_of_descriptors(exc):
        raise _NoDescriptorLeft(exc.errno, exc.strerror, exc.filename) from None
    try:
        return call()
    except OSError as again:
        if again.errno not in NO_DESCRIPTOR_LEFT:
            raise
        decided = _NoDescriptorLeft if out_of_descriptors(again) else _RefusedByFilesystem
        raise decided(again.errno, again.strerror, again.filename) from None


def _near_limit(limit: int) -> int:
    """How close to a limit counts as at it: an eighth of it, at least 64 (a pool's threads each
    holding a few descriptors, closed and opened while the count is taken)."""
    return max(64, limit // 8)


class Budget:
    """A checkpoint for long walks: ends them cleanly at a deadline, and asks about cancellation at
    most every ``every`` seconds (asking costs a few microseconds, a hop into the event loop's state:
    a walk of 20,000 directories does not pay 20,000 questions, and cancellation still lands in ms)."""

    __slots__ = ("_next_check", "cancel", "clock", "deadline", "every", "reason", "seconds")

    def __init__(
        self,
        seconds: float,
        cancel: Callable[[], None] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        every: float = 0.002,
    ) -> None:
        self.clock = clock
        self.seconds = seconds
        self.deadline = clock() + seconds
        self.cancel = cancel
        self.every = every
        self.reason = f"time budget of {seconds:g} s reached"
        self._next_check = -math.inf

    def __call__(self) -> None:
        now = self.clock()
        if self.cancel is not None and now >= self._next_check:
            self._next_check = now + self.every
            self.cancel()
        if now >= self.deadline:
            raise ScanStopped(self.reason)

    @property
    def expired(self) -> bool:
        return self.clock() >= self.deadline

    def sharing(self, cancel: Callable[[], None] | None) -> Budget:
        """A budget with this one's deadline and reason and another checkpoint: a worker process's
        own progress, or a stage's. Why: one deadline for every process and stage of a call (forked
        children share the monotonic clock), each asking its own question every few milliseconds."""
        shared = Budget(self.seconds, cancel, clock=self.clock)
        shared.deadline, shared.reason = self.deadline, self.reason
        return shared


def throttled(cancel: Callable[[], None]) -> Budget:
    """A checkpoint without a deadline: asks about cancellation at most every few milliseconds."""
    return Budget(math.inf, cancel)
