"""what_changed's engine: choose or make the two snapshots, diff them, fit the fill rate. No words.

The flow of docs/history.md: the store finds the snapshots of the path's series (the roots applied
on read), a fresh scan when the newest is stale (it leaves a snapshot), ``history.diff`` (pure), the
disk readings' fit. ``compare(Comparison, progress, cancel) -> Findings`` (``sysmcp.engine.calls``'
shape). What the answer notes is kept as facts in the ``Findings``; the tool
(``sysmcp.tools.what_changed``) reads the arguments into a ``Comparison`` and words the ``Findings``.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

from sysmcp.engine.calls import Cancel, Progress, never_cancelled, no_progress
from sysmcp.engine.faults import EngineError
from sysmcp.engine.hashing import ALGORITHMS, TreeRequest, hash_path
from sysmcp.engine.opens import Parents
from sysmcp.engine.usage import Usage, UsageRequest, scan_usage
from sysmcp.engine.walk import (
    GONE,
    ScanStopped,
    SkipCounter,
    WalkOptions,
    mount_points_below,
)
from sysmcp.history import state
from sysmcp.history.diff import (
    BaselineDiff,
    FillRate,
    Growth,
    ScanDiff,
    diff_baselines,
    diff_scan_rows,
    fill_rate,
    growth_between,
    most_lost,
)
from sysmcp.history.recording import (
    baseline_of,
    disk_reading,
    lstat_below,
    options_of,
    record_scan,
    series_of,
    unreadable_of,
)
from sysmcp.history.snapshots import Baseline, FileRow, ScanSnapshot, SnapshotInfo, within
from sysmcp.history.store import DirRows, Pruned, Store

FRESH_S = 300.0  # a snapshot younger than this answers "until now" without a new scan
FALLBACK_WINDOW_S = 86400.0  # "last" with nothing to compare: files modified in the last day
MIN_FIT_S = 600.0  # readings or snapshots closer than this give no rate (noise, not a trend)
INTEGRITY_KEEP = 256 << 20  # bytes of the manifest hashed now that the integrity check keeps in memory


@dataclass(frozen=True)
class Comparison:
    """What to compare: ``path`` (absolute, resolved) from ``since`` (epoch seconds; None: the
    snapshot before the newest) to ``until`` (None: now, scanning afresh when the newest snapshot is
    stale), with ``now`` the time those were read against. ``files_kept``: the largest files the
    fresh scan keeps; ``visible``: whether the roots in force let this call show a path; ``store``:
    the history store, opened in the worker (opening it is I/O; None: history is off); ``clock``: the
    time snapshots and readings are taken at; ``monotonic``: the clock of the time budget."""

    path: bytes
    since: float | None
    until: float | None
    now: float
    timeout_s: float
    options: WalkOptions
    files_kept: int
    visible: Callable[[bytes | str], bool] = field(default_factory=lambda: within(None))
    store: Callable[[], Store | None] = state.active
    clock: Callable[[], float] = state.now
    monotonic: Callable[[], float] = time.monotonic


class LowerBound(NamedTuple):
    """No snapshot to compare with: the files modified since then, (relative path, disk bytes)."""

    files: int
    disk: int
    rows: list[tuple[str, int]]
    stopped: str | None = None  # why that walk stopped early: only what it reached is counted


@dataclass
class Findings:
    """What the comparison found, in facts for the words."""

    history: bool
    old: ScanSnapshot | None = None
    new: ScanSnapshot | None = None
    fresh: bool = False
    diff: ScanDiff | None = None
    fill: FillRate | None = None
    mount_point: str = ""
    integrity: BaselineDiff | None = None  # the newest integrity baseline against the tree hashed now
    integrity_taken: float | None = None  # when that baseline was taken
    integrity_stopped: str | None = None  # why hashing now stopped early (the budget, a cancel)
    #: What hashing the tree now met and a baseline never holds (symlinks, FIFOs, sockets, devices), by
    #: the walk's skip reason: not compared, so never a finding.
    integrity_not_files: dict[str, int] = field(default_factory=dict)
    baselines: int = 0
    growth: Growth | None = None  # the filesystem's used bytes over the compared span, however short
    lower_bound: LowerBound | None = None
    unsaved: str | None = None  # the store's reason the fresh scan's snapshot was not saved
    unread: str | None = None  # why the store's snapshots could not be read: nothing compared
    #: Why comparing the snapshots stopped before the end: its time budget ran out, the scan made now
    #: stopped early (its snapshot partial), or a prune deleted a snapshot as it was read (``unread``).
    stopped: Literal["time_budget", "scan_stopped", "snapshot_pruned"] | None = None
    scan_stopped_reason: str | None = None  # with "scan_stopped": why the scan made now stopped early
    not_kept: bool = False  # a fresh scan left no snapshot
    oldest_instead: float | None = None  # none as old as since: when the oldest one compared was taken
    #: Snapshots of the path (same host, root and options) of another filesystem once mounted there:
    #: never compared with this one, yet not "no snapshot yet".
    other_filesystem: int = 0
    #: Snapshots of the series before the newer end that stopped early (partial): never compared, their
    #: totals being of part of the tree, yet not "no snapshot yet" when no complete one is there.
    partial_before: int = 0
    readings_span_s: float | None = None  # the disk readings span only this: too short for a fill rate
    notes: list[str] = field(default_factory=list)  # the fill rate's own (history.diff's)
    skipped: SkipCounter = field(default_factory=SkipCounter)  # what the fresh scan left out


def _pick(infos: Sequence[SnapshotInfo], at: float | None, before_id: int | None) -> SnapshotInfo | None:
    """The newest complete snapshot at or before ``at`` (any time for None) and older than ``before_id``."""
    for info in infos:  # newest first
        if info.partial or (before_id is not None and info.id >= before_id):
            continue
        if at is None or info.taken <= at:
            return info
    return None


def compare(
    asked: Comparison, progress: Progress = no_progress, cancel: Cancel = never_cancelled
) -> Findings:
    """Choose or make the snapshots in the store, diff them, fit the fill rate; ``progress`` counts
    the entries scanned (or files hashed). Raises OSError when the path cannot be scanned."""
    since, until, now = asked.since, asked.until, asked.now
    clock, monotonic, store = asked.clock, asked.monotonic, asked.store()
    found = Findings(store is not None)
    whole = UsageRequest(
        asked.files_kept, 0, 1, True, 0, asked.timeout_s, root=asked.path, options=asked.options
    )

    def scan(request: UsageRequest) -> Usage:
        usage = scan_usage(request, lambda entries, _: progress(entries, None), cancel, clock=monotonic)
        found.skipped.merge(usage.skipped.as_dict(), usage.skipped.named)
        return usage

    def modified_since() -> UsageRequest:
        """The walk that finds the files modified since ``since`` (the last day for "last")."""
        window = now - since if since is not None else FALLBACK_WINDOW_S
        return replace(whole, newer_than=now - window)

    if store is None:
        found.lower_bound = _lower_bound(scan(modified_since()))
        return found
    started = monotonic()

    def left() -> float:
        return asked.timeout_s - (monotonic() - started)

    def stop() -> str | None:
        """Asked while the snapshots are compared: a cancel raises, the budget spent stops."""
        cancel()
        return "its time budget ran out" if left() <= 0 else None

    def finish() -> Findings:
        _integrity(found, store, asked, left(), cancel)
        return _disk(found, store, asked)

    series = series_of(asked.path, asked.options)
    of_path = store.snapshots("scan", series.root, limit=2000, count_rows=False)
    infos = [i for i in of_path if i.series.same_as(series)]
    found.other_filesystem = sum(
        not i.series.same_as(series) and replace(i.series, fs_id=series.fs_id) == series for i in of_path
    )
    found.unread = None if infos else store.unread()
    if found.unread is not None:  # not read is not "none yet"
        found.lower_bound = _lower_bound(scan(modified_since()))
        return found
    newest = _pick(infos, until, None)
    alone = newest is not None and _pick(infos, None, newest.id) is None  # nothing older to compare it with
    if until is None and (newest is None or alone or now - newest.taken > FRESH_S or newest.taken > now + 60):
        # Something to compare with: the snapshot at or before since, else the oldest (``oldest_instead``).
        older = _pick(infos, since, None) if since is not None else newest
        if older is None and since is not None:
            older = next((i for i in reversed(infos) if not i.partial), None)
        done = record_scan(store, whole, scan, clock)  # the whole tree: its largest files are kept too
        found.unsaved = done.unsaved
        # Nothing to compare with: a second walk (of cached entries) finds the files modified since, in
        # what is left of the time budget, its entries counted on from the first's (its skips are the
        # first's again: not counted twice).
        if older is None:
            first = done.usage.entries
            again = replace(modified_since(), timeout_s=max(left(), 0.001))
            found.lower_bound = _lower_bound(
                scan_usage(again, lambda entries, _: progress(first + entries, None), cancel, clock=monotonic)
            )
        if done.snapshot is None:
            found.not_kept = True
            return finish()
        found.new, found.fresh = done.snapshot, True
        if done.snapshot.partial:
            found.stopped, found.scan_stopped_reason = "scan_stopped", done.usage.stopped
    elif newest is not None:
        found.new = store.load_scan(newest.id, dirs=False)
        found.unread = None if found.new is not None else store.unread()  # not read is not "none"
    if found.new is None or found.new.id is None:
        if newest is None and until is not None:  # none complete by then: the partial ones are no "none"
            found.partial_before = sum(i.partial and i.taken <= until for i in infos)
        return finish()
    old_info = _pick(infos, since, found.new.id)
    if old_info is None and since is not None:
        old_info = next((i for i in reversed(infos) if not i.partial and i.id < found.new.id), None)
        if old_info is not None:
            found.oldest_instead = old_info.taken
    if old_info is not None:
        found.old = store.load_scan(old_info.id, dirs=False)
        found.unread = None if found.old is not None else store.unread()
    if found.old is None:
        found.partial_before = sum(i.partial and i.id < found.new.id for i in infos)
    if found.old is not None:
        try:
            found.diff = _diff(found.old, found.new, found.fresh, store, asked, stop)
        except Pruned as gone:
            found.unread, found.stopped = str(gone), "snapshot_pruned"
            return finish()
        found.unread = None if found.diff is not None else store.unread()
        if found.diff is not None and found.diff.stopped is not None:
            found.stopped = "time_budget"
        if found.diff is not None and found.fresh:
            _look_again(found.diff, series.root)
    return finish()


def _diff(
    old: ScanSnapshot,
    new: ScanSnapshot,
    fresh: bool,
    store: Store,
    asked: Comparison,
    stop: Callable[[], str | None],
) -> ScanDiff | None:
    """The two snapshots diffed as their directories are read from the store in name order (the
    fresh scan's from memory), so neither is held whole; None when the store could not be read. Raises
    ``Pruned`` when a snapshot was deleted as it was read."""
    visible = asked.visible
    shown = _shown(visible, old.series.root)

    def work(rows: DirRows) -> ScanDiff:
        assert new.id is not None and old.id is not None
        new_rows = iter(sorted(new.dirs.items())) if fresh else rows(new.id)
        return diff_scan_rows(_head(old, visible), _head(new, visible), rows(old.id), new_rows, stop, shown)

    return store.with_dir_rows(work, None)


def _look_again(diff: ScanDiff, root: bytes) -> None:
    """A file gone from a fresh scan's largest files may only have shrunk below them, or (of just the
    size of the smallest kept) been cut from them among its equals: one lstat each tells (the snapshot
    is of now). One that cannot be looked at (a directory on the way replaced or refused by the
    filesystem) is neither removed nor shrunk: a note says how many."""
    removed = []
    untold: list[str] = []
    with Parents() as parents:
        for row in diff.removed_files + diff.tied_files:  # the older list's order, largest first
            try:
                st = lstat_below(parents, root, row.path)
            except OSError as exc:
                untold.append(exc.strerror or str(exc))
                continue
            if st is None:
                removed.append(row)
            elif (now := FileRow(row.path, st.st_blocks * 512, st.st_size, st.st_mtime)).disk < row.disk:
                diff.shrunk_files.append((row, now))
    diff.removed_files, diff.tied_files = removed, []
    diff.shrunk_files.sort(key=most_lost)
    if untold:
        diff.notes.append(
            f"{len(untold):,} file{'s' if len(untold) != 1 else ''} gone from the largest could not be "
            f"looked at again ({untold[0]}): not called removed"
        )


def _lower_bound(usage: Usage) -> LowerBound:
    files, _, disk = usage.matching or (0, 0, 0)
    return LowerBound(files, disk, [(rel, d) for _, d, rel in usage.files], usage.stopped)


def _shown(visible: Callable[[bytes | str], bool], root: bytes) -> Callable[[bytes], bool]:
    """Whether the roots in force let this call show a name relative to ``root``."""
    return lambda rel: bool(visible(os.path.join(root, rel) if rel else root))


def _head(snap: ScanSnapshot, visible: Callable[[bytes | str], bool]) -> ScanSnapshot:
    """The snapshot as the diff takes it beside its directories' rows: of its directories only the
    root's totals, and only what the roots in force let this call show."""
    ok = _shown(visible, snap.series.root)
    dirs = {b"": snap.dirs[b""]} if b"" in snap.dirs and ok(b"") else {}
    files = [f for f in snap.files if ok(f.path)]
    return ScanSnapshot(snap.series, snap.taken, snap.partial, snap.threshold, dirs, files, snap.id)


