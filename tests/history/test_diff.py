"""history.diff on plain values: changes, rates, attribution, the fill-rate fit, AIDE's view, and the
corners (a clock set back, one time for two snapshots, another filesystem at the same place)."""

from __future__ import annotations

import pytest

from sysmcp.history.diff import (
    DAY,
    STOP_EVERY,
    diff_baselines,
    diff_scan_rows,
    diff_scans,
    fill_rate,
    growth_between,
)
from sysmcp.history.snapshots import (
    FILES_KEPT,
    Baseline,
    BaselineFile,
    DirTotals,
    DiskReading,
    FileRow,
    ScanSnapshot,
    Series,
    Unread,
    build_scan,
    parse_gnu_manifest,
    threshold_for,
)

MiB = 1 << 20
GiB = 1 << 30
SERIES = Series("h", "8:1/abc", b"/srv", "{}")


def snap(
    taken: float, sizes: dict[bytes, int], series: Series = SERIES, files: list[FileRow] | None = None
) -> ScanSnapshot:
    return ScanSnapshot(
        series, taken, False, MiB, {p: DirTotals(s, s, 1) for p, s in sizes.items()}, files or []
    )


OLD = {b"": 100 * MiB, b"var": 60 * MiB, b"var/log": 50 * MiB, b"home": 30 * MiB, b"gone": 10 * MiB}
NEW = {b"": 112 * MiB, b"var": 80 * MiB, b"var/log": 70 * MiB, b"home": 28 * MiB, b"new": 4 * MiB}


def test_changes_each_with_its_kind_delta_and_rate_per_day() -> None:
    diff = diff_scans(snap(0.0, OLD), snap(2 * DAY, NEW))
    assert diff.comparable and diff.total_delta == 12 * MiB and diff.notes == []
    found = {c.path: (c.kind, c.delta, c.per_day) for c in diff.changes}
    assert found == {
        b"var/log": ("grew", 20 * MiB, 10 * MiB),  # var carries the same change: named as its parent
        b"home": ("shrank", -2 * MiB, -1 * MiB),
        b"gone": ("disappeared", -10 * MiB, -5 * MiB),
        b"new": ("appeared", 4 * MiB, 2 * MiB),
    }
    assert [c.path for c in diff.changes][:2] == [b"var/log", b"gone"]  # largest change first


def test_attribution_says_growth_and_shrinkage_apart_never_above_100_percent() -> None:
    diff = diff_scans(snap(0.0, OLD), snap(DAY, NEW))  # net +12 MiB: +24 MiB grew, -12 MiB shrank
    assert diff.attribution is not None and diff.shrinkage is not None
    assert diff.attribution.paths == (b"var/log", b"new")  # var is explained by var/log
    assert (diff.attribution.total, diff.attribution.covered, diff.attribution.percent) == (
        24 * MiB,
        24 * MiB,
        100.0,
    )
    assert diff.shrinkage.paths == (b"gone", b"home")
    assert (diff.shrinkage.total, diff.shrinkage.covered) == (-12 * MiB, -12 * MiB)
    back = diff_scans(snap(0.0, NEW), snap(DAY, OLD)).shrinkage
    assert back is not None and back.paths == (b"var/log", b"new")  # going back, new disappears


def test_a_chain_of_directories_carrying_one_change_is_listed_once_the_deepest_with_its_parents() -> None:
    old = {b"": 30 * MiB, b"c": 10 * MiB, b"c/deep": 8 * MiB, b"c/deep/er": 8 * MiB, b"c/x": 2 * MiB}
    new = {b"": 25 * MiB, b"c": 5 * MiB, b"c/deep": 3 * MiB, b"c/deep/er": 3 * MiB, b"c/x": 2 * MiB}
    diff = diff_scans(snap(0.0, old), snap(DAY, new))
    assert [(c.path, c.delta, c.parents) for c in diff.changes] == [
        (b"c/deep/er", -5 * MiB, (b"c/deep", b"c"))
    ]
    uneven = {**new, b"c": 6 * MiB, b"c/x": 3 * MiB, b"": 26 * MiB}  # c's change is not c/deep's alone
    changed = diff_scans(snap(0.0, old), snap(DAY, uneven)).changes
    assert [(c.path, c.parents) for c in changed] == [(b"c/deep/er", (b"c/deep",)), (b"c", ()), (b"c/x", ())]


