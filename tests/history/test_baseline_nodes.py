"""An integrity baseline's directories, symbolic links and special files: kept in the store exactly (a
link's target as bytes, a device's number), read back as not recorded from a baseline an older sysmcp
wrote, and compared as AIDE does (pure values: no tree, no clock)."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

from sysmcp.history.diff import diff_baselines
from sysmcp.history.snapshots import Baseline, BaselineFile, BaselineNode, Series, Unread
from sysmcp.history.store import DB_NAME, MIGRATIONS, Store

SERIES = Series("host", "8:1/abc", b"/srv", '{"exclude":[],"xdev":true}')
DIR = BaselineNode(stat.S_IFDIR, 0o755, 0, 0)
FILE = BaselineFile("ab" * 32, 10, 1.0, 0o644, 0, 0, 2.0)


class Clock:
    def __call__(self) -> float:
        return 1000.0


def link(target: bytes, uid: int = 0) -> BaselineNode:
    return BaselineNode(stat.S_IFLNK, 0o777, uid, uid, None, target)


def baseline(
    files: dict[bytes, BaselineFile] | None = None,
    nodes: dict[bytes, BaselineNode] | None = None,
    **rest: object,
) -> Baseline:
    return Baseline(SERIES, 1.0, "sha256", files or {}, nodes=nodes, **rest)  # type: ignore[arg-type]


def test_nodes_are_kept_exactly_and_a_baseline_without_them_reads_back_as_not_recording_them(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path / "s", Clock())
    nodes = {
        b"": DIR,
        b"etc/cron.d/x": link(b"/tmp/\xff\nevil"),  # not UTF-8, a newline: the bytes as they are
        b"etc/null": BaselineNode(stat.S_IFCHR, 0o666, 0, 0, 0x103, None),
        b"etc/fifo": BaselineNode(stat.S_IFIFO, 0o600, 7, 8),
    }
    saved = store.save_baseline(baseline({b"etc/passwd": FILE}, nodes, nodes_unrecorded=3))
    again = store.load_baseline(saved.id or 0)
    assert again is not None and (again.nodes, again.nodes_unrecorded) == (nodes, 3)
    none = store.save_baseline(baseline({b"etc/passwd": FILE}, {}))
    loaded = store.load_baseline(none.id or 0)
    assert loaded is not None and loaded.nodes == {}  # recorded, and there were none: not "not recorded"
    old = store.save_baseline(baseline({b"etc/passwd": FILE}))
    loaded = store.load_baseline(old.id or 0)
    assert loaded is not None and loaded.nodes is None


def test_a_version_3_baseline_is_upgraded_and_reads_back_without_nodes(tmp_path: Path) -> None:
    """What release 3 wrote: its schema, a baseline of one file. It loads with ``nodes`` None (so
    what_changed says they were not recorded, never that they were added), and its rows stay."""
    (tmp_path / "s").mkdir(mode=0o700)
    with sqlite3.connect(tmp_path / "s" / DB_NAME) as db:
        for migration in MIGRATIONS[:3]:
            for statement in migration:
                db.execute(statement)
        db.execute(
            "INSERT INTO snapshots (kind, host, fs_id, root, options, taken, partial, disk, files, threshold,"
            " label) VALUES ('baseline', 'host', '8:1/abc', ?, '{\"xdev\":true}', 6.0, 0, 10, 1, 0, 'sha256')",
            (b"/srv",),
        )
        db.execute(
            "INSERT INTO baseline_files VALUES (1, ?, ?, 10, 1.0, 420, 0, 0, 2.0)", (b"etc/passwd", "ab" * 32)
        )
        db.execute("PRAGMA user_version = 3")
    (tmp_path / "s" / DB_NAME).chmod(0o600)
    store = Store.open(tmp_path / "s", Clock())
    old = store.load_baseline(1)
    assert old is not None and old.nodes is None and old.files == {b"etc/passwd": FILE}
    with sqlite3.connect(tmp_path / "s" / DB_NAME) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 4


def test_a_baseline_without_nodes_compares_its_files_and_calls_no_link_or_directory_added() -> None:
    old = baseline({b"a": FILE})
    new = baseline({b"a": FILE}, {b"": DIR, b"d": DIR, b"l": link(b"/tmp")})
    result = diff_baselines(old, new)
    assert result.comparable and not result.nodes_compared
    assert (result.added, result.removed, result.content, result.metadata) == ([], [], [], [])


def test_links_devices_and_directories_compare_as_aide_does() -> None:
    char = BaselineNode(stat.S_IFCHR, 0o600, 0, 0, 0x801, None)
    old = baseline(
        {b"f": FILE, b"was-file": FILE},
        {
            b"": DIR,
            b"d": DIR,
            b"gone": link(b"x"),
            b"l": link(b"a"),
            b"owned": link(b"y"),
            b"dev": char,
            b"was-link": link(b"f"),
        },
    )
    new = baseline(
        {b"f": FILE, b"was-link": FILE},
        {
            b"": BaselineNode(stat.S_IFDIR, 0o777, 0, 0),
            b"d": BaselineNode(stat.S_IFDIR, 0o755, 1000, 1000),
            b"l": link(b"b"),
            b"owned": link(b"y", uid=1000),
            b"dev": BaselineNode(stat.S_IFCHR, 0o600, 0, 0, 0x802, None),
            b"was-file": link(b"/etc/shadow"),
            b"new": BaselineNode(stat.S_IFBLK, 0o660, 0, 6, 0x800, None),
        },
    )
    result = diff_baselines(old, new)
    assert result.nodes_compared
    assert result.added == [b"new"]
    assert result.removed == [b"gone"] and result.removed_kind == {b"gone": stat.S_IFLNK}
    assert result.content == [b"dev", b"l", b"was-file", b"was-link"]
    assert result.metadata == [(b"", ("mode",)), (b"d", ("owner",)), (b"owned", ("owner",))]
    assert result.nodes[b"was-file"] == (FILE, link(b"/etc/shadow"))
    assert result.nodes[b"was-link"] == (link(b"f"), FILE)


def test_past_the_bound_a_node_on_one_side_only_is_not_compared_and_a_change_still_is() -> None:
    old = baseline({}, {b"": DIR, b"kept": link(b"a"), b"only-then": DIR}, nodes_unrecorded=5)
    new = baseline({}, {b"": DIR, b"kept": link(b"b"), b"only-now": DIR})
    result = diff_baselines(old, new)
    assert (result.added, result.removed, result.content) == ([], [], [b"kept"])
    assert result.nodes_uncompared == 6  # of the baseline's 8, only the 2 on both sides are compared


def test_past_the_bound_on_both_sides_what_neither_recorded_is_counted_as_not_compared() -> None:
    """Both sides cut at the bound at the same names: none is on one side only, yet the ones past it
    (a link re-pointed among them) were compared on neither side, and the answer must not read as if
    they were."""
    nodes = {b"": DIR, b"a": link(b"x")}
    old = baseline({}, nodes, nodes_unrecorded=50_300)
    new = baseline({}, dict(nodes), nodes_unrecorded=50_301)
    result = diff_baselines(old, new)
    assert (result.added, result.removed, result.content) == ([], [], [])
    assert result.nodes_uncompared == 50_301


def test_a_node_below_a_directory_unreadable_then_or_now_is_neither_added_nor_removed() -> None:
    unread = {b"locked": Unread("could not be listed", directory=True)}
    old = baseline({}, {b"": DIR, b"locked": DIR, b"open/l": link(b"a")}, unread=unread)
    new = baseline({}, {b"": DIR, b"locked": DIR, b"locked/l": link(b"b")}, unread={})
    result = diff_baselines(old, new)
    assert result.not_comparable == [b"locked/l"] and result.added == []
    old = baseline({}, {b"": DIR, b"locked": DIR, b"locked/l": link(b"a")})
    new = baseline({}, {b"": DIR, b"locked": DIR}, unread=unread)
    result = diff_baselines(old, new)
    assert result.removed == [] and b"locked/l" in result.unreadable


def test_node_rows_a_damaged_or_forged_store_holds_are_left_out_not_raised_or_shown_whole(
    tmp_path: Path,
) -> None:
    """Nothing read back from the store is trusted to be well-formed: a row whose name or target is
    text, not bytes, whose mode, owner or device number is not a whole number in range, or whose target
    is longer than any link can hold, is left out (it describes nothing a walk could record); the rows
    beside it load as they were kept."""
    store = Store.open(tmp_path / "s", Clock())
    saved = store.save_baseline(baseline({}, {b"": DIR, b"etc/ok": link(b"/etc/passwd")}))
    assert saved.ok and saved.id is not None
    forged = [
        ("etc/text-name", stat.S_IFLNK, 0o777, 0, 0, None, b"x"),
        (b"etc/text-target", stat.S_IFLNK, 0o777, 0, 0, None, "x"),
        (b"etc/int-target", stat.S_IFLNK, 0o777, 0, 0, None, 12345),
        (7, stat.S_IFLNK, 0o777, 0, 0, None, b"x"),
        (b"etc/mode-text", stat.S_IFDIR, "rwx", 0, 0, None, None),
        (b"etc/mode-real", stat.S_IFDIR, 1.5, 0, 0, None, None),
        (b"etc/mode-huge", stat.S_IFDIR, 1 << 40, 0, 0, None, None),
        (b"etc/kind-text", "dir", 0o755, 0, 0, None, None),
        (b"etc/owner-text", stat.S_IFDIR, 0o755, "root", 0, None, None),
        (b"etc/owner-negative", stat.S_IFDIR, 0o755, -1, 0, None, None),
        (b"etc/rdev-text", stat.S_IFCHR, 0o600, 0, 0, "1,3", None),
        (b"etc/rdev-negative", stat.S_IFCHR, 0o600, 0, 0, -1, None),
        (b"etc/huge-target", stat.S_IFLNK, 0o777, 0, 0, None, b"A" * 1_000_000),
    ]
    with sqlite3.connect(tmp_path / "s" / DB_NAME) as db:
        db.executemany(
            "INSERT INTO baseline_nodes VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [(saved.id, *r) for r in forged]
        )
    loaded = store.load_baseline(saved.id)
    assert loaded is not None and loaded.nodes == {b"": DIR, b"etc/ok": link(b"/etc/passwd")}


def test_findings_of_files_and_nodes_together_are_listed_in_name_order() -> None:
    """A directory made with a file and a link in it: the three added are named in order, the directory
    first, as the removed and changed are; the text's first few and the full list follow this order."""
    unread = {b"new/locked": Unread("could not be listed", directory=True)}
    old = baseline(
        {}, {b"": DIR, b"gone": DIR}, unread={b"gone": Unread("could not be listed", directory=True)}
    )
    new = baseline(
        {b"new/file": FILE, b"gone/f": FILE},
        {b"": DIR, b"new": DIR, b"new/link": link(b"x"), b"gone": DIR, b"gone/l": link(b"y")},
        unread=unread,
    )
    result = diff_baselines(old, new)
    assert result.added == [b"new", b"new/file", b"new/link"]
    assert result.not_comparable == [b"gone/f", b"gone/l"]
