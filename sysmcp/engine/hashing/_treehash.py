"""Hashing a whole tree at the speed of the disk: hash_tree's engine (``hash_path``: a ``TreeRequest``
in, a ``TreeHash`` out, failures as ``EngineError``s).

Why not a thread pool: for small files the cost is per file (system calls and the Python around
them), and threads share one interpreter lock. So each process walks its share of the tree and
hashes what it lists, in line; the parent hands the directories still waiting to forked children
after a few milliseconds (``parallel.ParallelWalk``, the driver every walking engine runs on).

Why sorted runs: a million manifest lines as Python objects would be hundreds of megabytes. Each
process writes compact records (``name NUL line``) as sorted runs to an unlinked temporary file
(never visible in any directory, gone when closed); the parent merges them into the manifest, kept whole only while it fits the result store.

Why no ``lstat`` per file: the walk (``regular_by_type``) knows a regular file by its directory
entry's type, and the open checks the rest on the descriptor; a small file then costs five system
calls (``openat``, ``fstat``, ``read``, ``fstat``, ``close``), where ``sha256sum`` makes seven.

Safety: names come from descriptor-relative listings that never follow symlinks; each file is
opened relative to its directory (``O_NOFOLLOW``, ``O_NONBLOCK``: only an entry typed regular file)
and checked on the descriptor to be a regular file and the inode listed; a file that changed while
read is reported, never hashed into a digest of no real version.
"""

from __future__ import annotations

import errno
import heapq
import mmap
import os
import stat
import struct
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, Any, overload

from sysmcp import platform
from sysmcp.engine.calls import Cancel, Progress
from sysmcp.engine.faults import EngineError, NotFound, PermissionRefused, WrongKind
from sysmcp.engine.hashing import _checksums as checksums
from sysmcp.engine.hashing._checksums import (
    CHUNK,
    FS_ENCODING,
    FS_ERRORS,
    OPEN_AT,
    Algorithm,
    Style,
    describe_change,
    explain,
    format_line,
    hash_fd,
)
from sysmcp.engine.opens import (
    S_IFMT,
    FileSwap,
    NotRegularFile,
    closing_fd,
    kind,
    open_parent,
    open_path,
    refused_symlink,
)
from sysmcp.engine.parallel import ParallelWalk, SharedCounters, Sharing, available_processes, children_counts
from sysmcp.engine.walk import (
    RUN_BYTES,
    Budget,
    Listing,
    Node,
    ScanConfig,
    Scanner,
    ScanStopped,
    SkipCounter,
    SortedRuns,
    SubtreeTotals,
    WalkOptions,
    join,
    mount_table,
    read_run,
)

READ_BYTES = 64 << 10  # read-ahead per run while merging, at most
MERGE_BYTES = 1 << 20  # read-ahead of all runs together (a million files: about 100 runs, 10 KiB each)
MIN_READ_BYTES = 4 << 10
MAX_UNREADABLE_KEPT = 1000  # per process; the rest are counted
#: Directories, symbolic links and special files a tree's hash records for an integrity baseline, all
#: processes together (``NodeTally``); the rest are counted. A row each in the store.
MAX_NODES_KEPT = 250_000


#: A kept node's record after its name and a NUL: ``S_IFMT`` type, permission bits, uid, gid, device
#: number, and whether it has a device number (1) and a target (2); the target's bytes follow.
_NODE_HEADER = struct.Struct("<HHIIQB")


def pack_node(node: Node) -> bytes:
    """One node as one ``bytes`` (name, NUL, header, target): about 110 bytes held for a link where
    the walk's tuple of seven objects costs twice that and more, and ``marshal`` copies it whole. The
    records sort by name (no name holds a NUL)."""
    name, kind, mode, uid, gid, rdev, target = node
    flags = (rdev is not None) | (target is not None) << 1
    header = _NODE_HEADER.pack(kind, mode, uid, gid, rdev or 0, flags)
    return b"%s\0%s%s" % (name, header, target or b"")


def unpack_node(record: bytes) -> Node:
    """The node a ``pack_node`` record holds."""
    at = record.index(b"\0")
    kind, mode, uid, gid, rdev, flags = _NODE_HEADER.unpack_from(record, at + 1)
    target = record[at + 1 + _NODE_HEADER.size :] if flags & 2 else None
    return (record[:at], kind, mode, uid, gid, rdev if flags & 1 else None, target)


