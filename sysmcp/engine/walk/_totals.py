"""A totals-only walk: ``du -x`` totals of a root and of each directory in it, and nothing else.

Why beside the usage scan: container_usage's reconciliation of a data root needs two numbers per
directory of the root and nothing below, not the usage scan's rankings, per-file hook and fan-out to
other processes. It is ``Scanner`` asked for no listing and no totals below depth 1, so it walks by
the same rules: every entry's ``st_size`` and ``st_blocks`` counted once per inode, directories
entered by name relative to their parent's descriptor (``O_NOFOLLOW``, identity checked), mount
points known from the mount table skipped unseen, another device not entered, each skip counted.
A copy of Scanner's loop without its frames and identity checks cost about a fifth less CPU (44 ms
against 54 ms for 4,200 directories and 8,000 files): not worth a second walk to keep safe.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from sysmcp.engine.walk._budget import Budget
from sysmcp.engine.walk._types import ScanConfig, SkipCounter, SubtreeTotals, WalkOptions
from sysmcp.engine.walk._walk import NEVER, Scanner

_TOTALS_ONLY = ScanConfig(file_floor=NEVER, block_floor=NEVER, empty_listings=False, finished_depth=1)


def walk_totals(
    root: str, timeout_s: float, progress: Callable[[int, int], None], cancel: Callable[[], None]
) -> tuple[SubtreeTotals, dict[str, SubtreeTotals], str | None, SkipCounter]:
    """The root's totals, each of its directories' by name, why the walk stopped early (None: it
    did not) and what it skipped; ``progress(entries, bytes)`` and ``cancel()`` every few
    milliseconds. Raises ``OSError`` only when the root cannot be opened."""
    skipped = SkipCounter()
    scanner = Scanner(os.fsencode(root), WalkOptions(), skipped, config=_TOTALS_ONLY)

    def progress_and_cancel() -> None:
        progress(scanner.entries, scanner.apparent)
        cancel()

    scanner.cancel = Budget(timeout_s, progress_and_cancel)
    parts: dict[str, SubtreeTotals] = {}
    for event in scanner.events():  # SubtreeTotals only: no file is listed
        assert isinstance(event, SubtreeTotals)
        parts[event.relative] = event
    progress(scanner.entries, scanner.apparent)
    return parts.pop(""), parts, scanner.stopped, skipped