def test_files_gone_from_the_largest_or_smaller_than_then_are_named_as_new_ones_are() -> None:
    old_files = [FileRow(b"a/gone", 9 * MiB, 9 * MiB, 1.0), FileRow(b"a/log", 8 * MiB, 8 * MiB, 1.0)]
    new_files = [FileRow(b"a/log", 2 * MiB, 2 * MiB, 5.0)]
    diff = diff_scans(snap(0.0, OLD, files=old_files), snap(DAY, NEW, files=new_files))
    assert [f.path for f in diff.removed_files] == [b"a/gone"]
    assert [(then.disk, now.disk) for then, now in diff.shrunk_files] == [(8 * MiB, 2 * MiB)]
    full = [FileRow(f"big{i}".encode(), 20 * MiB, 20 * MiB, 5.0) for i in range(FILES_KEPT)]
    kept_full = diff_scans(snap(0.0, OLD, files=old_files), snap(DAY, NEW, files=full))
    assert kept_full.removed_files == []  # below the smallest kept now: it may only have shrunk


def test_a_file_of_just_the_size_at_which_a_full_newer_list_was_cut_is_tied_not_removed() -> None:
    """Equal sizes at the cut: the walk keeps ties in the order it meets them, so a file missing from
    the newer list at the size of its smallest may be there still; one larger is gone (or shrank)."""
    tied = [FileRow(f"t{i:03}".encode(), MiB, MiB, -1.0) for i in range(FILES_KEPT + 1)]  # unchanged since
    larger = FileRow(b"larger", 2 * MiB, 2 * MiB, 1.0)
    old_files = [larger, *tied[1 : FILES_KEPT - 1]]
    diff = diff_scans(snap(0.0, OLD, files=old_files), snap(DAY, NEW, files=tied[:FILES_KEPT]))
    assert [f.path for f in diff.removed_files] == [b"larger"]
    assert diff.tied_files == [] and diff.new_files == []
    cut_apart = diff_scans(snap(0.0, OLD, files=tied[1:]), snap(DAY, NEW, files=tied[:FILES_KEPT]))
    assert cut_apart.removed_files == [] and [f.path for f in cut_apart.tied_files] == [b"t100"]


@pytest.mark.parametrize("unlisted", ["older", "newer"])
def test_a_snapshot_that_counted_files_but_kept_no_list_names_no_file_new_removed_or_shrunk(
    unlisted: str,
) -> None:
    """A scan filtered by time keeps no "largest files": a file missing from its empty list is not
    new (nor removed, when the empty list is the newer one); the diff says which side kept none."""
    listed = [FileRow(b"a/log", 8 * MiB, 8 * MiB, 5.0), FileRow(b"a/gone", 2 * MiB, 2 * MiB, 1.0)]
    old = snap(0.0, OLD, files=[] if unlisted == "older" else listed)
    new = snap(DAY, NEW, files=[] if unlisted == "newer" else listed[:1])
    diff = diff_scans(old, new)
    assert diff.comparable and [c.path for c in diff.changes]  # the directories are still compared
    assert (diff.new_files, diff.removed_files, diff.shrunk_files) == ([], [], [])
    assert diff.unlisted == [old if unlisted == "older" else new]
    empty = ScanSnapshot(SERIES, 0.0, False, MiB, {b"": DirTotals(0, 0, 0)})  # no file: the whole list
    assert diff_scans(empty, snap(DAY, NEW, files=listed)).new_files == listed


@pytest.mark.parametrize("filtered", ["older", "newer"])
def test_a_list_shorter_than_the_files_its_snapshot_counted_is_not_taken_for_the_whole_tree(
    filtered: str,
) -> None:
    """An older version kept the list of a scan filtered by time or size: the three files it
    counted, one listed. Against a whole list, no file is new, removed or shrunk for missing from it."""
    whole = [
        FileRow(b"a/big", 30 * MiB, 30 * MiB, 5.0),
        FileRow(b"a/mid", 20 * MiB, 20 * MiB, 5.0),
        FileRow(b"a/recent", 2 * MiB, 2 * MiB, 5.0),
    ]

    def three_files(taken: float, files: list[FileRow], counted: int = 3) -> ScanSnapshot:
        return ScanSnapshot(SERIES, taken, False, MiB, {b"": DirTotals(52 * MiB, 52 * MiB, counted)}, files)

    old = three_files(0.0, whole[2:] if filtered == "older" else whole)
    new = three_files(DAY, whole[2:] if filtered == "newer" else whole)
    diff = diff_scans(old, new)
    assert (diff.new_files, diff.removed_files, diff.shrunk_files) == ([], [], [])
    assert diff.unlisted == [old if filtered == "older" else new]
    gone = diff_scans(three_files(0.0, whole), three_files(DAY, whole[:2], counted=2))  # one deleted
    assert gone.removed_files == whole[2:] and gone.unlisted == []


