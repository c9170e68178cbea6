"""dir_usage: what fills a directory — du's totals plus the largest directories and files, bounded.

The answer a sysadmin gets from ``du -sx``, ``du -d1 | sort -h`` and ``find -size`` together, in a
few hundred tokens whatever the tree size: totals that equal ``du`` (apparent and on-disk bytes,
hard links once), the top directories (cumulative) and the top files, kept in fixed-size heaps.
A time budget bounds the call; when it runs out the result says so and reports what was seen.
"""

from __future__ import annotations

import heapq
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sysmcp.fs.fanout import MAX_TASKS, FanOut, Progress, available_processes
from sysmcp.fs.paths import display, printable
from sysmcp.fs.units import human_bytes, plural
from sysmcp.fs.walk import (
    Budget,
    Finished,
    Listing,
    Scanner,
    ScanStopped,
    SkipCounter,
    Subtree,
    WalkOptions,
    collect_within,
)
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ArgumentError, ToolError
from sysmcp.tools.arguments import size_argument
from sysmcp.tools.merging import HostOutcome, fleet_output, table
from sysmcp.tools.recording import recorded_scan
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput
from sysmcp.tools.walking import denied_by, require_directory, skipped_phrase, walk_options, walk_properties
from sysmcp.views import DIR_USAGE

DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 300.0
FULL_FILES = 1000  # rows kept for the full listing resource (the inline list is top_n of these)
FULL_DIRECTORIES = 10_000
MAX_EXTENSIONS = 10_000  # distinct extensions tallied per process; more are lumped as "(other)"
NO_EXTENSION = "(none)"
OTHER_EXTENSIONS = "(other)"
MAX_AGE_S = 200 * 365 * 86400  # a duration longer than this is a typo, not a filter
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)\s*")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_NOTE = "a duration such as '90s', '45m', '6h', '7d', '2w', or a number of seconds"

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "minLength": 1,
            "description": "Absolute path of the directory to scan, e.g. '/var'.",
        },
        "top_n": {
            "type": "integer",
            "minimum": 1,
            "maximum": 50,
            "default": 5,
            "description": "How many entries to list in each list (largest files, largest directories), 1 to 50.",
        },
        "show": {
            "type": "string",
            "enum": ["both", "files", "directories", "extensions", "all"],
            "default": "both",
            "description": "Which lists to return: the largest 'files', the largest 'directories' (cumulative "
            "size, like du), 'both', 'extensions' (the top file extensions by size: count and bytes; "
            "'(none)' for names without one, e.g. which types fill /var), or 'all' three. Totals are "
            "always returned.",
        },
        "modified_within": {
            "type": ["string", "number"],
            "minLength": 1,
            "maxLength": 32,
            "description": "Keep only files modified within this long before now, e.g. '1h' or '7d' (what "
            "is new: what filled the disk lately). A duration: '90s', '45m', '6h', '7d', '2w', or seconds. "
            "Applies to the file and extension lists, whose matching count and bytes are added to totals; "
            "directory totals stay du's.",
        },
        "modified_before": {
            "type": ["string", "number"],
            "minLength": 1,
            "maxLength": 32,
            "description": "Keep only files last modified longer ago than this, e.g. '30d' (clean-up "
            "candidates: big and old). Same durations as modified_within; with both, files modified "
            "between the two.",
        },
        "max_depth": {
            "type": "integer",
            "minimum": 1,
            "maximum": 1000,
            "default": 1,
            "description": "Deepest directory level in the directory list: 1 lists the immediate "
            "subdirectories of path (like 'du -d 1 | sort -h'), 2 also their children, and so on. The scan "
            "itself always covers the whole tree.",
        },
        "sort_by": {
            "type": "string",
            "enum": ["disk", "apparent"],
            "default": "disk",
            "description": "Rank by 'disk' usage (allocated blocks, what fills a disk; sparse files count "
            "only their data) or by 'apparent' size (file length, what ls -l shows).",
        },
        "min_size": size_argument(
            "List only files and directories at least this big (apparent size), e.g. '100M'. Totals still "
            "count everything."
        ),
        "timeout_s": {
            "type": "number",
            "minimum": 0.001,
            "maximum": MAX_TIMEOUT_S,
            "default": DEFAULT_TIMEOUT_S,
            "description": "Time budget in seconds (at most 300). When it runs out the scan stops and the "
            "result, marked partial, covers what was scanned so far.",
        },
        **walk_properties("path"),
    },
    "required": ["path"],
    "additionalProperties": False,
}

