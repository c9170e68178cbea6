"""find_duplicates: files with identical content under a directory, largest reclaimable space first.

Three sieves, each cheaper than the next is expensive (the fdupes/rmlint recipe): files are
grouped by size (no reads at all), then by a hash of their first and last 4 KiB (two small reads),
and only files still tied are hashed in full. Most files never share a size, and most that do
differ in their head or tail, so few files are ever read to the end. Names of one inode (hard
links) are one file, not duplicates. Read-only: nothing is ever deleted or changed.

Bounded memory on a million files: the walk is shared with forked workers (forked a few milliseconds
in, before anything big exists), every process writes one compact record per file to sorted runs on
disk (``sizeruns``), the runs are merged one size at a time into a file of candidates, and the same
workers then compare its blocks. No Python object outlives its file's directory listing or its block.
"""

from __future__ import annotations

import contextlib
import errno
import marshal
import math
import os
import select
import stat
import struct
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from blake3 import blake3 as _blake3

from sysmcp.fs import fanout
from sysmcp.fs.checksums import BLAKE3, BLAKE3_THREADED, CHUNK, hash_fd, hash_once
from sysmcp.fs.fanout import MAX_TASKS, FanOut, Progress, available_processes
from sysmcp.fs.paths import display, printable
from sysmcp.fs.sizeruns import RUN_BYTES, SizeRuns, merge_by_size, parse, read_records
from sysmcp.fs.units import human_bytes, plural
from sysmcp.fs.walk import (
    GIVE_UP_AFTER_S,
    Budget,
    Listing,
    Scanner,
    ScanStopped,
    SkipCounter,
    Subtree,
    WalkOptions,
    collect_within,
)
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ToolError
from sysmcp.tools.arguments import size_argument
from sysmcp.tools.merging import summary_merge
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput
from sysmcp.tools.walking import denied_by, require_directory, skipped_phrase, walk_options, walk_properties

BLOCK = 4096  # head and tail sample size
SMALL = 64 << 10  # files up to this size are hashed whole at once: one read beats a second open
THREADED_FROM = 4 << 20  # files at least this big are hashed by blake3's threads, on every core
# Candidates are opened relative to their directory: never following a symlink, never blocking (a FIFO
# swapped in), never becoming a controlling terminal.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_FILES = 2_000_000  # listing bound (the runs on disk): past it the walk stops and the result says so
PATHS_INLINE = 5  # paths shown per group in the text and structured content
FULL_TEXT_CAP = 8 << 20  # the full group list resource is cut (and says so) beyond this
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 600.0
PARALLEL_FROM = 2000  # candidates from which the comparison is shared out between processes
PARALLEL_BYTES = 256 << 20  # or candidate bytes: a few big files are worth a second reader
BLOCKS = 200  # the candidates are cut into about this many blocks of whole sizes, claimed one by one
SPLIT_AFTER_S = 0.01  # a walk still running after this long shares its waiting subtrees out
SUBTREES_PER_PROCESS = 32

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


# A candidate while it is compared: (name relative to the root, device, inode, bytes allocated).
Found = tuple[bytes, int, int, int]


