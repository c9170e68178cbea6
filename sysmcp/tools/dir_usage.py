"""dir_usage: what fills a directory — du's totals plus the largest directories and files, bounded.

The answer a sysadmin gets from ``du -sx``, ``du -d1 | sort -h`` and ``find -size`` together, in a
few hundred tokens whatever the tree size: totals that equal ``du`` (apparent and on-disk bytes,
hard links once), the top directories (cumulative) and the top files, kept in fixed-size heaps.
A time budget bounds the call; when it runs out the result says so and reports what was seen.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import os
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
)
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ToolError
from sysmcp.tools.arguments import size_argument
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput
from sysmcp.tools.walking import denied_by, require_directory, skipped_phrase, walk_options, walk_properties

DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 300.0
FULL_FILES = 1000  # rows kept for the full listing resource (the inline list is top_n of these)
FULL_DIRECTORIES = 10_000

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
            "enum": ["both", "files", "directories"],
            "default": "both",
            "description": "Which lists to return: the largest 'files', the largest 'directories' (cumulative "
            "size, like du), or 'both'. Totals are always returned.",
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
    },
    "required": ["path", "disk_bytes", "apparent_bytes"],
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
            },
            "required": ["files", "directories", "apparent_bytes", "disk_bytes", "entries"],
        },
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


@dataclass(frozen=True)
class Request:
    top_files: int
    top_directories: int
    max_depth: int
    by_disk: bool
    min_size: int
    timeout_s: float


SPLIT_AFTER_S = 0.01  # a scan still running after this long shares its remaining subtrees out
MAX_SUBTREES = MAX_TASKS  # subtrees handed out at most (the rest stay with this process's walk)
SUBTREES_PER_PROCESS = 32  # enough pieces that processes finish together whatever the tree's shape
GIVE_UP_AFTER_S = 2.0  # how long past the deadline to wait for a worker before killing it
NEVER = 1 << 62


class Tally:
    """The two bounded lists and the counts behind them, fed by walk events (one per process)."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.top_files = TopN(request.top_files)
        self.top_dirs = TopN(request.top_directories)
        self.eligible_directories = 0
        self.totals: Finished | None = None

    def configure(self, scanner: Scanner) -> None:
        """Ask the scanner only for what the lists can still use."""
        request = self.request
        scanner.min_file_size = request.min_size
        scanner.keep_files, scanner.keep_by_disk = request.top_files, request.by_disk
        scanner.empty_listings = False
        scanner.finished_depth = request.max_depth
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
                offer(disk if by_disk else size, (size, disk, prefix + name, st.st_dev, st.st_ino))
            self._raise_floor(scanner)
        else:
            assert isinstance(event, Finished)
            if event.depth == 0:
                self.totals = event
            elif event.depth <= request.max_depth and event.apparent >= request.min_size:
                self.offer_directory([event.apparent, event.disk, event.relative, event.files, event.depth])

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

    def work(claim: Callable[[], int | None], progress: Progress, in_child: bool) -> dict[str, Any]:
        """Walk claimed subtrees; in a child, into a fresh tally sent back as plain data."""
        linked: list[tuple[int, int, int, int, bool, str]] | None
        if in_child:
            own, counter, linked = Tally(request), SkipCounter(), []
            ticker = _Counts()
            check = Budget(request.timeout_s, lambda: progress.set(*ticker.now()), clock=clock)
            check.deadline = budget.deadline  # one deadline, on the clock every process shares
            walk_checkpoint, counting = check, ticker
        else:
            own, counter, linked, walk_checkpoint, counting = tally, skipped, scanner.linked, budget, mine
        done: dict[int, tuple[int, int, int, int, bool]] = {}
        entries = eligible = 0
        halted: str | None = None
        while halted is None and (index := claim()) is not None:
            subtree = subtrees[index]
            sub = scanner.spawn(subtree, counter, walk_checkpoint, linked)
            own.configure(sub)
            counting.current = sub
            for event in sub.events():
                own.take(event, sub)
            counting.add(sub)
            entries += sub.entries
            eligible += sub.eligible_files
            halted = sub.stopped
            done[index] = (subtree.apparent, subtree.disk, subtree.files, subtree.dirs, halted is None)
        result: dict[str, Any] = {"done": done, "stopped": halted, "entries": entries, "eligible": eligible}
        if in_child:
            result["bytes"] = ticker.bytes
            result["files"] = own.top_files.largest()
            result["dirs"] = own.top_dirs.largest()
            result["eligible_dirs"] = own.eligible_directories
            result["skipped"] = counter.as_dict()
            result["skipped_named"] = counter.named
            result["linked"] = linked
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
                    fan = FanOut(len(subtrees), count, work)
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
    usage.files = _ranked(
        [(size, disk, relative) for size, disk, relative, _, _ in tally.top_files.largest()], request
    )
    usage.directories = _ranked([tuple(row) for row in tally.top_dirs.largest()], request)
    usage.stopped = stopped
    usage.elapsed = clock() - started
    return usage