class PackedNodes(Sequence[Node]):
    """Kept nodes as ``pack_node`` records, each unpacked when read: a baseline reads them once."""

    __slots__ = ("_records",)

    def __init__(self, records: list[bytes]) -> None:
        self._records = records

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> Node: ...
    @overload
    def __getitem__(self, index: slice) -> list[Node]: ...
    def __getitem__(self, index: int | slice) -> Node | list[Node]:
        if isinstance(index, slice):
            return [unpack_node(record) for record in self._records[index]]
        return unpack_node(self._records[index])

    def __iter__(self) -> Iterator[Node]:
        return map(unpack_node, self._records)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PackedNodes) and self._records == other._records

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedNodes({len(self._records)} nodes)"


class NodeTally:
    """How many nodes each process keeps, in memory its forked children share (a slot each), so that
    all of them together keep about ``TreeRequest.max_nodes``, not that many each.

    Why not exact: a process reads the sum, then keeps a listing's nodes; others may do the same at
    that moment, so all together keep at most one listing's nodes per other process past the bound
    (the merge cuts them to it). A lock per listing would cost more than that overshoot.
    """

    def __init__(self, processes: int) -> None:
        self._map = mmap.mmap(-1, 8 * max(1, processes))
        self._slots = memoryview(self._map).cast("q")
        self.slot = 0  # this process's slot: 0 in the parent, the child's progress slot in each child

    def kept(self) -> int:
        return sum(self._slots)

    def add(self, count: int) -> None:
        self._slots[self.slot] += count

    def close(self) -> None:
        self._slots.release()
        self._map.close()


@dataclass
class TreeHash:
    """A hash_tree call's result: the sorted manifest and what is not in it."""

    files: int = 0
    total_bytes: int = 0
    manifest_bytes: int = 0  # size of the whole manifest, kept or not
    manifest: bytearray | None = None  # None when larger than keep_limit
    first: list[bytes] = field(default_factory=list)  # the first ``first_lines`` lines
    unreadable: list[tuple[bytes, str]] = field(default_factory=list)  # sorted, the first ones only
    unreadable_count: int = 0
    non_utf8: int = 0
    stopped: str | None = None
    not_hashed: int = 0
    walk_complete: bool = True
    processes: int = 1
    seconds: float = 0.0
    base: bytes = b"/"
    skipped: dict[str, int] = field(default_factory=dict)  # by reason
    #: The first unreadable directories (up to MAX_UNREADABLE_KEPT: an integrity baseline records them)
    skipped_named: list[str] = field(default_factory=list)
    #: The first directories the filesystem refused (``filesystem_error``: an I/O error, a FUSE daemon's
    #: own EMFILE), up to MAX_UNREADABLE_KEPT: a baseline records them as not read, as unreadable ones
    skipped_refused: list[str] = field(default_factory=list)
    #: With ``TreeRequest.nodes``: the directories, symbolic links and special files below the root, by
    #: name, up to MAX_NODES_KEPT (which ones, past it, depends on the order the processes listed them);
    #: None when not asked for
    nodes: Sequence[Node] | None = None
    nodes_unrecorded: int = 0  # further ones, counted only
    nodes_gathered: int = 0  # the ones every process kept together, before the merge cut them to the bound

    @property
    def unread_total(self) -> int:
        """The files and directories it could not read, named or only counted. Every unreadable directory
        is named until the bound, so below it the names are the count (one refused twice, as when a
        handed-out directory is reopened, is one); so is every directory the filesystem refused."""
        named, refused = len(self.skipped_named), len(self.skipped_refused)
        return (
            self.unreadable_count
            + (self.skipped.get("unreadable", 0) if named >= MAX_UNREADABLE_KEPT else named)
            + (self.skipped.get("filesystem_error", 0) if refused >= MAX_UNREADABLE_KEPT else refused)
        )


#: What every process counts and the merge adds up, named as ``TreeHash`` names them.
_COUNTS = (
    "files",
    "total_bytes",
    "manifest_bytes",
    "non_utf8",
    "unreadable_count",
    "not_hashed",
    "nodes_unrecorded",
)