_SIZE = {"type": "integer", "minimum": 0}
_ENTRY = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "disk_bytes": _SIZE,
        "apparent_bytes": _SIZE,
        "modified": {
            "type": ["string", "null"],
            "description": "Last modification time, ISO 8601 UTC (null if out of range).",
        },
    },
    "required": ["path", "disk_bytes", "apparent_bytes", "modified"],
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "complete": {"type": "boolean", "description": "False when the scan stopped early (time budget)."},
        "stopped_reason": {
            "type": ["string", "null"],
            "description": "Why the scan stopped early, if it did.",
        },
        "elapsed_s": {"type": "number"},
        "sort_by": {"type": "string", "enum": ["disk", "apparent"]},
        "totals": {
            "type": "object",
            "properties": {
                "files": {
                    "type": "integer",
                    "description": "Regular files (hard-linked names counted once).",
                },
                "directories": {"type": "integer", "description": "Directories, including path itself."},
                "apparent_bytes": {"type": "integer", "description": "Like du -sxb."},
                "disk_bytes": {"type": "integer", "description": "Like du -sxB1: allocated blocks x 512."},
                "entries": {"type": "integer", "description": "Directory entries examined."},
                "matching": {
                    "type": "object",
                    "description": "With modified_within or modified_before: the files that match.",
                    "properties": {
                        "files": {"type": "integer"},
                        "apparent_bytes": {"type": "integer"},
                        "disk_bytes": {"type": "integer"},
                    },
                    "required": ["files", "apparent_bytes", "disk_bytes"],
                },
            },
            "required": ["files", "directories", "apparent_bytes", "disk_bytes", "entries"],
        },
        "modified_after": {
            "type": "string",
            "description": "With modified_within: files modified at or after this time (ISO 8601 UTC).",
        },
        "modified_until": {
            "type": "string",
            "description": "With modified_before: files modified before this time (ISO 8601 UTC).",
        },
        "extensions": {
            "type": "array",
            "description": "With show 'extensions' or 'all': the top extensions by the sort_by size.",
            "items": {
                "type": "object",
                "properties": {
                    "extension": {"type": "string", "description": "'.log', … or '(none)', '(other)'."},
                    "files": {"type": "integer"},
                    "disk_bytes": _SIZE,
                    "apparent_bytes": _SIZE,
                },
                "required": ["extension", "files", "disk_bytes", "apparent_bytes"],
            },
        },
        "extensions_not_shown": {"type": "integer"},
        "skipped": {
            "type": "object",
            "additionalProperties": {"type": "integer"},
            "description": "Entries left out, by reason: unreadable, other_filesystem, pseudo_filesystem, "
            "excluded, special_file, vanished.",
        },
        "largest_files": {"type": "array", "items": _ENTRY},
        "files_not_shown": {"type": "integer", "description": "Files (at least min_size) not listed."},
        "largest_directories": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "disk_bytes": _SIZE,
                    "apparent_bytes": _SIZE,
                    "files": {"type": "integer", "description": "Regular files below it."},
                    "depth": {"type": "integer", "description": "1 for an immediate subdirectory of path."},
                },
                "required": ["path", "disk_bytes", "apparent_bytes", "files", "depth"],
            },
        },
        "directories_not_shown": {
            "type": "integer",
            "description": "Directories within max_depth (at least min_size) not listed.",
        },
    },
    "required": [
        "path",
        "complete",
        "stopped_reason",
        "elapsed_s",
        "sort_by",
        "totals",
        "skipped",
        "largest_files",
        "files_not_shown",
        "largest_directories",
        "directories_not_shown",
    ],
    "additionalProperties": False,
}


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
        if len(self._heap) < self.capacity:
            self._tick += 1
            heapq.heappush(self._heap, (key, -self._tick, item))
        elif key > self._heap[0][0]:
            self._tick += 1
            heapq.heapreplace(self._heap, (key, -self._tick, item))

    def largest(self) -> list[Any]:
        return [item for _, _, item in sorted(self._heap, key=lambda t: (-t[0], -t[1]))]


@dataclass
class Usage:
    """What one scan found; ``files`` and ``directories`` hold (apparent, disk, relative[, files, depth])."""

    totals: Finished | None = None
    entries: int = 0
    eligible_files: int = 0
    eligible_directories: int = 0
    files: list[tuple[int, int, str]] = field(default_factory=list)
    directories: list[tuple[int, int, str, int, int]] = field(default_factory=list)
    stopped: str | None = None
    elapsed: float = 0.0
    processes: int = 1  # processes that walked (more than 1 when a long scan was shared out)
    child_bytes: int = 0  # apparent bytes the other processes saw
    modified: dict[str, float] = field(default_factory=dict)  # mtime of each listed file, by relative path
    matching: tuple[int, int, int] | None = None  # (files, apparent, disk) matching the time filter
    extensions: list[tuple[str, int, int, int]] = field(default_factory=list)  # (ext, files, apparent, disk)
    # With Request.record_floor: (relative, disk, apparent, files) of every directory at any depth at
    # least that big or named in record_also, for the history (sysmcp.history.snapshots).
    recorded: list[tuple[str, int, int, int]] | None = None


@dataclass(frozen=True)
class Request:
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

    @property
    def selects(self) -> bool:
        """Whether every file must be looked at (a time filter or an extension tally)."""
        return self.extensions or self.newer_than is not None or self.older_than is not None