def test_the_growth_between_readings_is_a_fact_however_short_their_span() -> None:
    readings = [
        DiskReading("h", b"/srv", "d|ext4", 100.0 + 2 * i, 10 * GiB, GiB + i * 12 * MiB, 9 * GiB)
        for i in range(5)
    ]
    growth = growth_between(readings, 100.0, None)
    assert growth is not None and (growth.readings, growth.span_s, growth.used) == (5, 8.0, 48 * MiB)
    assert fill_rate(readings) is not None  # the rate exists too; the tool withholds it under 10 minutes
    assert growth_between(readings, 105.0, 107.0) is None  # one reading in that span


@pytest.mark.parametrize(("later", "note"), [(-60.0, "backwards"), (0.0, "same time")])
def test_a_clock_set_back_or_one_time_for_both_gives_changes_without_rates(later: float, note: str) -> None:
    diff = diff_scans(snap(1000.0, OLD), snap(1000.0 + later, NEW))
    assert diff.comparable
    assert any(note in n for n in diff.notes)
    assert {c.path: c.delta for c in diff.changes}[b"var/log"] == 20 * MiB
    assert all(c.per_day is None for c in diff.changes)


def test_another_filesystem_at_the_same_mount_point_is_never_diffed_as_one() -> None:
    replaced = Series("h", "8:1/def", b"/srv", "{}")  # same device number, another filesystem id
    diff = diff_scans(snap(0.0, OLD), snap(DAY, NEW, replaced))
    assert not diff.comparable and diff.changes == [] and "different filesystem" in (diff.reason or "")
    other_options = Series("h", "8:1/abc", b"/srv", '{"xdev":false}')
    assert not diff_scans(snap(0.0, OLD), snap(DAY, NEW, other_options)).comparable


def test_largest_new_files_are_those_not_in_the_older_list_and_modified_since() -> None:
    old_files = [FileRow(b"var/a", 9 * MiB, 9 * MiB, 10.0)]
    new_files = [
        FileRow(b"var/a", 9 * MiB, 9 * MiB, 10.0),
        FileRow(b"var/b", 8 * MiB, 8 * MiB, 500.0),
        FileRow(b"var/old-but-newly-listed", 7 * MiB, 7 * MiB, 50.0),
    ]
    diff = diff_scans(snap(100.0, OLD, files=old_files), snap(DAY, NEW, files=new_files))
    assert [f.path for f in diff.new_files] == [b"var/b"]


def test_a_snapshot_keeps_directories_over_the_threshold_and_those_the_last_one_kept() -> None:
    total = 50_000 * MiB
    rows = [
        ("", total, total, 10, 7.0),
        ("big", 6 * MiB, 6 * MiB, 1, 7.0),
        ("small", 4 * MiB, 4 * MiB, 1, 3.0),
        ("kept", 10, 10, 1, 0.0),
    ]
    result = build_scan(SERIES, 1.0, False, rows, [("big/f", 6 * MiB, 6 * MiB, 1.0)], frozenset({"kept"}))
    assert threshold_for(total) == 5 * MiB == result.threshold
    assert set(result.dirs) == {b"", b"big", b"kept"}
    assert (result.dirs[b"big"].newest, result.dirs[b"kept"].newest) == (7.0, None)  # 0.0: no file
    assert threshold_for(10) == MiB


def reading(taken: float, used: int, fs_id: str = "sda1|ext4", free: int | None = None) -> DiskReading:
    return DiskReading("h", b"/", fs_id, taken, 1000 * MiB, used, 1000 * MiB - used if free is None else free)


