"""The one shape of an engine call: ``run(request, progress, cancel) -> Result``.

Why one shape: a tool then runs any engine the same way (``ToolContext.run_engine``).
``progress(done, total)`` is cheap enough to call per entry (it stores two numbers for the event loop
to read); ``cancel()`` raises once the call was given up. What a run skipped or could not read is
counted in its result, never in a counter passed in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import TypeAlias, TypeVar

__all__ = ["WAIT_S", "Cancel", "Progress", "StopFlag", "never_cancelled", "no_progress", "wait_for"]

#: Raises when the call was given up; otherwise returns at once.
Cancel: TypeAlias = Callable[[], None]
#: Work done so far and the total when known (None: not known yet).
Progress: TypeAlias = Callable[[float, "float | None"], None]


def never_cancelled() -> None:
    """The ``cancel`` of a call nobody can give up (a command-line run, a test)."""


def no_progress(done: float, total: float | None = None) -> None:
    """The ``progress`` of a call nobody watches."""


class _Stopped(Exception):
    """Raised in a call's worker thread once the call stopped (cancelled, or another part failed)."""


class StopFlag(threading.Event):
    """Set by the calling thread when the call stops (``cancel`` is asked there only, by ``wait_for``);
    its worker threads (smartctl reads, container API calls, hashing threads) call ``check`` between
    their steps."""

    def check(self) -> None:
        if self.is_set():
            raise _Stopped


T = TypeVar("T")
WAIT_S = 0.05  # how often the calling thread asks ``cancel`` while it waits for its worker threads


def wait_for(futures: list[Future[T]], cancel: Cancel, progress: Progress = no_progress) -> list[T]:
    """Their results, in order. While they run, the calling thread asks ``cancel`` every ``WAIT_S``
    and reports how many are done; a part's failure is raised as soon as it is seen."""
    pending = set(futures)
    while pending:
        cancel()
        done, pending = wait(pending, timeout=WAIT_S, return_when=FIRST_COMPLETED)
        for future in done:
            future.result()
        progress(len(futures) - len(pending), len(futures))
    return [future.result() for future in futures]
