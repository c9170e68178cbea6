"""What a scan, a manifest or a statvfs leaves in the store: the series, the snapshot, the reading.

Why one module: dir_usage, ``sysmcp snapshot``, hash_tree and what_changed each record through
here, so what a scan's result holds is turned into a snapshot in one place. No words: a write that
failed comes back as the store's reason, and the tool layer (``sysmcp.tools.history_hooks``) says it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sysmcp.engine.mounts import Figures, default_partitions, statvfs_usage
from sysmcp.engine.opens import Parents
from sysmcp.history import state
from sysmcp.history.snapshots import (
    FILES_KEPT,
    MIN_THRESHOLD,
    Baseline,
    BaselineNode,
    DiskReading,
    ScanSnapshot,
    Series,
    Unread,
    baseline_entry,
    baseline_node,
    build_scan,
    filesystem_id,
    options_key,
    parse_gnu_manifest,
    reading_identity,
    threshold_for,
)

if TYPE_CHECKING:  # disk_usage imports this module too, walks nothing, and opens no SQLite until it records
    from sysmcp.engine.hashing import TreeHash
    from sysmcp.engine.usage import Usage, UsageRequest
    from sysmcp.engine.walk import Node, WalkOptions
    from sysmcp.history.store import Store

PRUNE_EVERY = 25  # snapshots between two retention passes when no `sysmcp snapshot` timer prunes
READING_INTERVAL_S = 60.0  # at most one disk reading per filesystem this often, unless used bytes moved


def series_of(path: str | bytes | os.PathLike[str], options: WalkOptions) -> Series:
    """The series a scan of ``path`` with ``options`` belongs to (raises OSError if path is gone)."""
    raw = os.fsencode(path)
    return Series(
        state.host_name(), filesystem_id(raw), raw, options_key(options.one_file_system, options.exclude)
    )


def latest(store: Store, series: Series) -> int | None:
    """The id of the newest complete snapshot of ``series``."""
    for info in store.snapshots("scan", series.root, limit=200, count_rows=False):
        if info.series.same_as(series) and not info.partial:
            return info.id
    return None


@dataclass(frozen=True)
class ScanRecord:
    """A scan and what it left: the snapshot saved (None if none) and, when a write failed, the
    store's reason (``WriteResult.reason``)."""

    usage: Usage
    snapshot: ScanSnapshot | None = None
    unsaved: str | None = None


def record_scan(
    store: Store | None,
    request: UsageRequest,
    run: Callable[[UsageRequest], Usage],
    clock: Callable[[], float] = state.now,
) -> ScanRecord:
    """``run(request)``, recording every directory's totals in ``store`` (None: history is off, the
    scan runs unrecorded). In a worker."""
    if store is None:
        return ScanRecord(run(request))
    try:
        series = series_of(request.root, request.options)
    except OSError:
        return ScanRecord(run(request))
    previous = latest(store, series)
    keep_also = store.dir_names(previous) if previous is not None else frozenset()
    unread = store.unread()  # the previous snapshot's names not read (another process held the lock)
    usage = run(replace(request, record_floor=MIN_THRESHOLD, record_also=keep_also))
    if usage.totals is None or usage.recorded is None:
        return ScanRecord(usage)
    if unread is not None:
        # Kept without the directories the previous snapshot kept, a directory that shrank below the
        # resolution would be diffed as gone: the scan's answer comes, its snapshot is not kept.
        why = f"the history store could not be read ({unread}): the snapshot not saved"
        return ScanRecord(usage, None, why)
    totals = usage.totals
    rows = [("", totals.disk, totals.apparent, totals.files, totals.newest), *usage.recorded]
    # A list filtered by time, or cut by a size that left fewer than a snapshot keeps, is no "largest files".
    filtered = request.newer_than is not None or request.older_than is not None
    listed = [] if filtered or (request.min_size and len(usage.files) < FILES_KEPT) else usage.files
    files = [(rel, disk, apparent, usage.modified.get(rel)) for apparent, disk, rel in listed]
    snap = build_scan(series, clock(), usage.stopped is not None, rows, files, keep_also)
    saved = store.save_scan(snap)
    if not saved.ok:
        return ScanRecord(usage, None, saved.reason)
    if saved.id is not None and saved.id % PRUNE_EVERY == 0:  # a server with no timer stays bounded too
        store.prune()
    return ScanRecord(usage, snap)


@dataclass(frozen=True)
class Unreadable:
    """What a hash of a tree could not read: the files it names, with why (relative names), the
    directories it could not list (relative), and how many there were in all (named or only counted:
    the engine names a bounded number). With them, what it recorded of the rest of the tree: its
    directories, symbolic links and special files (``TreeHash.nodes``; None: not recorded)."""

    files: Sequence[tuple[bytes, str]] = ()
    directories: Sequence[bytes] = ()
    count: int = 0
    nodes: Sequence[Node] | None = None
    nodes_unrecorded: int = 0


