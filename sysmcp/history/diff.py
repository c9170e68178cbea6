"""Two snapshots in, the changes out: pure functions, no I/O, no clock.

Why pure: every corner (a clock set back, two snapshots with one time, a filesystem replaced at the
same mount point, a partial scan) is a test of plain values, and ``what_changed`` only words the
result. Directories are compared by relative name; a name missing on one side is a directory that
appeared or disappeared (or, for ``appeared``, one that was below the old snapshot's threshold:
``was_below`` says so and its delta is then exact within that threshold).
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from sysmcp.history.snapshots import (
    FILES_KEPT,
    Baseline,
    BaselineFile,
    BaselineNode,
    DirTotals,
    DiskReading,
    FileRow,
    ScanSnapshot,
    same_filesystem,
    same_reading_filesystem,
)

DAY = 86400.0
_ABSENT = DirTotals(0, 0, 0)  # the totals of a side the directory is missing from
STOP_EVERY = 4096  # directories merged between two asks whether to stop


@dataclass(frozen=True, slots=True)
class DirChange:
    path: bytes  # relative to the snapshots' root
    kind: str  # grew, shrank, appeared, disappeared, modified (same size, a newer file in it)
    old: DirTotals | None
    new: DirTotals | None
    delta: int  # disk bytes
    delta_apparent: int
    per_day: float | None  # disk bytes a day; None when the two times do not allow a rate
    was_below: bool = False  # appeared, and the old snapshot kept no directory this small
    parents: tuple[bytes, ...] = ()  # the parents that carry this same change, nearest first (not listed)

    @property
    def newest(self) -> float | None:
        """The newest file mtime in it now (None: gone, empty, or recorded before sysmcp kept it)."""
        return self.new.newest if self.new is not None else None

    @property
    def files_changed(self) -> bool | None:
        """Whether a file in it is newer than any it held at the older snapshot (None: not known,
        or it exists on one side only)."""
        if self.old is None or self.old.newest is None or self.newest is None:
            return None
        return self.newest > self.old.newest


@dataclass(frozen=True, slots=True)
class Attribution:
    """'+12.4 GiB grew, 11.9 GiB (96 %) of it in these 5 directories': one way only, growth or
    shrinkage (``total`` signed), so the share is never above 100 %."""

    total: int
    covered: int
    paths: tuple[bytes, ...]

    @property
    def percent(self) -> float | None:
        return None if self.total == 0 else 100.0 * self.covered / self.total


@dataclass(slots=True)
class ScanDiff:
    comparable: bool
    reason: str | None  # why not comparable, or what limits the comparison
    old: ScanSnapshot
    new: ScanSnapshot
    seconds: float
    total_delta: int = 0
    changes: list[DirChange] = field(default_factory=list)
    attribution: Attribution | None = None  # where the growth is
    shrinkage: Attribution | None = None  # where the shrinkage is
    new_files: list[FileRow] = field(default_factory=list)
    removed_files: list[FileRow] = field(default_factory=list)  # large files then, gone from the largest now
    #: Files kept then, missing now from a full list whose smallest is just their size: cut among equals
    #: or gone, not known which (a fresh scan looks at them again).
    tied_files: list[FileRow] = field(default_factory=list)
    shrunk_files: list[tuple[FileRow, FileRow]] = field(default_factory=list)  # (then, now), most lost first
    grown_files: list[tuple[FileRow, FileRow]] = field(default_factory=list)  # (then, now), most gained first
    unlisted: list[ScanSnapshot] = field(default_factory=list)  # the sides with no file list: none compared
    new_maybe_grown: bool = False  # the older list was full: a file new to it may have been smaller then
    notes: list[str] = field(default_factory=list)  # what limits the comparison
    stopped: str | None = None  # why comparing the directories stopped before the end (the budget)
    compared: int = 0  # directories merged when it stopped


def diff_scans(old: ScanSnapshot, new: ScanSnapshot) -> ScanDiff:
    """What changed from ``old`` to ``new``, largest changes first (by the size of the change)."""
    return diff_scan_rows(old, new, sorted(old.dirs.items()), sorted(new.dirs.items()))


def diff_scan_rows(
    old: ScanSnapshot,
    new: ScanSnapshot,
    old_rows: Iterable[tuple[bytes, DirTotals]],
    new_rows: Iterable[tuple[bytes, DirTotals]],
    stop: Callable[[], str | None] = lambda: None,
    shown: Callable[[bytes], bool] = lambda path: True,
) -> ScanDiff:
    """``diff_scans`` over each side's directories as rows in byte order of their names (as SQLite
    orders a BLOB key), ``old`` and ``new`` giving the rest (their times, series, root totals, files):
    the two lists are merged as they come, so only the changes are held, never both snapshots.
    ``stop`` is asked every ``STOP_EVERY`` rows; the reason it gives (the budget ran out) ends the
    comparison as not comparable, with ``stopped`` that reason and ``compared`` the rows merged by
    then: changes of only some directories would misstate the whole. A cancel raises from ``stop``.
    A directory ``shown`` refuses (the roots in force hide it) is left out of both sides."""
    seconds = new.taken - old.taken
    if not same_filesystem(old.series.fs_id, new.series.fs_id):
        why = "a different filesystem is mounted there now (its identity changed): the two are not compared"
        return ScanDiff(False, why, old, new, seconds)
    if old.series.options != new.series.options or old.series.root != new.series.root:
        return ScanDiff(False, "the two scans were made with different roots or options", old, new, seconds)
    for side, snap in (("older", old), ("newer", new)):
        if snap.partial:  # what it did not reach would look gone, its total smaller: no fact to tell
            why = f"the {side} scan stopped early: directories it did not reach would look gone"
            return ScanDiff(False, why, old, new, seconds)
    result = ScanDiff(True, None, old, new, seconds)
    if seconds < 0:
        result.notes.append("the clock went backwards between the two snapshots: no rates")
    elif seconds == 0:
        result.notes.append("the two snapshots have the same time: no rates")
    changes = []
    # Directories modified in place (same totals, a newer newest mtime), by name, with that mtime: one
    # is left out when a directory below it, which comes after it in name order, holds that same mtime
    # (the change is the subdirectory's, and only the deepest one is named).
    rewritten_in: dict[bytes, float] = {}
    held: set[bytes] = set()
    merged = 0
    for path, before, after in _merged(old_rows, new_rows):
        merged += 1
        if merged % STOP_EVERY == 0 and (halt := stop()) is not None:
            said = (
                f"comparing the two snapshots stopped early ({halt}) after {merged:,} directories in name "
                "order: what changed is not known"
            )
            return ScanDiff(False, said, old, new, seconds, stopped=halt, compared=merged)
        if not shown(path):
            continue
        if rewritten_in and after is not None and after.newest is not None and path:
            parent = path
            while parent:
                parent = _parent(parent)
                if rewritten_in.get(parent) == after.newest:
                    held.add(parent)
        delta = (after or _ABSENT).disk - (before or _ABSENT).disk
        delta_apparent = (after or _ABSENT).apparent - (before or _ABSENT).apparent
        if before is None:
            kind = "appeared"
        elif after is None:
            kind = "disappeared"
        elif delta == 0 and delta_apparent == 0:
            # Files rewritten in place: the same totals, a newer newest mtime (both known).
            if before.newest is None or after.newest is None or after.newest <= before.newest:
                continue
            rewritten_in[path] = after.newest
            kind = "modified"
        else:
            kind = "grew" if delta > 0 or (delta == 0 and delta_apparent > 0) else "shrank"
        per_day = delta * DAY / seconds if seconds > 0 and kind != "modified" else None
        changes.append(DirChange(path, kind, before, after, delta, delta_apparent, per_day, before is None))
    if held:
        changes = [c for c in changes if c.kind != "modified" or c.path not in held]
    changes.sort(key=lambda c: (-abs(c.delta), c.path))
    result.total_delta = new.total.disk - old.total.disk
    changes = [c for c in changes if c.path != b""]
    top = [c.delta for c in changes if b"/" not in c.path]  # the tree's gross growth and shrinkage
    result.attribution = attribute(changes, sum(d for d in top if d > 0))
    result.shrinkage = attribute(changes, sum(d for d in top if d < 0))
    result.changes = fold_chains(changes)
    result.unlisted = [snap for snap in (old, new) if not snap.lists_files]
    if result.unlisted:  # a file missing from a side that listed none is neither new nor removed
        return result
    then = {f.path: f for f in old.files}
    result.new_files = [
        f for f in new.files if f.path not in then and (f.mtime is None or f.mtime >= old.taken)
    ]
    result.new_maybe_grown = bool(result.new_files) and len(old.files) >= FILES_KEPT
    grown = [(then[f.path], f) for f in new.files if f.path in then and f.disk > then[f.path].disk]
    result.grown_files = sorted(grown, key=lambda pair: (pair[0].disk - pair[1].disk, pair[0].path))
    # A snapshot keeps only its FILES_KEPT largest files: one missing from a full newer list is gone
    # (or shrank below them) only if it was larger than the smallest kept there; one smaller may merely
    # have shrunk, and one of just that size may have been cut from the list among its equals (the
    # walk keeps ties in the order it meets them): neither is called removed.
    now = {f.path: f for f in new.files}
    full = len(new.files) >= FILES_KEPT
    smallest = min((f.disk for f in new.files), default=0) if full else -1
    result.removed_files = [f for f in old.files if f.path not in now and f.disk > smallest]
    result.tied_files = [f for f in old.files if f.path not in now and f.disk == smallest]
    shrunk = [(f, now[f.path]) for f in old.files if f.path in now and now[f.path].disk < f.disk]
    result.shrunk_files = sorted(shrunk, key=most_lost)
    return result


def most_lost(pair: tuple[FileRow, FileRow]) -> tuple[int, bytes]:
    """The order of (then, now) pairs of shrunk files: the most lost first, then by name."""
    return pair[1].disk - pair[0].disk, pair[0].path


def fold_chains(changes: Sequence[DirChange]) -> list[DirChange]:
    """Changes with every chain of directories that carry one change (``c/``, ``c/deep/``,
    ``c/deep/er/`` each −4.8 MiB) listed once: the deepest, its parents in ``parents``."""
    by_path = {c.path: c for c in changes}
    carried: dict[bytes, bytes] = {}  # parent → the child that carries its whole change
    for change in sorted(changes, key=lambda c: -c.path.count(b"/")):  # deepest first
        parent = by_path.get(_parent(change.path))
        if (
            parent is not None
            and parent.path not in carried
            and (parent.delta, parent.delta_apparent) == (change.delta, change.delta_apparent)
            and parent.kind == change.kind
        ):
            carried[parent.path] = change.path
    folded = []
    for change in changes:
        if change.path in carried:
            continue
        parents: list[bytes] = []
        path = change.path
        while (up := _parent(path)) in carried and carried[up] == path and up != path:
            parents.append(up)
            path = up
        folded.append(replace(change, parents=tuple(parents)) if parents else change)
    return folded


def _parent(path: bytes) -> bytes:
    return path.rpartition(b"/")[0]


def _merged(
    old_rows: Iterable[tuple[bytes, DirTotals]], new_rows: Iterable[tuple[bytes, DirTotals]]
) -> Iterator[tuple[bytes, DirTotals | None, DirTotals | None]]:
    """Each name of either side, in byte order, with its totals then and now (None: not there)."""
    olds, news = iter(old_rows), iter(new_rows)
    old, new = next(olds, None), next(news, None)
    while old is not None or new is not None:
        if new is None or (old is not None and old[0] < new[0]):
            assert old is not None
            yield old[0], old[1], None
            old = next(olds, None)
        elif old is None or new[0] < old[0]:
            yield new[0], None, new[1]
            new = next(news, None)
        else:
            yield old[0], old[1], new[1]
            old, new = next(olds, None), next(news, None)


def attribute(changes: Sequence[DirChange], total: int, share: float = 0.5) -> Attribution:
    """The few deepest directories that hold ``total`` (the growth when positive, the shrinkage when
    negative): from the top, a directory whose children changed by at least ``share`` of its own
    change (the same way) is explained by them instead."""
    if total == 0:
        return Attribution(0, 0, ())
    sign = 1 if total > 0 else -1
    moved = {c.path: c.delta * sign for c in changes if c.delta * sign > 0}
    children: dict[bytes, list[bytes]] = {}
    for path in moved:
        children.setdefault(_parent(path), []).append(path)

    def pick(path: bytes, amount: int) -> list[bytes]:
        kids = sorted(children.get(path, []), key=lambda p: -moved[p])
        if kids and sum(moved[k] for k in kids) >= share * amount:
            return [leaf for kid in kids for leaf in pick(kid, moved[kid])]
        return [path]

    chosen = [] if not children.get(b"") else pick(b"", abs(total))
    chosen = [p for p in chosen if p != b""]
    chosen.sort(key=lambda p: -moved[p])
    return Attribution(total, sign * sum(moved[p] for p in chosen), tuple(chosen))


@dataclass(frozen=True, slots=True)
class FillRate:
    """A least-squares line through ``used`` over time (``predict_linear``)."""

    readings: int
    span_s: float
    bytes_per_day: float
    seconds_to_full: float | None  # None when not filling
    growth: int  # used bytes, last reading minus first
    notes: tuple[str, ...] = ()


def _usable(readings: Sequence[DiskReading]) -> tuple[list[DiskReading], list[str]]:
    """The readings of the newest filesystem identity after the last time the clock went backwards,
    and what was left out (none of an empty list)."""
    notes: list[str] = []
    if not readings:
        return [], notes
    identity = readings[-1].fs_id
    same = [r for r in readings if same_reading_filesystem(r.fs_id, identity)]
    if len(same) < len(readings):
        notes.append("readings of another filesystem once mounted there are left out")
    start = 0
    for i in range(1, len(same)):
        if same[i].taken < same[i - 1].taken:
            start = i
    if start:
        notes.append("the clock went backwards: only the readings since then are fitted")
    return same[start:], notes


def fill_rate(readings: Sequence[DiskReading], since: float | None = None) -> FillRate | None:
    """The fit over ``readings`` (in the order they were written) of the newest filesystem identity,
    after the last time the clock went backwards, from ``since`` on; None with fewer than two
    distinct times."""
    usable, notes = _usable(readings)
    used = [r for r in usable if since is None or r.taken >= since]
    times = [r.taken for r in used]
    if len(used) < 2 or max(times) == min(times):
        return None
    mean_t = sum(times) / len(times)
    mean_u = sum(r.used for r in used) / len(used)
    var = sum((t - mean_t) ** 2 for t in times)
    slope = sum((t - mean_t) * (r.used - mean_u) for t, r in zip(times, used, strict=True)) / var
    last = used[-1]
    to_full = last.free / slope if slope > 0 else None
    return FillRate(
        len(used), max(times) - min(times), slope * DAY, to_full, last.used - used[0].used, tuple(notes)
    )


@dataclass(frozen=True, slots=True)
class Growth:
    """Used bytes of a filesystem from its first reading in a span to its last: a fact however short
    the span (only a rate needs a long one)."""

    readings: int
    first: float
    last: float
    used: int  # last minus first

    @property
    def span_s(self) -> float:
        return self.last - self.first


def growth_between(readings: Sequence[DiskReading], start: float | None, end: float | None) -> Growth | None:
    """The growth over the readings taken from ``start`` to ``end`` (None: open), as ``fill_rate``
    chooses them; None with fewer than two."""
    usable, _ = _usable(readings)
    inside = [r for r in usable if (start is None or r.taken >= start) and (end is None or r.taken <= end)]
    if len(inside) < 2 or inside[-1].taken <= inside[0].taken:
        return None
    return Growth(len(inside), inside[0].taken, inside[-1].taken, inside[-1].used - inside[0].used)


@dataclass(slots=True)
class BaselineDiff:
    comparable: bool
    reason: str | None  # why not comparable, or what limits the comparison
    added: list[bytes] = field(default_factory=list)
    removed: list[bytes] = field(default_factory=list)
    #: Digest changed; or, unreadable at the baseline, size, mtime or ctime alone: it may have (``files``)
    content: list[bytes] = field(default_factory=list)
    metadata: list[tuple[bytes, tuple[str, ...]]] = field(default_factory=list)  # same content, what changed
    #: Changed: then, now. A file unreadable at the baseline has then what lstat gave, its digest empty.
    files: dict[bytes, tuple[BaselineFile, BaselineFile]] = field(default_factory=dict)
    not_checked: int = 0  # files of the baseline not hashed now (the time budget ran out)
    #: Files (and directories, with a trailing slash) of the baseline still there that could not be read
    #: now (root squashed on NFS reads only what others may): neither removed nor known to be changed.
    unreadable: list[bytes] = field(default_factory=list)
    #: Unreadable at the baseline, read now, lstat then and now alike: whether it changed cannot be said.
    unread_then: list[bytes] = field(default_factory=list)
    #: Read now, below a directory the baseline could not list: neither added nor known to be unchanged.
    not_comparable: list[bytes] = field(default_factory=list)
    unrecorded: int = 0  # files and directories the baseline could not read past its bound: unnamed
    #: Of ``added`` and ``unreadable``: files and directories that could not be read now and were not
    #: recorded as unreadable at the baseline (a new file another user keeps 0600, a directory made
    #: unsearchable since): named, not left out, for what they hold cannot be seen now.
    unread_now: set[bytes] = field(default_factory=set)
    unrecorded_now: int = 0  # files and directories not read now past the bound: unnamed, maybe new
    #: Of ``removed``: names where something else than a regular file is now (a symlink, a directory, a
    #: FIFO), by its ``S_IFMT`` type: the file is gone, the name is not.
    replaced: dict[bytes, int] = field(default_factory=dict)
    #: Whether the baseline recorded its directories, symbolic links and special files (one an older
    #: sysmcp recorded did not: none of them is then compared, nor called added).
    nodes_compared: bool = False
    #: Directories, links and special files not compared, at least (how many more cannot be told): past
    #: the bound of what either side records, every name not kept on both sides, the ones counted and not
    #: named too; one on a side alone is then no finding.
    nodes_uncompared: int = 0
    #: Of the names in the lists, those that are or were a directory, link or special file: then, now
    #: (a regular file's record on a side where it was one, None on a side where it is not there).
    nodes: dict[bytes, tuple[Entry | None, Entry | None]] = field(default_factory=dict)
    #: Of ``removed``: each directory, link or special file by its ``S_IFMT`` type, for ``compare`` to
    #: look whether one of that type is still there (not reached in time, or below a directory made
    #: unreadable), as it looks for a regular file.
    removed_kind: dict[bytes, int] = field(default_factory=dict)
    #: Names of the baseline at or below a directory another filesystem is mounted on now, which the
    #: walk did not cross (``one_file_system``): not looked at, so neither removed nor unreadable.
    mounted_over: list[bytes] = field(default_factory=list)
    mount_points: set[bytes] = field(default_factory=set)  # of those, the mount points themselves


#: What a baseline records of a name: a regular file's digest and metadata, or a node's.
Entry = BaselineFile | BaselineNode


def diff_baselines(old: Baseline, new: Baseline) -> BaselineDiff:
    """AIDE's view: files added, removed, changed in content, changed only in mode/owner/mtime/ctime
    (ctime as AIDE's ``c``: named only when nothing else changed); and what the baseline could not
    read (``Baseline.unread``) kept apart from all of those. A ctime either side lacks (a baseline
    recorded before sysmcp kept it) is not compared.

    A file unreadable then and read now is changed if lstat then and now differ (in content, not
    compared, for a size, mtime or ctime that differs; else in metadata), else whether it changed
    cannot be said (``unread_then``);
    one below a directory unreadable then is ``not_comparable``; one unreadable now (itself, or under a
    directory unreadable now) is ``unreadable``, with lstat then and now in ``files`` when they differ.
    Anything else new is added.
    """
    if not same_filesystem(old.series.fs_id, new.series.fs_id) or old.series.root != new.series.root:
        return BaselineDiff(False, "the baselines are of different filesystems or directories")
    if old.algorithm != new.algorithm:
        return BaselineDiff(False, f"the baselines use different digests ({old.algorithm}, {new.algorithm})")
    result = BaselineDiff(True, None, unrecorded=old.unrecorded)
    if old.partial:  # a file it did not reach may have been there all along
        result.reason = "the baseline stopped early (out of time): a file not in it is not called added"
    unread_dirs = {name for name, u in old.unread.items() if u.directory}
    unread_dirs_now = {name for name, u in new.unread.items() if u.directory}
    for path in sorted(new.files.keys() - old.files.keys()):
        then = old.unread.get(path)
        if then is not None and not then.directory:
            _unread_then(result, path, then.seen, new.files[path])
        elif _below(path, unread_dirs):
            result.not_comparable.append(path)
        elif not old.partial:
            result.added.append(path)
    gone: list[tuple[bytes, BaselineFile | None]] = [
        (p, old.files[p]) for p in old.files.keys() - new.files.keys()
    ]
    for path, then in old.unread.items():
        if then.directory:
            if path in unread_dirs_now or _below(path, unread_dirs_now):
                result.unreadable.append(path + b"/")
        elif path not in new.files:
            gone.append((path, then.seen))
    for path, seen in gone:  # unreadable now, or gone, or not reached (compare looks whether it is there)
        now = new.unread.get(path)
        unread_now = (now is not None and not now.directory) or _below(path, unread_dirs_now)
        (result.unreadable if unread_now else result.removed).append(path)
        seen_now = now.seen if now is not None else None
        if seen is not None and seen_now is not None and _lstat_changed(seen, seen_now):
            result.files[path] = (seen, seen_now)  # not read now, yet lstat tells this much
    _unread_now(result, old, new, unread_dirs, unread_dirs_now)
    if old.nodes is not None and new.nodes is not None:
        _diff_nodes(result, old, new, unread_dirs, unread_dirs_now)
    result.removed.sort()
    result.unreadable.sort()
    for path in sorted(old.files.keys() & new.files.keys()):
        a, b = old.files[path], new.files[path]
        if a.digest != b.digest:
            result.content.append(path)
            result.files[path] = (a, b)
            continue
        what = _metadata_changed(a, b)
        if what:
            result.metadata.append((path, what))
            result.files[path] = (a, b)
    # Digests that differ (or sizes) first, then the files unreadable at the baseline whose mtime or
    # ctime alone moved, which may have changed: a hard-linking backup moves every file's ctime
    result.content.sort(key=lambda path: (path in result.files and not_compared(result.files[path]), path))
    # A change of mode, owner or mtime first, then the files whose ctime alone moved: a hard-linking
    # backup moves every file's ctime, and the few examples shown must not all be those
    result.metadata.sort(key=lambda item: (item[1] == CTIME_ALONE, item[0]))
    return result


def _unread_now(
    result: BaselineDiff, old: Baseline, new: Baseline, unread_dirs: set[bytes], unread_dirs_now: set[bytes]
) -> None:
    """What could not be read now and the baseline never named, kept visible: a file is added (it was
    not in the baseline, read or not), unless below a directory unreadable then (not comparable); a
    directory is unreadable (with its slash: the baseline kept no directories, so whether it is new
    cannot be said, and anything added in it cannot be seen). Without this an implant kept in a
    directory or file this user cannot read was in no list at all."""
    result.unrecorded_now = new.unrecorded
    for path, now in new.unread.items():
        then = old.unread.get(path)
        if now.directory:
            named = then is not None and then.directory  # unreadable then and now: named above
        else:
            named = path in old.files or (then is not None and not then.directory)  # unreadable or gone
        if named or _below(path, unread_dirs_now):  # or inside what is named unreadable already
            continue
        shown = path + b"/" if now.directory else path
        if _below(path, unread_dirs):
            result.not_comparable.append(shown)
        elif now.directory:
            result.unreadable.append(shown)
        elif not old.partial:
            result.added.append(shown)
        else:
            continue
        result.unread_now.add(shown)
    result.added.sort()
    result.not_comparable.sort()


def _diff_nodes(
    result: BaselineDiff, old: Baseline, new: Baseline, unread_dirs: set[bytes], unread_dirs_now: set[bytes]
) -> None:
    """The directories, symbolic links and special files of two baselines that both recorded them, as
    AIDE compares them: one of a side alone is added or removed (a planted link, a device node made);
    another type at a name (a regular file now a link, or the other way round), a link's target or a
    device's number is a changed content; a mode or owner is changed metadata. The rules for what could
    not be read then or now are the files' (``diff_baselines``)."""
    assert old.nodes is not None and new.nodes is not None
    result.nodes_compared = True
    cut = bool(old.nodes_unrecorded or new.nodes_unrecorded)
    if cut:  # every name of either tree not kept on both sides, at least: those past the bound too
        both = len(old.nodes.keys() & new.nodes.keys())
        result.nodes_uncompared = (
            max(
                len(old.nodes) + old.nodes_unrecorded,
                len(new.nodes) + new.nodes_unrecorded,
                len(old.nodes.keys() | new.nodes.keys()),
            )
            - both
        )
    added, removed = set(result.added), set(result.removed)
    for path in sorted(old.nodes.keys() | new.nodes.keys()):
        then: Entry | None = old.nodes.get(path) or old.files.get(path)
        now: Entry | None = new.nodes.get(path) or new.files.get(path)
        if then is None and now is not None:  # new, or unreadable then: the files' rules
            if cut:
                continue
            if path in old.unread or _below(path, unread_dirs):
                result.not_comparable.append(path)
            elif not old.partial:
                result.added.append(path)
            else:
                continue
        elif now is None and then is not None:  # gone, not reached, or unreadable now
            if cut:
                continue
            if path in new.unread or _below(path, unread_dirs_now):
                result.unreadable.append(path)
                if path in added:  # a node then, a regular file now it cannot read: not new
                    result.added.remove(path)
                    result.unread_now.discard(path)
            else:
                result.removed.append(path)
                assert isinstance(then, BaselineNode)
                result.removed_kind[path] = then.kind
        elif then is not None and now is not None:
            if _kind(then) != _kind(now) or _node_content(then) != _node_content(now):
                result.content.append(path)
                if path in removed:  # a regular file then, something else now: changed, not removed
                    result.removed.remove(path)
                if path in added:  # something else then, a regular file now: changed, not added
                    result.added.remove(path)
            elif what := _node_metadata(then, now):
                result.metadata.append((path, what))
            else:
                continue
        result.nodes[path] = (then, now)
    result.added.sort()  # the files' findings with these, each list in name order
    result.not_comparable.sort()


def _kind(entry: Entry) -> int:
    return stat.S_IFREG if isinstance(entry, BaselineFile) else entry.kind


def _node_content(entry: Entry) -> tuple[int | None, bytes | None]:
    """What a node holds instead of bytes: a device's number, a link's target."""
    return (None, None) if isinstance(entry, BaselineFile) else (entry.rdev, entry.target)


def _node_metadata(a: Entry, b: Entry) -> tuple[str, ...]:
    """What differs of two nodes' mode and owner."""
    return tuple(
        name for name, x, y in (("mode", a.mode, b.mode), ("owner", (a.uid, a.gid), (b.uid, b.gid))) if x != y
    )


def _metadata_changed(a: BaselineFile, b: BaselineFile) -> tuple[str, ...]:
    """What differs of mode, owner and mtime, and ctime when it is the only sign (``ctime_only``)."""
    what = tuple(
        name
        for name, x, y in (
            ("mode", a.mode, b.mode),
            ("owner", (a.uid, a.gid), (b.uid, b.gid)),
            ("mtime", a.mtime, b.mtime),
        )
        if x != y
    )
    return CTIME_ALONE if not what and ctime_only(a, b) else what


def not_compared(pair: tuple[BaselineFile, BaselineFile]) -> bool:
    """Whether a file in ``BaselineDiff.content`` only may have changed: unreadable at the baseline
    (no digest to compare) and of the same size, its mtime or ctime moved."""
    then, now = pair
    return not then.digest and then.size == now.size


#: What ``BaselineDiff.metadata`` says of a file whose ctime alone moved.
CTIME_ALONE = ("ctime",)


def ctime_only(a: BaselineFile, b: BaselineFile) -> bool:
    """Whether a file's two records differ in ctime alone (both known). Every change of size, mode,
    owner or mtime sets the ctime too, so ctime tells something only when nothing else it records
    changed: a mode or owner changed and changed back, a hard link made or removed, ACLs or extended
    attributes set, or new bytes written with the old size and mtime put back (``touch -r``)."""
    return (
        a.ctime is not None
        and b.ctime is not None
        and a.ctime != b.ctime
        and (a.size, a.mode, a.uid, a.gid, a.mtime) == (b.size, b.mode, b.uid, b.gid, b.mtime)
    )


def _lstat_changed(a: BaselineFile, b: BaselineFile) -> bool:
    return a.size != b.size or bool(_metadata_changed(a, b))


def _unread_then(result: BaselineDiff, path: bytes, seen: BaselineFile | None, now: BaselineFile) -> None:
    """A file unreadable at the baseline, read now: changed as far as lstat then and now tell, else
    not known to have changed or not.

    Its content may have changed when its size, mtime or (alone) ctime did: a write sets them, and
    only the ctime cannot be put back. It is then content changed, where a reader looks for a changed
    file, its words saying the content was not compared; a changed mode or owner alone is metadata."""
    if seen is None:
        result.unread_then.append(path)
    elif seen.size != now.size or seen.mtime != now.mtime or ctime_only(seen, now):
        result.content.append(path)
        result.files[path] = (seen, now)
    elif what := _metadata_changed(seen, now):
        result.metadata.append((path, what))
        result.files[path] = (seen, now)
    else:
        result.unread_then.append(path)


def _below(path: bytes, directories: set[bytes]) -> bool:
    """Whether ``path`` (relative) lies below one of ``directories`` (relative): each of its parents
    is looked up, so a baseline's thousand unreadable directories cost a lookup per level."""
    at = path.find(b"/")
    while at != -1:
        if path[:at] in directories:
            return True
        at = path.find(b"/", at + 1)
    return False