def test_the_fill_rate_is_the_least_squares_line_and_gives_the_time_to_full() -> None:
    readings = [reading(t * 3600.0, 100 * MiB + t * 10 * MiB) for t in range(6)]
    fit = fill_rate(readings)
    assert fit is not None and fit.readings == 6
    assert fit.bytes_per_day == pytest.approx(240 * MiB)
    assert fit.seconds_to_full == pytest.approx((1000 - 150) * MiB / (10 * MiB / 3600))
    assert fit.growth == 50 * MiB
    flat = fill_rate([reading(0.0, 5), reading(10.0, 5)])
    assert flat is not None and flat.seconds_to_full is None


def test_the_fit_copes_with_one_time_a_clock_set_back_and_a_replaced_filesystem() -> None:
    assert fill_rate([reading(5.0, 1), reading(5.0, 9)]) is None  # no time passed: no line
    assert fill_rate([]) is None
    back = [
        reading(1000.0, 900 * MiB),
        reading(2000.0, 950 * MiB),
        reading(10.0, 100 * MiB),
        reading(3610.0, 110 * MiB),
    ]
    fit = fill_rate(back)
    assert fit is not None and fit.readings == 2 and any("backwards" in n for n in fit.notes)
    assert fit.bytes_per_day == pytest.approx(10 * MiB * 24)
    mixed = [reading(0.0, 500 * MiB, "old|ext4"), reading(0.0, 1 * MiB), reading(3600.0, 2 * MiB)]
    fit = fill_rate(mixed)
    assert fit is not None and fit.readings == 2 and fit.growth == MiB
    assert any("another filesystem" in n for n in fit.notes)


def test_baselines_compare_as_aide_reports_them() -> None:
    def f(digest: str, mode: int = 0o644, uid: int = 0, mtime: float = 1.0) -> BaselineFile:
        return BaselineFile(digest, 10, mtime, mode, uid, 0)

    old = Baseline(SERIES, 0.0, "sha256", {b"a": f("1"), b"b": f("2"), b"c": f("3"), b"d": f("4")})
    new = Baseline(
        SERIES, 1.0, "sha256", {b"a": f("1"), b"b": f("9"), b"c": f("3", 0o600, 1000), b"e": f("5")}
    )
    diff = diff_baselines(old, new)
    assert diff.comparable
    assert (diff.added, diff.removed, diff.content) == ([b"e"], [b"d"], [b"b"])
    assert diff.metadata == [(b"c", ("mode", "owner"))]
    other = Baseline(Series("h", "8:1/zzz", b"/srv", "{}"), 1.0, "sha256", {})
    assert not diff_baselines(old, other).comparable
    assert not diff_baselines(old, Baseline(SERIES, 1.0, "blake3", {})).comparable


def test_what_a_baseline_could_not_read_is_never_called_added_and_changes_lstat_shows_are_named() -> None:
    """A baseline records the files it could not read (with what lstat gave) and the directories it
    could not list: read now, such a file is 'cannot say' when lstat then and now agree, changed when
    they differ; one below such a directory is not comparable; unreadable both times stays unreadable
    (lstat's differences kept for the words). Elsewhere a new file is still added."""

    def f(digest: str, size: int = 10, mode: int = 0o600, mtime: float = 1.0) -> BaselineFile:
        return BaselineFile(digest, size, mtime, mode, 4321, 4321)

    old = Baseline(
        SERIES,
        0.0,
        "sha256",
        {b"open": f("1"), b"shut/x": f("a"), b"taken": f("b"), b"taken_grown": f("c")},
        unread={
            b"same": Unread("permission denied", seen=f("")),
            b"grown": Unread("permission denied", seen=f("")),
            b"chmodded": Unread("permission denied", seen=f("")),
            b"unlooked": Unread("changed while being hashed"),  # lstat gave nothing
            b"still": Unread("permission denied", seen=f("")),
            b"still_grown": Unread("permission denied", seen=f("")),
            b"gone": Unread("permission denied", seen=f("")),
            b"closed": Unread("could not be listed", directory=True),
            b"shut": Unread("could not be listed", directory=True),
        },
        unrecorded=3,
    )
    new = Baseline(
        SERIES,
        1.0,
        "sha256",
        {
            b"open": f("1"),
            b"same": f("2"),
            b"grown": f("3", size=11),
            b"chmodded": f("4", mode=0o644),
            b"unlooked": f("5"),
            b"closed/f": f("6"),
            b"closed/deep/g": f("7"),
            b"closedx": f("8"),  # a sibling whose name begins as the directory's: not below it
            b"new": f("9"),
        },
        unread={
            b"still": Unread("permission denied", seen=f("")),
            b"still_grown": Unread("permission denied", seen=f("", size=12)),
            b"shut": Unread("could not be listed", directory=True),
            b"taken": Unread("permission denied", seen=f("")),  # readable then, not now
            b"taken_grown": Unread("permission denied", seen=f("", size=13)),
        },
    )
    diff = diff_baselines(old, new)
    assert diff.comparable and diff.reason is None
    assert diff.added == [b"closedx", b"new"]
    assert diff.unread_then == [b"same", b"unlooked"]
    assert diff.not_comparable == [b"closed/deep/g", b"closed/f"]
    assert (diff.content, diff.metadata) == ([b"grown"], [(b"chmodded", ("mode",))])
    assert diff.files[b"grown"] == (f(""), f("3", size=11))
    assert diff.unreadable == [b"shut/", b"shut/x", b"still", b"still_grown", b"taken", b"taken_grown"]
    assert diff.files[b"still_grown"] == (f(""), f("", size=12))
    assert diff.files[b"taken_grown"] == (f("c"), f("", size=13))
    assert b"taken" not in diff.files and b"still" not in diff.files
    assert diff.removed == [b"gone"]  # not read now either: what_changed looks whether it is there
    assert diff.unrecorded == 3
    unrecorded = diff_baselines(Baseline(SERIES, 0.0, "sha256", {}), new)  # a baseline that recorded none
    unread_now = [b"still", b"still_grown", b"taken", b"taken_grown"]  # new to it, not read now: added too
    assert unrecorded.added == sorted([*new.files, *unread_now]) and not unrecorded.unread_then