Part = dict[str, Any]


def _join(
    fan: FanOut,
    work: Callable[[Callable[[], int | None], Progress, bool], Part],
    budget: Budget,
    scanner: Scanner,
    subtrees: list[Subtree],
    tally: Tally,
    skipped: SkipCounter,
    usage: Usage,
) -> tuple[str | None, int]:
    """Walk subtrees here too, then merge every child's part; returns (stopped, eligible files).

    A child that died is not fatal: the subtrees it never reported are walked again here.
    """
    assert scanner.linked is not None
    request = tally.request
    here = fan.run_here()

    def waiting() -> None:  # cancellation ends the wait; the deadline does not, children stop at it too
        with contextlib.suppress(ScanStopped):
            budget()

    # Children stop at the deadline themselves; one that cannot (stuck in the kernel) is given up.
    give_up_at = time.monotonic() + max(0.0, budget.deadline - budget.clock()) + GIVE_UP_AFTER_S
    children = fan.collect(waiting, give_up_at)
    usage.processes = 1 + sum(part is not None for part in children)
    seen = {(dev, ino) for dev, ino, *_ in scanner.linked}  # counted here since the split
    done: dict[int, tuple[int, int, int, int, bool]] = dict(here["done"])
    eligible: int = here["eligible"]
    stopped: str | None = here["stopped"]
    for part in children:
        if part is None:
            continue
        _merge_child(part, tally, skipped, seen, subtrees, request)
        done.update(part["done"])
        usage.entries += part["entries"]
        usage.child_bytes += part["bytes"]
        eligible += part["eligible"]
        stopped = stopped or part["stopped"]
    lost = [i for i in range(len(subtrees)) if i not in done]
    if lost and stopped is None and not budget.expired:
        scanner.mark_seen(seen)  # what the children counted is not counted again here
        queue = iter(lost)
        again = work(lambda: next(queue, None), fan.progress, False)
        done.update(again["done"])
        eligible += again["eligible"]
        stopped = again["stopped"]
        lost = [i for i in lost if i not in done]
    if lost:
        stopped = stopped or "a scan process ended unexpectedly"
    settled = []
    for i, subtree in enumerate(subtrees):
        complete = False
        if i in done:
            subtree.apparent, subtree.disk, subtree.files, subtree.dirs, complete = done[i]
        settled.append((subtree, complete))
    for finished in scanner.settle(settled):
        tally.take(finished, scanner)
    return stopped, eligible


def _merge_child(
    part: Part,
    tally: Tally,
    skipped: SkipCounter,
    seen: set[tuple[int, int]],
    subtrees: list[Subtree],
    request: Request,
) -> None:
    """Fold a child's result into ``tally``, first taking out inodes another process counted already."""
    dirs = {row[2]: row for row in part["dirs"]}
    task_of = {subtrees[i].relative: i for i in part["done"]}
    dropped: set[tuple[int, int]] = set()
    for dev, ino, size, blocks, regular, directory in part["linked"]:
        if (dev, ino) not in seen:
            seen.add((dev, ino))
            continue
        dropped.add((dev, ino))
        disk, nfiles = blocks * 512, 1 if regular else 0
        names = directory.split("/")
        for depth in range(1, len(names) + 1):
            prefix = "/".join(names[:depth])
            if prefix in task_of:
                index = task_of[prefix]
                apparent_, disk_, files_, dirs_, complete = part["done"][index]
                part["done"][index] = (apparent_ - size, disk_ - disk, files_ - nfiles, dirs_, complete)
            row = dirs.get(prefix) if depth <= request.max_depth else None
            if row is not None:
                row[0] -= size
                row[1] -= disk
                row[3] -= nfiles
        if regular and size >= request.min_size:
            part["eligible"] -= 1
    for row in part["files"]:
        if (row[3], row[4]) not in dropped:
            tally.top_files.offer(row[1] if request.by_disk else row[0], tuple(row))
    for row in part["dirs"]:
        tally.offer_directory(row)
    tally.eligible_directories += part["eligible_dirs"] - len(part["dirs"])
    for reason, count in part["skipped"].items():
        skipped.add(reason, count)
    for name in part["skipped_named"]:
        skipped.name(name)


def _size_text(apparent: int, disk: int, by_disk: bool) -> str:
    """The ranked size, plus the other one when they tell different stories (sparse or tiny files)."""
    main, other, other_name = (disk, apparent, "apparent") if by_disk else (apparent, disk, "on disk")
    text = f"{human_bytes(main):>10}"
    if other > 2 * main + 65536 or main > 2 * other + 65536:
        text += f" ({other_name} {human_bytes(other)})"
    return text