def extension_of(name: str) -> str:
    """'app.LOG' → '.log', 'a.tar.gz' → '.gz'; dot files and names without a dot → '(none)'."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem or not ext:
        return NO_EXTENSION
    return "." + ext.lower()


class Selection:
    """The per-file hook a scanner calls (``Scanner.on_file``): the time filter, the matching files'
    totals and the extension tally. Sees every file, so the figures are exact, not top-N."""

    __slots__ = ("apparent", "disk", "extensions", "files", "linked", "newer", "older", "tally_types")

    def __init__(self, request: Request) -> None:
        self.newer, self.older = request.newer_than, request.older_than
        self.tally_types = request.extensions
        self.files = self.apparent = self.disk = 0
        self.extensions: dict[str, list[int]] = {}  # extension → [files, apparent, disk]
        # In a child: (dev, ino) → (extension, matched) of multiply-linked files, so one another
        # process counted too can be taken out again (see _merge_child).
        self.linked: dict[tuple[int, int], tuple[str, bool]] | None = None

    def __call__(self, name: str, st: os.stat_result) -> bool:
        mtime = st.st_mtime
        matched = (self.newer is None or mtime >= self.newer) and (self.older is None or mtime < self.older)
        ext = extension_of(name) if self.tally_types else ""
        if self.linked is not None and st.st_nlink > 1:
            self.linked[(st.st_dev, st.st_ino)] = (ext, matched)
        if not matched:
            return False
        size, disk = st.st_size, st.st_blocks * 512
        self.files += 1
        self.apparent += size
        self.disk += disk
        if self.tally_types:
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
        }

    def merge(self, data: dict[str, Any]) -> None:
        self.files += data["files"]
        self.apparent += data["apparent"]
        self.disk += data["disk"]
        for ext, (files, apparent, disk) in data["extensions"].items():
            self.add(ext, files, apparent, disk)


SPLIT_AFTER_S = 0.01  # a scan still running after this long shares its remaining subtrees out
MAX_SUBTREES = MAX_TASKS  # subtrees handed out at most (the rest stay with this process's walk)
SUBTREES_PER_PROCESS = 32  # enough pieces that processes finish together whatever the tree's shape
NEVER = 1 << 62


class Tally:
    """The two bounded lists and the counts behind them, fed by walk events (one per process)."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.top_files = TopN(request.top_files)
        self.top_dirs = TopN(request.top_directories)
        self.eligible_directories = 0
        self.totals: Finished | None = None
        self.selection = Selection(request)
        self.record: list[list[Any]] | None = [] if request.record_floor else None

    def configure(self, scanner: Scanner) -> None:
        """Ask the scanner only for what the lists can still use."""
        request = self.request
        scanner.on_file = self.selection if request.selects else None
        scanner.min_file_size = request.min_size
        scanner.keep_files, scanner.keep_by_disk = request.top_files, request.by_disk
        scanner.empty_listings = False
        scanner.finished_depth = request.max_depth if self.record is None else None
        scanner.file_floor, scanner.block_floor = (NEVER, 0) if request.by_disk else (0, NEVER)
        if request.top_files == 0:
            scanner.file_floor = scanner.block_floor = NEVER
        self._raise_floor(scanner)

    def _raise_floor(self, scanner: Scanner) -> None:
        # Tell the scanner to leave smaller files out of the next listings altogether.
        if self.top_files.full:
            if self.request.by_disk:
                scanner.block_floor = self.top_files.floor // 512 + 1
            else:
                scanner.file_floor = self.top_files.floor + 1

    def take(self, event: Listing | Finished, scanner: Scanner) -> None:
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
            self._raise_floor(scanner)
        else:
            assert isinstance(event, Finished)
            if event.depth == 0:
                self.totals = event
                return
            if self.record is not None:
                self.keep_record([event.apparent, event.disk, event.relative, event.files, event.depth])
            if event.depth <= request.max_depth and event.apparent >= request.min_size:
                self.offer_directory([event.apparent, event.disk, event.relative, event.files, event.depth])

    def keep_record(self, row: list[Any]) -> None:
        floor = self.request.record_floor
        if (
            row[0] >= floor or row[1] >= floor or row[2] in self.request.record_also
        ) and self.record is not None:
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


def _ranked(rows: list[Row], request: Request) -> list[Row]:
    """Largest first by the chosen size; a tie goes by the other size, then by name, as ``sort`` would."""
    if request.by_disk:
        return sorted(rows, key=lambda row: (-row[1], -row[0], row[2]))
    return sorted(rows, key=lambda row: (-row[0], -row[1], row[2]))


