"""What a scan leaves behind: the records the store keeps and ``diff`` compares.

Why a resolution threshold: a snapshot of ``/`` with every directory would be as big as the tree's
listing. Directories at least ``max(1 MiB, total / 10,000)`` are kept, and so is every directory the
previous snapshot of the same series kept (while it exists): a directory that shrinks below the
threshold or vanishes is then still diffed exactly. Names are bytes (non-UTF-8 names round-trip).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sysmcp.engine.mounts import filesystem_identity
from sysmcp.engine.paths import is_within

MIN_THRESHOLD = 1 << 20  # bytes: no directory below 1 MiB is kept for its own size
THRESHOLD_FRACTION = 10_000  # ... nor below a ten-thousandth of the scanned total
FILES_KEPT = 100  # the largest files a snapshot keeps


def threshold_for(total: int) -> int:
    """The resolution of a snapshot of a tree of ``total`` bytes."""
    return max(MIN_THRESHOLD, total // THRESHOLD_FRACTION)


@dataclass(frozen=True, slots=True)
class DirTotals:
    """A directory's cumulative totals, like ``du`` (``newest`` is None when not known)."""

    disk: int
    apparent: int
    files: int
    newest: float | None = None


@dataclass(frozen=True, slots=True)
class FileRow:
    path: bytes  # relative to the snapshot's root
    disk: int
    apparent: int
    mtime: float | None


@dataclass(frozen=True, slots=True)
class Series:
    """What makes two snapshots comparable: the same host, filesystem, root and scan options."""

    host: str
    fs_id: str
    root: bytes
    options: str

    def same_as(self, other: Series) -> bool:
        """The same series: its filesystem judged by ``same_filesystem``, the rest equal."""
        return (self.host, self.root, self.options) == (other.host, other.root, other.options) and (
            same_filesystem(self.fs_id, other.fs_id)
        )


@dataclass(slots=True)
class ScanSnapshot:
    """A ``dir_usage`` scan as stored: ``dirs`` by relative path (b"" is the root itself)."""

    series: Series
    taken: float
    partial: bool
    threshold: int
    dirs: dict[bytes, DirTotals]
    files: list[FileRow] = field(default_factory=list)
    id: int | None = None

    @property
    def total(self) -> DirTotals:
        return self.dirs.get(b"", DirTotals(0, 0, 0))

    @property
    def lists_files(self) -> bool:
        """Whether ``files`` are the tree's largest files: every file it counted, or ``FILES_KEPT`` of
        them. Fewer is no such list: a scan that listed no file, or one filtered by time or size
        (which older versions kept as if it were whole)."""
        return len(self.files) >= min(FILES_KEPT, self.total.files)


@dataclass(frozen=True, slots=True)
class DiskReading:
    """One filesystem's figures at one moment (the df view)."""

    host: str
    mount: bytes
    fs_id: str
    taken: float
    total: int
    used: int
    free: int
    inodes_used: int | None = None
    inodes_free: int | None = None
    id: int | None = None


@dataclass(frozen=True, slots=True)
class BaselineFile:
    """A file of an integrity baseline: its digest and the metadata AIDE compares.

    Why ctime: a rewrite can put the old size and mtime back (``touch -r``), but not the ctime short of
    setting the clock. None where a baseline recorded before sysmcp kept it: not compared."""

    digest: str
    size: int
    mtime: float
    mode: int
    uid: int
    gid: int
    ctime: float | None = None


@dataclass(frozen=True, slots=True)
class BaselineNode:
    """A directory, symbolic link or special file of an integrity baseline: what changes its meaning
    without touching a regular file's bytes (a link re-pointed, a directory made world-writable or given
    to another owner, a device node planted).

    ``kind`` is the ``S_IFMT`` type; ``target`` a link's exact bytes (None for others); ``rdev`` a device
    node's number (None for others). No times: a directory's change with every file made in it."""

    kind: int
    mode: int
    uid: int
    gid: int
    rdev: int | None = None
    target: bytes | None = None


