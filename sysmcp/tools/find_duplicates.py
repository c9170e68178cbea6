"""find_duplicates: files with identical content under a directory, largest reclaimable space first.

Three sieves, each cheaper than the next is expensive (the fdupes/rmlint recipe): files are
grouped by size (no reads at all), then by a hash of their first and last 4 KiB (two small reads),
and only files still tied are hashed in full. Most files never share a size, and most that do
differ in their head or tail, so few files are ever read to the end. Names of one inode (hard
links) are one file, not duplicates. Read-only: nothing is ever deleted or changed.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sysmcp import platform
from sysmcp.fs.checksums import BLAKE3, BLAKE3_THREADED, CHUNK, hash_fd, hash_once
from sysmcp.fs.fanout import MAX_TASKS, FanOut, Progress, available_processes
from sysmcp.fs.paths import display, printable
from sysmcp.fs.safeopen import open_path
from sysmcp.fs.units import human_bytes, plural
from sysmcp.fs.walk import Budget, Listing, Scanner, ScanStopped, SkipCounter, WalkOptions, collect_within
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ToolError
from sysmcp.tools.arguments import size_argument
from sysmcp.tools.merging import summary_merge
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput
from sysmcp.tools.walking import denied_by, require_directory, skipped_phrase, walk_options, walk_properties

BLOCK = 4096  # head and tail sample size
SMALL = 64 << 10  # files up to this size are hashed whole at once: one read beats a second open
THREADED_FROM = 4 << 20  # files at least this big are hashed by blake3's threads, on every core
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
MAX_FILES = 2_000_000  # size index bound: past it the walk stops and the result says so
PATHS_INLINE = 5  # paths shown per group in the text and structured content
FULL_TEXT_CAP = 8 << 20  # the full group list resource is cut (and says so) beyond this
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 600.0
PARALLEL_FROM = 2000  # candidates from which the comparison is shared out between processes

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "minLength": 1,
            "description": "Absolute path of the directory to search, e.g. '/home'.",
        },
        "min_size": size_argument(
            "Only consider files at least this big (empty files are always ignored), e.g. '1M' to look only "
            "at files of 1 MiB and more.",
            minimum=1,
            default=1,
        ),
        "top_n": {
            "type": "integer",
            "minimum": 1,
            "maximum": 50,
            "default": 10,
            "description": "How many duplicate groups to list, largest reclaimable space first (1 to 50).",
        },
        "timeout_s": {
            "type": "number",
            "minimum": 0.001,
            "maximum": MAX_TIMEOUT_S,
            "default": DEFAULT_TIMEOUT_S,
            "description": "Time budget in seconds (at most 600). Listing files may use half of it; when the "
            "budget runs out the result, marked partial, lists the duplicates confirmed so far (largest "
            "files are checked first).",
        },
        **walk_properties("path"),
    },
    "required": ["path"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "complete": {"type": "boolean", "description": "False when the search stopped early."},
        "stopped_reason": {"type": ["string", "null"]},
        "elapsed_s": {"type": "number"},
        "files_scanned": {"type": "integer", "description": "Regular files at least min_size."},
        "files_read": {"type": "integer", "description": "Files opened for a head/tail or full hash."},
        "bytes_read": {"type": "integer"},
        "groups_found": {"type": "integer"},
        "duplicate_files": {"type": "integer", "description": "Extra copies: files minus groups."},
        "reclaimable_bytes": {
            "type": "integer",
            "description": "Disk space freed by keeping one copy of each group.",
        },
        "hard_links_ignored": {
            "type": "integer",
            "description": "Further names of a file already counted (same inode), not duplicates.",
        },
        "groups": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "size_bytes": {"type": "integer"},
                    "copies": {"type": "integer"},
                    "reclaimable_bytes": {"type": "integer"},
                    "blake3": {"type": "string", "description": "BLAKE3 (256 bits) of the content."},
                    "paths": {"type": "array", "items": {"type": "string"}},
                    "paths_not_shown": {"type": "integer"},
                },
                "required": [
                    "size_bytes",
                    "copies",
                    "reclaimable_bytes",
                    "blake3",
                    "paths",
                    "paths_not_shown",
                ],
            },
        },
        "groups_not_shown": {"type": "integer"},
        "skipped": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
    "required": [
        "path",
        "complete",
        "stopped_reason",
        "elapsed_s",
        "files_scanned",
        "files_read",
        "bytes_read",
        "groups_found",
        "duplicate_files",
        "reclaimable_bytes",
        "hard_links_ignored",
        "groups",
        "groups_not_shown",
        "skipped",
    ],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class Candidate:
    """One inode that shares its size with another: its first path and identity."""

    relative: str  # as the scanner names it (undecodable bytes as surrogate escapes)
    dev: int
    ino: int
    disk: int


@dataclass(frozen=True, slots=True)
class Group:
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
    groups: list[Group] = field(default_factory=list)
    files_scanned: int = 0
    files_read: int = 0
    bytes_read: int = 0
    hard_links: int = 0
    stopped: str | None = None
    elapsed: float = 0.0


class SizeIndex:
    """Every listed file in compact arrays, grouped by size: no Python object per file.

    A million candidates as objects (name string, three ints, the object) take about 250 MB, and
    forked comparing processes copy the pages their reference counts touch. Here a file costs its
    name's bytes plus a few machine words, and the arrays are never written after the fork.
    Most sizes are unique: such a size maps to its one file's number, not to an array.
    """

    def __init__(self) -> None:
        self.names = bytearray()  # every name, relative to the root, back to back
        self.ends = array("Q")  # where each name ends in ``names``
        self.dev = array("Q")
        self.ino = array("Q")
        self.disk = array("Q")  # bytes allocated
        self.by_size: dict[int, int | array[int]] = {}
        self.shared: dict[int, array[int]] = {}  # filled by ``keep_shared``

    def add(self, relative: bytes, st: os.stat_result) -> None:
        number = len(self.ends)
        self.names += relative
        self.ends.append(len(self.names))
        self.dev.append(st.st_dev)
        self.ino.append(st.st_ino)
        self.disk.append(st.st_blocks * 512)
        size = st.st_size
        present = self.by_size.get(size)
        if present is None:
            self.by_size[size] = number
        elif isinstance(present, int):
            self.by_size[size] = array("I", (present, number))
        else:
            present.append(number)

    def keep_shared(self) -> None:
        """Keep only the sizes held by at least two distinct inodes, with their files' numbers."""
        self.shared = {
            size: numbers for size, numbers in self.by_size.items() if not isinstance(numbers, int)
        }
        self.by_size = {}

    def candidate(self, number: int) -> Candidate:
        start = self.ends[number - 1] if number else 0
        relative = os.fsdecode(bytes(self.names[start : self.ends[number]]))
        return Candidate(relative, self.dev[number], self.ino[number], self.disk[number])

    def candidates(self, numbers: Sequence[int]) -> list[Candidate]:
        return [self.candidate(number) for number in numbers]


