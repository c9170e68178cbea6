"""what_changed's integrity check of what is not a regular file, against real trees: a symlink planted,
re-pointed or removed, a device node made or given another number, a directory given another mode or
owner, a name whose type changed; each name and link target shown escaped; and a baseline an older
sysmcp wrote (schema 3, regular files only) still compared, saying plainly what it did not record."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.walk import WalkOptions
from sysmcp.history import state
from sysmcp.history.recording import baseline_of, series_of
from sysmcp.history.snapshots import BaselineNode
from sysmcp.history.store import DB_NAME, MIGRATIONS
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.hash_tree import INPUT_SCHEMA as HASH_INPUT
from sysmcp.tools.hash_tree import handle as hash_tree
from tests.harness import call_tool, tool_context
from tests.profile import UNDER_POSIX_PROFILE

pytestmark = pytest.mark.anyio
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making device nodes and giving files away needs root")
linux_only = pytest.mark.skipif(UNDER_POSIX_PROFILE, reason="device nodes and lchown as Linux has them")


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(tmp_path: Path) -> Iterator[Clock]:
    clock = Clock()
    state.configure(tmp_path / "state", clock)
    yield clock
    state.configure(None)


async def call(ctx: Any = None, **args: Any) -> Any:
    return await call_tool("what_changed", ctx or tool_context(progress_token="w"), **args)


async def baseline(tree: Path) -> None:
    await hash_tree(validate_arguments(HASH_INPUT, {"path": str(tree), "baseline": True}), tool_context())


def make(tree: Path) -> None:
    (tree / "etc" / "cron.d").mkdir(parents=True)
    for directory in (tree, tree / "etc", tree / "etc" / "cron.d"):
        directory.chmod(0o755)
    (tree / "etc" / "passwd").write_bytes(b"root:x:0:0\n")
    (tree / "etc" / "cron.d" / "job").symlink_to("../passwd")
    (tree / "etc" / "old").symlink_to("passwd")


async def test_a_link_removed_and_a_link_replaced_by_a_file_are_named_with_what_they_were(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    make(tree)
    await baseline(tree)
    (tree / "etc" / "old").unlink()
    (tree / "etc" / "cron.d" / "job").unlink()
    (tree / "etc" / "cron.d" / "job").write_bytes(b"* * * * * root sh\n")
    output = await call(path=str(tree), since="1h")
    text = output.text + "\n"
    assert f"\n  removed: {tree}/etc/old (was a symbolic link to 'passwd')\n" in text, text
    assert (
        f"\n  content changed: {tree}/etc/cron.d/job (a symbolic link to '../passwd' → a regular file)\n"
        in text
    ), text
    integrity = output.structured["integrity"]
    assert (integrity["added"], integrity["removed"], integrity["content_changed"]) == (0, 1, 1), text


async def test_link_targets_are_shown_escaped_in_the_text_and_the_full_list(
    tmp_path: Path, clock: Clock
) -> None:
    """A target is the link's bytes: a newline or an escape sequence in it can neither forge a line nor
    drive the terminal, and bytes that are not UTF-8 show as octal escapes, as names do."""
    tree = tmp_path / "tree"
    make(tree)
    await baseline(tree)
    for n in range(3):  # more added than top_n: the full list is kept too
        os.symlink(b"/tmp/\xff\n\x1b[2Jx%d" % n, os.fsencode(tree / "etc") + b"/l\n%d" % n)
    ctx = tool_context(progress_token="w")
    output = await call(ctx, path=str(tree), since="1h", top_n=2)
    text = output.text + "\n"
    assert f"\n  added: {tree}/etc/l\\n0 (a symbolic link to '/tmp/\\377\\n\\033[2Jx0', mode " in text, text
    assert "\x1b" not in output.text and "\xff" not in output.text
    (link,) = output.links
    kept = ctx.results.get(link.uri)
    assert kept is not None
    rows = [row for row in kept.text.splitlines() if row.startswith("added\t")]
    assert rows[2].startswith(
        f"added\t{tree}/etc/l\\n2\ta symbolic link to '/tmp/\\377\\n\\033[2Jx2', mode "
    ), rows


@as_root
@linux_only
async def test_a_device_node_planted_or_renumbered_and_a_directory_or_link_given_away_are_findings(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    make(tree)
    os.mknod(tree / "etc" / "disk", 0o600 | stat.S_IFBLK, os.makedev(8, 1))
    await baseline(tree)
    os.mknod(tree / "etc" / "mem", 0o666 | stat.S_IFCHR, os.makedev(1, 1))
    os.chmod(tree / "etc" / "mem", 0o666)
    (tree / "etc" / "disk").unlink()
    os.mknod(tree / "etc" / "disk", 0o600 | stat.S_IFBLK, os.makedev(8, 2))
    os.chown(tree / "etc" / "cron.d", 1000, 1000)
    os.lchown(tree / "etc" / "cron.d" / "job", 1000, 0)
    output = await call(path=str(tree), since="1h")
    text = output.text + "\n"
    assert f"\n  added: {tree}/etc/mem (a character device 1,1, mode 0666, owner 0:0)\n" in text, text
    assert f"\n  content changed: {tree}/etc/disk (a block device 8,1 → 8,2)\n" in text, text
    assert f"\n  metadata changed: {tree}/etc/cron.d (directory, owner 0:0 → 1000:1000)\n" in text, text
    assert (
        f"\n  metadata changed: {tree}/etc/cron.d/job (symbolic link to '../passwd', owner 0:0 → 1000:0)\n"
        in text
    ), text
    integrity = output.structured["integrity"]
    assert (integrity["added"], integrity["content_changed"], integrity["metadata_changed"]) == (1, 1, 2), (
        text
    )


async def test_names_the_roots_do_not_cover_are_not_shown(tmp_path: Path, clock: Clock) -> None:
    """A stored name that leads outside the roots ('../x', from a damaged or hand-made store) is not
    compared or shown, as a stored file's is not."""
    tree = tmp_path / "tree"
    make(tree)
    await baseline(tree)
    store = state.active()
    assert store is not None
    (info,) = store.snapshots("baseline")
    kept = store.load_baseline(info.id)
    assert kept is not None and kept.nodes is not None
    kept.nodes[b"../outside"] = BaselineNode(stat.S_IFLNK, 0o777, 0, 0, None, b"/etc/shadow")
    kept.taken += 1
    assert store.save_baseline(kept).ok
    output = await call(tool_context([tree], progress_token="w"), path=str(tree), since="1h")
    assert "outside" not in output.text and output.structured["integrity"]["removed"] == 0, output.text