def test_manifest_lines_are_read_back_with_their_escapes_undone() -> None:
    manifest = b"aa  plain\n\\bb  new\\nline\\\\x\ncc  caf\xe9\n"
    assert list(parse_gnu_manifest(manifest)) == [
        (b"plain", "aa"),
        (b"new\nline\\x", "bb"),
        (b"caf\xe9", "cc"),
    ]


def test_a_name_with_a_carriage_return_is_read_back_whole_from_every_algorithms_manifest() -> None:
    """hash_tree writes a CR in a name as it is where the algorithm's tool does not escape it (b3sum):
    only a newline ends a line, so the baseline keeps the file under its own name."""
    from sysmcp.engine.hashing import ALGORITHMS, format_line

    for algorithm in ALGORITHMS.values():
        digest = "a" * algorithm.hex_length
        manifest = format_line(b"a\rb", digest, algorithm) + format_line(b"plain", digest, algorithm)
        assert [name for name, _ in parse_gnu_manifest(manifest)] == [b"a\rb", b"plain"], algorithm.name


def with_newest(sizes: dict[bytes, tuple[int, float | None]], taken: float) -> ScanSnapshot:
    dirs = {p: DirTotals(s, s, 1, n) for p, (s, n) in sizes.items()}
    return ScanSnapshot(SERIES, taken, False, MiB, dirs)


def test_a_directory_of_the_same_size_with_a_rewritten_file_is_modified_and_only_the_deepest_named() -> None:
    old = with_newest(
        {
            b"": (100 * MiB, 10.0),
            b"etc": (20 * MiB, 10.0),
            b"etc/app": (5 * MiB, 10.0),
            b"var": (30 * MiB, 5.0),
            b"old": (10 * MiB, None),  # recorded before newest mtimes were kept
        },
        100.0,
    )
    new = with_newest(
        {
            b"": (100 * MiB, 500.0),
            b"etc": (20 * MiB, 500.0),
            b"etc/app": (5 * MiB, 500.0),  # a config rewritten in place: same size
            b"var": (30 * MiB, 5.0),  # untouched
            b"old": (10 * MiB, 400.0),
        },
        DAY,
    )
    diff = diff_scans(old, new)
    assert [(c.path, c.kind, c.delta, c.newest, c.files_changed) for c in diff.changes] == [
        (b"etc/app", "modified", 0, 500.0, True)  # etc is explained by etc/app; old is not known
    ]
    grown = with_newest({b"": (101 * MiB, 500.0), b"var": (31 * MiB, 500.0)}, DAY)
    change = diff_scans(with_newest({b"": (100 * MiB, 1.0), b"var": (30 * MiB, 1.0)}, 0.0), grown).changes[0]
    assert (change.kind, change.files_changed) == ("grew", True)