class Runs(SortedRuns):
    """One process's sorted runs in its own unlinked temporary file, and the counts behind them."""

    def __init__(
        self,
        spill: IO[bytes],
        run_bytes: int = RUN_BYTES,
        max_nodes: int | None = None,
        tally: NodeTally | None = None,
    ) -> None:
        super().__init__(spill, run_bytes)
        self.max_nodes = MAX_NODES_KEPT if max_nodes is None else max_nodes
        self.tally = tally  # what every process keeps (None: this one alone)
        self.files = 0
        self.total_bytes = 0
        self.manifest_bytes = 0
        self.non_utf8 = 0
        self.unreadable: list[tuple[bytes, str]] = []
        self.unreadable_count = 0
        self.not_hashed = 0
        self.nodes: list[bytes] = []  # pack_node records
        self.nodes_unrecorded = 0
        self.in_flight = 0  # bytes read so far of the (large) file being hashed: progress

    def progress(self) -> tuple[int, int]:
        return self.files, self.total_bytes + self.in_flight

    def add(self, name: bytes, line: bytes) -> None:
        record = name + b"\0" + line
        self.records.append(record)
        self.manifest_bytes += len(line)
        if not name.isascii():
            try:
                name.decode("utf-8")
            except UnicodeDecodeError:
                self.non_utf8 += 1
        self.appended(len(record))

    def add_listing(
        self, prefix: str, names: list[str], hexdigests: list[str], algorithm: Algorithm, style: Style
    ) -> None:
        """The lines of one directory's files (``prefix`` is its path and a slash), made together.

        Why together: names that need no escaping (nearly all) make their records in one
        comprehension, encoded from ``str`` at once, and the escaping and UTF-8 questions are asked
        once of the whole directory instead of once per file.
        """
        if not names:
            return
        text = prefix + "".join(names)
        if "\\" in text or "\n" in text or ((algorithm.escapes_cr or style == "bsd") and "\r" in text):
            for name, hexdigest in zip(names, hexdigests, strict=True):
                relative = os.fsencode(prefix + name)
                self.add(relative, format_line(relative, hexdigest, algorithm, style))
            return
        encode, errors = str.encode, FS_ERRORS
        if style == "bsd":
            tag = algorithm.tag
            records = [
                encode(f"{prefix}{n}\0{tag} ({prefix}{n}) = {h}\n", FS_ENCODING, errors)
                for n, h in zip(names, hexdigests, strict=True)
            ]
        else:
            records = [
                encode(f"{prefix}{n}\0{h}  {prefix}{n}\n", FS_ENCODING, errors)
                for n, h in zip(names, hexdigests, strict=True)
            ]
        if text.isascii():
            keys = len(text) + (len(names) - 1) * len(prefix)
        else:
            keys = len(os.fsencode(prefix)) * len(names) + len(os.fsencode("".join(names)))
            self.non_utf8 += sum(1 for name in names if not _is_utf8(prefix + name))
        size = sum(map(len, records))
        self.records += records
        self.manifest_bytes += size - keys - len(names)
        self.appended(size)

    def add_nodes(self, nodes: list[Node]) -> None:
        """A listing's directories, links and special files, while all processes together keep fewer
        than ``max_nodes``; the rest counted."""
        tally = self.tally
        room = self.max_nodes - (len(self.nodes) if tally is None else tally.kept())
        kept = nodes if room >= len(nodes) else nodes[: max(room, 0)]
        self.nodes += map(pack_node, kept)
        self.nodes_unrecorded += len(nodes) - len(kept)
        if tally is not None and kept:
            tally.add(len(kept))

    def fail(self, name: bytes, error: str) -> None:
        self.unreadable_count += 1
        if len(self.unreadable) < MAX_UNREADABLE_KEPT:
            self.unreadable.append((name, error))

    def summary(self) -> dict[str, Any]:
        """What a child sends back (``marshal``-able): the runs are in the file the parent opened."""
        self.flush()
        counts = {key: getattr(self, key) for key in _COUNTS}
        return {"extents": self.extents, "unreadable": self.unreadable, "nodes": self.nodes, **counts}