def write_version_3_baseline(state_dir: Path, tree: Path, taken: float) -> None:
    """A baseline of ``tree`` as sysmcp wrote it at schema 3: the schema of then, its rows as its
    ``save_baseline`` inserted them (regular files only)."""
    series = series_of(tree, WalkOptions(one_file_system=True))
    manifest = b"".join(
        b"%s  %s\n"
        % (hashlib.sha256(path.read_bytes()).hexdigest().encode(), os.fsencode(path.relative_to(tree)))
        for path in sorted(tree.rglob("*"))
        if path.is_file() and not path.is_symlink()
    )
    old = baseline_of(series, os.fsencode(tree), manifest, "sha256", False, taken)
    assert old.nodes is None
    state_dir.mkdir(mode=0o700)
    with sqlite3.connect(state_dir / DB_NAME) as db:
        for migration in MIGRATIONS[:3]:
            for statement in migration:
                db.execute(statement)
        sid = db.execute(
            "INSERT INTO snapshots (host, fs_id, root, options, kind, taken, partial, disk, files, threshold, label)"
            " VALUES (?, ?, ?, ?, 'baseline', ?, 0, ?, ?, 0, 'sha256')",
            (series.host, series.fs_id, series.root, series.options, taken, 0, len(old.files)),
        ).lastrowid
        db.executemany(
            "INSERT INTO baseline_files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (sid, p, f.digest, f.size, f.mtime, f.mode, f.uid, f.gid, f.ctime)
                for p, f in old.files.items()
            ),
        )
        db.execute("PRAGMA user_version = 3")
    (state_dir / DB_NAME).chmod(0o600)