def scan_usage(
    root: bytes,
    options: WalkOptions,
    skipped: SkipCounter,
    request: Request,
    meter: Meter | None = None,
    clock: Callable[[], float] = time.monotonic,
    processes: int | None = None,
    split_after_s: float = SPLIT_AFTER_S,
    pieces: int = SUBTREES_PER_PROCESS,
) -> Usage:
    """Walk once, keeping totals and two bounded heaps; stop cleanly when the time budget is spent.

    A walk still going after ``split_after_s`` hands the subdirectories waiting on its stack to
    ``processes`` processes (this one included; default: the usable CPUs, at most 4), split into
    about ``pieces`` subtrees per process, which the processes claim one by one. Their totals,
    lists and skip counts are merged here, inodes with several links counted once across
    processes, so the result is the one a single walk gives.
    """
    started = clock()
    usage = Usage()
    mine = _Counts()
    fan: FanOut | None = None

    def report() -> None:
        """Progress for the meter, then the cancellation question: every 2 ms at most (Budget)."""
        assert meter is not None
        entries, seen = mine.now()
        if fan is not None:
            more_entries, more_bytes = fan.progress.others()
            entries, seen = entries + more_entries, seen + more_bytes
        meter.done = entries
        meter.extra["bytes"] = seen
        meter.checkpoint()

    budget = Budget(request.timeout_s, report if meter is not None else None, clock=clock)

    tally = Tally(request)
    scanner = Scanner(root, options, skipped, budget)
    tally.configure(scanner)
    mine.current = scanner
    split_at = started + split_after_s if processes is None or processes > 1 else math.inf
    subtrees: list[Subtree] = []
    eligible_files = 0
    stopped: str | None = None

    def work(
        claim: Callable[[], int | None], progress: Progress, in_child: bool, *, share: bool = True
    ) -> dict[str, Any]:
        """Walk claimed subtrees; in a child, into a fresh tally sent back as plain data.

        With ``share``, a walk that sees the task queue run low gives part of its subtree away
        (``FanOut.give``): the directories above what it gave report to ``withheld`` instead, to be
        completed where the parts meet (``_join``).
        """
        linked: list[tuple[int, int, int, int, bool, str]] | None
        assert fan is not None

        def running_low() -> None:
            current = counting.current
            if share and current is not None and fan is not None and fan.waiting() < fan.processes:
                current.share_wanted = True

        if in_child:
            own, counter, linked = Tally(request), SkipCounter(), []
            own.selection.linked = {}
            ticker = counting = _Counts()

            def tick() -> None:
                progress.set(*ticker.now())
                running_low()

        else:
            own, counter, linked, counting = tally, skipped, scanner.linked, mine

            def tick() -> None:
                if meter is not None:
                    report()
                running_low()

        walk_checkpoint = budget.sharing(tick)  # one deadline, on the clock every process shares
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
            sub = scanner.spawn(subtree, counter, walk_checkpoint, linked)
            own.configure(sub)
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
            withheld += [[f.apparent, f.disk, f.relative, f.files, f.depth, index] for f in sub.withheld]
        result: dict[str, Any] = {
            "done": done,
            "stopped": halted,
            "entries": entries,
            "eligible": eligible,
            "withheld": withheld,
        }
        if in_child:
            result["bytes"] = ticker.bytes
            result["files"] = own.top_files.largest()
            result["dirs"] = own.top_dirs.largest()
            result["eligible_dirs"] = own.eligible_directories
            result["skipped"] = counter.as_dict()
            result["skipped_named"] = counter.named
            result["linked"] = linked
            result["selection"] = own.selection.as_data()
            result["record"] = own.record
        return result

    try:
        for event in scanner.events():
            tally.take(event, scanner)
            if clock() >= split_at:
                split_at = math.inf
                # Asked only now: a scan too short to share never reads the CPU count or quota.
                count = available_processes() if processes is None else processes
                if count > 1:
                    subtrees, listings = scanner.detach(MAX_SUBTREES, pieces * count)
                    for listing in listings:
                        tally.take(listing, scanner)
                if subtrees:
                    scanner.linked = []
                    fan = FanOut(len(subtrees), count, work, waits_for_gifts=True)
                    fan.start()
        mine.add(scanner)
        stopped = scanner.stopped
        eligible_files = scanner.eligible_files
        if fan is not None:
            stopped, eligible_files = _join(fan, work, budget, scanner, subtrees, tally, skipped, usage)
            stopped = scanner.stopped or stopped
            eligible_files += scanner.eligible_files
        elif scanner.detached:  # every subtree was small enough to be split here
            for finished in scanner.settle([]):
                tally.take(finished, scanner)
    finally:
        if fan is not None:
            fan.close()
        scanner.close()
    usage.entries += mine.entries
    usage.totals = tally.totals
    if meter is not None:  # the final progress notification reports the whole count
        meter.done = usage.entries
        meter.extra["bytes"] = mine.bytes + usage.child_bytes
    usage.eligible_files = eligible_files
    usage.eligible_directories = tally.eligible_directories
    kept = tally.top_files.largest()
    usage.files = _ranked([(size, disk, relative) for size, disk, relative, *_ in kept], request)
    usage.modified = {row[2]: row[5] for row in kept}
    selection = tally.selection
    if request.newer_than is not None or request.older_than is not None:
        usage.matching = (selection.files, selection.apparent, selection.disk)
    if request.extensions:
        usage.extensions = sorted(
            ((ext, files, apparent, disk) for ext, (files, apparent, disk) in selection.extensions.items()),
            key=lambda row: (-(row[3] if request.by_disk else row[2]), -row[1], row[0]),
        )
    usage.directories = _ranked([tuple(row) for row in tally.top_dirs.largest()], request)
    usage.stopped = stopped
    usage.elapsed = clock() - started
    if tally.record is not None:
        usage.recorded = [(row[2], row[1], row[0], row[3]) for row in tally.record]
    return usage


Part = dict[str, Any]


