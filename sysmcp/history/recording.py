"""What a scan, a manifest or a statvfs leaves in the store: the series, the snapshot, the reading.

Why one module: dir_usage, ``sysmcp snapshot``, hash_tree and what_changed each record through
here, so what a scan's result holds is turned into a snapshot in one place. No words: a write that
failed comes back as the store's reason, and the tool layer (``sysmcp.tools.recording``) says it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sysmcp.fs.mounts import default_partitions
from sysmcp.history import state
from sysmcp.history.snapshots import (
    MIN_THRESHOLD,
    Baseline,
    DiskReading,
    ScanSnapshot,
    Series,
    baseline_entry,
    build_scan,
    filesystem_id,
    options_key,
    parse_gnu_manifest,
)

if TYPE_CHECKING:  # disk_usage imports this module too, walks nothing, and opens no SQLite until it records
    from sysmcp.fs.usage import Request, Usage
    from sysmcp.fs.walk import WalkOptions
    from sysmcp.history.store import Store

PRUNE_EVERY = 25  # snapshots between two retention passes when no `sysmcp snapshot` timer prunes


def series_of(path: str | bytes | os.PathLike[str], options: WalkOptions) -> Series:
    """The series a scan of ``path`` with ``options`` belongs to (raises OSError if path is gone)."""
    raw = os.fsencode(path)
    return Series(
        state.host_name(), filesystem_id(raw), raw, options_key(options.one_file_system, options.exclude)
    )


def latest(store: Store, series: Series, *, complete: bool = True, before: int | None = None) -> int | None:
    """The id of the newest snapshot of ``series`` (complete ones only, by default)."""
    for info in store.snapshots("scan", series.root, limit=200, count_rows=False):
        if info.series == series and not (complete and info.partial) and (before is None or info.id < before):
            return info.id
    return None


@dataclass(frozen=True)
class RecordedScan:
    """A scan and what it left: the snapshot saved (None if none) and, when a write failed, the
    store's reason (``Saved.reason``)."""

    usage: Usage
    snapshot: ScanSnapshot | None = None
    unsaved: str | None = None


def record_scan(
    store: Store | None,
    path: str | bytes | os.PathLike[str],
    options: WalkOptions,
    request: Request,
    run: Callable[[Request], Usage],
    clock: Callable[[], float] = state.now,
) -> RecordedScan:
    """``run(request)``, recording every directory's totals in ``store`` (None: history is off, the
    scan runs unrecorded). In a worker."""
    if store is None:
        return RecordedScan(run(request))
    try:
        series = series_of(path, options)
    except OSError:
        return RecordedScan(run(request))
    previous = latest(store, series)
    keep_also = store.dir_names(previous) if previous is not None else frozenset()
    usage = run(replace(request, record_floor=MIN_THRESHOLD, record_also=keep_also))
    if usage.totals is None or usage.recorded is None:
        return RecordedScan(usage)
    totals = usage.totals
    rows = [("", totals.disk, totals.apparent, totals.files, totals.newest), *usage.recorded]
    listed = [] if request.newer_than is not None else usage.files  # a filtered list is no "largest files"
    files = [(rel, disk, apparent, usage.modified.get(rel)) for apparent, disk, rel in listed]
    snap = build_scan(series, clock(), usage.stopped is not None, rows, files, keep_also)
    saved = store.save_scan(snap)
    if not saved.ok:
        return RecordedScan(usage, None, saved.reason)
    if saved.id is not None and saved.id % PRUNE_EVERY == 0:  # a server with no timer stays bounded too
        from sysmcp.history.store import Retention

        store.prune(Retention())
    return RecordedScan(usage, snap)


@dataclass(frozen=True)
class KeptBaseline:
    """What became of an integrity baseline: the files kept, or the one fact that kept none."""

    files: int = 0
    kept: bool = False
    history_off: bool = False
    unreadable: str | None = None  # the root could not be stat'ed: its strerror
    unsaved: str | None = None  # the store refused the write: its reason


def record_baseline(
    store: Store | None,
    base: bytes,
    manifest: bytes,
    algorithm: str,
    options: WalkOptions,
    partial: bool,
    clock: Callable[[], float] = state.now,
) -> KeptBaseline:
    """hash_tree's manifest plus each file's size, mtime, mode and owner (one lstat each), as an
    integrity baseline of ``base``. In a worker."""
    if store is None:
        return KeptBaseline(history_off=True)
    try:
        series = series_of(base, options)
    except OSError as exc:
        return KeptBaseline(unreadable=exc.strerror)
    files = {}
    for name, digest in parse_gnu_manifest(manifest):
        try:
            st = os.lstat(os.path.join(base, name))
        except OSError:
            continue
        files[name] = baseline_entry(digest, st)
    saved = store.save_baseline(Baseline(series, clock(), algorithm, files, partial))
    if not saved.ok:
        return KeptBaseline(unsaved=saved.reason)
    return KeptBaseline(len(files), kept=True)


def _mount_of(path: str) -> tuple[str, str]:
    """(mount point, identity as disk_usage records it) of the filesystem holding ``path``."""
    table = default_partitions()()
    mount = table.holding(path, os.stat(path).st_dev)
    if mount is None:
        return "/", ""
    return mount.mount_point, f"{mount.device}|{mount.fs_type}"


def disk_reading(path: str | os.PathLike[str], clock: Callable[[], float]) -> tuple[DiskReading, str]:
    """A reading of the filesystem holding ``path`` now, with its mount point (raises OSError)."""
    point, identity = _mount_of(os.fspath(path))
    vfs = os.statvfs(path)
    frsize = vfs.f_frsize or vfs.f_bsize
    total, free = vfs.f_blocks * frsize, vfs.f_bavail * frsize
    used = total - vfs.f_bfree * frsize
    inodes = (vfs.f_files - vfs.f_ffree, vfs.f_ffree)
    return DiskReading(
        state.host_name(), os.fsencode(point), identity, clock(), total, used, free, *inodes
    ), point