class Reader:
    """Opens and hashes candidates, checking each is still the inode the walk saw.

    Every file is opened relative to its directory's descriptor, and every directory on the way from
    the root with ``O_DIRECTORY | O_NOFOLLOW``, so no symlink swapped in since the walk is followed and
    the kernel resolves one name per call. Candidates come in name order, so the files of one
    directory share one directory descriptor.
    """

    def __init__(self, root: bytes, skipped: SkipCounter, search: Search, checkpoint: Callable[[], None]):
        self.root = root
        self.skipped = skipped
        self.search = search
        self.checkpoint = checkpoint
        self.buffer = bytearray(CHUNK)
        self.view = memoryview(self.buffer)
        self._root_fd: int | None = None
        self._dir_name: bytes | None = None
        self._dir: int | OSError | None = None  # the open directory, or why it could not be opened

    def close(self) -> None:
        self._forget()
        if self._root_fd is not None:
            fd, self._root_fd = self._root_fd, None
            os.close(fd)

    def _forget(self) -> None:
        fd, self._dir, self._dir_name = self._dir, None, None
        if isinstance(fd, int) and fd != self._root_fd:
            os.close(fd)

    def _directory(self, parent: bytes) -> int:
        """The descriptor of the directory ``parent`` (relative to the root), reached name by name."""
        if parent == self._dir_name:
            if isinstance(self._dir, OSError):
                raise self._dir
            assert self._dir is not None
            return self._dir
        self._forget()
        self._dir_name = parent
        fd = self._root_fd
        try:
            if fd is None:
                fd = self._root_fd = os.open(self.root, _DIRECTORY)
            if parent:
                for name in parent.split(b"/"):
                    child = os.open(name, _DIRECTORY, dir_fd=fd)
                    if fd != self._root_fd:
                        os.close(fd)
                    fd = child
        except OSError as exc:
            if fd is not None and fd != self._root_fd:
                os.close(fd)
            self._dir = exc
            raise
        self._dir = fd
        return fd

    def _open(self, candidate: Found, size: int) -> tuple[int, os.stat_result] | None:
        """Open for reading only the very inode the walk saw, and only if it is still a regular file.

        The walk's ``lstat`` is the look (as ``safeopen.open_regular_at`` takes it with ``expect``, and
        hash_tree does): the name is opened relative to its directory, never following a symlink
        (ELOOP: something was swapped in), never blocking (a FIFO swapped in since) and never
        becoming a controlling terminal; the descriptor is then checked to be that very inode, a
        regular file of the size the walk saw, before anything is read. Returns it and its ``fstat``.
        """
        self.checkpoint()  # one size can have a hundred thousand candidates: stop between any two
        relative, dev, ino, _ = candidate
        parent, _, name = relative.rpartition(b"/")
        try:
            fd = os.open(name, _READ, dir_fd=self._directory(parent))
        except FileNotFoundError:
            self.skipped.add("vanished")
            return None
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                self.skipped.add("unreadable")
            elif exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR, errno.ENXIO):
                self.skipped.add("changed")  # a symlink, file or socket now stands on the way: not followed
            else:
                self.skipped.add("vanished")
            return None
        st = os.fstat(fd)
        if st.st_ino != ino or st.st_dev != dev or not stat.S_ISREG(st.st_mode) or st.st_size != size:
            os.close(fd)
            self.skipped.add("changed")
            return None
        self.search.files_read += 1
        return fd, st

    def small(self, candidate: Found, size: int) -> str | None:
        """BLAKE3 of a file smaller than the buffer: open, fstat, one read, fstat, close.

        The same checks as ``hash_once`` without its general machinery (the per-file cost on a million
        small files): the read must return the size seen at open, and size and mtime must not have
        moved after it, or the file counts as changed.
        """
        opened = self._open(candidate, size)
        if opened is None:
            return None
        fd, st = opened
        try:
            count = os.readv(fd, [self.buffer])
            after = os.fstat(fd)
        except OSError:
            self.skipped.add("unreadable")
            return None
        finally:
            os.close(fd)
        self.search.bytes_read += count
        if count != size or after.st_size != size or after.st_mtime_ns != st.st_mtime_ns:
            self.skipped.add("changed")
            return None
        return _blake3(self.view[:count]).hexdigest()

    def sample(self, candidate: Found, size: int) -> str | None:
        """Hash of the first and last 4 KiB (the whole content for files up to SMALL)."""
        if size <= SMALL:
            return self.small(candidate, size) if size < len(self.buffer) else self.full(candidate, size)
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

    def full(self, candidate: Found, size: int) -> str | None:
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
    candidates: list[tuple[int, Found]], key: Callable[[Found, int], str | None]
) -> list[tuple[int, str, list[Found]]]:
    """Candidates (size, candidate) grouped by size and key, keeping groups of two or more."""
    groups: dict[tuple[int, str], list[Found]] = {}
    for size, candidate in candidates:
        value = key(candidate, size)
        if value is not None:
            groups.setdefault((size, value), []).append(candidate)
    return [(size, value, group) for (size, value), group in groups.items() if len(group) > 1]


