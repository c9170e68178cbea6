"""The one shape of an engine call: ``run(request, progress, cancel) -> Result``.

Why one shape: a tool then runs any engine the same way (``ToolContext.run_engine``), and an engine
reads the same two callables whatever it does. ``progress(done, total)`` is cheap enough to call per
entry (it only stores two numbers for the event loop to read); ``cancel()`` raises the caller's
cancellation when the call was given up, and engines call it between entries or chunks. What a run
skipped or could not read is counted in its result, never in a counter passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

__all__ = ["Cancel", "Progress", "never_cancelled", "no_progress"]

#: Raises when the call was given up; otherwise returns at once.
Cancel: TypeAlias = Callable[[], None]
#: Work done so far and the total when known (None: not known yet).
Progress: TypeAlias = Callable[[float, "float | None"], None]


def never_cancelled() -> None:
    """The ``cancel`` of a call nobody can give up (a command-line run, a test)."""


def no_progress(done: float, total: float | None = None) -> None:
    """The ``progress`` of a call nobody watches."""