def _visible_files(baseline: Baseline, visible: Callable[[bytes | str], bool]) -> Baseline:
    """The baseline with only the files (read or not) the roots in force let this call show."""
    ok = _shown(visible, baseline.series.root)
    baseline.files = {name: f for name, f in baseline.files.items() if ok(name)}
    baseline.unread = {name: u for name, u in baseline.unread.items() if ok(name)}
    if baseline.nodes is not None:
        baseline.nodes = {name: n for name, n in baseline.nodes.items() if ok(name)}
    return baseline


def _integrity(found: Findings, store: Store, asked: Comparison, budget_s: float, cancel: Cancel) -> None:
    """The newest integrity baseline of the path against the tree hashed now, as ``aide --check``
    does, within what is left of the time budget."""
    root = asked.path
    infos = store.snapshots("baseline", root, limit=200, count_rows=False)  # the newest first
    found.baselines = len(infos)
    if not infos:
        return
    chosen = next((info for info in infos if not info.partial), infos[0])  # a complete one if any
    baseline = store.load_baseline(chosen.id)
    if baseline is None:
        return
    found.integrity_taken = baseline.taken
    algorithm = ALGORITHMS.get(baseline.algorithm)
    if algorithm is None:
        found.integrity = BaselineDiff(False, f"the baseline's digest {baseline.algorithm} is unknown here")
        return
    request = TreeRequest(
        root,
        algorithm,
        "gnu",
        options_of(baseline.series),
        max(budget_s, 0.001),
        INTEGRITY_KEEP,
        0,
        shown=os.fsdecode(root),
        clock=asked.monotonic,
        nodes=baseline.nodes is not None,  # what the baseline did not record is not compared
    )
    try:  # its progress (files and bytes together) is not the scan's entries: not reported
        tree = hash_path(request, no_progress, cancel)
    except (EngineError, OSError, ScanStopped) as exc:
        found.integrity = BaselineDiff(False, f"the tree could not be hashed now: {exc}")
        return
    if tree.manifest is None:
        found.integrity = BaselineDiff(False, "the tree's manifest is too large to compare in memory")
        return
    manifest, stopped, unreadable = bytes(tree.manifest), bool(tree.stopped), unreadable_of(tree)
    found.integrity_not_files = {
        k: n for k, n in tree.skipped.items() if k in ("symlink", "special_file") and n
    }
    now = baseline_of(baseline.series, root, manifest, baseline.algorithm, stopped, 0.0, unreadable)
    visible = asked.visible
    result = diff_baselines(_visible_files(baseline, visible), _visible_files(now, visible))
    _mounted_over(result, root, options_of(baseline.series))
    # Not hashed now is not removed: only a file that is gone is. One still there was not reached in time,
    # or could not be read (a root-squashed export, a mode changed since).
    # A directory, link or special file is still there when one of its type is.
    expected = result.removed_kind
    with Parents() as parents:
        now_there = {p: _there_now(parents, root, p, expected.get(p, stat.S_IFREG)) for p in result.removed}
    there = [p for p, kind in now_there.items() if kind == expected.get(p, stat.S_IFREG)]
    result.replaced = {
        p: kind
        for p, kind in now_there.items()
        if kind is not None and kind != stat.S_IFREG and p not in expected
    }
    if there:
        kept = set(there)
        result.removed = [p for p in result.removed if p not in kept]
    if tree.stopped:
        found.integrity_stopped = tree.stopped
        result.not_checked = len(there)
    else:
        result.unreadable = sorted([*result.unreadable, *there])
    found.integrity = result