async def test_a_baseline_an_older_sysmcp_recorded_still_compares_and_says_it_holds_regular_files_only(
    tmp_path: Path,
) -> None:
    """Its files are compared as before; a link planted, a FIFO made and a directory made writable are
    not called added or changed (the baseline never saw them), and the answer says so plainly."""
    tree = tmp_path / "tree"
    make(tree)
    (tree / "etc" / "shadow").write_bytes(b"x\n")
    clock = Clock()
    write_version_3_baseline(tmp_path / "state", tree, clock.now - 60)
    state.configure(tmp_path / "state", clock)
    try:
        (tree / "etc" / "cron.d" / "evil").symlink_to("/tmp/evil")
        os.mkfifo(tree / "etc" / "pipe")
        (tree / "etc").chmod(0o777)
        (tree / "etc" / "passwd").write_bytes(b"root:x:0:0:changed\n")
        (tree / "etc" / "shadow").unlink()
        (tree / "etc" / "shadow").symlink_to("passwd")
        output = await call(path=str(tree), since="1h")
        text = output.text + "\n"
        assert "): 0 added, 1 removed, 1 content changed, 0 metadata changed\n" in text, text
        assert (
            "\n  The baseline was recorded by an older sysmcp and holds regular files only: the 4 symbolic links "
            "and 1 special file under it now, and the directories' own mode and owner, are not compared, nor "
            "called added (a symlink planted or re-pointed, or a directory made writable, is not seen here); "
            "hash_tree baseline: true records a baseline that holds them.\n"
        ) in text, text
        assert f"\n  removed: {tree}/etc/shadow (now a symbolic link, not a regular file)\n" in text, text
        assert f"\n  content changed: {tree}/etc/passwd (size " in text, text
        integrity = output.structured["integrity"]
        assert integrity["links_and_directories_compared"] is False
        assert (integrity["symlinks_not_compared"], integrity["special_files_not_compared"]) == (4, 1)
        with sqlite3.connect(tmp_path / "state" / DB_NAME) as db:
            assert db.execute("PRAGMA user_version").fetchone()[0] == 4
            assert db.execute(
                "SELECT nodes_unrecorded FROM snapshots WHERE kind = 'baseline'"
            ).fetchall() == [(None,)]
    finally:
        state.configure(None)


async def test_past_the_bound_every_link_is_compared_or_counted_as_not_compared(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both walks keep a few names and count the rest: every link re-pointed is either a finding or
    among those the answer says were not compared, never passed over in silence under "Compared: ...
    symbolic links (target, owner)". (The bound made small: 250,000 links cost seconds to make.)"""
    monkeypatch.setattr("sysmcp.engine.hashing._treehash.MAX_NODES_KEPT", 4)
    tree = tmp_path / "tree"
    tree.mkdir()
    for n in range(6):
        (tree / f"l{n}").symlink_to(f"t{n}")
    await baseline(tree)
    for n in range(6):
        (tree / f"l{n}").unlink()
        (tree / f"l{n}").symlink_to(f"/tmp/evil{n}")
    output = await call(path=str(tree), since="1h")
    integrity = output.structured["integrity"]
    uncompared = integrity.get("links_and_directories_not_compared", 0)
    assert uncompared >= 2 and integrity["content_changed"] + uncompared >= 6, output.text
    assert (
        f"\n  At least {uncompared} symbolic links, directories or special files not compared: the baseline or "
        "the tree now held more than a baseline records (250,000).\n" in output.text + "\n"
    ), output.text


async def test_what_the_text_leaves_out_of_links_and_directories_is_counted_as_names_not_files(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    make(tree)
    await baseline(tree)
    (tree / "new").mkdir()
    for n in range(3):
        (tree / "new" / f"l{n}").symlink_to("/tmp")
    output = await call(path=str(tree), since="1h", top_n=1)
    assert f"\n  added: {tree}/new (a directory, mode " in output.text, output.text
    assert "\n  … and 3 more names not shown\n" in output.text + "\n", output.text


async def test_a_baseline_past_the_bound_says_how_many_links_and_directories_it_did_not_keep(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Told when the baseline is taken, not only when a later what_changed finds them not compared."""
    monkeypatch.setattr("sysmcp.engine.hashing._treehash.MAX_NODES_KEPT", 4)
    tree = tmp_path / "tree"
    tree.mkdir()
    for n in range(6):
        (tree / f"l{n}").symlink_to(f"t{n}")
    output = await hash_tree(
        validate_arguments(HASH_INPUT, {"path": str(tree), "baseline": True}), tool_context()
    )
    assert (
        " 2 more symbolic links, directories or special files past what a baseline records (250,000) are "
        "counted, not kept: what_changed does not compare them." in output.text
    ), output.text