def _join(
    fan: FanOut,
    work: Callable[..., Part],
    budget: Budget,
    scanner: Scanner,
    subtrees: list[Subtree],
    tally: Tally,
    skipped: SkipCounter,
    usage: Usage,
) -> tuple[str | None, int]:
    """Walk subtrees here too, then merge every child's part; returns (stopped, eligible files).

    A child that died is not fatal: the subtrees it never reported are walked again here (when no
    process gave work away: parts of a lost subtree may then have been counted elsewhere, and the
    result says it is partial instead). Parts given away mid-walk are added to the subtree they came
    from, and to every withheld directory above them, before the subtrees settle.
    """
    assert scanner.linked is not None
    request = tally.request

    def keep_waiting() -> bool:
        """Wait for a child's gift until the deadline; cancellation raises (the budget asks)."""
        try:
            budget()
        except ScanStopped:
            return False
        return True

    here = fan.run_here(keep_waiting)
    children = collect_within(fan, budget)
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
        _merge_child(part, tally, skipped, seen, roots, request)
        done.update(part["done"])
        withheld += part["withheld"]
        usage.entries += part["entries"]
        usage.child_bytes += part["bytes"]
        eligible += part["eligible"]
        stopped = stopped or part["stopped"]
    lost = [i for i in [*range(len(subtrees)), *given] if i not in done]
    if lost and not given and stopped is None and not budget.expired:
        scanner.mark_seen(seen)  # what the children counted is not counted again here
        queue = iter(lost)
        again = work(lambda: next(queue, None), fan.progress, False, share=False)
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
    for row in withheld:  # a directory above given parts: its own part plus every part below it
        below = f"{row[2]}/"
        for number, (apparent, disk, files, _, _) in parts.items():
            if given[number][0].startswith(below):
                row[0] += apparent
                row[1] += disk
                row[3] += files
        if tally.record is not None:
            tally.keep_record(row[:5])
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
    tally: Tally,
    skipped: SkipCounter,
    seen: set[tuple[int, int]],
    roots: dict[str, int],
    request: Request,
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
        ext, matched = chosen["linked"].get((dev, ino), ("", True))
        if regular and matched and (dev, ino) in chosen["linked"]:  # counted by the child's selection
            chosen["files"] -= 1
            chosen["apparent"] -= size
            chosen["disk"] -= blocks * 512
            if ext:
                row = chosen["extensions"].get(ext) or chosen["extensions"].get(OTHER_EXTENSIONS)
                if row is not None:
                    row[0] -= 1
                    row[1] -= size
                    row[2] -= blocks * 512
        disk, nfiles = blocks * 512, 1 if regular else 0
        names = directory.split("/")
        prefixes = ["/".join(names[:depth]) for depth in range(1, len(names) + 1)]
        owner = next((roots[prefix] for prefix in reversed(prefixes) if prefix in roots), None)
        if owner in part["done"]:
            apparent_, disk_, files_, dirs_, complete = part["done"][owner]
            part["done"][owner] = (apparent_ - size, disk_ - disk, files_ - nfiles, dirs_, complete)
        for prefix in prefixes:
            if (kept := recorded.get(prefix)) is not None:
                kept[0] -= size
                kept[1] -= disk
                kept[3] -= nfiles
            if len(prefix.split("/")) > request.max_depth:
                continue
            row = dirs.get(prefix)
            if row is None and prefix in held and held[prefix][5] == owner:
                row = held[prefix]
            if row is not None:
                row[0] -= size
                row[1] -= disk
                row[3] -= nfiles
        if regular and size >= request.min_size and matched:
            part["eligible"] -= 1
    for row in part["files"]:
        if (row[3], row[4]) not in dropped:
            tally.top_files.offer(row[1] if request.by_disk else row[0], tuple(row))
    for row in part["dirs"]:
        tally.offer_directory(row)
    tally.eligible_directories += part["eligible_dirs"] - len(part["dirs"])
    skipped.merge(part["skipped"], part["skipped_named"])
    tally.selection.merge(chosen)
    if tally.record is not None:
        tally.record += recorded.values()


def _size_text(apparent: int, disk: int, by_disk: bool) -> str:
    """The ranked size, plus the other one when they tell different stories (sparse or tiny files)."""
    main, other, other_name = (disk, apparent, "apparent") if by_disk else (apparent, disk, "on disk")
    text = f"{human_bytes(main):>10}"
    if other > 2 * main + 65536 or main > 2 * other + 65536:
        text += f" ({other_name} {human_bytes(other)})"
    return text


def _joined(shown: str, relative: str) -> str:
    # display() takes the str as it is when it encodes (almost always): no round trip through bytes
    return shown.rstrip("/") + "/" + display(relative)


def parse_duration(value: Any, name: str) -> float:
    """Seconds in '90s', '45m', '6h', '7d', '2w', '3600' or 3600; ``ArgumentError`` naming ``name``."""
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (found := _DURATION.fullmatch(value.lower())):
        seconds = float(found.group(1)) * _DURATION_UNITS[found.group(2)]
    if seconds is None or not math.isfinite(seconds):
        raise ArgumentError(f"Invalid arguments: {name!r} must be {_DURATION_NOTE}, got {value!r}")
    if not 0 < seconds <= MAX_AGE_S:
        raise ArgumentError(
            f"Invalid arguments: {name!r} must be more than 0 and at most 200 years, got {value!r}"
        )
    return seconds