def test_a_filesystem_is_known_by_its_fsid_where_both_have_one_else_by_its_device_number_too() -> None:
    from sysmcp.history.snapshots import same_filesystem

    assert same_filesystem("0:41/f6f7295d68f4a2d3", "0:43/f6f7295d68f4a2d3")  # btrfs mounted again
    assert not same_filesystem("0:41/7ad5c6875547acac", "0:41/a90c0866df44dd89")  # a tmpfs mounted anew
    assert not same_filesystem("0:50/0", "0:51/0")  # no fsid (NFS, FUSE): the device number decides
    assert same_filesystem("0:50/0", "0:50/0") and not same_filesystem("8:1/0", "8:2/1f")
    assert not same_filesystem("whatever", "0:41/1")


def test_what_cannot_be_read_now_and_the_baseline_never_named_is_in_a_list_not_left_out() -> None:
    """An implant another user keeps 0600, or keeps in a directory this user cannot list, is not read
    now and was in no baseline: it is added (a file) or unreadable (a directory, with its slash: the
    baseline kept no directories), marked as not read now, and never silently left out. Below a
    directory unreadable at the baseline it is not comparable; inside one unreadable then and now it
    is that directory's. Past the bound, how many more were not read now is said."""

    def f(digest: str) -> BaselineFile:
        return BaselineFile(digest, 10, 1.0, 0o600, 4321, 4321)

    shut = Unread("could not be listed", directory=True)
    old = Baseline(
        SERIES,
        0.0,
        "sha256",
        {b"open": f("1"), b"was_read": f("2"), b"kept": f("3")},
        unread={
            b"closed": shut,
            b"both": shut,
            b"locked": Unread("permission denied", seen=f("")),
            b"was_dir": shut,
            b"was_unread_file": Unread("permission denied", seen=f("")),
        },
    )
    new = Baseline(
        SERIES,
        1.0,
        "sha256",
        {b"kept": f("3")},
        unread={
            b"implant": Unread("permission denied", seen=f("")),
            b"hid": shut,
            b"closed/inner": shut,
            b"closed/f": Unread("permission denied", seen=f("")),
            b"both": shut,
            b"locked": Unread("permission denied", seen=f("")),
            b"was_read": Unread("permission denied", seen=f("")),
            b"was_dir": Unread("permission denied", seen=f("")),  # a file now where a directory was
            b"was_unread_file": shut,  # a directory now where a file was
            b"open": shut,
        },
        unrecorded=7,
    )
    diff = diff_baselines(old, new)
    assert diff.added == [b"implant", b"was_dir"]
    assert diff.unreadable == [b"both/", b"hid/", b"locked", b"open/", b"was_read", b"was_unread_file/"]
    assert diff.not_comparable == [b"closed/f", b"closed/inner/"]
    assert diff.unread_now == {
        b"implant",
        b"hid/",
        b"closed/f",
        b"closed/inner/",
        b"was_dir",
        b"open/",
        b"was_unread_file/",
    }
    # the files gone from where directories are now (what_changed looks whether each is still there)
    assert (diff.removed, diff.unrecorded_now) == ([b"open", b"was_unread_file"], 7)
    partial = diff_baselines(Baseline(SERIES, 0.0, "sha256", {}, partial=True), new)
    assert partial.added == [] and b"hid/" in partial.unreadable  # not reached then is not new


