"""The walk's vocabulary: its options, skip counts, events and the frames of its stack.

Why a module of their own: the walk (``Scanner``), the mount points it skips and every engine that
consumes a walk speak these types; keeping them here lets each import them without importing the walk.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from sysmcp.engine.walk._budget import open_again, out_of_descriptors

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
# What opening a directory listed a moment ago says when it is no longer there as a directory: gone
# (ENOENT), or swapped for a symlink (ELOOP; EMLINK on FreeBSD) or a file (ENOTDIR). Any other error
# (denied, an I/O error, a filesystem's own refusal) leaves it there, unreadable.
GONE = frozenset({errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.EMLINK})
# An entry's kind: ``st_mode & S_IFMT`` (one mask, no call per entry), compared with these.
S_IFDIR, S_IFREG, S_IFLNK = stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK


@dataclass(frozen=True)
class WalkOptions:
    """The walk rules the tools share; the defaults are what a sysadmin expects from ``du -x``."""

    one_file_system: bool = True
    exclude: Sequence[str] = ()
    skip_pseudo: bool = True


class SkipCounter:
    """Entries left out of a walk, by reason, so a result can say what it did not see and why."""

    __slots__ = ("_counts", "_limit", "_named", "_refused")

    #: Unreadable directories named per result (the rest are counted): enough to see where access stops.
    NAMED = 5

    def __init__(self, named: int = NAMED) -> None:
        """``named``: how many unreadable directories to name (an integrity baseline records more)."""
        self._counts: Counter[str] = Counter()
        self._limit = named
        self._named: list[str] = []
        self._refused: list[str] = []

    def add(self, reason: str, count: int = 1) -> None:
        self._counts[reason] += count

    def unreadable(self, relative: str) -> None:
        """Count an unreadable directory and name it, relative to the walk's root, if few so far."""
        self._counts["unreadable"] += 1
        self.name(relative)

    def unlistable(self, exc: OSError, relative: str) -> None:
        """Count a directory that could not be listed: vanished (ENOENT), else as ``refused``."""
        if exc.errno == errno.ENOENT:
            self._counts["vanished"] += 1
        else:
            self.refused(exc, relative)

    def refused(self, exc: OSError, relative: str) -> None:
        """Count a directory that is there but could not be opened or listed: unreadable and named when
        permission was denied (answers say "permission denied on" the named ones), else a
        ``filesystem_error``: what the filesystem answered for reasons of its own (an I/O error, a
        FUSE daemon's EMFILE), which no permission would change, named apart (``refused_named``): an
        integrity baseline records either as not read, so that its files are neither added nor removed."""
        if exc.errno in (errno.EACCES, errno.EPERM):
            self.unreadable(relative)
        else:
            self.refused_directory(relative)

    def refused_directory(self, relative: str) -> None:
        """Count a directory the filesystem refused to open or to list to the end, and name it if few so far."""
        self._counts["filesystem_error"] += 1
        if len(self._refused) < self._limit and relative not in self._refused:
            self._refused.append(relative)

    def name(self, relative: str) -> None:
        if len(self._named) < self._limit and relative not in self._named:
            self._named.append(relative)

    @property
    def named(self) -> list[str]:
        """The first unreadable directories, relative to the root ('' is the root itself)."""
        return list(self._named)

    @property
    def refused_named(self) -> list[str]:
        """The first directories the filesystem refused (``filesystem_error``), relative to the root."""
        return list(self._refused)

    def merge(self, counts: dict[str, int], named: Iterable[str] = (), refused: Iterable[str] = ()) -> None:
        """Add another process's ``as_dict()``, ``named`` and ``refused_named`` (a forked worker's skips)."""
        for reason, n in counts.items():
            self._counts[reason] += n
        for relative in named:
            self.name(relative)
        for relative in refused:
            if len(self._refused) < self._limit and relative not in self._refused:
                self._refused.append(relative)

    def as_dict(self) -> dict[str, int]:
        return {reason: n for reason, n in sorted(self._counts.items()) if n}

    def __repr__(self) -> str:
        return f"SkipCounter({self.as_dict()})"


@dataclass(frozen=True)
class FileEntry:
    """A regular file met by ``walk_files``; ``stat`` is its lstat, taken relative to its directory."""

    path: bytes
    relative: bytes
    stat: os.stat_result


@dataclass(slots=True)
class Listing:
    """One directory's entries, handed out as soon as it has been read (pre-order): ``files`` seen
    for the first time, ``links`` further names of an inode already counted. Names are ``str`` with
    undecodable bytes as surrogate escapes: ``os.fsencode`` restores the bytes.
    """

    relative: str
    depth: int
    files: list[tuple[str, os.stat_result]]
    links: list[tuple[str, os.stat_result]]
    # With ``ScanConfig.regular_by_type``: the regular files, known by their directory entry's type,
    # never ``lstat``-ed, each with the inode number the entry gave (every name, hard links too).
    typed: list[tuple[str, int]] = field(default_factory=list)
    # With ``ScanConfig.record_nodes``: its directories, symbolic links and special files as an
    # integrity baseline records them (``Node``), their names relative to the walk's root.
    nodes: list[Node] = field(default_factory=list)