@dataclass(frozen=True, slots=True)
class Unread:
    """A file or directory a baseline could not read: why, and, for a file, what ``lstat`` gave of it
    (``seen``, its digest empty; None when lstat gave nothing). A directory is a prefix: nothing below
    it was seen."""

    reason: str
    directory: bool = False
    seen: BaselineFile | None = None


@dataclass(slots=True)
class Baseline:
    """An integrity baseline: the files read (``files``) and those that could not be (``unread``, by
    relative name; ``unrecorded`` more than its bound allowed, counted, not named), and what it
    recorded of everything else (``nodes``)."""

    series: Series
    taken: float
    algorithm: str
    files: dict[bytes, BaselineFile]
    partial: bool = False
    id: int | None = None
    unread: dict[bytes, Unread] = field(default_factory=dict)
    unrecorded: int = 0
    #: Its directories (the root's own as b""), symbolic links and special files, by relative name; None
    #: when it recorded none (recorded by an older sysmcp, schema 3 or before): then none is compared.
    nodes: dict[bytes, BaselineNode] | None = None
    nodes_unrecorded: int = 0  # more of them than it records: counted, not named


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A stored snapshot's header, for listings and for choosing what to diff."""

    id: int
    kind: str  # "scan" or "baseline"
    series: Series
    taken: float
    partial: bool
    disk: int
    files: int
    rows: int


def options_key(one_file_system: bool, exclude: Sequence[str]) -> str:
    """The scan options that change totals, as a stable string (only equal ones are diffed)."""
    return json.dumps({"xdev": bool(one_file_system), "exclude": sorted(exclude)}, separators=(",", ":"))


def within(allowed: Sequence[Path] | None) -> Callable[[bytes | str], bool]:
    """Whether the roots in force (None: the whole filesystem) let a stored path be shown, judged
    where it leads (a stored '../x' too), whoever recorded it: what_changed and ``sysmcp history``."""

    def shown(name: bytes | str) -> bool:
        if allowed is None:
            return True
        real = Path(os.path.normpath(os.fsdecode(name)))
        return any(is_within(real, root) for root in allowed)

    return shown


def filesystem_id(path: str | bytes) -> str:
    """The identity of the filesystem holding ``path``: its device number and, where statvfs gives
    one, its filesystem id (``engine.mounts.filesystem_identity``). A filesystem replaced by
    another at the same mount point gets another identity, so the two are never diffed as one."""
    return filesystem_identity(os.stat(path).st_dev, getattr(os.statvfs(path), "f_fsid", 0))


def reading_identity(device: str, fs_type: str, filesystem: str | None) -> str:
    """A disk reading's filesystem identity: the mount's source and type, and (None: not known) its
    ``filesystem_id``. The source and type alone are the same for a tmpfs mounted again, or a device
    made anew with mkfs, so readings of the two would be fitted as one line."""
    named = f"{device}|{fs_type}"
    return named if filesystem is None else f"{named}|{filesystem}"


_KERNEL_IDENTITY = re.compile(r"\d+:\d+/([0-9a-f]+)")


def same_filesystem(one: str, other: str) -> bool:
    """Whether two ``filesystem_id``s are of one filesystem: by the filesystem id where both have one,
    else by the whole (the device number too).

    Why not the device number where there is an fsid: a btrfs volume's device number is an anonymous
    one, handed out as it is mounted, so the same filesystem has another after a reboot that mounted
    things in another order; its fsid comes from its UUID. Where the fsid is made of the device number
    (XFS), the two agree anyway; where there is none (0: NFS, FUSE), the device number decides.

    Why not the fsid alone: an overlay (before Linux 6.6, or uuid=off) gives its upper filesystem's, so
    one mounted over a directory of that filesystem would be taken for the directory it covers. An
    overlay's device number is anonymous (major 0), as btrfs' are; a disk's is not: one of each with
    the same fsid are two filesystems."""
    if one == other:
        return True
    mine, theirs = _KERNEL_IDENTITY.fullmatch(one), _KERNEL_IDENTITY.fullmatch(other)
    if mine is None or theirs is None or int(mine[1], 16) == 0 or int(theirs[1], 16) == 0:
        return False
    return mine[1] == theirs[1] and one.startswith("0:") == other.startswith("0:")