class ListingHasher:
    """Hashes the files of listings under ``root``, in this process, into ``Runs``, as ``request`` says."""

    def __init__(self, root: bytes, request: TreeRequest, runs: Runs, cancel: Callable[[], None]) -> None:
        self.head = join(root, b"x")[:-1]  # root and one slash
        self.algorithm, self.style, self.trusted = request.algorithm, request.style, request.trusted
        self.runs = runs
        self.cancel = cancel
        self.buffer = bytearray(CHUNK)
        self.view = memoryview(self.buffer)
        # The trusted filesystems' device numbers and mount ids: see _refusal; read when first needed
        self.trusted_devices: tuple[frozenset[int], frozenset[int]] | None = None

    def consume(self, event: Listing | SubtreeTotals, scanner: Scanner) -> None:
        """A walk's event, as the parallel walk hands it: a listing's files are hashed, totals ignored."""
        if type(event) is Listing:
            self.listing(event, scanner.listing_fd)

    def listing(self, listing: Listing, dir_fd: int | None) -> None:
        """Hash every file (hard-linked names too) of one listing of a ``regular_by_type`` walk. A
        listing whose directory is closed again (``dir_fd`` None: read while the walk was split) has
        its directory reopened from ``/`` without following symlinks."""
        if listing.files or listing.links:
            raise AssertionError("hash_tree walks with regular_by_type: every regular file is typed")
        relative, files = listing.relative, listing.typed
        if listing.nodes:
            self.runs.add_nodes(listing.nodes)
        if not files:
            return
        if dir_fd is not None:
            self.typed(relative, files, dir_fd)
            return
        try:
            dir_fd = open_path(os.fsdecode(join(self.head, os.fsencode(relative))), directory=True)
        except OSError as exc:
            base = os.fsencode(relative) + b"/" if relative else b""
            for name, _ in files:
                self.runs.fail(base + os.fsencode(name), _open_error(exc))
            return
        with closing_fd(dir_fd):
            self.typed(relative, files, dir_fd)

    def typed(self, relative: str, files: list[tuple[str, int]], dir_fd: int) -> None:
        """The files a ``regular_by_type`` walk listed: open, check, read and hash each, in line.

        The hot loop of hash_tree on small files, so it is written out (the five calls of the module's
        docstring, and nothing else per file).
        """
        base = os.fsencode(relative) + b"/" if relative else b""
        names: list[str] = []  # hashed, in listing order, and their digests: their lines come at the end
        hexdigests: list[str] = []
        fsencode = os.fsencode
        runs, cancel = self.runs, self.cancel
        buffer, view, room = self.buffer, self.view, len(self.buffer)
        one_shot = checksums.one_shot(self.algorithm)
        open_, readv, fstat, close = os.open, os.readv, os.fstat, os.close
        flags = OPEN_AT
        dev = fstat(dir_fd).st_dev
        targets = [buffer]
        fail, done, digested = runs.fail, names.append, hexdigests.append
        position = 0
        try:
            for position, (name, inode) in enumerate(files):  # noqa: B007 - the stop below reads it
                cancel()
                try:
                    fd = open_(name, flags, dir_fd=dir_fd)
                except OSError as exc:
                    fail(base + fsencode(name), _open_error(exc))
                    continue
                try:
                    opened = fstat(fd)
                    if (
                        opened.st_ino != inode
                        or opened.st_dev != dev
                        or opened.st_mode & S_IFMT != stat.S_IFREG
                    ):
                        refused = self._refusal(name, dir_fd, inode, dev, opened)
                        if refused is not None:
                            fail(base + fsencode(name), refused)
                            continue
                    size = opened.st_size
                    count = readv(fd, targets) if 0 < size < room else -1
                    if count == size:  # one read, no report or stop check inside: the common case
                        hexdigest = one_shot(view[:count]).hexdigest()
                        later = fstat(fd)
                        if later.st_size != size or later.st_mtime_ns != opened.st_mtime_ns:
                            fail(
                                base + fsencode(name),
                                f"changed while being hashed: {describe_change(opened, later, count)}",
                            )
                            continue
                    else:  # too big for one read, or empty or short (a kernel file: procfs says 0, sysfs 4,096)
                        if count >= 0:
                            os.lseek(fd, 0, os.SEEK_SET)
                        outcome = self._stream(fd, opened, size >= room)
                        if isinstance(outcome, str):
                            fail(base + fsencode(name), outcome)
                            continue
                        hexdigest, count = outcome
                except OSError as exc:
                    fail(base + fsencode(name), f"read error: {explain(exc)}")
                    continue
                finally:
                    close(fd)
                runs.files += 1
                runs.total_bytes += count
                done(name)
                digested(hexdigest)
        except ScanStopped:
            runs.not_hashed += len(files) - position
            raise
        finally:  # a stop keeps the lines of the files done so far
            runs.add_listing(
                relative + "/" if relative else "", names, hexdigests, self.algorithm, self.style
            )

    def _refusal(self, name: str, dir_fd: int, inode: int, dev: int, opened: os.stat_result) -> str | None:
        """Why the descriptor opened for a typed entry is refused, or None if it is the file after all.

        Not a regular file: refused. Another inode than the entry named, on a filesystem whose entries
        carry ``stat``'s inode numbers: swapped since the listing, refused. Elsewhere (overlayfs
        across filesystems reports other device and inode numbers, FUSE may too) the name is looked
        at once more, and the file accepted only if it still leads to exactly this inode.
        """
        if opened.st_mode & S_IFMT != stat.S_IFREG:
            return explain(NotRegularFile(opened.st_mode))
        if opened.st_ino != inode:
            if self.trusted_devices is None:
                trusted = [mount for mount in mount_table() if mount.fstype in self.trusted]
                self.trusted_devices = (
                    frozenset(mount.dev for mount in trusted),
                    frozenset(mount.mount_id for mount in trusted),
                )
            devices, mounts = self.trusted_devices
            # The mount the directory is open on (fdinfo's mnt_id) where st_dev is no mount's (btrfs)
            if dev in devices or platform.fd_mount_id(platform.PROC, "self", str(dir_fd)) in mounts:
                return explain(FileSwap())
        try:
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return explain(FileSwap())
        if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
            return explain(FileSwap())
        return None

    def _stream(self, fd: int, opened: os.stat_result, big: bool) -> tuple[str, int] | str:
        """A file too big for one read (or empty: kernel files say size 0 and have content), chunk
        by chunk: the digest and size, or why not."""
        runs, cancel = self.runs, self.cancel

        def on_chunk(read: int) -> None:
            runs.in_flight = read
            cancel()

        try:  # a file that kept growing raises, and is failed as any read error is
            digest = hash_fd(fd, (self.algorithm,), self.buffer, on_chunk if big else None, opened=opened)
        finally:
            runs.in_flight = 0
        if digest.changed:
            return f"changed while being hashed: {digest.changed}"
        return digest.hexdigests[self.algorithm.name], digest.size