def test_ctime_is_compared_where_both_records_have_it_and_named_only_when_nothing_else_changed() -> None:
    """ctime as AIDE's 'c': a readable file of the same content, mode, owner and mtime whose ctime moved
    is metadata changed ('ctime'). A file unreadable at the baseline whose size, mtime or ctime moved may
    have another content: content changed (the words say it was not compared); a mode or owner alone is
    metadata. Unreadable now, a moved ctime keeps lstat's records for the words. A ctime either side
    lacks (a baseline recorded before sysmcp kept it) is not compared: such a file is in no list."""

    def f(digest: str, mtime: float = 1.0, mode: int = 0o600, ctime: float | None = 5.0) -> BaselineFile:
        return BaselineFile(digest, 10, mtime, mode, 4321, 4321, ctime)

    def unread(ctime: float | None = 5.0) -> Unread:
        return Unread("permission denied", seen=f("", ctime=ctime))

    old = Baseline(
        SERIES,
        0.0,
        "sha256",
        {
            b"chmod_undone": f("1"),
            b"chmodded": f("2"),
            b"same": f("3"),
            b"old_row": f("4", ctime=None),
            b"taken": f("5"),
            b"taken_same": f("6"),
        },
        unread={
            b"forged": unread(),
            b"touched": unread(),
            b"chowned": unread(),
            b"left": unread(),
            b"old_unread": unread(ctime=None),
            b"still": unread(),
        },
    )
    new = Baseline(
        SERIES,
        1.0,
        "sha256",
        {
            b"chmod_undone": f("1", ctime=9.0),
            b"chmodded": f("2", mode=0o644, ctime=9.0),
            b"same": f("3"),
            b"old_row": f("4", ctime=9.0),
            b"forged": f("7", ctime=9.0),  # rewritten, size and mtime put back
            b"touched": f("8", mtime=2.0, ctime=9.0),
            b"chowned": BaselineFile("9", 10, 1.0, 0o600, 0, 0, 9.0),
            b"left": f("a"),
            b"old_unread": f("b", ctime=9.0),
        },
        unread={b"taken": unread(ctime=9.0), b"taken_same": unread(), b"still": unread(ctime=9.0)},
    )
    diff = diff_baselines(old, new)
    assert diff.content == [b"forged", b"touched"]
    assert diff.metadata == [  # ctime alone after the rest
        (b"chmodded", ("mode",)),
        (b"chowned", ("owner",)),
        (b"chmod_undone", ("ctime",)),
    ]
    assert diff.unread_then == [b"left", b"old_unread"]
    assert diff.unreadable == [b"still", b"taken", b"taken_same"]
    assert diff.files[b"still"] == (f(""), f("", ctime=9.0)) and diff.files[b"taken"] == (
        f("5"),
        f("", ctime=9.0),
    )
    assert b"taken_same" not in diff.files and not diff.added and not diff.removed


def test_readings_of_two_nfs_exports_mounted_in_turn_at_one_point_are_not_fitted_as_one_line() -> None:
    """NFS (and FUSE) give no fsid: their kernel identity is the device number alone, an anonymous one the
    next mount gets again. Readings of another export once mounted there (another source) are left out,
    as they were before the kernel's identity was recorded, not fitted with this one's."""
    before = [
        reading(0.0, 900 * MiB, "nas:/archive|nfs4|0:53/0"),
        reading(3600.0, 950 * MiB, "nas:/archive|nfs4"),
    ]
    now = [
        reading(7200.0, 1 * MiB, "nas:/scratch|nfs4|0:53/0"),
        reading(10800.0, 2 * MiB, "nas:/scratch|nfs4|0:53/0"),
    ]
    fit = fill_rate([*before, *now])
    assert fit is not None and fit.readings == 2 and fit.growth == MiB, fit
    assert any("another filesystem" in n for n in fit.notes)
    # One with an fsid is known by it, however its source is worded for the roots in force.
    kept = [
        reading(0.0, 1 * MiB, "/dev/sda1|ext4|8:1/7a"),
        reading(3600.0, 2 * MiB, "(outside the roots)|ext4|8:1/7a"),
    ]
    both = fill_rate(kept)
    assert both is not None and both.readings == 2


def test_a_disks_filesystem_and_an_anonymous_devices_with_one_fsid_are_two() -> None:
    """An overlay over a directory of an ext4 gives that ext4's fsid (before Linux 6.6): its device number
    is anonymous (major 0), the ext4's a disk's. Two anonymous ones (btrfs mounted again) stay one."""
    from sysmcp.history.snapshots import same_filesystem

    assert not same_filesystem("7:0/e8c698506b21c335", "0:40/e8c698506b21c335")
    assert not same_filesystem("0:40/e8c698506b21c335", "254:0/e8c698506b21c335")
    assert same_filesystem("0:41/e8c698506b21c335", "0:43/e8c698506b21c335")
    assert same_filesystem("8:16/7ddf171c21b65d2", "8:32/7ddf171c21b65d2")  # a USB disk named anew


