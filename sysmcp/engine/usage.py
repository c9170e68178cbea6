"""dir_usage's engine: one walk for du's totals plus the largest directories and files, bounded.

No MCP here: ``scan_usage(request, progress, cancel) -> Usage`` (``sysmcp.engine.calls``' shape); the
tool (``sysmcp.tools.dir_usage``) reads the arguments into a ``UsageRequest`` and words the ``Usage``. A
caller that keeps scans (history) reads ``totals``, ``root_dev``, ``directories``, ``files`` and
``modified``: all computed for the answer anyway, so keeping them costs nothing extra.
"""

from __future__ import annotations

import heapq
import os
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, NamedTuple, TypeVar

from sysmcp.engine.calls import Cancel
from sysmcp.engine.parallel import ParallelWalk, SharedCounters, Sharing, children_counts
from sysmcp.engine.walk import (
    NEVER,
    Budget,
    Listing,
    ScanConfig,
    Scanner,
    SkipCounter,
    Subtree,
    SubtreeTotals,
    WalkOptions,
)

#: A usage scan's progress: (entries, bytes seen) over every process; no total is known ahead.
ScanProgress = Callable[[int, int], None]

MAX_EXTENSIONS = 10_000  # distinct extensions tallied per process; more are lumped as "(other)"
NO_EXTENSION = "(none)"
OTHER_EXTENSIONS = "(other)"
SHARED = Sharing()  # a long walk shared with the usable CPUs' processes, at most 4