def _mounted_over(result: BaselineDiff, root: bytes, options: WalkOptions) -> None:
    """Move the names the tree hashed now did not reach because another filesystem is mounted at or
    above them now (a mount point the walk does not cross) from removed and unreadable to
    ``mounted_over``: they were not looked at. Done before anything below is looked at again, as the
    walk does: the root of a hung network mount would stall an ``lstat``."""
    if not (result.removed or result.unreadable):
        return
    points = {
        os.fsencode(os.path.join(parent, name))
        for parent, names in mount_points_below(root, options).items()
        for name in names
    }
    if not points:
        return

    def over(path: bytes) -> bool:
        path = path.rstrip(b"/")
        at = len(path)
        while at != -1:
            if path[:at] in points:
                return True
            at = path.rfind(b"/", 0, at)
        return False

    mounted = [p for p in (*result.removed, *result.unreadable) if over(p)]
    if not mounted:
        return
    result.removed = [p for p in result.removed if not over(p)]
    result.unreadable = [p for p in result.unreadable if not over(p)]
    result.mounted_over = sorted(mounted)
    result.mount_points = {p for p in mounted if p.rstrip(b"/") in points}


def _there_now(parents: Parents, root: bytes, relative: bytes, expected: int = stat.S_IFREG) -> int | None:
    """What is at the name of a baseline file the tree hashed now left out, by its ``S_IFMT`` type
    (reached without following a symlink on the way): ``S_IFREG`` for a regular file still there, or
    one behind a directory that could not be looked into, which tells nothing of it (this user may not
    search it, no descriptor was left to open it, the filesystem refused it: an I/O error, a FUSE
    daemon's own EMFILE; or it was replaced while the paths below it were read); a symlink, directory or
    FIFO now is the file gone, the name not; None when nothing is there, or it is behind a symlink or a
    file (``GONE``). ``expected``: the type the baseline recorded there (a directory, link or special
    file's), given back where nothing can be told."""
    try:
        dir_fd, name = parents.parent(os.path.join(root, relative))
        return stat.S_IFMT(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError as exc:
        return None if exc.errno in GONE else expected
    except ValueError:  # a stored name that is not normalised ('../x')
        return None


def _disk(found: Findings, store: Store, asked: Comparison) -> Findings:
    """Record a reading of the filesystem now and fit its fill rate over the stored ones."""
    try:
        reading, point = disk_reading(os.fsdecode(asked.path), asked.clock)
    except OSError:
        return found
    store.save_readings([reading])
    readings = store.readings(os.fsencode(point))
    fill = fill_rate(readings, asked.since) or fill_rate(readings)
    start = found.old.taken if found.old is not None else asked.since
    found.growth = growth_between(readings, start, asked.until)
    if not asked.visible(point):  # the mount point is outside the roots: the filesystem is named by the path
        point = os.fsdecode(asked.path)
    found.mount_point = point
    if fill is not None and fill.span_s < MIN_FIT_S:
        found.readings_span_s = fill.span_s
    elif fill is not None:
        found.fill = fill
        found.notes += fill.notes
    return found
