"""what_changed's worker: choose or make the two snapshots, diff them, fit the fill rate. No words.

Why apart from the tool module: the tool keeps its schema, words and fleet merge; this is the flow
of docs/history.md — the store finds the snapshots (roots applied on read), a fresh scan when the
newest is stale (it leaves a snapshot), ``history.diff`` (pure), the disk readings' fit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sysmcp.fs.mounts import default_partitions
from sysmcp.fs.usage import Request, scan_usage
from sysmcp.fs.walk import SkipCounter
from sysmcp.history import state
from sysmcp.history.diff import BaselineDiff, FillRate, ScanDiff, diff_baselines, diff_scans, fill_rate
from sysmcp.history.snapshots import DiskReading, ScanSnapshot, SnapshotInfo
from sysmcp.history.store import Store
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ArgumentError
from sysmcp.tools.dir_usage import FULL_FILES, age_text, parse_duration, usage_report
from sysmcp.tools.recording import recorded_scan, series_of
from sysmcp.tools.walking import walk_options

FRESH_S = 300.0  # a snapshot younger than this answers "until now" without a new scan
MAX_TIMEOUT_S = 300.0
FALLBACK_WINDOW_S = 86400.0  # "last" with nothing to compare: files modified in the last day
MIN_FIT_S = 600.0  # readings or snapshots closer than this give no rate (noise, not a trend)


def parse_when(value: str, name: str, now: float) -> float:
    """Epoch seconds of '24h' (back from now) or an ISO 8601 time; ``ArgumentError`` naming ``name``."""
    try:
        return now - parse_duration(value, name)
    except ArgumentError:
        pass
    try:
        return datetime.fromisoformat(value.strip()).timestamp()
    except ValueError:
        raise ArgumentError(
            f"Invalid arguments: {name!r} must be a duration ('24h', '7d'), an ISO 8601 time "
            f"('2026-11-30T09:00'){' or last' if name == 'since' else ''}, got {value!r}"
        ) from None


@dataclass
class Outcome:
    """What the worker found, for the words."""

    history: bool
    old: ScanSnapshot | None = None
    new: ScanSnapshot | None = None
    fresh: bool = False
    diff: ScanDiff | None = None
    fill: FillRate | None = None
    mount_point: str = ""
    integrity: BaselineDiff | None = None
    baselines: int = 0
    lower_bound: tuple[int, int, list[tuple[str, int, float | None]]] | None = None
    notes: list[str] = field(default_factory=list)


def _pick(infos: Sequence[SnapshotInfo], at: float | None, before_id: int | None) -> SnapshotInfo | None:
    """The newest complete snapshot at or before ``at`` (any time for None) and older than ``before_id``."""
    for info in infos:  # newest first
        if info.partial or (before_id is not None and info.id >= before_id):
            continue
        if at is None or info.taken <= at:
            return info
    return None


def _mount_of(path: str) -> tuple[str, str]:
    """(mount point, identity as disk_usage records it) of the filesystem holding ``path``."""
    table = default_partitions()()
    mount = table.holding(path, os.stat(path).st_dev)
    if mount is None:
        return "/", ""
    return mount.mount_point, f"{mount.device}|{mount.fs_type}"


def compare(
    path: Path,
    args: dict[str, Any],
    now: float,
    meter: Meter | None,
    visible: Any,
    clock: Any = time.time,
    *,
    monotonic: Callable[[], float] = time.monotonic,
) -> Outcome:
    """The worker: choose or make the snapshots, diff them, fit the fill rate. No words.
    ``monotonic``: the clock of the scan's time budget (a test's own)."""
    options = walk_options(args)
    store = state.active()
    since_raw: str = args["since"]
    since = None if since_raw.strip().lower() == "last" else parse_when(since_raw, "since", now)
    until = parse_when(args["until"], "until", now) if "until" in args else None
    timeout = min(float(args["timeout_s"]), MAX_TIMEOUT_S)
    raw = os.fsencode(path)

    report = usage_report(meter)

    def scan(request: Request) -> Any:
        return scan_usage(
            raw,
            options,
            SkipCounter(),
            request,
            report,
            meter.checkpoint if meter is not None else None,
            clock=monotonic,
        )

    base_request = Request(FULL_FILES, 0, 1, True, 0, timeout)
    if store is None:
        window = now - since if since is not None else FALLBACK_WINDOW_S
        usage = scan(Request(FULL_FILES, 0, 1, True, 0, timeout, newer_than=now - window))
        outcome = Outcome(False)
        outcome.lower_bound = _lower_bound(usage)
        outcome.notes.append(
            "history is off on this host (--no-history, or its state directory cannot be written)"
        )
        return outcome
    outcome = Outcome(True)
    series = series_of(path, options)
    infos = [
        i for i in store.snapshots("scan", series.root, limit=2000, count_rows=False) if i.series == series
    ]
    newest = _pick(infos, until, None)
    alone = newest is not None and _pick(infos, None, newest.id) is None  # nothing older to compare it with
    if until is None and (newest is None or alone or now - newest.taken > FRESH_S or newest.taken > now + 60):
        older = _pick(infos, since, None) if since is not None else newest
        filtered = older is None
        request = base_request
        if filtered:  # nothing to compare with: the same walk finds the files modified since
            window = now - since if since is not None else FALLBACK_WINDOW_S
            request = Request(FULL_FILES, 0, 1, True, 0, timeout, newer_than=now - window)
        usage, snap, note = recorded_scan(path, options, request, scan, clock)
        if note:
            outcome.notes.append(note.removeprefix("History: "))
        if filtered:
            outcome.lower_bound = _lower_bound(usage)
        if snap is None:
            if outcome.lower_bound is None:
                outcome.notes.append("the fresh scan could not be kept, so nothing was compared")
            return _disk(outcome, store, path, since, visible, clock)
        outcome.new, outcome.fresh = snap, True
    elif newest is not None:
        outcome.new = store.load_scan(newest.id)
    if outcome.new is None or outcome.new.id is None:
        return _disk(outcome, store, path, since, visible, clock)
    old_info = _pick(infos, since, outcome.new.id)
    if old_info is None and since is not None:
        old_info = next((i for i in reversed(infos) if not i.partial and i.id < outcome.new.id), None)
        if old_info is not None:
            outcome.notes.append(
                f"no snapshot as old as asked: compared with the oldest, {when(old_info.taken)}"
            )
    if old_info is not None:
        outcome.old = store.load_scan(old_info.id)
    if outcome.old is not None:
        outcome.diff = diff_scans(_filtered(outcome.old, visible), _filtered(outcome.new, visible))
    _integrity(outcome, store, series.root, since)
    return _disk(outcome, store, path, since, visible, clock)


def _lower_bound(usage: Any) -> tuple[int, int, list[tuple[str, int, float | None]]]:
    files, _, disk = usage.matching or (0, 0, 0)
    rows = [(rel, d, usage.modified.get(rel)) for _, d, rel in usage.files]
    return files, disk, rows


def _filtered(snap: ScanSnapshot, visible: Any) -> ScanSnapshot:
    """The snapshot with only what the roots in force let this call show."""
    root = snap.series.root

    def ok(rel: bytes) -> bool:
        return bool(visible(os.path.join(root, rel) if rel else root))

    dirs = {p: d for p, d in snap.dirs.items() if ok(p)}
    files = [f for f in snap.files if ok(f.path)]
    return ScanSnapshot(snap.series, snap.taken, snap.partial, snap.threshold, dirs, files, snap.id)


def _integrity(outcome: Outcome, store: Store, root: bytes, since: float | None) -> None:
    infos = [
        i for i in store.snapshots("baseline", root, limit=200, count_rows=False) if i.series.root == root
    ]
    outcome.baselines = len(infos)
    if len(infos) < 2:
        return
    newest = store.load_baseline(infos[0].id)
    older = _pick(infos[1:], since, None) or infos[-1]
    old = store.load_baseline(older.id)
    if newest is not None and old is not None:
        outcome.integrity = diff_baselines(old, newest)


def disk_reading(path: Path, clock: Any) -> tuple[DiskReading, str]:
    """A reading of the filesystem holding ``path`` now, with its mount point (raises OSError)."""
    point, identity = _mount_of(str(path))
    vfs = os.statvfs(path)
    frsize = vfs.f_frsize or vfs.f_bsize
    total, free = vfs.f_blocks * frsize, vfs.f_bavail * frsize
    used = total - vfs.f_bfree * frsize
    inodes = (vfs.f_files - vfs.f_ffree, vfs.f_ffree)
    return DiskReading(
        state.host_name(), os.fsencode(point), identity, clock(), total, used, free, *inodes
    ), point


def _disk(
    outcome: Outcome, store: Store, path: Path, since: float | None, visible: Any, clock: Any
) -> Outcome:
    """Record a reading of the filesystem now and fit its fill rate over the stored ones."""
    try:
        reading, point = disk_reading(path, clock)
    except OSError:
        return outcome
    store.save_readings([reading])
    readings = store.readings(os.fsencode(point))
    fill = fill_rate(readings, since) or fill_rate(readings)
    if not visible(point):
        point = str(path)  # the mount point is outside the roots: the filesystem is named by the path
    outcome.mount_point = point
    if fill is not None and fill.span_s < MIN_FIT_S:
        outcome.notes.append(
            f"the disk readings of {point} span only {age_text(fill.span_s)}: too short for a fill rate "
            "(disk_usage with sample_s gives the short-term rate)"
        )
    elif fill is not None:
        outcome.fill = fill
        outcome.notes += fill.notes
    return outcome


def when(epoch: float | None) -> str:
    if epoch is None:
        return "?"
    return time.strftime("%a %d %b %H:%M", time.localtime(epoch))