#: Filesystems whose directory entries carry the inode numbers ``stat`` gives (native local inodes).
ENTRY_INODES_TRUSTED = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "f2fs", "zfs", "jfs", "reiserfs"}
)


def _is_utf8(name: str) -> bool:
    """Whether a name from the walk (undecodable bytes as surrogate escapes) is valid UTF-8."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _open_error(exc: OSError) -> str:
    """Why a listed file could not be opened (a symlink swapped in is refused, never followed)."""
    if exc.errno == errno.ENOENT:
        return "vanished before it could be hashed"
    if refused_symlink(exc):
        return explain(FileSwap())
    return explain(exc)


def merge(
    parts: Sequence[tuple[IO[bytes], dict[str, Any]]],
    keep_limit: int,
    first_lines: int,
    cancel: Callable[[], None],
    max_nodes: int | None = None,
) -> TreeHash:
    """Merge every process's sorted runs into one manifest, sorted by name, in bounded memory."""
    out = TreeHash()
    extents = [
        (spill.fileno(), offset, length) for spill, part in parts for offset, length in part["extents"]
    ]
    read_bytes = max(MIN_READ_BYTES, min(READ_BYTES, MERGE_BYTES // max(1, len(extents))))
    # each record is ``name NUL line``: a line ends at its only newline
    streams = [read_run(*extent, read_bytes, line=True) for extent in extents]
    unreadable: list[tuple[bytes, str]] = []
    for _, part in parts:
        for key in _COUNTS:
            setattr(out, key, getattr(out, key) + part[key])
        unreadable += [(bytes(name), str(error)) for name, error in part["unreadable"]]
    unreadable.sort()
    out.unreadable = unreadable[:MAX_UNREADABLE_KEPT]
    nodes: list[bytes] = [record for _, part in parts for record in part["nodes"]]
    nodes.sort()
    out.nodes_gathered = len(nodes)
    max_nodes = MAX_NODES_KEPT if max_nodes is None else max_nodes
    out.nodes_unrecorded += max(0, len(nodes) - max_nodes)
    del nodes[max_nodes:]
    out.nodes = PackedNodes(nodes)
    whole = bytearray() if out.manifest_bytes <= keep_limit else None
    first = out.first
    for count, record in enumerate(heapq.merge(*streams)):
        line = record[record.index(b"\0") + 1 :]
        if whole is not None:
            whole += line
        if count < first_lines:
            first.append(line)
        elif whole is None:
            break  # the rest would only be counted, and the counts are known
        if not count & 0xFFF:
            cancel()
    out.manifest = whole  # no copy: a manifest may be tens of megabytes
    return out


@dataclass(frozen=True)
class TreeRequest:
    """What to hash and how (``shown`` names the tree in errors)."""

    root: bytes
    algorithm: Algorithm
    style: Style
    options: WalkOptions
    timeout_s: float
    keep_limit: int  # the whole manifest is kept only up to this many bytes
    first_lines: int  # the first lines kept in any case
    sharing: Sharing = field(default_factory=Sharing)
    shown: str = ""
    clock: Callable[[], float] = time.monotonic
    run_bytes: int = RUN_BYTES  # records a process buffers before it sorts and writes them as one run
    trusted: frozenset[str] = ENTRY_INODES_TRUSTED  # filesystems whose entries carry stat's inodes
    nodes: bool = False  # record the directories, symbolic links and special files (``TreeHash.nodes``)
    max_nodes: int | None = None  # of those, kept at most (the rest counted); None: MAX_NODES_KEPT


def hash_tree_parallel(
    request: TreeRequest, skipped: SkipCounter, progress: Progress, cancel: Cancel
) -> TreeHash:
    """Walk ``request.root`` and hash every regular file, in this process and (past
    ``sharing.split_after_s``) in forked children, until the deadline; the merged, sorted manifest.
    ``cancel`` raises to abandon the call (children are killed).
    """
    root, sharing = request.root, request.sharing
    count = available_processes() if sharing.processes is None else sharing.processes
    sharing = replace(sharing, processes=count)  # asked now: one spill file per process
    spills = [tempfile.TemporaryFile(prefix="sysmcp-manifest-") for _ in range(max(1, count))]  # noqa: SIM115
    tally = NodeTally(count)
    mine = Runs(spills[0], request.run_bytes, request.max_nodes, tally)
    parallel: ParallelWalk | None = None

    def progress_and_cancel() -> None:
        progress(sum(mine.progress()) + sum(children_counts(parallel)), None)
        cancel()

    budget = Budget(request.timeout_s, progress_and_cancel, clock=request.clock)
    try:
        # Every file is opened and checked here: told by its entry's type, no lstat each.
        config = ScanConfig(finished_depth=-1, regular_by_type=True, record_nodes=request.nodes)
        scanner = Scanner(root, request.options, skipped, budget, config=config)
        hasher = ListingHasher(root, request, mine, budget)

        def work(claim: Callable[[], int | None], progress: SharedCounters, in_child: bool) -> dict[str, Any]:
            assert parallel is not None
            if in_child:
                tally.slot = progress.slot
                runs, counter = (
                    Runs(spills[progress.slot], request.run_bytes, request.max_nodes, tally),
                    SkipCounter(MAX_UNREADABLE_KEPT),
                )
                check = budget.sharing(lambda: progress.set(*runs.progress()))
                own = ListingHasher(root, request, runs, check)
            else:
                runs, counter, check, own = mine, skipped, budget, hasher
            walked = parallel.walk_claimed(claim, counter, check, own.consume, in_child)
            return runs.summary() | walked if in_child else walked

        def detached(event: Listing | SubtreeTotals, scanner: Scanner) -> None:
            if type(event) is Listing:
                hasher.listing(event, None)  # its directory is closed: the files are opened by path

        parallel = ParallelWalk(scanner, budget, sharing, work)
        with parallel:
            stopped = parallel.walk(hasher.consume, detached=detached)
            stopped = stopped or scanner.stopped
            walked = [parallel.here(), *parallel.children()] if parallel.fan is not None else []
            if walked:
                stopped = stopped or parallel.stopped_early(
                    walked, "a hashing process ended unexpectedly", skipped
                )
            parts = [(spills[0], mine.summary())]  # once this process's share of the walk is done
            parts += [(spills[slot], part) for slot, part in enumerate(walked) if slot and part is not None]
            result = merge(parts, request.keep_limit, request.first_lines, cancel, request.max_nodes)
        result.stopped = stopped
        result.walk_complete = stopped is None
        if not request.nodes:
            result.nodes, result.nodes_unrecorded = None, 0
        result.processes = len(parts)
        return result
    finally:
        tally.close()
        for spill in spills:
            spill.close()


def hash_path(request: TreeRequest, progress: Progress, cancel: Cancel) -> TreeHash:
    """The manifest of ``request.root``: a directory (``hash_tree_parallel``), or one regular file
    relative to its directory; anything else is refused (``WrongKind``, ``reason="not_tree"``). At
    the deadline the manifest holds the files finished by then: every line still true.
    ``progress(files + bytes)`` moves for big and tiny files alike."""
    root, shown = request.root, request.shown
    started = time.perf_counter()
    try:
        looked = os.stat(root, follow_symlinks=False)
    except FileNotFoundError:
        raise NotFound(f"No such file or directory: {shown}") from None
    except OSError as exc:
        raise EngineError(f"Cannot read {shown}: {exc.strerror or exc}") from None
    if stat.S_ISREG(looked.st_mode):
        result = _hash_one(request, looked, progress, cancel)
    elif not stat.S_ISDIR(looked.st_mode):
        raise WrongKind(f"Cannot hash {shown}: it is {kind(looked.st_mode)}", reason="not_tree")
    else:
        skipped = SkipCounter(MAX_UNREADABLE_KEPT)
        try:
            result = hash_tree_parallel(request, skipped, progress, cancel)
        except PermissionError:
            raise PermissionRefused(f"Permission denied: cannot read the directory {shown}") from None
        except OSError as exc:
            raise EngineError(f"Cannot walk {shown}: {exc.strerror or exc}") from None
        result.base, result.skipped, result.skipped_named = root, skipped.as_dict(), skipped.named
        result.skipped_refused = skipped.refused_named
    progress(result.files + result.total_bytes, None)
    result.seconds = time.perf_counter() - started
    return result


def _hash_one(request: TreeRequest, looked: os.stat_result, progress: Progress, cancel: Cancel) -> TreeHash:
    """The manifest of one regular file, relative to its directory: opened and hashed as a listing's file is."""
    base = os.path.dirname(request.root)
    name = request.root[len(base.rstrip(b"/")) + 1 :]
    with tempfile.TemporaryFile(prefix="sysmcp-manifest-") as spill:
        runs = Runs(spill, request.run_bytes)

        def progress_and_cancel() -> None:
            progress(sum(runs.progress()), None)
            cancel()

        budget = Budget(request.timeout_s, progress_and_cancel, clock=request.clock)
        hasher = ListingHasher(base, request, runs, budget)
        stopped = None
        try:  # the directory reached, not opened for reading: as sha256sum, searching it is enough
            parent, _ = open_parent(os.fsdecode(request.root))
        except OSError as exc:
            runs.fail(name, _open_error(exc))
        else:
            try:
                hasher.typed("", [(os.fsdecode(name), looked.st_ino)], parent)
            except ScanStopped as stop:
                stopped = stop.reason
            finally:
                os.close(parent)
        merged = merge([(spill, runs.summary())], request.keep_limit, request.first_lines, cancel)
    merged.stopped, merged.base = stopped, base
    return merged