def test_a_change_of_mode_owner_or_mtime_comes_before_the_files_whose_ctime_alone_moved() -> None:
    """A backup that hard-links a tree (``cp -al``, rsnapshot) moves every file's ctime: each is metadata
    changed. A file made world-writable among them is listed first, not after every file named before it,
    where the examples shown (the first few) would leave it out."""

    def f(mode: int = 0o644, ctime: float = 5.0) -> BaselineFile:
        return BaselineFile("ab", 10, 1.0, mode, 0, 0, ctime)

    names = [b"f%02d.conf" % i for i in range(20)]
    old = Baseline(SERIES, 0.0, "sha256", {name: f() for name in names})
    new = Baseline(
        SERIES, 1.0, "sha256", {name: f(0o666 if name == b"f19.conf" else 0o644, 9.0) for name in names}
    )
    diff = diff_baselines(old, new)
    assert diff.metadata[0] == (b"f19.conf", ("mode",))
    assert diff.metadata[1:] == [(name, ("ctime",)) for name in names[:19]]


def test_a_digest_that_changed_comes_before_the_unread_files_that_may_have_changed() -> None:
    """Files unreadable at the baseline whose ctime moved (a hard-linking backup moves every one) may
    have changed: content changed, not compared. A file whose digest changed is listed before them, and
    one unreadable then whose size changed (another content, surely) too."""

    def f(digest: str, size: int = 10, ctime: float = 5.0) -> BaselineFile:
        return BaselineFile(digest, size, 1.0, 0o600, 0, 0, ctime)

    unread = {b"a%02d" % i: Unread("permission denied", seen=f("")) for i in range(12)}
    old = Baseline(SERIES, 0.0, "sha256", {b"z_real": f("1")}, unread={**unread, b"b_grown": unread[b"a00"]})
    files = {name: f("9", ctime=9.0) for name in unread} | {b"z_real": f("2"), b"b_grown": f("8", size=20)}
    diff = diff_baselines(old, Baseline(SERIES, 1.0, "sha256", files))
    assert diff.content == [b"b_grown", b"z_real", *sorted(unread)]


def test_a_rewritten_file_is_found_below_a_directory_past_its_siblings_in_name_order() -> None:
    """The directories are merged in byte order of their names, where ``etc-old`` and ``etc.d`` come
    between ``etc`` and ``etc/app``: ``etc`` is still explained by ``etc/app`` below it."""
    sizes: dict[bytes, int] = {
        b"": 100 * MiB,
        b"etc": 20 * MiB,
        b"etc-old": MiB,
        b"etc.d": MiB,
        b"etc/app": 5 * MiB,
    }
    then: dict[bytes, float] = {b"": 10.0, b"etc": 10.0, b"etc/app": 10.0}
    now: dict[bytes, float] = {b"": 500.0, b"etc": 500.0, b"etc/app": 500.0}
    old = with_newest({p: (s, then.get(p, 3.0)) for p, s in sizes.items()}, 100.0)
    new = with_newest({p: (s, now.get(p, 3.0)) for p, s in sizes.items()}, DAY)
    assert [(c.path, c.kind) for c in diff_scans(old, new).changes] == [(b"etc/app", "modified")]


def test_a_comparison_told_to_stop_says_why_and_how_far_it_came_and_names_no_change() -> None:
    """``stop`` is asked every ``STOP_EVERY`` directories merged; the first reason it gives ends the
    comparison: the changes of only the first directories by name would misstate the whole."""
    many = {b"": 3 * STOP_EVERY * MiB} | {b"d%06d" % i: MiB for i in range(3 * STOP_EVERY)}
    grown = {path: size + MiB for path, size in many.items()}
    asked: list[int] = []

    def stop() -> str | None:
        asked.append(len(asked))
        return "its time budget ran out" if len(asked) == 2 else None

    old, new = snap(0.0, many), snap(DAY, grown)
    diff = diff_scan_rows(old, new, sorted(old.dirs.items()), sorted(new.dirs.items()), stop)
    assert (diff.comparable, diff.stopped, diff.compared, diff.changes) == (
        False,
        "its time budget ran out",
        2 * STOP_EVERY,
        [],
    )
    assert diff.reason is not None and "stopped early (its time budget ran out)" in diff.reason
    whole = diff_scan_rows(old, new, sorted(old.dirs.items()), sorted(new.dirs.items()), lambda: None)
    assert whole.comparable and whole.stopped is None and len(whole.changes) == 3 * STOP_EVERY