NOTHING_UNREADABLE = Unreadable()


def unreadable_of(tree: TreeHash) -> Unreadable:
    """What a hash of a tree could not read, as a baseline records it: the files it named with why,
    the directories it could not list, and how many of both there were; and the directories, links and
    special files it recorded, if it was asked to (``TreeRequest.nodes``)."""
    directories = [os.fsencode(name) for name in (*tree.skipped_named, *tree.skipped_refused)]
    return Unreadable(tree.unreadable, directories, tree.unread_total, tree.nodes, tree.nodes_unrecorded)


@dataclass(frozen=True)
class BaselineRecord:
    """What became of an integrity baseline: the files kept, or the one fact that kept none."""

    files: int = 0
    kept: bool = False
    history_off: bool = False
    unreadable: str | None = None  # the root could not be stat'ed: its strerror
    unsaved: str | None = None  # the store refused the write: its reason
    unread: int = 0  # files and directories it could not read, recorded as such
    unrecorded: int = 0  # more of them, beyond the bound: counted, not recorded
    nodes_unrecorded: int = 0  # directories, links and special files beyond their bound: counted only


def record_baseline(
    store: Store | None,
    base: bytes,
    manifest: bytes,
    algorithm: str,
    options: WalkOptions,
    partial: bool,
    clock: Callable[[], float] = state.now,
    unreadable: Unreadable = NOTHING_UNREADABLE,
) -> BaselineRecord:
    """hash_tree's manifest plus each file's size, mtime, ctime, mode and owner (one lstat each), and what
    it could not read, as an integrity baseline of ``base``. In a worker."""
    if store is None:
        return BaselineRecord(history_off=True)
    try:
        series = series_of(base, options)
    except OSError as exc:
        return BaselineRecord(unreadable=exc.strerror)
    baseline = baseline_of(series, base, manifest, algorithm, partial, clock(), unreadable)
    saved = store.save_baseline(baseline)
    if not saved.ok:
        return BaselineRecord(unsaved=saved.reason)
    return BaselineRecord(
        len(baseline.files),
        kept=True,
        unread=len(baseline.unread),
        unrecorded=baseline.unrecorded,
        nodes_unrecorded=baseline.nodes_unrecorded,
    )


def baseline_of(
    series: Series,
    base: bytes,
    manifest: bytes,
    algorithm: str,
    partial: bool,
    taken: float,
    unreadable: Unreadable = NOTHING_UNREADABLE,
) -> Baseline:
    """A GNU manifest of ``base`` plus each file's size, mtime, ctime, mode and owner (``lstat_below``: a
    file gone since it was hashed is left out; one that cannot be looked at again, a directory on the
    way replaced or refused, is recorded as not read), and the files and directories it could not read.

    Why record those: a file missing from the baseline would be called added once readable, and one
    changed since it was unreadable would look new. An unreadable file keeps what ``lstat`` gave (one
    gone since is left out, as a hashed one is); a directory is kept as a prefix, nothing below it seen.
    """
    files = {}
    unread: dict[bytes, Unread] = {}
    nodes = _nodes_of(base, unreadable.nodes)
    with Parents() as parents:
        for name, digest in parse_gnu_manifest(manifest):
            try:
                if (st := lstat_below(parents, base, name)) is not None:
                    files[name] = baseline_entry(digest, st)
            except OSError as exc:
                unread[name] = Unread(f"could not be looked at again: {exc.strerror or exc}")
        for name, reason in unreadable.files:
            try:
                if (st := lstat_below(parents, base, name)) is not None:
                    unread[name] = Unread(reason, seen=baseline_entry("", st))
            except OSError:
                unread[name] = Unread(reason)
    for name in unreadable.directories:
        if name:  # the root itself unreadable: nothing was hashed at all
            unread[name] = Unread("could not be listed", directory=True)
    offered = len(unreadable.files) + len(unreadable.directories)
    return Baseline(
        series,
        taken,
        algorithm,
        files,
        partial,
        unread=unread,
        unrecorded=max(0, unreadable.count - offered),
        nodes=nodes,
        nodes_unrecorded=unreadable.nodes_unrecorded if nodes is not None else 0,
    )


def _nodes_of(base: bytes, walked: Sequence[Node] | None) -> dict[bytes, BaselineNode] | None:
    """The walk's directories, links and special files by relative name, and the root's own mode and
    owner as b"" (a root made world-writable is a finding too); None when the walk recorded none."""
    if walked is None:
        return None
    nodes = {
        name: BaselineNode(kind, mode, uid, gid, rdev, target)
        for name, kind, mode, uid, gid, rdev, target in walked
    }
    # the root gone since it was hashed: its entries are gone too, and said so
    with contextlib.suppress(OSError):
        nodes[b""] = baseline_node(os.stat(base, follow_symlinks=False))
    return nodes


