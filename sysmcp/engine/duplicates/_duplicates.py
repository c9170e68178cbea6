"""find_duplicates' engine: files with identical content under a directory, largest reclaimable space first.

Three sieves, each cheaper than the next is expensive (the fdupes/rmlint recipe): files are
grouped by size (no reads at all), then by a hash of their first and last 4 KiB (two small reads),
and only files still tied are hashed in full. Most files never share a size, and most that do
differ in their head or tail, so few files are ever read to the end. Names of one inode (hard
links) are one file, not duplicates. Read-only: nothing is ever deleted or changed.

Bounded memory on a million files: the walk is shared with forked workers (forked a few milliseconds
in, before anything big exists), every process writes one compact record per file to sorted runs on
disk (``sizeruns``), the runs are merged one size at a time into a file of candidates, and the same
workers then compare its blocks (``sieves``). No Python object outlives its file's directory listing
or its block.
"""

from __future__ import annotations

import errno
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from sysmcp.engine.calls import Cancel, Progress, never_cancelled, no_progress
from sysmcp.engine.duplicates._sieves import (
    Candidates,
    Handoff,
    Reader,
    StatFields,
    as_stat,
    compare,
    gather_candidates,
)
from sysmcp.engine.duplicates._sizeruns import SizeRuns
from sysmcp.engine.faults import EngineError, NotFound, PermissionRefused, Unavailable, WrongKind
from sysmcp.engine.parallel import (
    SPLIT_AFTER_S,
    ParallelWalk,
    SharedCounters,
    Sharing,
    available_processes,
    children_counts,
    give_up_at,
    quiet,
    run_shared,
)
from sysmcp.engine.walk import (
    NEVER,
    PART,
    Budget,
    ScanConfig,
    Scanner,
    ScanStopped,
    SkipCounter,
    WalkOptions,
)

MAX_FILES = 2_000_000  # listing bound (the runs on disk): past it the walk stops and the result says so
DEFAULT_TIMEOUT_S = 60.0
PARALLEL_FROM = 2000  # candidates from which the comparison is shared out between processes
PARALLEL_BYTES = 256 << 20  # or candidate bytes: a few big files are worth a second reader


@dataclass(frozen=True, slots=True)
class DuplicatesRequest:
    """One search, as the tool reads it from its arguments."""

    root: bytes
    options: WalkOptions = field(default_factory=WalkOptions)
    min_size: int = 1  # empty files are never considered, whatever this says
    timeout_s: float = DEFAULT_TIMEOUT_S  # listing may use half of it
    processes: int | None = None  # None: as many as this process may use
    limit: int = MAX_FILES
    split_after_s: float = SPLIT_AFTER_S
    #: Further absolute roots searched with ``root`` as one tree, one after the other in this process:
    #: a copy under one and a copy under another are duplicates, and names are then relative to ``/``.
    more_roots: tuple[bytes, ...] = ()

    @property
    def base(self) -> bytes:
        """What the names of the copies found are relative to."""
        return b"/" if self.more_roots else self.root


@dataclass(frozen=True, slots=True)
class Candidate:
    """One inode that shares its size with another: its first path and identity."""

    relative: str  # as the scanner names it (undecodable bytes as surrogate escapes)
    dev: int
    ino: int
    disk: int
    # its descriptor's fstat when its content was read (what a plan's identity is)
    seen: StatFields | None = None

    def stat(self) -> os.stat_result | None:
        """The file as it was when its bytes were hashed (None: not known)."""
        return as_stat(self.seen) if self.seen is not None else None


@dataclass(frozen=True, slots=True)
class Group:
    """Files of one size and one content (a BLAKE3 digest), one ``Candidate`` per inode."""

    size: int
    digest: str
    copies: tuple[Candidate, ...]

    @property
    def reclaimable(self) -> int:
        """What deleting all copies but the one using the most blocks would free."""
        disks = [c.disk for c in self.copies]
        return sum(disks) - max(disks)


@dataclass
class Search:
    """The result: groups largest reclaimable space first, and why it stopped early if it did."""

    groups: list[Group] = field(default_factory=list)
    files_scanned: int = 0
    files_read: int = 0
    bytes_read: int = 0
    hard_links: int = 0
    stopped: str | None = None
    elapsed: float = 0.0
    skipped: SkipCounter = field(default_factory=SkipCounter)


