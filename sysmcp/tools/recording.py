"""The small hooks through which dir_usage, disk_usage and hash_tree leave history behind.

Why here and not in each tool: each tool adds one call; what a scan's result holds is turned into a
snapshot in one place, and a write that failed comes back as one sentence for the answer. Every
hook does nothing when history is off (``sysmcp.history.state.active()`` is None).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from sysmcp.history.store import Retention, Store
from sysmcp.protocol.threads import run_in_thread

if TYPE_CHECKING:  # disk_usage records through here too, and walks nothing
    from sysmcp.fs.usage import Request, Usage
    from sysmcp.fs.walk import WalkOptions

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


def recorded_scan(
    path: str | os.PathLike[str],
    options: WalkOptions,
    request: Request,
    run: Callable[[Request], Usage],
    clock: Callable[[], float] = state.now,
) -> tuple[Usage, ScanSnapshot | None, str | None]:
    """``run(request)``, recording every directory's totals for history when history is on: the
    usage, the snapshot saved (None if none) and a sentence when it could not be saved. In a worker."""
    store = state.active()
    if store is None:
        return run(request), None, None
    try:
        series = series_of(path, options)
    except OSError:
        return run(request), None, None
    previous = latest(store, series)
    keep_also = store.dir_names(previous) if previous is not None else frozenset()
    usage = run(replace(request, record_floor=MIN_THRESHOLD, record_also=keep_also))
    if usage.totals is None or usage.recorded is None:
        return usage, None, None
    totals = usage.totals
    rows = [("", totals.disk, totals.apparent, totals.files, totals.newest), *usage.recorded]
    listed = [] if request.newer_than is not None else usage.files  # a filtered list is no "largest files"
    files = [(rel, disk, apparent, usage.modified.get(rel)) for apparent, disk, rel in listed]
    snap = build_scan(series, clock(), usage.stopped is not None, rows, files, keep_also)
    saved = store.save_scan(snap)
    if not saved.ok:
        return usage, None, f"History: {saved.reason}."
    if saved.id is not None and saved.id % PRUNE_EVERY == 0:  # a server with no timer stays bounded too
        store.prune(Retention())
    return usage, snap, None


async def record_disk(
    filesystems: Sequence[dict[str, Any]], clock: Callable[[], float] = state.now
) -> str | None:
    """Keep disk_usage's figures (a few tiny rows), off the event loop; a sentence if not saved.

    The store is opened by the worker that writes (``state.active()`` in ``save``), not here: the
    event loop does no file I/O, and a fresh process opens one SQLite connection, not two."""
    if not state.configured():
        return None
    taken = clock()
    host = state.host_name()
    readings = [
        DiskReading(
            host,
            os.fsencode(fs["mount_point"]),
            f"{fs.get('device', '')}|{fs.get('fs_type', '')}",
            taken,
            fs["total_bytes"],
            fs["used_bytes"],
            fs["free_bytes"],
            (fs.get("inodes") or {}).get("used"),
            (fs.get("inodes") or {}).get("free"),
        )
        for fs in filesystems
        if fs.get("status") == "ok" and "used_bytes" in fs
    ]

    def save(_: None) -> str | None:
        store = state.active()
        if store is None:
            return None
        saved = store.save_readings(readings)
        return None if saved.ok else f"History: {saved.reason}."

    result: str | None = await run_in_thread(save, None, None)
    return result


def record_baseline(
    base: bytes,
    manifest: bytes,
    algorithm: str,
    options: WalkOptions,
    partial: bool,
    clock: Callable[[], float] = state.now,
) -> str:
    """hash_tree's manifest plus each file's size, mtime, mode and owner (one lstat each), as an
    integrity baseline of ``base``; the sentence for the answer. In a worker."""
    store = state.active()
    if store is None:
        return "No baseline kept: history is off (--no-history, or the state directory cannot be written)."
    try:
        series = series_of(base, options)
    except OSError as exc:
        return f"No baseline kept: {exc.strerror}."
    files = {}
    for name, digest in parse_gnu_manifest(manifest):
        try:
            st = os.lstat(os.path.join(base, name))
        except OSError:
            continue
        files[name] = baseline_entry(digest, st)
    saved = store.save_baseline(Baseline(series, clock(), algorithm, files, partial))
    if not saved.ok:
        return f"No baseline kept: {saved.reason}."
    return f"Integrity baseline of {len(files):,} files kept (what_changed compares against it)."


def baseline_series(path: Path, options: WalkOptions) -> Series | None:
    try:
        return series_of(path, options)
    except OSError:
        return None