def time_window(args: dict[str, Any], now: float) -> tuple[float | None, float | None]:
    """(newer_than, older_than) in epoch seconds from modified_within and modified_before."""
    within = parse_duration(args["modified_within"], "modified_within") if "modified_within" in args else None
    before = parse_duration(args["modified_before"], "modified_before") if "modified_before" in args else None
    if within is not None and before is not None and before >= within:
        raise ArgumentError(
            "Invalid arguments: 'modified_before' must be shorter than 'modified_within' (files modified "
            f"between {age_text(within)} and {age_text(before)} ago); as given no file can match"
        )
    return (None if within is None else now - within), (None if before is None else now - before)


# The seconds ``datetime`` can show (years 1 to 9999): outside them a time is not shown (None).
_FIRST_SECOND, _LAST_SECOND = -62_135_596_800, 253_402_300_799


def iso_utc(mtime: float) -> str | None:
    """``mtime`` as ``datetime.fromtimestamp(mtime, UTC)`` would print it, without an aware ``datetime``.

    Why by hand: the full listing dates up to a thousand files on every call, and an aware
    ``datetime``'s ``strftime`` made the render 4.6 ms of a 0.6 s call (2.6 ms this way). Rounding as
    ``datetime`` does it: to the microsecond, half to even, then the whole second below.
    """
    try:
        fraction, whole = math.modf(mtime)
        micro = round(fraction * 1e6)
        seconds = int(whole) + (1 if micro >= 1_000_000 else -1 if micro < 0 else 0)
    except (OverflowError, ValueError):  # inf, nan
        return None
    if not _FIRST_SECOND <= seconds <= _LAST_SECOND:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def age_text(seconds: float) -> str:
    """'45 s', '12 min', '6 h', '3 d', '2 y': one unit, rounded down, as a person glances at it."""
    if seconds < 60:
        return f"{int(seconds)} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h"
    if seconds < 2 * 365 * 86400:
        return f"{int(seconds // 86400)} d"
    return f"{int(seconds // (365 * 86400))} y"


def _age(mtime: float | None, now: float) -> str:
    if mtime is None:
        return ""
    if mtime > now + 1:
        return "  (modified in the future)"
    return f"  ({age_text(max(0.0, now - mtime))} old)"