def index_by_size(scanner: Scanner, search: Search, limit: int = MAX_FILES) -> SizeIndex:
    """Every listed file by size, in compact arrays, keeping the sizes of two inodes or more (``shared``).

    The scanner's floor leaves files under ``min_size`` out of its listings, and its hard-link
    bookkeeping hands further names of a counted inode out separately (``links``).
    """
    index = SizeIndex()
    add = index.add
    events = scanner.events()
    try:
        for event in events:
            if type(event) is not Listing:
                continue
            search.hard_links += len(event.links)
            prefix = os.fsencode(event.relative) + b"/" if event.relative else b""
            for name, st in event.files:
                add(prefix + os.fsencode(name), st)
            search.files_scanned += len(event.files)
            if search.files_scanned >= limit:
                search.stopped = f"more than {limit:,} files: the search stopped listing there"
                break
    finally:
        events.close()
    index.keep_shared()
    return index


class Reader:
    """Opens and hashes candidates, checking each is still the inode the walk saw."""

    def __init__(self, root: bytes, skipped: SkipCounter, search: Search, checkpoint: Callable[[], None]):
        self.root = root
        self.skipped = skipped
        self.search = search
        self.checkpoint = checkpoint
        self.buffer = bytearray(CHUNK)
        # Reopening an O_PATH descriptor through /proc/self/fd needs both (Linux); elsewhere each
        # candidate is opened by name from the root, with the same identity and type checks.
        self.proc_fd = platform.has_o_path() and platform.has_proc_fd()

    def _open(self, candidate: Candidate, size: int) -> tuple[int, os.stat_result] | None:
        """Open for reading only the very inode the walk saw, and only if it is still a regular file.

        The name is first opened with ``O_PATH`` (which reads nothing and has no device side effects),
        its identity and type checked on that descriptor, and only then reopened for reading through
        ``/proc/self/fd``. Whatever was renamed or swapped since the walk, what gets read is the file
        the walk found inside the tree, or nothing. Returns the descriptor and its ``fstat``.
        """
        self.checkpoint()  # one size can have a hundred thousand candidates: stop between any two
        path = os.path.join(self.root, os.fsencode(candidate.relative))
        try:
            if self.proc_fd:
                handle = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    st = os.fstat(handle)
                    if (st.st_dev, st.st_ino) != (candidate.dev, candidate.ino) or not stat.S_ISREG(
                        st.st_mode
                    ):
                        self.skipped.add("changed")
                        return None
                    fd = os.open(f"{platform.PROC_SELF_FD}/{handle}", _READ)
                finally:
                    os.close(handle)
            else:
                fd = open_path(os.fsdecode(path), regular=True)
        except FileNotFoundError:
            self.skipped.add("vanished")
            return None
        except OSError as exc:
            self.skipped.add("unreadable" if exc.errno in (errno.EACCES, errno.EPERM) else "vanished")
            return None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (candidate.dev, candidate.ino) or st.st_size != size:
            os.close(fd)
            self.skipped.add("changed")
            return None
        self.search.files_read += 1
        return fd, st

    def sample(self, candidate: Candidate, size: int) -> str | None:
        """Hash of the first and last 4 KiB (the whole content for files up to SMALL)."""
        if size <= SMALL:
            return self.full(candidate, size)
        opened = self._open(candidate, size)
        if opened is None:
            return None
        fd = opened[0]
        try:
            digest = BLAKE3.new()
            head = os.pread(fd, BLOCK, 0)
            tail = os.pread(fd, BLOCK, size - BLOCK)
            digest.update(head)
            digest.update(tail)
            self.search.bytes_read += len(head) + len(tail)
            return digest.hexdigest()
        except OSError:
            self.skipped.add("unreadable")
            return None
        finally:
            os.close(fd)

    def full(self, candidate: Candidate, size: int) -> str | None:
        """BLAKE3 of the whole content, streamed by the shared engine with a checkpoint per chunk; large files
        are hashed on every core (blake3's own threads), small ones with one read."""
        opened = self._open(candidate, size)
        if opened is None:
            return None
        fd, st = opened
        try:
            if size < len(self.buffer):
                digest = hash_once(fd, (BLAKE3,), self.buffer, st)
            else:
                algorithm = BLAKE3_THREADED if size >= THREADED_FROM else BLAKE3
                digest = hash_fd(fd, (algorithm,), self.buffer, lambda _: self.checkpoint(), opened=st)
        except OSError:
            self.skipped.add("unreadable")
            return None
        finally:
            os.close(fd)
        self.search.bytes_read += digest.size
        if digest.changed:
            self.skipped.add("changed")
            return None
        return digest.hexdigests[BLAKE3.name]