def _joined(shown: str, relative: str) -> str:
    return shown.rstrip("/") + "/" + display(os.fsencode(relative))


def render(
    shown: str, usage: Usage, skipped: dict[str, int], args: dict[str, Any], named: Sequence[str] = ()
) -> tuple[str, dict[str, Any], str | None]:
    """Text for the model, structured content, and the full listing (None when nothing was cut)."""
    totals = usage.totals
    assert totals is not None
    by_disk = args["sort_by"] == "disk"
    top_n: int = args["top_n"]
    show: str = args["show"]
    files: list[dict[str, Any]] = [
        {"path": _joined(shown, rel), "disk_bytes": disk, "apparent_bytes": apparent}
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
    dirs_not_shown = files_not_shown = 0
    shown_dirs: list[dict[str, Any]] = []
    shown_files: list[dict[str, Any]] = []

    def listing(title: str, rows: list[dict[str, Any]], eligible: int, noun: str) -> int:
        """One bounded list in the text; returns how many eligible entries it left out."""
        lines.append(title)
        for row in rows:
            size = _size_text(row["apparent_bytes"], row["disk_bytes"], by_disk)
            name = printable(row["path"])
            lines.append(
                f"  {size}  {name}/  ({plural(row['files'], 'file')})"
                if "files" in row
                else f"  {size}  {name}"
            )
        if not rows:
            lines.append("  (none)")
        left_out = eligible - len(rows)
        if left_out:
            lines.append(f"  … and {plural(left_out, 'more ' + noun)} not shown")
        return left_out

    if show in ("both", "directories"):
        shown_dirs = directories[:top_n]
        depth = "immediate subdirectories" if args["max_depth"] == 1 else f"depth ≤ {args['max_depth']}"
        title = f"Largest directories ({depth}, by {measure}{limit}):"
        dirs_not_shown = listing(title, shown_dirs, usage.eligible_directories, "directory")
    if show in ("both", "files"):
        shown_files = files[:top_n]
        title = f"Largest files (by {measure}{limit}):"
        files_not_shown = listing(title, shown_files, usage.eligible_files, "file")
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
        },
        "skipped": skipped,
        "largest_files": shown_files,
        "files_not_shown": files_not_shown,
        "largest_directories": shown_dirs,
        "directories_not_shown": dirs_not_shown,
    }
    full = None
    if len(files) > len(shown_files) or len(directories) > len(shown_dirs):
        out = [f"# dir_usage {shown} (sort_by={args['sort_by']}, max_depth={args['max_depth']})"]
        if usage.stopped:
            out.append(f"# PARTIAL: {usage.stopped}")
        if show in ("both", "directories"):
            out.append(f"# largest directories ({len(directories):,} of {usage.eligible_directories:,})")
            out.append("disk_bytes\tapparent_bytes\tfiles\tpath")
            out += [
                f"{r['disk_bytes']}\t{r['apparent_bytes']}\t{r['files']}\t{printable(r['path'])}/"
                for r in directories
            ]
        if show in ("both", "files"):
            out.append(f"# largest files ({len(files):,} of {usage.eligible_files:,})")
            out.append("disk_bytes\tapparent_bytes\tpath")
            out += [f"{r['disk_bytes']}\t{r['apparent_bytes']}\t{printable(r['path'])}" for r in files]
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


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    path = await ctx.resolve(args["path"], lambda found: require_directory(found, display(found)))
    shown = display(path)
    show: str = args["show"]
    request = Request(
        top_files=FULL_FILES if show != "directories" else 0,
        top_directories=FULL_DIRECTORIES if show != "files" else 0,
        max_depth=args["max_depth"],
        by_disk=args["sort_by"] == "disk",
        min_size=args["min_size"],
        timeout_s=min(float(args["timeout_s"]), MAX_TIMEOUT_S),
    )
    options = walk_options(args)
    skipped = SkipCounter()

    def describe(meter: Meter, elapsed: float) -> str:
        return f"{plural(int(meter.done), 'entry')} scanned, {human_bytes(meter.extra.get('bytes', 0))} seen"

    def scan(meter: Meter) -> Usage:
        meter.total = _inodes_in_use(path) if options.one_file_system else None
        return scan_usage(os.fsencode(path), options, skipped, request, meter)

    try:
        usage = await ctx.run_in_worker(scan, describe=describe)
    except PermissionError:
        raise ToolError(f"Permission denied: cannot read the directory {shown}{denied_by(path)}") from None
    except OSError as exc:
        raise ToolError(f"Cannot scan {shown}: {exc.strerror or exc}") from None
    text, structured, full = render(shown, usage, skipped.as_dict(), args, skipped.named)
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
        "sizes, never contents."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=handle,
)
