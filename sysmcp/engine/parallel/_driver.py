"""The one parallel walk driver: walk here, share the tree out once the walk runs long, collect it back.

``ParallelWalk`` starts the walk here; once it has run ``split_after_s`` (a short walk never pays for
a fork) it detaches the subdirectories waiting on its stack (``Scanner.detach``) for forked children
(``FanOut``) and this process to claim, collects every part within the time budget (a child stuck past
the deadline is killed) and walks again here the subtrees of a child that died. The engine supplies
``consume`` (each walk event), ``work`` (how a process walks claimed subtrees) and the merge of the
parts, its own plain data. Work known from the start (ranges, blocks) goes through ``run_shared``.

Why the driver owns the fork: it is the one place that starts children, so fork safety is decided
once: an engine that names no count of processes gets ``available_processes`` (1 where fork after
threads is unsafe, ``platform.fork_is_safe``), and a child relies on no thread pool of the parent
(``forked``: blake3 hashes on one thread there, since the parent's rayon threads are not in a child).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sysmcp.engine.parallel._fork import MAX_TASKS, FanOut, Work, available_processes
from sysmcp.engine.walk import (
    Budget,
    Listing,
    Scanner,
    ScanStopped,
    SkipCounter,
    Subtree,
    SubtreeTotals,
)

GIVE_UP_AFTER_S = 2.0  # past a budget's deadline, how long to wait for a worker process before killing it


def collect_within(fan: FanOut, budget: Budget, cancel: Callable[[], None] | None = None) -> list[Any]:
    """Every forked worker's part (None for one that died or was given up), for a walk under ``budget``.

    Cancellation, raised by ``cancel`` (default: the budget itself), ends the wait; the deadline does
    not, since the workers stop at it themselves (one stuck in the kernel: see ``give_up_at``).
    """
    return fan.collect(quiet(cancel or budget), give_up_at(budget))


def give_up_at(budget: Budget) -> float:
    """When (``time.monotonic``) a worker still running under ``budget`` is killed: ``GIVE_UP_AFTER_S``
    past its deadline (the workers stop at the deadline themselves, unless stuck in the kernel)."""
    return time.monotonic() + max(0.0, budget.deadline - budget.clock()) + GIVE_UP_AFTER_S


def quiet(cancel: Callable[[], None]) -> Callable[[], None]:
    """A ``cancel`` for waiting on workers: progress and cancellation, but its deadline does not end the wait."""

    def waiting() -> None:
        with contextlib.suppress(ScanStopped):
            cancel()

    return waiting


SPLIT_AFTER_S = 0.01  # a walk still running after this long shares its waiting subtrees out
SUBTREES_PER_PROCESS = 32  # enough pieces that processes finish together whatever the tree's shape


#: What the engine does with each event of this process's walk (given the scanner, to raise floors).
Consume = Callable[[Listing | SubtreeTotals, Scanner], None]


@dataclass(frozen=True, slots=True)
class Sharing:
    """When and how widely a walk is shared: the knobs tests and benchmarks turn."""

    processes: int | None = None  # None: the usable CPUs (at most 4), asked only when the split comes
    split_after_s: float = SPLIT_AFTER_S
    pieces: int = SUBTREES_PER_PROCESS  # subtrees per process to split the waiting tree into
    waits_for_gifts: bool = False  # children wait for subtrees given away mid-walk (FanOut.give)


class ParallelWalk:
    """One walk of ``scanner``'s tree, shared with forked children past ``Sharing.split_after_s``: use
    ``walk(consume)``; then, if ``fan`` is set, ``here()`` and ``children()`` for the parts, ``again(lost)``
    for subtrees no part reported; ``close()`` always (a ``with`` block does it)."""

    def __init__(
        self, scanner: Scanner, budget: Budget, sharing: Sharing, work: Work, keep: Collection[int] = ()
    ) -> None:
        self.scanner = scanner
        self.budget = budget
        self.sharing = sharing
        self.work = work
        self.keep = keep  # descriptors from ``pipe()`` the children keep open (a later stage's)
        self.subtrees: list[Subtree] = []
        self.fan: FanOut | None = None
        self.processes = 1 if sharing.processes is None else sharing.processes
        self.on_split: Callable[[list[Subtree]], None] | None = None  # before any child is forked

    def walk(
        self, consume: Consume, started: float | None = None, detached: Consume | None = None
    ) -> str | None:
        """Walk this process's share, each event to ``consume(event, scanner)``; returns why the walk
        stopped early if ``consume`` raised ``ScanStopped`` (its own: ``scanner.stopped``).

        The split comes ``split_after_s`` after ``started`` (on the budget's clock; default: now).
        ``detached`` (default ``consume``) gets the listings the split read to cut subtrees finer: their
        directories are closed (no ``scanner.listing_fd``).
        """
        scanner, clock, sharing = self.scanner, self.budget.clock, self.sharing
        split_at = math.inf  # one process: never split
        if sharing.processes is None or sharing.processes > 1:
            split_at = (clock() if started is None else started) + sharing.split_after_s
        events = scanner.events()
        try:
            for event in events:
                consume(event, scanner)
                if clock() >= split_at:
                    split_at = math.inf
                    self._split(detached or consume)
        except ScanStopped as stop:
            return stop.reason
        finally:
            events.close()
        return None

    def _split(self, consume: Consume) -> None:
        # Asked only now: a walk too short to share never reads the CPU count or quota.
        sharing = self.sharing
        count = available_processes() if sharing.processes is None else sharing.processes
        self.processes = count
        if count <= 1:
            return
        subtrees, listings = self.scanner.detach(MAX_TASKS, sharing.pieces * count)
        for listing in listings:
            consume(listing, self.scanner)
        if subtrees:
            self.subtrees = subtrees
            if self.on_split is not None:
                self.on_split(subtrees)
            self.fan = FanOut(
                len(subtrees), count, self.work, self.keep, waits_for_gifts=sharing.waits_for_gifts
            )
            self.fan.start()

    def here(self) -> Any:
        """This process's part: it claims subtrees too, until none is left (with
        ``Sharing.waits_for_gifts``, it waits for a child's gift until the deadline; cancellation
        raises, as the budget asks)."""
        assert self.fan is not None
        return self.fan.run_here(self._before_deadline)

    def _before_deadline(self) -> bool:
        try:
            self.budget()
        except ScanStopped:
            return False
        return True

    def children(self, budget: Budget | None = None, cancel: Callable[[], None] | None = None) -> list[Any]:
        """Every child's part, None for one that died or was given up (killed past the deadline of
        ``budget``, default the walk's); ``cancel`` (default the budget) runs while waiting."""
        assert self.fan is not None
        return collect_within(self.fan, budget or self.budget, cancel)

    def walk_claimed(
        self,
        claim: Callable[[], int | None],
        counter: SkipCounter,
        cancel: Callable[[], None],
        consume: Consume,
        in_child: bool = False,
    ) -> dict[str, Any]:
        """Walk the claimed subtrees here, each event to ``consume(event, scanner)``; returns this
        process's part as ``stopped_early`` reads it (``stopped``, ``subtrees`` walked and, in a child,
        ``skipped``, ``skipped_named``, ``skipped_refused``), to which the engine adds what it found."""
        stopped: str | None = None
        done = 0
        while stopped is None and (index := claim()) is not None:
            sub = self.scanner.spawn(self.subtrees[index], counter, cancel, None)
            events = sub.events()
            try:
                for event in events:
                    consume(event, sub)
            except ScanStopped as stop:
                stopped = stop.reason
            finally:
                events.close()
            stopped = stopped or sub.stopped
            done += 1
        part: dict[str, Any] = {"stopped": stopped, "subtrees": done}
        if in_child:
            part["skipped"], part["skipped_named"] = counter.as_dict(), counter.named
            part["skipped_refused"] = counter.refused_named
        return part

    def stopped_early(
        self, parts: Sequence[dict[str, Any] | None], died: str, skipped: SkipCounter
    ) -> str | None:
        """Why the shared walk is partial (None: it is not), from every process's ``walk_claimed`` part
        (this one's first; None for a child that died, said as ``died``); the children's skips go into
        ``skipped``. A subtree no part walked (stopped at the deadline) leaves it partial for the
        budget's reason."""
        stopped: str | None = None
        claimed = 0
        for slot, part in enumerate(parts):
            if part is None:
                stopped = stopped or died
                continue
            claimed += part["subtrees"]
            stopped = stopped or part["stopped"]
            if slot:
                skipped.merge(part["skipped"], part["skipped_named"], part["skipped_refused"])
        if claimed < len(self.subtrees):
            stopped = stopped or self.budget.reason
        return stopped

    def again(self, lost: Iterable[int], work: Work | None = None) -> Any:
        """Walk here the subtrees (by index) whose process died before reporting them."""
        assert self.fan is not None
        queue = iter(lost)
        return (work or self.work)(lambda: next(queue, None), self.fan.progress, False)

    def close(self) -> None:
        """End the children (killed if still running) and close the walk's descriptors."""
        try:
            if self.fan is not None:
                self.fan.close()
        finally:
            self.scanner.close()

    def __enter__(self) -> ParallelWalk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def children_counts(walk: ParallelWalk | None) -> tuple[int, int]:
    """What the forked children of ``walk`` have counted so far (entries, bytes): (0, 0) before the
    split, or before the walk exists. A progress report adds it to this process's own counts."""
    fan = walk.fan if walk is not None else None
    return fan.progress.others() if fan is not None else (0, 0)


class SharedTasks:
    """Tasks ``0..tasks-1`` shared out with forked children that start at once, finished later: the
    children work while this process does something else (explain's side tasks beside its walk)."""

    def __init__(self, tasks: int, processes: int, work: Work) -> None:
        self.fan = FanOut(tasks, processes, work)
        try:
            self.fan.start()
        except BaseException:
            self.fan.close()
            raise

    def finish(self, budget: Budget, cancel: Callable[[], None] | None = None) -> list[Any]:
        """This process's part (the tasks no child claimed yet), then every child's (None for one that
        died or was given up past ``budget``'s deadline; ``cancel``, default the budget, runs while
        waiting)."""
        return [self.fan.run_here(), *collect_within(self.fan, budget, cancel)]

    def close(self) -> None:
        self.fan.close()


def run_shared(
    tasks: int, processes: int, work: Work, budget: Budget, cancel: Callable[[], None] | None = None
) -> list[Any]:
    """Tasks ``0..tasks-1`` shared out at once between this process and forked children (no walk
    to split first), as ``SharedTasks.finish`` returns them."""
    shared = SharedTasks(tasks, processes, work)
    try:
        return shared.finish(budget, cancel)
    finally:
        shared.close()
