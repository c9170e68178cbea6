"""One bound on the bytes a gateway holds of its peers' answers: lines begun and not ended, and
answers ended and kept for the fleet's merge.

Each host's reply line may be up to 80 MiB (a large result), so each session's own cap bounds one
host, not the gateway: 64 sessions at once, each answering large or stalling mid-line, held some
5 GiB. The sessions of one gateway share one ``LineBudget``: before a session keeps more of an
unfinished line it claims the bytes it will hold; when the claim would pass the budget, the holder
of the most (the claimant included) is refused and its session ended, which frees its bytes at once,
until the claim fits. The holder of the most, not the claimant: a host that stalled holding tens of
MiB is the one cut, not each small answer that arrives after it. A session alone in the budget is
never refused by it (its own line cap bounds it): one host's answer up to that cap is always read.
An answer kept for the merge is a holder too, by the bytes of its line (``fanout.Fleet.fan_out``):
16 hosts each sending a large answer otherwise held them all, ended, until the last one came.

Free of I/O and of anyio: every session's reader runs on one event loop, so claims never interleave.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

#: The gateway's default budget: 512 MiB, or an eighth of physical memory if that is less (``sysmcp
#: --fleet-memory`` sets it). Raw bytes are what is charged; a line once ended is parsed, and parsed it
#: takes up to ~4 times its length (``client.MAX_REPLY_VALUES``), so the raw budget leaves that room.
#: 512 MiB is six of the largest answers (80 MiB) at once, far more than any real fan-out returns.
DEFAULT_LINE_BUDGET = 512 << 20
PHYSICAL_SHARE = 8


def default_line_budget(physical: int | None) -> int:
    """``DEFAULT_LINE_BUDGET``, or ``physical // PHYSICAL_SHARE`` when that is less (``physical`` the
    machine's memory in bytes; None when unknown)."""
    if physical is None or physical <= 0:
        return DEFAULT_LINE_BUDGET
    return min(DEFAULT_LINE_BUDGET, physical // PHYSICAL_SHARE)


#: What a refused holder is told to do: ``refuse(reason)`` ends its session (freeing its bytes).
Refuse = Callable[[str], None]


@dataclass
class LineBudget:
    """Bytes of unfinished lines held, by holder, against one ``limit`` shared by all of them."""

    limit: int
    _held: dict[object, int] = field(default_factory=dict)
    _refuse: dict[object, Refuse] = field(default_factory=dict)

    @property
    def held(self) -> int:
        """Bytes held now by every holder."""
        return sum(self._held.values())

    @property
    def holders(self) -> int:
        """Holders holding any bytes now."""
        return len(self._held)

    def held_by(self, holder: object) -> int:
        return self._held.get(holder, 0)

    def claim(self, holder: object, size: int, refuse: Refuse) -> bool:
        """``holder`` will hold ``size`` bytes (in place of what it held): True if it may. While the
        total would pass the limit, the holder of the most is refused (``refuse`` with the reason) and
        its bytes released; False when that is ``holder`` itself, which then holds nothing here."""
        self.release(holder)
        if size <= 0:
            return True
        while self._held and self.held + size > self.limit:
            largest = max(self._held, key=self._held.__getitem__)
            if self._held[largest] <= size:  # the claimant would hold the most: it is the one refused
                self._refused(holder, refuse)
                return False
            self._refused(largest, self._refuse[largest])
        self._held[holder] = size
        self._refuse[holder] = refuse
        return True

    def release(self, holder: object) -> None:
        """``holder`` holds nothing now (its line ended, or its session did)."""
        self._held.pop(holder, None)
        self._refuse.pop(holder, None)

    def _refused(self, holder: object, refuse: Refuse) -> None:
        """``holder`` refused while a claim is being made: the hosts counted are every holder and the
        claimant (released from the table while it claims)."""
        hosts = self.holders + 1
        self.release(holder)
        refuse(
            f"its answer did not fit the gateway's memory for answers in flight ({self.limit / (1 << 20):g} "
            f"MiB across {hosts} hosts): ask fewer hosts at once or a smaller answer"
        )


__all__ = ["DEFAULT_LINE_BUDGET", "PHYSICAL_SHARE", "LineBudget", "default_line_budget"]