def render(
    shown: str,
    usage: Usage,
    skipped: dict[str, int],
    args: dict[str, Any],
    now: float | None = None,
    named: Sequence[str] = (),
) -> tuple[str, dict[str, Any], str | None]:
    """Text for the model, structured content, and the full listing (None when nothing was cut)."""
    totals = usage.totals
    assert totals is not None
    now = time.time() if now is None else now
    by_disk = args["sort_by"] == "disk"
    top_n: int = args["top_n"]
    show: str = args["show"]
    files: list[dict[str, Any]] = [
        {
            "path": _joined(shown, rel),
            "disk_bytes": disk,
            "apparent_bytes": apparent,
            "modified": iso_utc(usage.modified[rel]) if rel in usage.modified else None,
        }
        for apparent, disk, rel in usage.files
    ]
    directories: list[dict[str, Any]] = [
        {"path": _joined(shown, rel), "disk_bytes": disk, "apparent_bytes": apparent, "files": n, "depth": d}
        for apparent, disk, rel, n, d in usage.directories
    ]
    measure = "disk usage" if by_disk else "apparent size"
    lines = []
    if usage.stopped:
        lines.append(
            f"PARTIAL RESULT: the scan stopped early ({usage.stopped}) after {plural(usage.entries, 'entry')}; "
            "totals and lists cover only what was scanned."
        )
    lines.append(
        f"{shown}: {human_bytes(totals.disk)} on disk ({human_bytes(totals.apparent)} apparent) in "
        f"{plural(totals.files, 'file')} and {plural(totals.dirs, 'directory')}"
        + (" so far" if usage.stopped else "")
        + f" [{usage.elapsed:.2f} s]"
    )
    limit = f", at least {human_bytes(args['min_size'])}" if args["min_size"] else ""
    window = _window_phrase(args)
    if usage.matching is not None:
        count, apparent, disk = usage.matching
        lines.append(
            f"Files modified {window}: {count:,}, {human_bytes(disk)} on disk ({human_bytes(apparent)} apparent)"
            + (" so far" if usage.stopped else "")
        )
    dirs_not_shown = files_not_shown = 0
    shown_dirs: list[dict[str, Any]] = []
    shown_files: list[dict[str, Any]] = []

    def listing(title: str, rows: list[dict[str, Any]], eligible: int, noun: str) -> int:
        """One bounded list in the text; returns how many eligible entries it left out."""
        lines.append(title)
        for index, row in enumerate(rows):
            size = _size_text(row["apparent_bytes"], row["disk_bytes"], by_disk)
            name = printable(row["path"])
            lines.append(
                f"  {size}  {name}/  ({plural(row['files'], 'file')})"
                if "files" in row
                else f"  {size}  {name}{_age(usage.modified.get(usage.files[index][2]), now)}"
            )
        if not rows:
            lines.append("  (none)")
        left_out = eligible - len(rows)
        if left_out:
            lines.append(f"  … and {plural(left_out, 'more ' + noun)} not shown")
        return left_out

    if show in ("both", "directories", "all"):
        shown_dirs = directories[:top_n]
        depth = "immediate subdirectories" if args["max_depth"] == 1 else f"depth ≤ {args['max_depth']}"
        title = f"Largest directories ({depth}, by {measure}{limit}):"
        dirs_not_shown = listing(title, shown_dirs, usage.eligible_directories, "directory")
    if show in ("both", "files", "all"):
        shown_files = files[:top_n]
        matching = f", modified {window}" if window else ""
        title = f"Largest files (by {measure}{limit}{matching}):"
        files_not_shown = listing(title, shown_files, usage.eligible_files, "file")
    extensions: list[dict[str, Any]] = []
    extensions_not_shown = 0
    if show in ("extensions", "all"):
        extensions = [
            {
                "extension": display(os.fsencode(ext)),
                "files": n,
                "disk_bytes": disk,
                "apparent_bytes": apparent,
            }
            for ext, n, apparent, disk in usage.extensions[:top_n]
        ]
        extensions_not_shown = len(usage.extensions) - len(extensions)
        lines.append(f"Top extensions (by {measure}{f', modified {window}' if window else ''}):")
        for row in extensions:
            size = _size_text(row["apparent_bytes"], row["disk_bytes"], by_disk)
            lines.append(f"  {size}  {printable(row['extension'])}  ({plural(row['files'], 'file')})")
        if not extensions:
            lines.append("  (none)")
        if extensions_not_shown:
            lines.append(f"  … and {plural(extensions_not_shown, 'more extension')} not shown")
    if skipped:
        lines.append("Skipped: " + skipped_phrase(skipped, named, shown))
    structured = {
        "path": shown,
        "complete": usage.stopped is None,
        "stopped_reason": usage.stopped,
        "elapsed_s": round(usage.elapsed, 3),
        "sort_by": args["sort_by"],
        "totals": {
            "files": totals.files,
            "directories": totals.dirs,
            "apparent_bytes": totals.apparent,
            "disk_bytes": totals.disk,
            "entries": usage.entries,
            **(
                {}
                if usage.matching is None
                else {
                    "matching": {
                        "files": usage.matching[0],
                        "apparent_bytes": usage.matching[1],
                        "disk_bytes": usage.matching[2],
                    }
                }
            ),
        },
        "skipped": skipped,
        "largest_files": shown_files,
        "files_not_shown": files_not_shown,
        "largest_directories": shown_dirs,
        "directories_not_shown": dirs_not_shown,
    }
    if show in ("extensions", "all"):
        structured["extensions"] = extensions
        structured["extensions_not_shown"] = extensions_not_shown
    for key, argument in (("modified_after", "modified_within"), ("modified_until", "modified_before")):
        if argument in args:
            cutoff = iso_utc(now - parse_duration(args[argument], argument))
            if cutoff is not None:
                structured[key] = cutoff
    full = None
    if len(files) > len(shown_files) or len(directories) > len(shown_dirs):
        out = [f"# dir_usage {shown} (sort_by={args['sort_by']}, max_depth={args['max_depth']})"]
        if usage.stopped:
            out.append(f"# PARTIAL: {usage.stopped}")
        if show in ("both", "directories", "all"):
            out.append(f"# largest directories ({len(directories):,} of {usage.eligible_directories:,})")
            out.append("disk_bytes\tapparent_bytes\tfiles\tpath")
            out += [
                f"{r['disk_bytes']}\t{r['apparent_bytes']}\t{r['files']}\t{printable(r['path'])}/"
                for r in directories
            ]
        if show in ("both", "files", "all"):
            out.append(f"# largest files ({len(files):,} of {usage.eligible_files:,})")
            out.append("disk_bytes\tapparent_bytes\tmodified\tpath")
            out += [
                f"{r['disk_bytes']}\t{r['apparent_bytes']}\t{r['modified'] or ''}\t{printable(r['path'])}"
                for r in files
            ]
        full = "\n".join(out) + "\n"
    return "\n".join(lines), structured, full


def _inodes_in_use(path: os.PathLike[str]) -> int | None:
    """The progress total of a scan of a whole filesystem: its used inodes (what the scan will meet,
    give or take hard links), so a client can show a percentage. None below a mount point, where the
    filesystem's count would say nothing about this directory."""
    try:
        if not os.path.ismount(path):
            return None
        fs = os.statvfs(path)
    except OSError:
        return None
    return fs.f_files - fs.f_ffree if fs.f_files > 0 else None


def _window_phrase(args: dict[str, Any]) -> str:
    """'within 7 d', 'more than 30 d ago', 'between 30 d and 7 d ago', or '' without a filter."""
    within = args.get("modified_within")
    before = args.get("modified_before")
    if within is not None and before is not None:
        return (
            f"between {age_text(parse_duration(within, 'modified_within'))} and "
            f"{age_text(parse_duration(before, 'modified_before'))} ago"
        )
    if within is not None:
        return f"within {age_text(parse_duration(within, 'modified_within'))}"
    if before is not None:
        return f"more than {age_text(parse_duration(before, 'modified_before'))} ago"
    return ""


