"""what_changed's merge of two snapshots' directories, as rows in name order (from SQLite or sorted in
memory), against the dict diff it replaced, kept here as the reference: on random snapshots whose names
are built to sort awkwardly (``etc``, ``etc-old``, ``etc.d``, ``etc/app``, bytes above 0x7f, the root
b"") and whose totals and newest mtimes collide often, both give the same changes. Through a real store,
SQLite's BLOB order (memcmp, then length) must be Python's bytes order, or the merge would see one
directory as gone and appeared."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sysmcp.history.compare import _head
from sysmcp.history.diff import (
    _ABSENT,
    DAY,
    DirChange,
    ScanDiff,
    attribute,
    diff_scan_rows,
    diff_scans,
    fold_chains,
    most_lost,
)
from sysmcp.history.snapshots import FILES_KEPT, DirTotals, FileRow, ScanSnapshot, Series, same_filesystem
from sysmcp.history.store import Store

EXAMPLES = int(os.environ.get("SYSMCP_MERGE_EXAMPLES", "300"))
ROOT = b"/srv"
SERIES = Series("h", "8:1/abc", ROOT, "{}")


class Clock:
    def __call__(self) -> float:
        return 1_800_000_000.0


def reference_diff_scans(old: ScanSnapshot, new: ScanSnapshot) -> ScanDiff:
    """The diff as it was before the merge (both snapshots' directories as dicts), but for its file
    lists, which the merge did not change."""
    seconds = new.taken - old.taken
    if not same_filesystem(old.series.fs_id, new.series.fs_id):
        return ScanDiff(False, "fs", old, new, seconds)
    for snap in (old, new):
        if snap.partial:
            return ScanDiff(False, "partial", old, new, seconds)
    result = ScanDiff(True, None, old, new, seconds)
    if seconds < 0:
        result.notes.append("the clock went backwards between the two snapshots: no rates")
    elif seconds == 0:
        result.notes.append("the two snapshots have the same time: no rates")
    changes = []
    held_below: set[tuple[bytes, float]] = set()
    for path, totals in new.dirs.items():
        if totals.newest is None or not path:
            continue
        parent = path
        while parent:
            parent = parent.rpartition(b"/")[0]
            held_below.add((parent, totals.newest))
    for path in old.dirs.keys() | new.dirs.keys():
        before, after = old.dirs.get(path), new.dirs.get(path)
        delta = (after or _ABSENT).disk - (before or _ABSENT).disk
        delta_apparent = (after or _ABSENT).apparent - (before or _ABSENT).apparent
        if before is None:
            kind = "appeared"
        elif after is None:
            kind = "disappeared"
        elif delta == 0 and delta_apparent == 0:
            rewritten = (
                before.newest is not None and after.newest is not None and after.newest > before.newest
            )
            if not rewritten or (path, after.newest) in held_below:
                continue
            kind = "modified"
        else:
            kind = "grew" if delta > 0 or (delta == 0 and delta_apparent > 0) else "shrank"
        per_day = delta * DAY / seconds if seconds > 0 and kind != "modified" else None
        changes.append(DirChange(path, kind, before, after, delta, delta_apparent, per_day, before is None))
    changes.sort(key=lambda c: (-abs(c.delta), c.path))
    result.total_delta = new.total.disk - old.total.disk
    changes = [c for c in changes if c.path != b""]
    top = [c.delta for c in changes if b"/" not in c.path]
    result.attribution = attribute(changes, sum(d for d in top if d > 0))
    result.shrinkage = attribute(changes, sum(d for d in top if d < 0))
    result.changes = fold_chains(changes)
    result.unlisted = [snap for snap in (old, new) if not snap.lists_files]
    if result.unlisted:
        return result
    then = {f.path: f for f in old.files}
    result.new_files = [
        f for f in new.files if f.path not in then and (f.mtime is None or f.mtime >= old.taken)
    ]
    result.new_maybe_grown = bool(result.new_files) and len(old.files) >= FILES_KEPT
    grown = [(then[f.path], f) for f in new.files if f.path in then and f.disk > then[f.path].disk]
    result.grown_files = sorted(grown, key=lambda pair: (pair[0].disk - pair[1].disk, pair[0].path))
    now = {f.path: f for f in new.files}
    smallest = min((f.disk for f in new.files), default=0) if len(new.files) >= FILES_KEPT else 0
    result.removed_files = [f for f in old.files if f.path not in now and f.disk >= smallest]
    shrunk = [(f, now[f.path]) for f in old.files if f.path in now and now[f.path].disk < f.disk]
    result.shrunk_files = sorted(shrunk, key=most_lost)
    return result


def reference_filtered(snap: ScanSnapshot, shown: Callable[[bytes], bool]) -> ScanSnapshot:
    """The snapshot with only what ``shown`` lets through, as compare filtered it before the merge."""
    dirs = {p: d for p, d in snap.dirs.items() if shown(p)}
    files = [f for f in snap.files if shown(f.path)]
    return ScanSnapshot(snap.series, snap.taken, snap.partial, snap.threshold, dirs, files, snap.id)


def answer(diff: ScanDiff) -> tuple[object, ...]:
    """What of a diff reaches an answer (not the snapshots it was given, which differ by design)."""
    return (
        diff.comparable,
        diff.seconds,
        diff.total_delta,
        diff.changes,
        diff.attribution,
        diff.shrinkage,
        diff.new_files,
        diff.removed_files,
        diff.shrunk_files,
        diff.grown_files,
        len(diff.unlisted),
        diff.new_maybe_grown,
        diff.notes,
        diff.stopped,
    )


# Names that sort around each other: '-' (0x2d) and '.' (0x2e) before '/' (0x2f), bytes above 0x7f
# after every ASCII one, a name that is a prefix of another.
PARTS = [b"etc", b"etc-old", b"etc.d", b"app", b"a", b"\xff", b"\x80x", b"\xc3\xa9", b"-", b"0", b"~"]
names = st.lists(st.sampled_from(PARTS), min_size=1, max_size=4).map(b"/".join)
# Few sizes and mtimes, so that a directory often keeps its totals and gets a newer newest file
# ("modified"), and a subdirectory often holds that same mtime (the change is then only its own).
totals = st.builds(
    DirTotals,
    st.sampled_from([1, 4096]),
    st.sampled_from([1, 4096]),
    st.integers(0, 1),
    st.sampled_from([None, 10.0, 20.0]),
)
sides = st.tuples(st.one_of(st.none(), totals), st.one_of(st.none(), totals))
Side = tuple[DirTotals | None, DirTotals | None]


def with_parents(both: dict[bytes, Side]) -> tuple[dict[bytes, DirTotals], dict[bytes, DirTotals]]:
    """The two trees, each directory's missing parents given its totals (a chain carrying one change,
    or a rewritten file held below), as a scan keeps a parent of every directory it keeps."""
    closed = dict(both)
    for path, side in sorted(both.items(), key=lambda item: -item[0].count(b"/")):
        while path:
            path = path.rpartition(b"/")[0]
            closed.setdefault(path, side)
    return tuple({p: s[i] for p, s in closed.items() if s[i] is not None} for i in (0, 1))  # type: ignore[return-value]


pairs = st.dictionaries(st.one_of(st.just(b""), names), sides, max_size=20).map(with_parents)
files = st.lists(
    st.builds(FileRow, names, st.sampled_from([1, 2, 3]), st.just(1), st.sampled_from([None, 5.0, 50.0])),
    max_size=4,
    unique_by=lambda f: f.path,
)
hidden = st.lists(names, max_size=2)


def shown_by(hide: list[bytes]) -> Callable[[bytes], bool]:
    return lambda rel: not any(rel == h or rel.startswith(h + b"/") for h in hide)


def visible_by(hide: list[bytes]) -> Callable[[bytes | str], bool]:
    """``--root`` as compare asks it: of a full path."""
    shown = shown_by(hide)

    def visible(full: bytes | str) -> bool:
        full = os.fsencode(full)
        return full == ROOT or shown(full[len(ROOT) + 1 :])

    return visible


def scans(
    old_dirs: dict[bytes, DirTotals],
    new_dirs: dict[bytes, DirTotals],
    old_files: list[FileRow],
    new_files: list[FileRow],
    seconds: float,
) -> tuple[ScanSnapshot, ScanSnapshot]:
    old = ScanSnapshot(SERIES, 1000.0, False, 1, old_dirs, old_files)
    return old, ScanSnapshot(SERIES, 1000.0 + seconds, False, 1, new_dirs, new_files)


@settings(max_examples=EXAMPLES, deadline=None)
@given(pairs, files, files, st.sampled_from([DAY, 0.0, -5.0]), hidden)
def test_the_merge_in_memory_gives_the_dict_diffs_answer(
    tree_pair: tuple[dict[bytes, DirTotals], dict[bytes, DirTotals]],
    old_files: list[FileRow],
    new_files: list[FileRow],
    seconds: float,
    hide: list[bytes],
) -> None:
    old, new = scans(*tree_pair, old_files, new_files, seconds)
    assert answer(diff_scans(old, new)) == answer(reference_diff_scans(old, new))
    shown = shown_by(hide)
    merged = diff_scan_rows(
        _head(old, visible_by(hide)),
        _head(new, visible_by(hide)),
        sorted(old.dirs.items()),
        sorted(new.dirs.items()),
        shown=shown,
    )
    expected = reference_diff_scans(reference_filtered(old, shown), reference_filtered(new, shown))
    assert answer(merged) == answer(expected)


def test_the_merge_of_rows_read_from_the_store_gives_the_dict_diffs_answer(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state", Clock())

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(pairs, files, files, hidden)
    def check(
        tree_pair: tuple[dict[bytes, DirTotals], dict[bytes, DirTotals]],
        old_files: list[FileRow],
        new_files: list[FileRow],
        hide: list[bytes],
    ) -> None:
        old, new = scans(*tree_pair, old_files, new_files, DAY)
        old_id, new_id = store.save_scan(old).id, store.save_scan(new).id
        assert old_id is not None and new_id is not None
        stored_old, stored_new = store.load_scan(old_id, dirs=False), store.load_scan(new_id, dirs=False)
        assert stored_old is not None and stored_new is not None
        visible = visible_by(hide)
        merged = store.with_dir_rows(
            lambda rows: diff_scan_rows(
                _head(stored_old, visible),
                _head(stored_new, visible),
                rows(old_id),
                rows(new_id),
                shown=shown_by(hide),
            ),
            None,
        )
        assert merged is not None, store.unread()
        shown = shown_by(hide)
        expected = reference_diff_scans(reference_filtered(old, shown), reference_filtered(new, shown))
        assert answer(merged) == answer(expected)

    check()
