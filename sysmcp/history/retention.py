"""The retention policy of stored snapshots: which to keep per hour, day and week, and a size ceiling.

Pure (rows in, ids out), so ``Store.prune`` applies it in one transaction and tests check it alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HOUR, DAY, WEEK = 3600.0, 86400.0, 7 * 86400.0


@dataclass(frozen=True, slots=True)
class Retention:
    """Keep, per series, the newest snapshot of each hour for ``hourly_s``, of each day for
    ``daily_s`` and of each week for ``weekly_s``; nothing older. ``max_bytes``: the size ceiling."""

    hourly_s: float = 2 * DAY
    daily_s: float = 5 * WEEK
    weekly_s: float = 52 * WEEK
    max_bytes: int = 100 << 20

    def doomed(self, rows: Sequence[tuple[int, Any, float]], now: float) -> list[int]:
        """Of ``(id, series, taken)`` rows, newest (highest id) first, the ids to delete. A time in
        the future (a clock set back since) counts as now: never deleted for being odd."""
        kept: set[tuple[Any, str, int]] = set()
        doomed = []
        for row_id, series, taken in rows:
            age = max(0.0, now - taken)
            if age <= HOUR:  # the last hour's are kept whole: what_changed compares against them
                continue
            if age <= self.hourly_s:
                bucket = ("h", int(taken // HOUR))
            elif age <= self.daily_s:
                bucket = ("d", int(taken // DAY))
            elif age <= self.weekly_s:
                bucket = ("w", int(taken // WEEK))
            else:
                doomed.append(row_id)
                continue
            key = (series, *bucket)
            if key in kept:
                doomed.append(row_id)
            else:
                kept.add(key)
        return doomed