def find_duplicates(
    request: DuplicatesRequest,
    progress: Progress = no_progress,
    cancel: Cancel = never_cancelled,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> Search:
    """Walk (at most half the budget), then confirm duplicates from the largest size down.

    ``progress(done, total)``: ``total`` is None while files are still being listed (``done`` counts
    the files listed), then the files listed plus the candidates to compare. ``cancel`` raises to
    abandon the call (workers are killed). An ``EngineError`` (``engine_error``) when the search
    cannot be made.
    """
    try:
        return _search(request, progress, cancel, clock)
    except OSError as exc:
        raise engine_error(exc) from exc


def engine_error(exc: OSError) -> EngineError:
    """The engine's failure for an ``OSError`` that ends the whole search (the root unreadable, no disk)."""
    detail = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return PermissionRefused(detail)
    if exc.errno == errno.ENOENT:
        return NotFound(detail)
    if exc.errno == errno.ENOTDIR:
        return WrongKind(detail)
    return Unavailable(detail)


def _search(
    request: DuplicatesRequest, progress: Progress, cancel: Cancel, clock: Callable[[], float]
) -> Search:
    """The run, as the module says. A tree listed before the split compares in this process, or in
    workers forked then if there is much to read: either way one set of workers at most.
    """
    started = clock()
    root, limit, timeout_s = request.base, request.limit, request.timeout_s
    search = Search()
    skipped = search.skipped
    listing = Budget(timeout_s / 2, cancel, clock=clock)
    listing.reason = f"listing files took half of the {timeout_s:g} s time budget"
    budget = Budget(timeout_s, cancel, clock=clock)
    count = available_processes() if request.processes is None else max(1, request.processes)
    spills: list[IO[bytes]] = [tempfile.TemporaryFile(prefix="sysmcp-sizes-") for _ in range(count)]  # noqa: SIM115
    candidates = Candidates(tempfile.TemporaryFile(prefix="sysmcp-candidates-"))  # noqa: SIM115
    handoff = Handoff(count) if count > 1 else None
    mine = SizeRuns(spills[0])
    walked = total = compared = 0
    parallel: ParallelWalk | None = None
    here: Reader | None = None  # this process's comparison reader, once comparing

    def cancel_listing() -> None:
        files = mine.files + children_counts(parallel)[0]
        progress(files, None)
        if files >= limit:
            raise ScanStopped(limit_reason)
        listing()

    def cancel_comparing() -> None:
        progress(
            walked + (here.files_compared if here is not None else 0) + children_counts(parallel)[0], total
        )
        cancel()

    config = ScanConfig(  # a big directory in parts: its files go to the size runs a part at a time
        file_floor=max(1, request.min_size),
        block_floor=NEVER,
        empty_listings=False,
        finished_depth=-1,
        listing_parts=PART,
    )
    tops = (request.root, *request.more_roots)
    scanners = [Scanner(top, request.options, skipped, cancel_listing, config=config) for top in tops]
    limit_reason = f"more than {limit:,} files: the search stopped listing there"

    def work(claim: Callable[[], int | None], progress: SharedCounters, in_child: bool) -> dict[str, Any]:
        """Walk the subtrees claimed into size runs; in a forked worker, then hand its walk's part
        back (``Handoff.report``) and compare the blocks it claims."""
        assert parallel is not None
        if not in_child:
            return parallel.walk_claimed(claim, skipped, cancel_listing, mine.consume)
        assert handoff is not None
        end = handoff.in_child(progress.slot)
        runs, counter = SizeRuns(spills[progress.slot]), SkipCounter()
        share = max(1, limit // count)

        def publish() -> None:
            progress.set(runs.files, 0)
            if runs.files >= share:
                raise ScanStopped(limit_reason)

        walked = parallel.walk_claimed(claim, counter, listing.sharing(publish), runs.consume, in_child)
        progress.set(0, 0)  # from here on: files read
        Handoff.report(end, spills[progress.slot], runs.summary() | walked)
        return compare_apart(root, candidates.spill.fileno(), handoff.claim, budget, progress)

    sharing = Sharing(1 if request.more_roots else count, request.split_after_s)  # 1: never split
    keep = handoff.keep if handoff is not None else ()
    parallel = ParallelWalk(scanners[0], listing, sharing, work, keep)
    try:
        with parallel:
            for top, scanner in zip(tops, scanners, strict=True):
                if request.more_roots:  # names relative to / (``base``); never split: one walk after another
                    mine.prefix = _from_slash(top)
                walk = parallel if scanner is scanners[0] else ParallelWalk(scanner, listing, sharing, work)
                walk.walk(mine.consume)
            stopped = next((scanner.stopped for scanner in scanners if scanner.stopped), None)
            parts: list[dict[str, Any] | None] = []
            fan = parallel.fan
            if fan is not None and handoff is not None:
                handoff.started()
                walked_here = parallel.here()
                parts = handoff.wait(fan.children, spills, give_up_at(listing), quiet(cancel_listing))
                died = "a listing process ended unexpectedly"
                stopped = stopped or parallel.stopped_early([walked_here, *parts], died, skipped)
            search.stopped = stopped
            runs: list[tuple[int, int, int]] = []
            for spill, part in zip(spills, [mine.summary(), *parts], strict=False):
                if part is not None:
                    search.files_scanned += part["files"]
                    search.hard_links += part["links"]
                    runs += [(spill.fileno(), offset, length) for offset, length in part["extents"]]
            links = gather_candidates(runs, candidates, search.files_scanned, cancel)
            search.hard_links += links
            search.files_scanned -= links  # two processes each listed a name of one inode first
            walked = search.files_scanned
            for spill in spills:
                spill.truncate(0)  # the runs are merged: give their disk space back now
            total = walked + candidates.files
            if fan is not None:
                fan.progress.reset()  # the children's counts so far are files listed, in walked already
            progress(walked, total)

            # Called before every file opened: the progress count and the cancellation question (a hop
            # into the event loop, microseconds) are asked every few milliseconds, the deadline every time.
            here = Reader(root, skipped, budget.sharing(cancel_comparing))
            try:
                if fan is not None and handoff is not None:
                    handoff.send(candidates.blocks)
                    results: list[dict[str, Any] | None] = [
                        compare(here, candidates.spill.fileno(), handoff.claim)
                    ]
                    results += parallel.children(budget, cancel_comparing)
                else:
                    results = compare_blocks(candidates, here, budget, count, cancel_comparing)
            finally:
                here.close()
            search.files_read, search.bytes_read = here.files_read, here.bytes_read
            merge_comparisons(results, search)
            compared = here.files_compared + sum(r.get("compared", 0) for r in results if r is not None)
    finally:
        if handoff is not None:
            handoff.close()
        for spill in [*spills, candidates.spill]:
            spill.close()
    done = walked + compared  # each file once, as the total counts it
    progress(done, max(done, total))
    search.groups.sort(key=lambda g: (-g.reclaimable, -g.size, g.copies[0].relative))
    search.elapsed = clock() - started
    return search


def _from_slash(top: bytes) -> bytes:
    """The prefix of the names below ``top`` relative to ``/`` (``/`` itself: none)."""
    inner = top.strip(b"/")
    return inner + b"/" if inner else b""


def compare_apart(
    root: bytes,
    fd: int,
    claim: Callable[[], tuple[int, int] | None],
    budget: Budget,
    progress: SharedCounters,
) -> dict[str, Any]:
    """In a forked worker: compare the blocks claimed with a reader and counts of its own."""
    counter = SkipCounter()
    reader = Reader(
        root, counter, budget.sharing(lambda: progress.set(reader.files_compared, reader.bytes_read))
    )
    try:
        result = compare(reader, fd, claim)
    finally:
        reader.close()
    result.update(
        read=reader.files_read,
        compared=reader.files_compared,
        bytes=reader.bytes_read,
        skipped=counter.as_dict(),
    )
    return result


def merge_comparisons(results: Sequence[dict[str, Any] | None], search: Search) -> None:
    """Fold every process's comparison into ``search`` (None: a worker that died or was given up)."""
    for result in results:
        if result is None:
            search.stopped = search.stopped or "a comparing process ended unexpectedly"
            continue
        for size, digest, same in result["groups"]:
            same.sort()
            copies = tuple(
                Candidate(os.fsdecode(name), dev, ino, disk, tuple(looked))
                for name, dev, ino, disk, looked in same
            )
            search.groups.append(Group(size, digest, copies))
        search.files_read += result.get("read", 0)
        search.bytes_read += result.get("bytes", 0)
        search.skipped.merge(result.get("skipped", {}), result.get("skipped_named", ()))
        search.stopped = search.stopped or result["stopped"]


def compare_blocks(
    candidates: Candidates,
    reader: Reader,
    budget: Budget,
    processes: int,
    cancel: Cancel,
) -> list[dict[str, Any] | None]:
    """Compare the blocks, largest sizes first, here and, when there is much to read, in forked workers
    (only for a tree listed before the walk split: no workers exist yet).
    """
    fd = candidates.spill.fileno()
    blocks = candidates.blocks
    much = candidates.files >= PARALLEL_FROM or candidates.bytes >= PARALLEL_BYTES
    if processes < 2 or len(blocks) < 2 or not much:
        queue = iter(blocks)
        return [compare(reader, fd, lambda: next(queue, None))]

    def work(claim: Callable[[], int | None], progress: SharedCounters, in_child: bool) -> dict[str, Any]:
        def next_block() -> tuple[int, int] | None:
            task = claim()
            return None if task is None else blocks[task]

        if not in_child:
            return compare(reader, fd, next_block)
        return compare_apart(reader.root, fd, next_block, budget, progress)

    return run_shared(len(blocks), processes, work, budget, cancel)