#: What a walk records of an entry that is not a regular file, for an integrity baseline: its name
#: relative to the root (bytes), ``S_IFMT`` type, permission bits, uid, gid, device number (a device
#: node's; else None) and target (a symbolic link's exact bytes; else None). A plain tuple, made per
#: listing; what a hash keeps of it is one packed record (``hashing._treehash.pack_node``).
Node = tuple[bytes, int, int, int, int, int | None, bytes | None]


@dataclass(slots=True)
class SubtreeTotals:
    """A directory whose whole subtree is done (post-order), with cumulative totals like ``du``;
    ``partial`` when the scan stopped before it was complete. ``newest``: the newest mtime of a regular
    file this walk counted in it (0.0: none); subtrees another scanner walked are not in it
    (``engine.usage`` adds them for the history), so it takes no part in comparing two results.
    """

    relative: str
    depth: int
    apparent: int
    disk: int
    files: int
    dirs: int
    partial: bool = False
    newest: float = field(default=0.0, compare=False)


@dataclass(slots=True, eq=False, repr=False)
class Frame:
    """One open directory on the walk's stack (one is made per directory: slotted, compared by identity)."""

    fd: int | None
    relative: str
    depth: int
    dev: int
    ino: int
    apparent: int
    disk: int
    subdirs: list[tuple[str, os.stat_result]] = field(default_factory=list)
    files: int = 0
    dirs: int = 1
    newest: float = 0.0  # the newest mtime of the regular files counted below (SubtreeTotals.newest)
    held: bool = False  # on the stack at Scanner.detach: its SubtreeTotals waits for Scanner.settle
    given: bool = False  # gave subdirectories away (Scanner.share): its totals lack theirs (withheld)
    partial: bool = False
    parent: Frame | None = None  # set for directories handed out or split by detach()
    listed: bool = False  # read already: the subdirectories of a split directory past the task bound
    # A big directory handed out in parts (``ScanConfig.listing_parts``): the names not read yet
    rest: Iterator[str] | None = None


# A directory handed out by ``Scanner.detach`` for another scanner (or process) to walk, by path
# and identity (device, inode): its fields start with the directory's own size, and hold its
# cumulative totals once walked.
Subtree = Frame


def same(fd: int, dev: int, ino: int) -> int | None:
    """``fd`` if it is the directory (device, inode) that was listed; otherwise it is closed: None."""
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if st.st_ino == ino and st.st_dev == dev:
        return fd
    os.close(fd)
    return None


def reopen(name: bytes | str, dev: int, ino: int, dir_fd: int | None = None) -> int | None:
    """The directory ``name`` opened again, if it is still (device, inode); None if not, or if it
    cannot be opened. No descriptor left (``out_of_descriptors``) is no fact about the directory: raised."""
    try:
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        except OSError as first:  # an EMFILE the count calls not ours: once more (``open_again``)
            fd = open_again(first, lambda: os.open(name, DIR_FLAGS, dir_fd=dir_fd))
        return same(fd, dev, ino)
    except OSError as exc:
        if out_of_descriptors(exc):
            raise
        return None


@dataclass(frozen=True, slots=True)
class ScanConfig:
    """What a walk hands its consumer, set once by the engine; a top-N consumer raises the scanner's
    live floors (``Scanner.file_floor``, ``.block_floor``) from these as its heap fills."""

    # Regular files below both floors (apparent bytes, 512-byte blocks) are counted but left out
    # of listings, so almost no stat results outlive their directory. 0: every file is listed.
    file_floor: int = 0
    block_floor: int = 0
    min_file_size: int = 0  # files at least this big (apparent) are counted in .eligible_files
    # A top-N consumer also says N (and its key): a directory of a million files then keeps at most
    # about 2 N of them while it is read, instead of all of them until its floor can rise.
    keep_files: int = 0  # 0: every file over the floors is listed
    keep_by_disk: bool = False
    # Asked about every regular file counted (first name of an inode only), before the floors:
    # False leaves it out of listings and eligible_files (still in the totals). A consumer that
    # filters by time or tallies types sees every file this way, not only the big ones.
    on_file: Callable[[str, os.stat_result], bool] | None = None
    # What to hand out: consumers that want neither empty listings nor every directory's totals
    # skip an object and a generator round trip per directory.
    empty_listings: bool = True
    finished_depth: int | None = None  # SubtreeTotals only down to this depth (None: all, -1: none)
    # For a consumer that opens and checks every regular file itself (hash_tree): regular files are
    # told by their directory entry's type, without an ``lstat`` each, and listed in
    # ``Listing.typed``; their sizes are then not in the totals, nor their hard links told apart.
    regular_by_type: bool = False
    # For an integrity baseline: each directory, symbolic link (its target read relative to the listed
    # directory, never followed) and special file listed is handed out in ``Listing.nodes``.
    record_nodes: bool = False
    list_at_once: int = 256 << 10  # directories up to this size (st_size) are listed in one call
    # A directory bigger than that (streamed) is handed out as several ``Listing``s of about this many
    # files each, so a consumer that keeps nothing of a listing holds that many, not a million (0: one).
    listing_parts: int = 0
    check_every: int = 1024  # entries between checkpoints inside one huge directory (about 3 ms of work)