def compare_block(candidates: list[tuple[int, Found]], reader: Reader) -> list[tuple[int, str, list[Found]]]:
    """The groups of identical content among candidates of a few sizes: head and tail, then the whole.

    Candidates are read in name order (the files of a directory one after another), whatever their size.
    """
    candidates.sort(key=lambda item: item[1][0])
    groups = []
    tied: list[tuple[int, Found]] = []
    for size, sample, same in _split(candidates, reader.sample):
        if size <= SMALL:  # the sample was the full hash
            groups.append((size, sample, same))
        else:
            tied += [(size, candidate) for candidate in same]
    if tied:
        tied.sort(key=lambda item: item[1][0])
        groups += _split(tied, reader.full)
    return groups


def block_candidates(fd: int, offset: int, length: int) -> list[tuple[int, Found]]:
    """The candidates stored in one block of the candidates file, each with its size."""
    out = []
    for record in read_records(fd, offset, length):
        size, dev, ino, disk, name = parse(record)
        out.append((size, (name, dev, ino, disk)))
    return out


@dataclass
class Candidates:
    """Sizes at least two distinct inodes share, their records back to back in one temporary file,
    largest size first, cut into blocks of whole sizes for the comparison to share out."""

    spill: IO[bytes]
    blocks: list[tuple[int, int]] = field(default_factory=list)  # (offset, length)
    files: int = 0
    bytes: int = 0  # the candidates' total size