class TopN:
    """The ``capacity`` largest items seen, in a min-heap: memory fixed however many are offered."""

    __slots__ = ("_heap", "_tick", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._heap: list[tuple[int, int, Any]] = []
        self._tick = 0

    @property
    def full(self) -> bool:
        return 0 < self.capacity <= len(self._heap)

    @property
    def floor(self) -> int:
        """The smallest key still kept (-1 while there is room)."""
        return self._heap[0][0] if self.full else -1

    def offer(self, key: int, item: Any) -> None:
        # The tick breaks ties by arrival (earlier wins) and keeps items from ever being compared.
        if not self.capacity:
            return
        self._tick += 1  # counted for every offer: the order of arrival is kept all the same
        if len(self._heap) < self.capacity:
            heapq.heappush(self._heap, (key, -self._tick, item))
        elif key > self._heap[0][0]:
            heapq.heapreplace(self._heap, (key, -self._tick, item))

    def largest(self) -> list[Any]:
        return [item for _, _, item in sorted(self._heap, key=lambda t: (-t[0], -t[1]))]


class FileRow(NamedTuple):
    """One listed file: sizes and its path relative to the root (its mtime is in ``Usage.modified``)."""

    apparent: int
    disk: int
    relative: str


class DirectoryRow(NamedTuple):
    """One listed directory with its cumulative totals, like ``du`` (depth 1: a child of the root)."""

    apparent: int
    disk: int
    relative: str
    files: int
    depth: int


@dataclass
class Usage:
    """What one scan found: the root's totals, the ranked lists, the counts behind them."""

    totals: SubtreeTotals | None = None
    entries: int = 0
    eligible_files: int = 0
    eligible_directories: int = 0
    files: list[FileRow] = field(default_factory=list)
    directories: list[DirectoryRow] = field(default_factory=list)
    stopped: str | None = None
    elapsed: float = 0.0
    processes: int = 1  # processes that walked (more than 1 when a long scan was shared out)
    child_bytes: int = 0  # apparent bytes the other processes saw
    modified: dict[str, float] = field(default_factory=dict)  # mtime of each listed file, by relative path
    matching: tuple[int, int, int] | None = None  # (files, apparent, disk) matching the time filter
    extensions: list[tuple[str, int, int, int]] = field(default_factory=list)  # (ext, files, apparent, disk)
    root_dev: int | None = None  # st_dev of the root directory (None if it could not be opened)
    # Counted files with other (hard-linked) names, sparse holes' bytes, dot files, dot files' bytes,
    # bytes allocated past files' ends (Selection.past_end)
    notes: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
    # With UsageRequest.record_floor: (relative, disk, apparent, files, newest file mtime or 0.0) of every
    # directory at any depth at least that big or named in record_also, for the history
    # (sysmcp.history.snapshots); ``totals.newest`` is then the whole tree's.
    recorded: list[tuple[str, int, int, int, float]] | None = None
    skipped: SkipCounter = field(default_factory=SkipCounter)  # what the walk left out, by reason


@dataclass(frozen=True)
class UsageRequest:
    """What to scan (``root``, ``options``) and what to keep of it."""

    top_files: int
    top_directories: int
    max_depth: int
    by_disk: bool
    min_size: int
    timeout_s: float
    newer_than: float | None = None  # files modified at or after this (epoch seconds) match
    older_than: float | None = None  # files modified before this match
    extensions: bool = False  # tally every matching file's extension
    record_floor: int = 0  # > 0: keep every directory's totals this big (apparent or disk) for history
    record_also: frozenset[str] = frozenset()  # ... and these directories' whatever their size
    _: KW_ONLY
    root: bytes
    options: WalkOptions = field(default_factory=WalkOptions)


def past_end(st: os.stat_result) -> int:
    """At least the bytes allocated past a file's end: its blocks beyond its size rounded up to whole
    blocks (``st_blksize``) and beyond what the filesystem may spend mapping them. Preallocated space:
    ``fallocate --keep-size``, or what XFS allocates ahead of a file that grows (speculative
    preallocation, given back some time after the file is closed). ``du -B1`` counts them; no apparent
    size shows them.

    ``st_blocks`` counts the filesystem's own mapping blocks too: ext2/ext3's indirect blocks (a plain
    64 MiB file on ext2 has 257 KiB of them), ext4's extent tree and XFS's extent btree of a fragmented
    file. A stat cannot tell them from preallocation, so past a file's first 4 blocks (ext4 keeps 4
    extents in the inode) as many blocks as records of 16 bytes a block (XFS's, the largest) would take,
    and 2 more for the levels above them, are taken to be mapping, not past the end. A file with holes
    nets them against its preallocation (``sparse_bytes`` is the other side)."""
    block = st.st_blksize or 512
    blocks = -(-st.st_size // block)
    mapping = -(-blocks * 16 // block) + 2 if blocks > 4 else 0
    return max(st.st_blocks * 512 - (blocks + mapping) * block, 0)


def extension_of(name: str) -> str:
    """'app.LOG' → '.log', 'a.tar.gz' → '.gz'; dot files and names without a dot → '(none)'."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem or not ext:
        return NO_EXTENSION
    return "." + ext.lower()


class Selection:
    """The per-file hook a scanner calls (``ScanConfig.on_file``): the time filter, the matching files'
    totals and the extension tally. Sees every file, so the figures are exact, not top-N."""

    __slots__ = ("apparent", "disk", "extensions", "files", "linked", "newer", "notes", "older", "types")

    def __init__(self, request: UsageRequest) -> None:
        self.newer, self.older = request.newer_than, request.older_than
        self.types = request.extensions
        self.files = self.apparent = self.disk = 0
        # What the totals leave to be inferred, over every file counted, matching or not (Usage.notes).
        self.notes = [0, 0, 0, 0, 0]
        self.extensions: dict[str, list[int]] = {}  # extension → [files, apparent, disk]
        # In a child: (dev, ino) → (extension, matched, bytes past its end) of multiply-linked files,
        # so one another process counted too can be taken out again (see _merge_child).
        self.linked: dict[tuple[int, int], tuple[str, bool, int]] | None = None

    def __call__(self, name: str, st: os.stat_result) -> bool:
        size, disk = st.st_size, st.st_blocks * 512
        past = 0
        # Rare: one test for the common file (whose blocks reach at most one block past its size).
        if st.st_nlink > 1 or disk < size or disk - size >= st.st_blksize or name[0] == ".":
            notes, dot = self.notes, name[0] == "."
            past = past_end(st)
            notes[0] += st.st_nlink > 1
            notes[1] += max(size - disk, 0)
            notes[2] += dot
            notes[3] += size if dot else 0
            notes[4] += past
        mtime = st.st_mtime
        matched = (self.newer is None or mtime >= self.newer) and (self.older is None or mtime < self.older)
        ext = extension_of(name) if self.types else ""
        if self.linked is not None and st.st_nlink > 1:
            self.linked[(st.st_dev, st.st_ino)] = (ext, matched, past)
        if not matched:
            return False
        self.files += 1
        self.apparent += size
        self.disk += disk
        if self.types:
            self.add(ext, 1, size, disk)
        return True

    def add(self, ext: str, files: int, apparent: int, disk: int) -> None:
        row = self.extensions.get(ext)
        if row is None:
            if len(self.extensions) >= MAX_EXTENSIONS:
                ext = OTHER_EXTENSIONS
                row = self.extensions.get(ext)
            if row is None:
                row = self.extensions[ext] = [0, 0, 0]
        row[0] += files
        row[1] += apparent
        row[2] += disk

    def as_data(self) -> dict[str, Any]:
        """Plain data a child sends back (marshal-able)."""
        return {
            "files": self.files,
            "apparent": self.apparent,
            "disk": self.disk,
            "extensions": {ext: list(row) for ext, row in self.extensions.items()},
            "linked": dict(self.linked or {}),
            "notes": list(self.notes),
        }

    def merge(self, data: dict[str, Any]) -> None:
        self.files += data["files"]
        self.apparent += data["apparent"]
        self.disk += data["disk"]
        self.notes = [mine + theirs for mine, theirs in zip(self.notes, data["notes"], strict=True)]
        for ext, (files, apparent, disk) in data["extensions"].items():
            self.add(ext, files, apparent, disk)


class TopLists:
    """The two bounded lists and the counts behind them, fed by walk events (one per process)."""

    def __init__(self, request: UsageRequest) -> None:
        self.request = request
        self.top_files = TopN(request.top_files)
        self.top_dirs = TopN(request.top_directories)
        self.eligible_directories = 0
        self.totals: SubtreeTotals | None = None
        self.selection = Selection(request)
        self.record: list[list[Any]] | None = [] if request.record_floor else None
        # While recording: the newest mtime of finished subdirectories, by parent, until the parent
        # finishes. A subtree another scanner or process walked reaches its parent only this way.
        self.newest_below: dict[str, float] = {}

    def config(self) -> ScanConfig:
        """Ask the scanner only for what the lists can still use (the floors then rise as they fill)."""
        request = self.request
        file_floor, block_floor = (NEVER, 0) if request.by_disk else (0, NEVER)
        if request.top_files == 0:
            file_floor = block_floor = NEVER
        return ScanConfig(
            file_floor=file_floor,
            block_floor=block_floor,
            min_file_size=request.min_size,
            keep_files=request.top_files,
            keep_by_disk=request.by_disk,
            on_file=self.selection,  # every file: the time filter, extensions and the counts for notes
            # An event per directory, listed files or not: the walk driver decides on the split between
            # events, and a walk that lists no file (totals only) would otherwise give it none until the end.
            empty_listings=True,
            finished_depth=request.max_depth if self.record is None else None,
        )

    def raise_floor(self, scanner: Scanner) -> None:
        """Tell the scanner to leave smaller files out of the next listings altogether."""
        if self.top_files.full:
            if self.request.by_disk:
                scanner.block_floor = self.top_files.floor // 512 + 1
            else:
                scanner.file_floor = self.top_files.floor + 1

    def take(self, event: Listing | SubtreeTotals, scanner: Scanner) -> None:
        request = self.request
        if type(event) is Listing:
            if not event.files:
                return
            prefix = event.relative + "/" if event.relative else ""
            min_size, by_disk, offer = request.min_size, request.by_disk, self.top_files.offer
            for name, st in event.files:
                size = st.st_size
                if size < min_size:
                    continue
                disk = st.st_blocks * 512
                offer(
                    disk if by_disk else size, (size, disk, prefix + name, st.st_dev, st.st_ino, st.st_mtime)
                )
            self.raise_floor(scanner)
        else:
            assert isinstance(event, SubtreeTotals)
            if self.record is not None:
                event.newest = self.settle_newest(event.relative, event.newest)
            if event.depth == 0:
                self.totals = event
                return
            if self.record is not None:
                self.keep_record(
                    [event.apparent, event.disk, event.relative, event.files, event.depth, event.newest]
                )
            if event.depth <= request.max_depth and event.apparent >= request.min_size:
                self.offer_directory([event.apparent, event.disk, event.relative, event.files, event.depth])

    def settle_newest(self, relative: str, newest: float) -> float:
        """A finished directory's newest mtime with its subdirectories' (a max: a subtree counted
        twice changes nothing), passed on to its parent."""
        newest = max(newest, self.newest_below.pop(relative, 0.0))
        if relative:
            parent = relative.rpartition("/")[0]
            if newest > self.newest_below.get(parent, 0.0):
                self.newest_below[parent] = newest
        return newest

    def keep_record(self, row: list[Any]) -> None:
        """Keep a directory's totals for the history when it is big enough or asked for by name."""
        floor = self.request.record_floor
        if self.record is not None and (
            row[0] >= floor or row[1] >= floor or row[2] in self.request.record_also
        ):
            self.record.append(row)

    def offer_directory(self, row: list[Any]) -> None:
        self.eligible_directories += 1
        self.top_dirs.offer(row[1] if self.request.by_disk else row[0], row)


class _Counts:
    """This process's share of the entry and byte counts: finished scanners plus the running one."""

    __slots__ = ("bytes", "current", "entries")

    def __init__(self) -> None:
        self.entries = 0
        self.bytes = 0
        self.current: Scanner | None = None

    def add(self, scanner: Scanner) -> None:
        self.entries += scanner.entries
        self.bytes += scanner.apparent
        self.current = None

    def now(self) -> tuple[int, int]:
        current = self.current
        if current is None:
            return self.entries, self.bytes
        return self.entries + current.entries, self.bytes + current.apparent


Row = TypeVar("Row", bound=tuple[Any, ...])


def _ranked(rows: list[Row], request: UsageRequest) -> list[Row]:
    """Largest first by the chosen size; a tie goes by the other size, then by name, as ``sort`` would."""
    if request.by_disk:
        return sorted(rows, key=lambda row: (-row[1], -row[0], row[2]))
    return sorted(rows, key=lambda row: (-row[0], -row[1], row[2]))


def scan_usage(
    request: UsageRequest,
    progress: ScanProgress | None = None,
    cancel: Cancel | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    sharing: Sharing = SHARED,
    seen: set[tuple[int, int]] | None = None,
) -> Usage:
    """Walk once, keeping totals and two bounded heaps; stop cleanly when the time budget is spent.

    A walk still going after ``sharing.split_after_s`` is shared out (``parallel.ParallelWalk``); the
    parts are merged here, inodes with several links counted once across processes, so the result is
    the one a single walk gives. ``progress(entries, bytes seen)`` (every process's) and ``cancel()``
    (which raises; children are killed) run every 2 ms at most, ``progress`` once more at the end.

    ``seen``: the (device, inode) of multiply-linked files an earlier walk counted, which this one
    does not count again; those this walk counts, in any of its processes, are added to it. One set
    passed to the walk of each of several roots counts an inode once across them, as ``du -x a b``.
    """
    started = clock()
    usage = Usage()
    mine = _Counts()
    parallel: ParallelWalk | None = None

    def progress_and_cancel() -> None:
        """Progress for the caller, then the cancellation question: every 2 ms at most (Budget)."""
        if progress is not None:
            entries, seen = mine.now()
            more_entries, more_bytes = children_counts(parallel)
            progress(entries + more_entries, seen + more_bytes)
        if cancel is not None:
            cancel()

    asks = progress is not None or cancel is not None
    budget = Budget(request.timeout_s, progress_and_cancel if asks else None, clock=clock)

    tally = TopLists(request)
    skipped = usage.skipped
    scanner = Scanner(request.root, request.options, skipped, budget, config=tally.config(), seen=seen)
    mine.current = scanner

    def work(
        claim: Callable[[], int | None], counters: SharedCounters, in_child: bool, *, share: bool = True
    ) -> dict[str, Any]:
        """Walk claimed subtrees; in a child, into a fresh tally sent back as plain data. With
        ``share``, a walk that sees the task queue run low gives part of its subtree away: the
        directories above what it gave go to ``withheld``, completed where the parts meet (``_join``).
        """
        linked: list[tuple[int, int, int, int, bool, str]] | None
        assert parallel is not None
        fan, subtrees = parallel.fan, parallel.subtrees
        assert fan is not None

        if in_child:
            own, counter, linked, counting = TopLists(request), SkipCounter(), [], _Counts()
            own.selection.linked = {}
        else:
            own, counter, linked, counting = tally, skipped, scanner.linked, mine

        def tick() -> None:
            """Progress (a child's into shared memory), then: is the queue running low?"""
            if in_child:
                counters.set(*counting.now())
            elif asks:
                progress_and_cancel()
            current = counting.current
            if share and current is not None and fan is not None and fan.waiting() < fan.processes:
                current.share_wanted = True

        walk_cancel = budget.sharing(tick)  # one deadline, on the clock every process shares
        done: dict[int, tuple[int, int, int, int, bool]] = {}
        withheld: list[list[Any]] = []
        entries = eligible = 0
        halted: str | None = None
        while halted is None and (index := claim()) is not None:
            if index < len(subtrees):
                subtree, origin = subtrees[index], index
            else:
                relative, depth, dev, ino, apparent, disk, origin = fan.record(index)
                subtree = Subtree(None, relative, depth, dev, ino, apparent, disk)
            sub = scanner.spawn(subtree, counter, walk_cancel, linked, own.config())
            own.raise_floor(sub)
            if share:

                def give(offered: list[Subtree], origin: int = origin) -> list[Subtree]:
                    assert fan is not None
                    rows = [(p.relative, p.depth, p.dev, p.ino, p.apparent, p.disk, origin) for p in offered]
                    return offered[fan.give(rows) :]

                sub.share = give
                sub.share_limit = 2 * fan.processes
            counting.current = sub
            for event in sub.events():
                own.take(event, sub)
            counting.add(sub)
            entries += sub.entries
            eligible += sub.eligible_files
            halted = sub.stopped
            done[index] = (subtree.apparent, subtree.disk, subtree.files, subtree.dirs, halted is None)
            withheld += [
                [f.apparent, f.disk, f.relative, f.files, f.depth, index, f.newest] for f in sub.withheld
            ]
        result: dict[str, Any] = {
            "done": done,
            "stopped": halted,
            "entries": entries,
            "eligible": eligible,
            "withheld": withheld,
        }
        if in_child:
            result["bytes"] = counting.bytes
            result["files"] = own.top_files.largest()
            result["dirs"] = own.top_dirs.largest()
            result["eligible_dirs"] = own.eligible_directories
            result["skipped"] = counter.as_dict()
            result["skipped_named"] = counter.named
            result["skipped_refused"] = counter.refused_named
            result["linked"] = linked
            result["selection"] = own.selection.as_data()
            result["record"] = own.record
            result["newest_below"] = own.newest_below
        return result

    def linked_since_the_split(subtrees: list[Subtree]) -> None:
        scanner.linked = []  # inodes with several links counted here from now on (see _merge_child)

    parallel = ParallelWalk(scanner, budget, replace(sharing, waits_for_gifts=True), work)
    parallel.on_split = linked_since_the_split
    with parallel:
        parallel.walk(tally.take, started)
        mine.add(scanner)
        stopped = scanner.stopped
        eligible_files = scanner.eligible_files
        if parallel.fan is not None:
            stopped, eligible_files = _join(parallel, work, tally, usage)
            stopped = scanner.stopped or stopped
            eligible_files += scanner.eligible_files
        elif scanner.detached:  # every subtree was small enough to be split here
            for finished in scanner.settle([]):
                tally.take(finished, scanner)
    usage.entries += mine.entries
    usage.totals = tally.totals
    usage.root_dev = scanner.root_dev
    if progress is not None:  # the final progress notification reports the whole count
        progress(usage.entries, mine.bytes + usage.child_bytes)
    usage.eligible_files = eligible_files
    usage.eligible_directories = tally.eligible_directories
    kept = tally.top_files.largest()
    usage.files = _ranked([FileRow(size, disk, relative) for size, disk, relative, *_ in kept], request)
    usage.modified = {row[2]: row[5] for row in kept}
    selection = tally.selection
    if request.newer_than is not None or request.older_than is not None:
        usage.matching = (selection.files, selection.apparent, selection.disk)
    if request.extensions:
        usage.extensions = sorted(
            ((ext, files, apparent, disk) for ext, (files, apparent, disk) in selection.extensions.items()),
            key=lambda row: (-(row[3] if request.by_disk else row[2]), -row[1], row[0]),
        )
    usage.directories = _ranked([DirectoryRow(*row) for row in tally.top_dirs.largest()], request)
    notes = selection.notes
    usage.notes = (notes[0], notes[1], notes[2], notes[3], notes[4])
    usage.stopped = stopped
    usage.elapsed = clock() - started
    if tally.record is not None:
        usage.recorded = [(row[2], row[1], row[0], row[3], row[5]) for row in tally.record]
    return usage


Part = dict[str, Any]


def _join(
    parallel: ParallelWalk,
    work: Callable[..., Part],
    tally: TopLists,
    usage: Usage,
) -> tuple[str | None, int]:
    """Walk subtrees here too, then merge every child's part; returns (stopped, eligible files).

    A child that died is not fatal: the subtrees it never reported are walked again here (when no
    process gave work away: parts of a lost subtree may then have been counted elsewhere, and the
    result says it is partial instead). Parts given away mid-walk are added to the subtree they came
    from, and to every withheld directory above them, before the subtrees settle.
    """
    fan, budget, scanner, subtrees = parallel.fan, parallel.budget, parallel.scanner, parallel.subtrees
    assert fan is not None and scanner.linked is not None
    request = tally.request

    here = parallel.here()
    children = parallel.children()
    usage.processes = 1 + sum(part is not None for part in children)
    given = fan.given()  # number -> (relative, depth, dev, ino, apparent, disk, origin)
    roots = {subtree.relative: i for i, subtree in enumerate(subtrees)}
    roots.update((record[0], number) for number, record in given.items())
    seen = {(dev, ino) for dev, ino, *_ in scanner.linked}  # counted here since the split
    done: dict[int, tuple[int, int, int, int, bool]] = dict(here["done"])
    withheld: list[list[Any]] = list(here["withheld"])
    eligible: int = here["eligible"]
    stopped: str | None = here["stopped"]
    for part in children:
        if part is None:
            continue
        _merge_child(part, tally, usage.skipped, seen, roots, request)
        done.update(part["done"])
        withheld += part["withheld"]
        usage.entries += part["entries"]
        usage.child_bytes += part["bytes"]
        eligible += part["eligible"]
        stopped = stopped or part["stopped"]
    scanner.seen.update(seen)  # what the children counted: not counted again here, nor by a later walk
    lost = [i for i in [*range(len(subtrees)), *given] if i not in done]
    if lost and not given and stopped is None and not budget.expired:
        again = parallel.again(
            lost, lambda claim, counters, in_child: work(claim, counters, in_child, share=False)
        )
        done.update(again["done"])
        withheld += again["withheld"]
        eligible += again["eligible"]
        stopped = again["stopped"]
        lost = [i for i in lost if i not in done]
    if lost:
        stopped = stopped or "a scan process ended unexpectedly"
    parts: dict[int, tuple[int, int, int, int, bool]] = {}  # each given part: its totals
    for number, (_, _, _, _, apparent, disk, _) in given.items():
        parts[number] = done.get(number, (apparent, disk, 0, 1, False))  # lost: its own size
    totals = {i: done[i] for i in range(len(subtrees)) if i in done}
    for number, (apparent, disk, files, dirs, complete) in parts.items():
        origin = given[number][6]
        if origin in totals:
            a, d, f, n, c = totals[origin]
            totals[origin] = (a + apparent, d + disk, f + files, n + dirs, c and complete)
    for row in sorted(withheld, key=lambda row: -row[4]):  # a directory above given parts: its own
        # part plus every part below it (deepest first: a directory's newest is final before its parent's)
        below = f"{row[2]}/"
        for number, (apparent, disk, files, _, _) in parts.items():
            if given[number][0].startswith(below):
                row[0] += apparent
                row[1] += disk
                row[3] += files
        if tally.record is not None:
            tally.keep_record([*row[:5], tally.settle_newest(row[2], row[6])])
        if row[0] >= request.min_size and row[4] <= request.max_depth:
            tally.offer_directory(row[:5])
    settled = []
    for i, subtree in enumerate(subtrees):
        complete = False
        if i in totals:
            subtree.apparent, subtree.disk, subtree.files, subtree.dirs, complete = totals[i]
        settled.append((subtree, complete))
    for finished in scanner.settle(settled):
        tally.take(finished, scanner)
    return stopped, eligible


def _merge_child(
    part: Part,
    tally: TopLists,
    skipped: SkipCounter,
    seen: set[tuple[int, int]],
    roots: dict[str, int],
    request: UsageRequest,
) -> None:
    """Fold a child's result into ``tally``, first taking out inodes another process counted already.

    ``roots`` are the tasks' directories (relative) and numbers: a file belongs to the deepest one above
    it, whose totals, and whose withheld directories above the file, hold it.
    """
    dirs = {row[2]: row for row in part["dirs"]}
    recorded = {row[2]: row for row in part.get("record") or ()}
    held = {row[2]: row for row in part["withheld"]}
    dropped: set[tuple[int, int]] = set()
    chosen: dict[str, Any] = part["selection"]
    for dev, ino, size, blocks, regular, directory in part["linked"]:
        if (dev, ino) not in seen:
            seen.add((dev, ino))
            continue
        dropped.add((dev, ino))
        ext, matched, past = chosen["linked"].get((dev, ino), ("", True, 0))
        disk, nfiles = blocks * 512, 1 if regular else 0
        if regular and (dev, ino) in chosen["linked"]:  # one inode counted by two processes: once
            chosen["notes"][0] -= 1
            chosen["notes"][1] -= max(size - disk, 0)
            chosen["notes"][4] -= past
            if matched:  # counted by the child's selection
                chosen["files"] -= 1
                chosen["apparent"] -= size
                chosen["disk"] -= disk
                row = chosen["extensions"].get(ext) or chosen["extensions"].get(OTHER_EXTENSIONS)
                if ext and row is not None:
                    row[0] -= 1
                    row[1] -= size
                    row[2] -= disk
        names = directory.split("/")
        prefixes = ["/".join(names[:depth]) for depth in range(1, len(names) + 1)]
        owner = next((roots[prefix] for prefix in reversed(prefixes) if prefix in roots), None)
        if owner in part["done"]:
            apparent_, disk_, files_, dirs_, complete = part["done"][owner]
            part["done"][owner] = (apparent_ - size, disk_ - disk, files_ - nfiles, dirs_, complete)
        for prefix in prefixes:
            row = dirs.get(prefix)
            if row is None and prefix in held and held[prefix][5] == owner:
                row = held[prefix]
            shallow = len(prefix.split("/")) <= request.max_depth
            for kept in (recorded.get(prefix), row if shallow else None):
                if kept is not None:  # [apparent, disk, relative, files, ...]
                    kept[0] -= size
                    kept[1] -= disk
                    kept[3] -= nfiles
        if regular and size >= request.min_size and matched:
            part["eligible"] -= 1
    for row in part["files"]:
        if (row[3], row[4]) not in dropped:
            tally.top_files.offer(row[1] if request.by_disk else row[0], tuple(row))
    for row in part["dirs"]:
        tally.offer_directory(row)
    tally.eligible_directories += part["eligible_dirs"] - len(part["dirs"])
    skipped.merge(part["skipped"], part["skipped_named"], part["skipped_refused"])
    tally.selection.merge(chosen)
    if tally.record is not None:
        tally.record += recorded.values()
        for relative, newest in part["newest_below"].items():
            tally.newest_below[relative] = max(newest, tally.newest_below.get(relative, 0.0))
