"""One bound on the bytes a gateway holds of its peers' answers: lines begun and not ended, and
answers ended and kept for the fleet's merge.

Each host's reply line may be up to 80 MiB (a large result), so each session's own cap bounds one
host, not the gateway: 64 sessions at once, each answering large or stalling mid-line, held some
5 GiB. The sessions of one gateway share one ``LineBudget``: before a session keeps more of an
unfinished line it claims the bytes it will hold. An answer kept for the merge is a holder too, by
the bytes of its line (``fanout.Fleet.fan_out``): 16 hosts each sending a large answer otherwise held
them all, ended, until the last one came.

When a claim would pass the budget, lines still arriving are refused before any answer kept, the
longest first (the claimant's included), each one's session ended, which frees its bytes at once,
until the claim fits: a host that stalled holding tens of MiB is the one cut, not each small answer
that arrives after it, and a line that may never end never costs an answer ended, parsed and about
to be merged. Answers kept are not refused for one another: an answer that finds no room beside those
kept before it is refused itself, the newest, so an answer once kept is merged. A holder alone in the
budget is never refused by it (a session's own line cap bounds it): one host's answer up to that cap
is always read. So the bytes held stay within the budget, or one holder holds them all.

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
    """Bytes held of the peers' answers, by holder, against one ``limit`` shared by all of them: lines
    still arriving (``claim``) and answers ended and kept (``keep``)."""

    limit: int
    _held: dict[object, int] = field(default_factory=dict)
    _refuse: dict[object, Refuse] = field(default_factory=dict)
    _host: dict[object, object] = field(default_factory=dict)
    _kept: set[object] = field(default_factory=set)

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

    def claim(self, holder: object, size: int, refuse: Refuse, *, host: object = None) -> bool:
        """``holder``, a line still arriving from ``host`` (default: the holder is its own host), will
        hold ``size`` bytes (in place of what it held): True if it may. Past the limit the lines
        arriving are refused before any answer kept, the longest first, the claimant among them (``refuse``
        with the reason, its bytes released); False when that is ``holder``, which then holds nothing."""
        return self._claim(holder, size, refuse, host, kept=False)

    def keep(self, holder: object, size: int, refuse: Refuse, *, host: object = None) -> bool:
        """``holder``, an answer from ``host`` ended and parsed, is kept at ``size`` bytes until released:
        True if it may. Past the limit every line still arriving is refused before it, the longest
        first; if the answers already kept leave it no room, it is refused itself, the newest."""
        return self._claim(holder, size, refuse, host, kept=True)

    def release(self, holder: object) -> None:
        """``holder`` holds nothing now (its line ended, or its session did, or its answer is merged)."""
        self._held.pop(holder, None)
        self._refuse.pop(holder, None)
        self._host.pop(holder, None)
        self._kept.discard(holder)

    def _claim(self, holder: object, size: int, refuse: Refuse, host: object, *, kept: bool) -> bool:
        """An answer kept is worth more than a line that may never end: a line arriving is never kept in
        the place of one. An answer kept is never dropped for a later one either: it stays until its call
        returns, and the newest is the one refused. A holder alone is never refused (a host's own line
        cap bounds it). So the sum stays within the limit, or one holder holds it all."""
        self.release(holder)
        if size <= 0:
            return True
        hosts = len({*self._host.values(), holder if host is None else host})
        kept_held = sum(self._held[other] for other in self._kept)
        if self._kept and kept_held + size > self.limit:  # no line refused would make room
            self._refused(holder, refuse, hosts)
            return False
        while self.held + size > self.limit:
            arriving = [other for other in self._held if other not in self._kept]
            if not arriving:  # the claimant alone: nothing else is held
                break
            longest = max(arriving, key=self._held.__getitem__)
            if not kept and self._held[longest] <= size:  # the claimant's line would be the longest
                self._refused(holder, refuse, hosts)
                return False
            self._refused(longest, self._refuse[longest], hosts)
        self._held[holder] = size
        self._refuse[holder] = refuse
        self._host[holder] = holder if host is None else host
        if kept:
            self._kept.add(holder)
        return True

    def _refused(self, holder: object, refuse: Refuse, hosts: int) -> None:
        """``holder`` refused while a claim is made; ``hosts``: the distinct hosts holding bytes then,
        the claimant's included (one host may hold a line in one call and an answer kept in another)."""
        self.release(holder)
        across = "1 host" if hosts == 1 else f"{hosts} hosts"
        refuse(
            f"its answer did not fit the gateway's memory for answers in flight ({self.limit / (1 << 20):g} "
            f"MiB across {across}): ask fewer hosts at once or a smaller answer"
        )


__all__ = ["DEFAULT_LINE_BUDGET", "PHYSICAL_SHARE", "LineBudget", "default_line_budget"]