def request_for(args: dict[str, Any], now: float) -> Request:
    """The scan the validated arguments ask for; bad durations raise ``ArgumentError``."""
    newer_than, older_than = time_window(args, now)
    show: str = args["show"]
    return Request(
        top_files=FULL_FILES if show in ("both", "files", "all") else 0,
        top_directories=FULL_DIRECTORIES if show in ("both", "directories", "all") else 0,
        max_depth=args["max_depth"],
        by_disk=args["sort_by"] == "disk",
        min_size=args["min_size"],
        timeout_s=min(float(args["timeout_s"]), MAX_TIMEOUT_S),
        newer_than=newer_than,
        older_than=older_than,
        extensions=show in ("extensions", "all"),
    )


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    now = time.time()
    request = request_for(args, now)  # bad durations are refused before any work
    path = await ctx.resolve(args["path"], lambda found: require_directory(found, display(found)))
    shown = display(path)
    options = walk_options(args)
    skipped = SkipCounter()

    def describe(meter: Meter, elapsed: float) -> str:
        return f"{plural(int(meter.done), 'entry')} scanned, {human_bytes(meter.extra.get('bytes', 0))} seen"

    def scan(meter: Meter) -> tuple[Usage, Any, str | None]:
        meter.total = _inodes_in_use(path) if options.one_file_system else None
        # The history hook: with history on, the scan also keeps every directory's totals for it.
        return recorded_scan(
            path, options, request, lambda r: scan_usage(os.fsencode(path), options, skipped, r, meter)
        )

    try:
        usage, _, history_note = await ctx.run_in_worker(scan, describe=describe)
    except PermissionError:
        raise ToolError(f"Permission denied: cannot read the directory {shown}{denied_by(path)}") from None
    except OSError as exc:
        raise ToolError(f"Cannot scan {shown}: {exc.strerror or exc}") from None
    text, structured, full = render(shown, usage, skipped.as_dict(), args, now, skipped.named)
    if history_note:
        text += "\n" + history_note
    links: tuple[ResourceLink, ...] = ()
    if full is not None:
        name = f"dir_usage-{os.path.basename(shown.rstrip('/')) or 'root'}.tsv"
        link = ctx.keep(
            name,
            full,
            description=f"Full dir_usage listing of {shown}",
            mime_type="text/tab-separated-values",
        )
        if isinstance(link, str):  # bounded by the list sizes; only absurdly long names could get here
            text += f"\nLonger lists: not kept, {link}"
        else:
            links = (link,)
            text += (
                f"\nLonger lists (up to {FULL_DIRECTORIES:,} directories, {FULL_FILES:,} files): {link.uri}"
            )
    return ToolOutput(text, structured, links=links)


def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
    """Per-host totals side by side, then each host's largest entries (each host already cut to top_n)."""
    answered = [o for o in outcomes if o.ok and o.result is not None]
    key = "apparent_bytes" if arguments.get("sort_by") == "apparent" else "disk_bytes"
    rows = [["HOST", "DISK", "APPARENT", "FILES", "DIRS", "COMPLETE"]]
    totals: list[dict[str, Any]] = []
    largest: list[dict[str, Any]] = []
    for outcome in sorted(answered, key=lambda o: -int((o.result or {}).get("totals", {}).get(key, 0))):
        result = outcome.result or {}
        total = result.get("totals", {})
        rows.append(
            [
                outcome.host,
                human_bytes(total.get("disk_bytes", 0)),
                human_bytes(total.get("apparent_bytes", 0)),
                f"{total.get('files', 0):,}",
                f"{total.get('directories', 0):,}",
                "yes" if result.get("complete") else "partial",
            ]
        )
        totals.append(
            {"host": outcome.host, "path": result.get("path"), "complete": result.get("complete"), **total}
        )
        largest.append(
            {
                "host": outcome.host,
                "largest_directories": result.get("largest_directories", []),
                "largest_files": result.get("largest_files", []),
            }
        )
    body = table(rows, right=(1, 2, 3, 4)) if answered else []
    for entry in largest:
        for kind in ("largest_directories", "largest_files"):
            if entry[kind]:
                body.append(f"{entry['host']}: {kind.replace('_', ' ')}")
                body += [f"  {human_bytes(item.get(key, 0)):>10}  {item['path']}" for item in entry[kind]]
    return fleet_output(outcomes, body, {"totals": totals, "largest": largest, "sort_by": key})


TOOL = Tool(
    name="dir_usage",
    title="Directory usage",
    description=(
        "What fills a directory: totals equal to du -sx (apparent and on-disk bytes, hard links counted once, "
        "sparse files at their real allocation), the largest subdirectories (cumulative, like du -d1 | sort -h) "
        "and the largest files anywhere below, each list capped at top_n with a count of what was not shown. "
        "Never follows symlinks, stays on one filesystem by default, skips /proc, /sys and /dev, counts "
        "unreadable and skipped entries by reason, and stops at timeout_s with a partial result clearly "
        "marked. Longer lists are returned as a sysmcp:// resource link. Read-only; returns names and "
        "sizes, never contents. Every listed file carries its modification time (and age in the text); "
        "modified_within keeps only new files (what grew lately), modified_before only old ones "
        "(clean-up candidates), with their count and bytes in the totals; show 'extensions' or 'all' "
        "adds which file types take the space. For space df counts but no walk finds, use "
        "deleted_open_files."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=handle,
    view=DIR_USAGE.uri,
    merge=merge,
)