def same_reading_filesystem(one: str, other: str) -> bool:
    """Whether two readings' identities (``reading_identity``) are of one filesystem: by the kernel's
    identity (``same_filesystem``) when both carry it, else by source and type (readings older sysmcp
    versions kept carry no other). Only the kernel's when both have it: the source is worded for the
    roots in force (``disk_usage`` does not name a source outside them), not the filesystem's to change.
    Where the kernel gives no fsid (0: NFS, FUSE) its identity is the device number alone, an anonymous
    one the next mount at that point is given again: the source must agree too (another export)."""
    named, _, kernel = one.rpartition("|")
    named_other, _, kernel_other = other.rpartition("|")
    mine, theirs = _KERNEL_IDENTITY.fullmatch(kernel), _KERNEL_IDENTITY.fullmatch(kernel_other)
    if mine and theirs:
        if int(mine[1], 16) == 0 or int(theirs[1], 16) == 0:
            return kernel == kernel_other and named == named_other
        return same_filesystem(kernel, kernel_other)
    return (named if mine else one) == (named_other if theirs else other)


def build_scan(
    series: Series,
    taken: float,
    partial: bool,
    rows: Iterable[tuple[str, int, int, int, float]],
    files: Iterable[tuple[str, int, int, float | None]],
    keep_also: frozenset[str] = frozenset(),
) -> ScanSnapshot:
    """A snapshot from a scan's directory rows ``(relative, disk, apparent, files, newest)`` (the
    root is ``""``; ``newest`` the newest file mtime below, 0.0 for none) and its largest files
    ``(relative, disk, apparent, mtime)``; ``keep_also``: relative names the previous snapshot kept,
    kept again whatever their size."""
    table = {relative: (disk, apparent, count, newest) for relative, disk, apparent, count, newest in rows}
    root = table.get("", (0, 0, 0, 0.0))
    threshold = threshold_for(max(root[0], root[1]))
    dirs = {
        os.fsencode(relative): DirTotals(disk, apparent, count, newest or None)
        for relative, (disk, apparent, count, newest) in table.items()
        if relative == "" or max(disk, apparent) >= threshold or relative in keep_also
    }
    kept = sorted(files, key=lambda row: (-row[1], -row[2], row[0]))[:FILES_KEPT]
    file_rows = [FileRow(os.fsencode(rel), disk, apparent, mtime) for rel, disk, apparent, mtime in kept]
    return ScanSnapshot(series, taken, partial, threshold, dirs, file_rows)


def baseline_entry(digest: str, st: os.stat_result) -> BaselineFile:
    mode = stat.S_IMODE(st.st_mode)
    return BaselineFile(digest, st.st_size, st.st_mtime, mode, st.st_uid, st.st_gid, st.st_ctime)


def baseline_node(st: os.stat_result, target: bytes | None = None) -> BaselineNode:
    """A directory's, link's or special file's record from its ``lstat`` (and a link's target)."""
    kind = stat.S_IFMT(st.st_mode)
    rdev = st.st_rdev if kind in (stat.S_IFCHR, stat.S_IFBLK) else None
    return BaselineNode(kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, rdev, target)


def parse_gnu_manifest(manifest: bytes) -> Iterable[tuple[bytes, str]]:
    """(name, digest) of each '<hex>  <name>' line, undoing sha256sum's backslash escapes. Only a
    newline ends a line: b3sum's format leaves a CR in a name as it is."""
    for line in manifest.split(b"\n"):
        escaped = line.startswith(b"\\")
        if escaped:
            line = line[1:]
        digest, sep, name = line.partition(b"  ")
        if not sep:
            continue
        if escaped:
            name = name.replace(b"\\\\", b"\0").replace(b"\\n", b"\n").replace(b"\\r", b"\r")
            name = name.replace(b"\0", b"\\")
        yield name, digest.decode("ascii", "replace")