def _split(
    candidates: list[Candidate], size: int, key: Callable[[Candidate, int], str | None]
) -> list[tuple[str, list[Candidate]]]:
    """Candidates grouped by key, keeping only groups of two or more (unreadable ones drop out)."""
    groups: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        value = key(candidate, size)
        if value is not None:
            groups.setdefault(value, []).append(candidate)
    return [(value, group) for value, group in groups.items() if len(group) > 1]


def compare_size(candidates: list[Candidate], size: int, reader: Reader) -> list[tuple[str, list[Candidate]]]:
    """The groups of identical content among candidates of one size: head and tail, then the whole."""
    groups = []
    for sample, tied in _split(candidates, size, reader.sample):
        if size <= SMALL:  # the sample was the full hash
            groups.append((sample, tied))
        else:
            groups += _split(tied, size, reader.full)
    return groups


def compare_in_processes(
    sizes: list[int],
    index: SizeIndex,
    reader: Reader,
    budget: Budget,
    search: Search,
    processes: int,
    meter: Meter | None,
    walked: int,
) -> None:
    """Compare the sizes shared out between forked processes (``fanout.FanOut``, as ``dir_usage`` walks).

    The sizes, largest first, are cut into contiguous slices of about equal candidate counts, claimed
    one by one, so a partial result still holds the largest files. Each process sends back its
    groups as candidate positions, its read counts and its skips; a dead one only loses its groups.
    """
    by_size = index.shared
    total = sum(len(by_size[size]) for size in sizes)
    per_task = max(1, -(-total // MAX_TASKS))
    slices: list[tuple[int, int]] = []
    start = taken = 0
    for at, size in enumerate(sizes):
        taken += len(by_size[size])
        if taken >= per_task or at == len(sizes) - 1:
            slices.append((start, at + 1))
            start, taken = at + 1, 0
    fan: FanOut | None = None

    def report_and_check() -> None:
        if meter is not None:
            others = fan.progress.others()[0] if fan is not None else 0
            meter.done = walked + search.files_read + others
        if budget.check_cancelled is not None:
            budget.check_cancelled()

    def work(claim: Callable[[], int | None], progress: Progress, in_child: bool) -> dict[str, Any]:
        if in_child:
            own_search, own_skipped = Search(), SkipCounter()
            check = Budget(
                budget.seconds,
                lambda: progress.set(own_search.files_read, own_search.bytes_read),
                clock=budget.clock,
            )
            own = Reader(reader.root, own_skipped, own_search, check)
        else:
            own_search, own_skipped = search, reader.skipped
            check = Budget(budget.seconds, report_and_check, clock=budget.clock)
            own = Reader(reader.root, own_skipped, own_search, check)
        check.deadline, check.reason = budget.deadline, budget.reason
        groups: list[tuple[int, str, list[int]]] = []
        stopped: str | None = None
        try:
            while (task := claim()) is not None:
                first, last = slices[task]
                for size in sizes[first:last]:
                    check()
                    candidates = index.candidates(by_size[size])
                    position = {id(c): i for i, c in enumerate(candidates)}
                    for digest, same in compare_size(candidates, size, own):
                        groups.append((size, digest, [position[id(c)] for c in same]))
        except ScanStopped as stop:
            stopped = stop.reason
        result: dict[str, Any] = {"groups": groups, "stopped": stopped}
        if in_child:
            result.update(
                read=own_search.files_read, bytes=own_search.bytes_read, skipped=own_skipped.as_dict()
            )
        return result

    try:
        fan = FanOut(len(slices), processes, work)
        fan.start()
        parts: list[dict[str, Any] | None] = [fan.run_here()]
        parts += collect_within(fan, budget, report_and_check)
    finally:
        if fan is not None:
            fan.close()
    for part in parts:
        if part is None:
            search.stopped = search.stopped or "a comparing process ended unexpectedly"
            continue
        for size, digest, positions in part["groups"]:
            numbers = by_size[size]
            search.groups.append(Group(size, digest, tuple(index.candidate(numbers[i]) for i in positions)))
        search.files_read += part.get("read", 0)
        search.bytes_read += part.get("bytes", 0)
        for reason, n in part.get("skipped", {}).items():
            reader.skipped.add(reason, n)
        search.stopped = search.stopped or part["stopped"]


def find_duplicates(
    root: bytes,
    options: WalkOptions,
    skipped: SkipCounter,
    min_size: int,
    timeout_s: float,
    meter: Meter | None = None,
    clock: Callable[[], float] = time.monotonic,
    processes: int | None = None,
) -> Search:
    """Walk (at most half the budget), then confirm duplicates from the largest size down."""
    started = clock()
    search = Search()
    check = meter.checkpoint if meter is not None else None
    listing = Budget(timeout_s / 2, check, clock=clock)
    listing.reason = f"listing files took half of the {timeout_s:g} s time budget"
    budget = Budget(timeout_s, check, clock=clock)
    walked = 0
    listing_stopped = False

    def walk_checkpoint() -> None:
        nonlocal listing_stopped
        if meter is not None:
            meter.done = search.files_scanned
        try:
            listing()
        except ScanStopped:
            listing_stopped = True  # the walk ends quietly; the comparison uses what it found
            raise

    def hash_checkpoint() -> None:
        if meter is not None:
            meter.done = walked + search.files_read
        budget()

    scanner = Scanner(root, options, skipped, walk_checkpoint)
    scanner.file_floor, scanner.block_floor = max(1, min_size), 1 << 62
    scanner.empty_listings = False
    scanner.finished_depth = -1
    index = index_by_size(scanner, search)
    by_size = index.shared
    if listing_stopped and search.stopped is None:
        search.stopped = listing.reason
    walked = search.files_scanned
    reader = Reader(root, skipped, search, hash_checkpoint)
    if meter is not None:
        meter.total = walked + sum(len(group) for group in by_size.values())
    sizes = sorted(by_size, reverse=True)
    candidates = sum(len(group) for group in by_size.values())
    count = available_processes() if candidates >= PARALLEL_FROM and processes is None else processes or 1
    try:
        if count > 1 and len(sizes) > 1:
            compare_in_processes(sizes, index, reader, budget, search, count, meter, walked)
        else:
            for size in sizes:
                hash_checkpoint()
                for digest, same in compare_size(index.candidates(by_size[size]), size, reader):
                    search.groups.append(Group(size, digest, tuple(same)))
    except ScanStopped as stop:
        search.stopped = search.stopped or stop.reason
    if meter is not None:
        meter.done = walked + search.files_read
        meter.total = max(meter.done, meter.total or 0)
    search.groups.sort(key=lambda g: (-g.reclaimable, -g.size, g.copies[0].relative))
    search.elapsed = clock() - started
    return search


def render(
    shown: str, search: Search, skipped: dict[str, int], top_n: int, named: Sequence[str] = ()
) -> tuple[str, dict[str, Any], str | None]:
    """Text for the model, structured content, and the full group list when anything was cut."""
    base = shown.rstrip("/") + "/"

    def path(c: Candidate) -> str:
        return base + display(os.fsencode(c.relative))

    reclaimable = sum(g.reclaimable for g in search.groups)
    duplicates = sum(len(g.copies) - 1 for g in search.groups)
    shown_groups = search.groups[:top_n]
    lines = []
    if search.stopped:
        lines.append(
            f"PARTIAL RESULT: the search stopped early ({search.stopped}); duplicates not yet confirmed are "
            "missing (the largest files are checked first)."
        )
    lines.append(
        f"{shown}: {plural(len(search.groups), 'group')} of identical files, {plural(duplicates, 'extra copy')}, "
        f"{human_bytes(reclaimable)} reclaimable; {plural(search.files_scanned, 'file')} considered, "
        f"{search.files_read:,} opened, {human_bytes(search.bytes_read)} read [{search.elapsed:.2f} s]"
    )
    groups = []
    for number, group in enumerate(shown_groups, 1):
        paths = [path(c) for c in group.copies]
        groups.append(
            {
                "size_bytes": group.size,
                "copies": len(group.copies),
                "reclaimable_bytes": group.reclaimable,
                "blake3": group.digest,
                "paths": paths[:PATHS_INLINE],
                "paths_not_shown": max(0, len(paths) - PATHS_INLINE),
            }
        )
        lines.append(
            f"{number}. {len(paths)} copies of {human_bytes(group.size)} — {human_bytes(group.reclaimable)} "
            "reclaimable:"
        )
        lines += [f"     {printable(p)}" for p in paths[:PATHS_INLINE]]
        if len(paths) > PATHS_INLINE:
            lines.append(f"     … and {plural(len(paths) - PATHS_INLINE, 'more copy')} not shown")
    not_shown = len(search.groups) - len(shown_groups)
    if not_shown:
        lines.append(f"… and {plural(not_shown, 'more group')} not shown")
    if search.hard_links:
        lines.append(
            f"{search.hard_links:,} hard-linked names of files already counted were not treated as copies"
        )
    if skipped:
        lines.append("Skipped: " + skipped_phrase(skipped, named, shown))
    lines.append("Nothing was deleted: sysmcp is read-only.")
    structured = {
        "path": shown,
        "complete": search.stopped is None,
        "stopped_reason": search.stopped,
        "elapsed_s": round(search.elapsed, 3),
        "files_scanned": search.files_scanned,
        "files_read": search.files_read,
        "bytes_read": search.bytes_read,
        "groups_found": len(search.groups),
        "duplicate_files": duplicates,
        "reclaimable_bytes": reclaimable,
        "hard_links_ignored": search.hard_links,
        "groups": groups,
        "groups_not_shown": not_shown,
        "skipped": skipped,
    }
    full = None
    if not_shown or any(g["paths_not_shown"] for g in groups):
        out = [
            f"# find_duplicates {shown}: {len(search.groups):,} groups, {human_bytes(reclaimable)} reclaimable"
        ]
        if search.stopped:
            out.append(f"# PARTIAL: {search.stopped}")
        size = 0
        for group in search.groups:
            block = [
                f"# {len(group.copies)} copies x {group.size} bytes, {group.reclaimable} reclaimable, "
                f"blake3 {group.digest}"
            ]
            block += [printable(path(c)) for c in group.copies]
            size += sum(len(line) + 1 for line in block)
            if size > FULL_TEXT_CAP:
                out.append("# … list cut here: the result store keeps at most 8 MiB per result")
                break
            out += block
        full = "\n".join(out) + "\n"
    return "\n".join(lines), structured, full


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    path = await ctx.resolve(args["path"], lambda found: require_directory(found, display(found)))
    shown = display(path)
    options = walk_options(args)
    skipped = SkipCounter()
    timeout_s = min(float(args["timeout_s"]), MAX_TIMEOUT_S)

    def describe(meter: Meter, elapsed: float) -> str:
        if meter.total is None:
            return f"listing: {plural(int(meter.done), 'file')}"
        return f"comparing: {int(meter.done):,} of {int(meter.total):,} steps"

    try:
        search = await ctx.run_in_worker(
            lambda meter: find_duplicates(
                os.fsencode(path), options, skipped, args["min_size"], timeout_s, meter
            ),
            describe=describe,
        )
    except PermissionError:
        raise ToolError(f"Permission denied: cannot read the directory {shown}{denied_by(path)}") from None
    except OSError as exc:
        raise ToolError(f"Cannot search {shown}: {exc.strerror or exc}") from None
    text, structured, full = render(shown, search, skipped.as_dict(), args["top_n"], skipped.named)
    links: tuple[ResourceLink, ...] = ()
    if full is not None:
        name = f"duplicates-{os.path.basename(shown.rstrip('/')) or 'root'}.txt"
        link = ctx.keep(name, full, description=f"All duplicate groups under {shown}")
        if isinstance(link, str):
            text += f"\nAll groups and paths: not kept, {link}"
        else:
            links = (link,)
            text += f"\nAll groups and paths: {link.uri}"
    return ToolOutput(text, structured, links=links)


TOOL = Tool(
    name="find_duplicates",
    title="Find duplicate files",
    description=(
        "Groups of files with identical content under a directory, largest reclaimable space first, with "
        "the bytes that keeping one copy of each would free. Compares sizes, then the first and last 4 KiB, "
        "then full BLAKE3 hashes, so most files are never read in full; hard links to one inode are not "
        "duplicates; empty files are ignored. Same walk rules as dir_usage (no symlinks followed, one "
        "filesystem by default, skipped entries counted), a time budget with partial results marked, "
        "progress and cancellation. The full list comes as a sysmcp:// resource link when it is long. "
        "Read-only: it never deletes anything."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=handle,
    merge=summary_merge(
        "Duplicates are found within each host: files are not compared across hosts."
    ),  # per-host summaries
)