def lstat_below(parents: Parents, root: bytes, relative: bytes) -> os.stat_result | None:
    """The ``lstat`` of a stored name below ``root`` now, reached without following a symlink on the
    way; None when it is not there: gone, or behind a symlink or a file (the walk's ``GONE``), or a
    stored name that is not normalised. ``OSError`` when that cannot be told (a directory on the way
    replaced, ``DirectoryReplaced``; refused by the filesystem, EIO or a FUSE daemon's EMFILE; not
    searchable; no descriptor left): such a file is not gone. A directory since swapped for a symlink
    must not lead outside the tree. ``parents`` keeps the directories on the way open, so sorted names
    cost one walk per directory."""
    from sysmcp.engine.walk import GONE  # the walk only when a baseline is made (disk_usage imports this)

    try:
        dir_fd, name = parents.parent(os.path.join(root, relative))
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except ValueError:  # a stored name that is not normalised ('../x')
        return None
    except OSError as exc:
        if exc.errno in GONE:
            return None
        raise


def options_of(series: Series) -> WalkOptions:
    """The walk options a series was recorded with (``options_key`` read back)."""
    from sysmcp.engine.walk import WalkOptions

    key = json.loads(series.options or "{}")
    return WalkOptions(one_file_system=bool(key.get("xdev", True)), exclude=tuple(key.get("exclude", ())))


def disk_reading(path: str | os.PathLike[str], clock: Callable[[], float]) -> tuple[DiskReading, str]:
    """A reading of the filesystem holding ``path`` now (df's figures, with the mount point and
    identity disk_usage records), and its mount point (raises OSError)."""
    raw = os.fspath(path)
    stats = statvfs_usage(raw)
    mount = default_partitions()().holding(raw, stats.st_dev)
    point = mount.mount_point if mount else "/"
    try:  # of the mount point, as disk_usage reads it: a btrfs subvolume below it has an identity of its own
        kernel: str | None = filesystem_id(point)
    except OSError:
        kernel = None
    identity = reading_identity(mount.device, mount.fs_type, kernel) if mount else ""
    df = Figures.from_stats(stats)
    figures = (df.total, df.used, df.free, df.inodes_used, df.inodes_free)
    return DiskReading(state.host_name(), os.fsencode(point), identity, clock(), *figures), point


class ReadingGate:
    """Which disk readings are worth a write: at most one per filesystem per ``interval_s``, unless
    its used bytes moved by at least a snapshot's resolution (``threshold_for`` its size) since the
    last one kept. A reading seconds after the last adds nothing to a fill rate, and its write (a
    worker thread, an SQLite transaction) was most of a small disk_usage call's time.

    ``clock``: a monotonic clock (a test's own); ``quiet(key)`` tells, before any statvfs, whether
    every filesystem the call named ``key`` read last time had a reading kept within the interval."""

    def __init__(self, interval_s: float = READING_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.interval_s = interval_s
        self.clock = clock
        self._kept: dict[tuple[bytes, str], tuple[float, int]] = {}  # (mount, fs id) → (when, used)
        self._calls: dict[str, tuple[tuple[bytes, str], ...]] = {}  # a call's key → the filesystems it read
        self._directory: object = None  # the state directory the kept readings were written to

    def _recent(self, when: float, now: float) -> bool:
        return 0 <= now - when < self.interval_s

    def due(self, readings: Sequence[DiskReading]) -> list[DiskReading]:
        """The readings worth keeping now."""
        now = self.clock()
        return [
            reading
            for reading in readings
            if (last := self._kept.get((reading.mount, reading.fs_id))) is None
            or not self._recent(last[0], now)
            or abs(reading.used - last[1]) >= threshold_for(reading.total)
        ]

    def kept(self, readings: Sequence[DiskReading]) -> None:
        """``readings`` were written."""
        now = self.clock()
        for reading in readings:
            self._kept[(reading.mount, reading.fs_id)] = (now, reading.used)

    def answered(self, key: str, readings: Sequence[DiskReading]) -> None:
        """The call named ``key`` read these filesystems (for ``quiet``)."""
        self._calls[key] = tuple((r.mount, r.fs_id) for r in readings)

    def quiet(self, key: str) -> bool:
        """Whether every filesystem the call ``key`` read last time had a reading kept within the
        interval: then its next reading is due only if used bytes moved materially."""
        filesystems = self._calls.get(key)
        if not filesystems:
            return False
        now = self.clock()
        return all(
            (last := self._kept.get(fs)) is not None and self._recent(last[0], now) for fs in filesystems
        )

    def follow(self, directory: object) -> None:
        """History is kept in ``directory`` now: what was kept elsewhere does not count."""
        if directory != self._directory:
            self._directory = directory
            self._kept.clear()
            self._calls.clear()