def gather_candidates(
    runs: list[tuple[int, int, int]], out: Candidates, search: Search, checkpoint: Callable[[], None]
) -> None:
    """Merge the runs by size and keep the shared sizes (``sizeruns.merge_by_size``), in bounded memory."""
    per_block = max(1, -(-search.files_scanned // BLOCKS))
    links = [0]
    pending = bytearray()
    written = block_start = block_files = 0
    spill = out.spill
    spill.seek(0)
    spill.truncate()

    def write() -> None:
        nonlocal written
        spill.write(pending)
        written += len(pending)
        pending.clear()

    for size, records in merge_by_size(runs, links, checkpoint):
        for record in records:
            pending += record
        out.files += len(records)
        out.bytes += size * len(records)
        block_files += len(records)
        if block_files >= per_block:
            end = written + len(pending)
            out.blocks.append((block_start, end - block_start))
            block_start, block_files = end, 0
        if len(pending) >= RUN_BYTES:
            write()
    write()
    if written > block_start:
        out.blocks.append((block_start, written - block_start))
    spill.flush()
    search.hard_links += links[0]
    search.files_scanned -= links[0]  # two processes each listed a name of one inode first


_BLOCK = struct.Struct("<QQ")  # a block of candidates handed to the workers: (offset, length)


class Handoff:
    """How forked workers that walked go on to compare, so that no second set of processes is forked.

    Forked processes count the parent's resident pages again, so forking once for the walk and once
    more for the comparison would pay the server's size three times. Instead each worker, its walk
    done, writes what it found after its runs and says where through its own pipe (the parent sees an
    end of file without a message if it died), then waits on a second pipe for the blocks to compare,
    which the parent writes all at once (a few kilobytes) and closes: the end of that pipe is the end
    of the tasks, also if the parent went away.
    """

    def __init__(self, processes: int) -> None:
        self.blocks_r, self.blocks_w = fanout.pipe()
        self.walked = [fanout.pipe() for _ in range(processes)]  # slot 0 (this process) unused

    @property
    def keep(self) -> list[int]:
        return [self.blocks_r, *(write_end for _, write_end in self.walked)]

    def in_child(self, slot: int) -> int:
        """In worker ``slot``: close the other workers' ends; returns this worker's end."""
        for other, (_, write_end) in enumerate(self.walked):
            if other != slot:
                os.close(write_end)
        return self.walked[slot][1]

    def started(self) -> None:
        """In this process, once the workers are forked: only they hold their pipes' write ends."""
        for _, write_end in self.walked:
            fanout.release(write_end)
        self.walked = [(read_end, -1) for read_end, _ in self.walked]

    @staticmethod
    def report(end: int, spill: IO[bytes], part: dict[str, Any]) -> None:
        """In a worker: store its walk's part after its runs and tell the parent where."""
        data = marshal.dumps(part)
        offset = spill.seek(0, os.SEEK_END)
        spill.write(data)
        spill.flush()
        os.write(end, _BLOCK.pack(offset, len(data)))
        os.close(end)

    def wait(
        self, workers: int, spills: Sequence[IO[bytes]], give_up_at: float, checkpoint: Callable[[], None]
    ) -> list[dict[str, Any] | None]:
        """Every worker's walk part (None for one that died or did not answer by ``give_up_at``)."""
        parts: list[dict[str, Any] | None] = [None] * workers
        waiting = {self.walked[slot][0]: slot for slot in range(1, workers + 1)}
        poller = select.poll()
        for fd in waiting:
            poller.register(fd, select.POLLIN)
        while waiting and time.monotonic() < give_up_at:
            checkpoint()
            for fd, _ in poller.poll(10):
                slot = waiting.pop(fd)
                poller.unregister(fd)
                message = os.read(fd, _BLOCK.size)
                if len(message) == _BLOCK.size:
                    offset, length = _BLOCK.unpack(message)
                    with contextlib.suppress(EOFError, ValueError, TypeError):
                        parts[slot - 1] = marshal.loads(os.pread(spills[slot].fileno(), length, offset))
        return parts

    def send(self, blocks: Sequence[tuple[int, int]]) -> None:
        """Hand every block to whoever claims it first (one write: at most BLOCKS + 1 entries)."""
        if blocks:
            os.write(self.blocks_w, b"".join(_BLOCK.pack(*block) for block in blocks))
        fanout.release(self.blocks_w)
        self.blocks_w = -1

    def claim(self) -> tuple[int, int] | None:
        """The next block nobody claimed yet (waits until ``send``); None once none are left."""
        data = os.read(self.blocks_r, _BLOCK.size)
        return _BLOCK.unpack(data) if len(data) == _BLOCK.size else None

    def close(self) -> None:
        ends = [self.blocks_r, self.blocks_w, *(fd for pair in self.walked for fd in pair)]
        fanout.release(*(fd for fd in ends if fd >= 0))
        self.walked = []


class Comparer:
    """The comparison's per-process part: claims blocks, returns the groups found and its counts."""

    def __init__(self, reader: Reader, fd: int) -> None:
        self.reader = reader
        self.fd = fd

    def run(self, claim: Callable[[], tuple[int, int] | None]) -> dict[str, Any]:
        groups: list[tuple[int, str, list[Found]]] = []
        stopped: str | None = None
        try:
            while (block := claim()) is not None:
                self.reader.checkpoint()
                groups += compare_block(block_candidates(self.fd, *block), self.reader)
        except ScanStopped as stop:
            stopped = stop.reason
        return {"groups": groups, "stopped": stopped}


def find_duplicates(
    root: bytes,
    options: WalkOptions,
    skipped: SkipCounter,
    min_size: int,
    timeout_s: float,
    meter: Meter | None = None,
    clock: Callable[[], float] = time.monotonic,
    processes: int | None = None,
    limit: int = MAX_FILES,
    split_after_s: float = SPLIT_AFTER_S,
) -> Search:
    """Walk (at most half the budget), then confirm duplicates from the largest size down.

    The walk runs in this process and, past ``split_after_s``, in forked workers too (forked a few
    milliseconds in, before anything big exists), each writing sorted size runs to its own unlinked
    file (``sizeruns``); the runs are merged by size into the candidates file, and the same workers
    then compare its blocks. A tree listed before the split compares in this process, or in workers
    forked then if there is much to read: either way one set of workers at most.
    """
    started = clock()
    search = Search()
    cancelled = meter.checkpoint if meter is not None else _nothing
    listing = Budget(timeout_s / 2, cancelled, clock=clock)
    listing.reason = f"listing files took half of the {timeout_s:g} s time budget"
    budget = Budget(timeout_s, cancelled, clock=clock)
    count = available_processes() if processes is None else max(1, processes)
    limit_reason = f"more than {limit:,} files: the search stopped listing there"
    spills: list[IO[bytes]] = [tempfile.TemporaryFile(prefix="sysmcp-sizes-") for _ in range(count)]  # noqa: SIM115
    candidates = Candidates(tempfile.TemporaryFile(prefix="sysmcp-candidates-"))  # noqa: SIM115
    handoff = Handoff(count) if count > 1 else None
    fan: FanOut | None = None
    mine = SizeRuns(spills[0])
    walked = 0
    scanner = Scanner(root, options, skipped)
    scanner.file_floor, scanner.block_floor = max(1, min_size), 1 << 62
    scanner.empty_listings = False
    scanner.finished_depth = -1
    subtrees: list[Subtree] = []

    def others() -> int:
        return fan.progress.others()[0] if fan is not None else 0

    def listing_checkpoint() -> None:
        files = mine.files + others()
        if meter is not None:
            meter.done = files
        if files >= limit:
            raise ScanStopped(limit_reason)
        listing()

    def comparing_checkpoint() -> None:
        if meter is not None:
            meter.done = walked + search.files_read + others()
        cancelled()

    def work(claim: Callable[[], int | None], progress: Progress, in_child: bool) -> dict[str, Any]:
        """Walk the subtrees claimed; in a worker, then report the walk and compare blocks."""
        if in_child:
            assert handoff is not None
            end = handoff.in_child(progress.slot)
            blocks_claim = handoff.claim
            runs, counter = SizeRuns(spills[progress.slot]), SkipCounter()
            share = max(1, limit // count)

            def publish() -> None:
                progress.set(runs.files, 0)
                if runs.files >= share:
                    raise ScanStopped(limit_reason)

            check: Callable[[], None] = listing.sharing(publish)
        else:
            runs, counter, check = mine, skipped, listing_checkpoint
        stopped: str | None = None
        done = 0
        while stopped is None and (index := claim()) is not None:
            sub = scanner.spawn(subtrees[index], counter, check, None)
            walk = sub.events()
            try:
                for event in walk:
                    if type(event) is Listing:
                        runs.listing(event)
            finally:
                walk.close()
            stopped = sub.stopped
            done += 1
        if not in_child:
            return {"stopped": stopped, "subtrees": done}
        part = runs.summary()
        part.update(stopped=stopped, subtrees=done, skipped=counter.as_dict(), skipped_named=counter.named)
        progress.set(0, 0)  # from here on: files read
        Handoff.report(end, spills[progress.slot], part)
        own_search, own_skipped = Search(), SkipCounter()
        compare_check = budget.sharing(lambda: progress.set(own_search.files_read, own_search.bytes_read))
        reader = Reader(root, own_skipped, own_search, compare_check)
        try:
            result = Comparer(reader, candidates.spill.fileno()).run(blocks_claim)
        finally:
            reader.close()
        result.update(read=own_search.files_read, bytes=own_search.bytes_read, skipped=own_skipped.as_dict())
        return result

    scanner.checkpoint = listing_checkpoint
    split_at = listing.clock() + split_after_s if count > 1 else math.inf
    try:
        events = scanner.events()
        try:
            for event in events:
                if type(event) is Listing:
                    mine.listing(event)
                if listing.clock() >= split_at:
                    split_at = math.inf
                    found, listings = scanner.detach(MAX_TASKS, SUBTREES_PER_PROCESS * count)
                    for read_here in listings:
                        mine.listing(read_here)
                    if found and handoff is not None:
                        subtrees = found
                        fan = FanOut(len(subtrees), count, work, keep=handoff.keep)
                        fan.start()
                        handoff.started()
        finally:
            events.close()
        stopped = scanner.stopped
        parts: list[dict[str, Any] | None] = []
        if fan is not None and handoff is not None:
            here = fan.run_here()
            stopped = stopped or here["stopped"]
            claimed = here["subtrees"]
            give_up_at = time.monotonic() + max(0.0, listing.deadline - listing.clock()) + GIVE_UP_AFTER_S
            parts = handoff.wait(
                fan.children, spills, give_up_at, listing_checkpoint_quiet(listing_checkpoint)
            )
            for part in parts:
                if part is None:
                    stopped = stopped or "a listing process ended unexpectedly"
                    continue
                claimed += part["subtrees"]
                stopped = stopped or part["stopped"]
                skipped.merge(part.get("skipped", {}), part.get("skipped_named", ()))
            if claimed < len(subtrees):
                stopped = stopped or listing.reason
        search.stopped = stopped
        runs: list[tuple[int, int, int]] = []
        for spill, part in zip(spills, [mine.summary(), *parts], strict=False):
            if part is not None:
                search.files_scanned += part["files"]
                search.hard_links += part["links"]
                runs += [(spill.fileno(), offset, length) for offset, length in part["extents"]]
        gather_candidates(runs, candidates, search, cancelled)
        walked = search.files_scanned
        for spill in spills:
            spill.truncate(0)  # the runs are merged: give their disk space back now
        if meter is not None:
            meter.total = walked + candidates.files

        # Called before every file opened: the progress count and the cancellation question (a hop
        # into the event loop, microseconds) are asked every few milliseconds, the deadline every time.
        hash_checkpoint = budget.sharing(comparing_checkpoint)

        reader = Reader(root, skipped, search, hash_checkpoint)
        try:
            if fan is not None and handoff is not None:
                handoff.send(candidates.blocks)
                results: list[dict[str, Any] | None] = [
                    Comparer(reader, candidates.spill.fileno()).run(handoff.claim)
                ]
                results += collect_within(fan, budget, comparing_checkpoint)
            else:
                results = compare_blocks(candidates, reader, budget, count, comparing_checkpoint)
        finally:
            reader.close()
        for result in results:
            if result is None:
                search.stopped = search.stopped or "a comparing process ended unexpectedly"
                continue
            for size, digest, same in result["groups"]:
                same.sort()
                copies = tuple(Candidate(os.fsdecode(name), dev, ino, disk) for name, dev, ino, disk in same)
                search.groups.append(Group(size, digest, copies))
            search.files_read += result.get("read", 0)
            search.bytes_read += result.get("bytes", 0)
            skipped.merge(result.get("skipped", {}), result.get("skipped_named", ()))
            search.stopped = search.stopped or result["stopped"]
    finally:
        if fan is not None:
            fan.close()
        if handoff is not None:
            handoff.close()
        scanner.close()
        for spill in [*spills, candidates.spill]:
            spill.close()
    if meter is not None:
        meter.done = walked + search.files_read
        meter.total = max(meter.done, meter.total or 0)
    search.groups.sort(key=lambda g: (-g.reclaimable, -g.size, g.copies[0].relative))
    search.elapsed = clock() - started
    return search


def listing_checkpoint_quiet(checkpoint: Callable[[], None]) -> Callable[[], None]:
    """``checkpoint`` for waiting on workers: progress and cancellation, but the deadline does not end the wait."""

    def waiting() -> None:
        with contextlib.suppress(ScanStopped):
            checkpoint()

    return waiting


def compare_blocks(
    candidates: Candidates,
    reader: Reader,
    budget: Budget,
    processes: int,
    report_and_check: Callable[[], None],
) -> list[dict[str, Any] | None]:
    """Compare the blocks, largest sizes first, here and, when there is much to read, in forked workers.

    Only for a tree listed before the walk split (so no workers exist yet): what this process holds
    then is the candidates file's block table, nothing per file.
    """
    fd = candidates.spill.fileno()
    blocks = candidates.blocks
    parallel = processes > 1 and len(blocks) > 1
    parallel = parallel and (candidates.files >= PARALLEL_FROM or candidates.bytes >= PARALLEL_BYTES)
    if not parallel:
        queue = iter(blocks)
        return [Comparer(reader, fd).run(lambda: next(queue, None))]
    fan: FanOut | None = None

    def work(claim: Callable[[], int | None], progress: Progress, in_child: bool) -> dict[str, Any]:
        def next_block() -> tuple[int, int] | None:
            task = claim()
            return None if task is None else blocks[task]

        if not in_child:
            return Comparer(reader, fd).run(next_block)
        own_search, own_skipped = Search(), SkipCounter()
        check = budget.sharing(lambda: progress.set(own_search.files_read, own_search.bytes_read))
        own = Reader(reader.root, own_skipped, own_search, check)
        try:
            result = Comparer(own, fd).run(next_block)
        finally:
            own.close()
        result.update(read=own_search.files_read, bytes=own_search.bytes_read, skipped=own_skipped.as_dict())
        return result

    try:
        fan = FanOut(len(blocks), processes, work)
        fan.start()
        parts: list[dict[str, Any] | None] = [fan.run_here()]
        parts += collect_within(fan, budget, report_and_check)
    finally:
        if fan is not None:
            fan.close()
    return parts


def _nothing() -> None:
    return None


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
