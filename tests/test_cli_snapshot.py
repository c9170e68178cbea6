"""``sysmcp snapshot`` and ``sysmcp history`` as a timer runs them: quiet, exit codes, the lock."""

from __future__ import annotations

import fcntl
import os
import pwd
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sysmcp.cli.snapshot import EXIT_LOCKED, EXIT_NO_HISTORY, EXIT_OK, EXIT_USAGE, LOCK_NAME


def sysmcp(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sysmcp", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_a_snapshot_run_is_quiet_and_the_history_lists_it(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "f").write_bytes(b"x" * 2_000_000)
    state = tmp_path / "state"
    done = sysmcp("snapshot", "--state-dir", str(state), str(tree), "--baseline", str(tree / "a"))
    assert (done.returncode, done.stdout, done.stderr) == (EXIT_OK, "", "")
    listed = sysmcp("history", "--state-dir", str(state))
    assert listed.returncode == EXIT_OK
    lines = listed.stdout.splitlines()
    assert any(" scan " in line and line.endswith(str(tree)) for line in lines), listed.stdout
    assert any(" baseline " in line and line.endswith(str(tree / "a")) for line in lines), listed.stdout
    assert oct(os.stat(state).st_mode & 0o777) == "0o700"


def test_a_second_run_while_one_holds_the_lock_does_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    fd = os.open(state / LOCK_NAME, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the first run, still going
        done = sysmcp("snapshot", "--state-dir", str(state), str(tmp_path))
        assert done.returncode == EXIT_LOCKED and "holds the lock" in done.stderr
    finally:
        os.close(fd)


def test_exit_codes_for_no_history_and_a_path_outside_the_roots(tmp_path: Path) -> None:
    assert sysmcp("snapshot", "--no-history", str(tmp_path)).returncode == EXIT_NO_HISTORY
    (tmp_path / "in").mkdir()
    done = sysmcp("snapshot", "--state-dir", str(tmp_path / "s"), "--root", str(tmp_path / "in"), "/")
    assert done.returncode == EXIT_USAGE and "outside" in done.stderr
    unwritable = tmp_path / "file"
    unwritable.write_text("x")
    assert sysmcp("history", "--state-dir", str(unwritable / "s")).returncode == EXIT_NO_HISTORY


def test_history_under_root_lists_only_what_lies_inside_the_roots(tmp_path: Path) -> None:
    """--root confines history as it confines live answers: a snapshot of a tree outside the roots,
    recorded by a run without them, is not listed (nor its path named)."""
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    for tree in (inside, outside):
        (tree / "a").mkdir(parents=True)
        (tree / "a" / "f").write_bytes(b"x" * 2_000_000)
    state = tmp_path / "state"
    done = sysmcp("snapshot", "--state-dir", str(state), str(inside), str(outside))
    assert done.returncode == EXIT_OK, done.stderr
    everything = sysmcp("history", "--state-dir", str(state)).stdout
    assert str(outside) in everything and str(inside) in everything
    listed = sysmcp("history", "--state-dir", str(state), "--root", str(inside))
    assert listed.returncode == EXIT_OK
    assert str(inside) in listed.stdout and str(outside) not in listed.stdout


def test_a_snapshot_root_whose_name_holds_control_characters_is_listed_escaped_on_one_line(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "x\x1b[2J\nFORGED"
    tree.mkdir()
    state = tmp_path / "state"
    assert sysmcp("snapshot", "--state-dir", str(state), str(tree)).returncode == EXIT_OK
    listed = sysmcp("history", "--state-dir", str(state))
    assert "\x1b" not in listed.stdout
    assert listed.stdout.splitlines()[-1].endswith(f"{tmp_path}/x\\033[2J\\nFORGED")


def test_history_reclaim_under_root_names_no_kept_copy_outside_the_roots(tmp_path: Path) -> None:
    """A reclaim run with wider roots logged a duplicate inside that was removed in favour of a copy
    outside: listed under --root, the action is shown, the kept copy's path is not."""
    from sysmcp.history.store import Store
    from sysmcp.reclaim import ActionLog, LogRecord

    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    state = tmp_path / "state"
    actions = ActionLog(Store.open(state), lambda: 1e9)
    extra, kept = str(inside / "copy.iso"), str(outside / "secret-kept.iso")
    actions.record(LogRecord(1e9, "p1", "duplicate-1", extra, "delete", "done", None, 4096, 4096, kept))
    assert actions.flush() is None
    wide = sysmcp("history", "--reclaim", "--state-dir", str(state))
    assert kept in wide.stdout  # without roots, the whole log
    listed = sysmcp("history", "--reclaim", "--state-dir", str(state), "--root", str(tmp_path / "inside"))
    assert listed.returncode == EXIT_OK, listed.stderr
    assert extra in listed.stdout and "secret-kept" not in listed.stdout
    assert "kept copy outside the allowed roots" in listed.stdout


def test_history_of_a_missing_state_directory_says_so_and_makes_nothing(tmp_path: Path) -> None:
    """A listing creates nothing: a mistyped --state-dir (or sudo's other HOME) is named, not made into
    an empty history."""
    missing = tmp_path / "typo" / "state"
    for reclaim in ([], ["--reclaim"]):
        listed = sysmcp("history", *reclaim, "--state-dir", str(missing))
        assert listed.returncode == EXIT_OK and listed.stdout == "", listed.stderr
        assert f"no history is kept in {missing}" in listed.stderr
    assert not (tmp_path / "typo").exists()
    missing.mkdir(parents=True, mode=0o700)  # a directory with no database in it yet: none made there either
    assert sysmcp("history", "--state-dir", str(missing)).returncode == EXIT_OK
    assert list(missing.iterdir()) == []


def test_history_limit_counts_what_the_roots_show_and_any_number_is_taken(tmp_path: Path) -> None:
    """--limit N is the newest N the roots let it list, not the newest N of which the roots then hide
    some; a limit beyond SQLite's integers lists everything instead of a traceback."""
    from sysmcp.history.snapshots import DirTotals, ScanSnapshot, Series
    from sysmcp.history.store import Store

    state = tmp_path / "state"
    store = Store.open(state)
    inside = tmp_path / "inside"
    inside.mkdir()
    for n, root in enumerate([inside / "a", inside / "b", *(tmp_path / f"out{i}" for i in range(5))]):
        series = Series("h", "8:1/0", os.fsencode(root), "{}")
        store.save_scan(ScanSnapshot(series, 1e9 + n, False, 1 << 20, {b"": DirTotals(1, 1, 1)}))
    store.close()
    listed = sysmcp("history", "--state-dir", str(state), "--root", str(tmp_path / "inside"), "--limit", "2")
    assert listed.returncode == EXIT_OK, listed.stderr
    assert [line.split()[-1] for line in listed.stdout.splitlines()[2:]] == [
        str(inside / "b"),
        str(inside / "a"),
    ]
    everything = sysmcp("history", "--state-dir", str(state), "--limit", str(10**30))
    assert (everything.returncode, everything.stderr) == (EXIT_OK, ""), everything.stderr
    assert len(everything.stdout.splitlines()) == 2 + 7


def test_history_reclaim_limit_counts_the_actions_the_roots_show(tmp_path: Path) -> None:
    from sysmcp.history.store import Store
    from sysmcp.reclaim import ActionLog, LogRecord

    inside, state = tmp_path / "inside", tmp_path / "state"
    inside.mkdir()
    actions = ActionLog(Store.open(state), lambda: 1e9)
    for n, path in enumerate(
        [inside / "old.iso", inside / "new.iso", *(tmp_path / f"out{i}" for i in range(3))]
    ):
        actions.record(
            LogRecord(1e9 + n, "p1", f"stale-{n}", str(path), "delete", "done", None, 4096, 4096, None)
        )
    assert actions.flush() is None
    listed = sysmcp("history", "--reclaim", "--state-dir", str(state), "--root", str(inside), "--limit", "1")
    assert listed.returncode == EXIT_OK, listed.stderr
    assert str(inside / "new.iso") in listed.stdout and "1 action," in listed.stdout, listed.stdout


def test_history_of_a_store_it_cannot_read_says_so_and_exits_1_not_an_empty_listing(tmp_path: Path) -> None:
    """A store another process holds locked (or one found damaged) lists nothing: the listing must not
    then read as 'nothing kept' ('0 actions, 0 B freed')."""
    import sqlite3

    from sysmcp.history.store import Store

    state = tmp_path / "state"
    Store.open(state).close()
    holder = sqlite3.connect(state / "history.sqlite3", isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("COMMIT")  # held until it closes
    try:
        for reclaim in ([], ["--reclaim"]):
            listed = sysmcp("history", *reclaim, "--state-dir", str(state))
            assert listed.returncode == 1 and listed.stdout.count("\n") <= 1, listed.stdout
            assert "could not be read (database is locked): nothing listed" in listed.stderr, listed.stderr
    finally:
        holder.close()


def test_an_empty_state_dir_is_refused_not_read_as_the_default_store(tmp_path: Path) -> None:
    """--state-dir "$UNSET": refused as bad usage, not the default store recorded in or listed."""
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_STATE_HOME": "", "SYSMCP_STATE_DIR": ""}
    for command in (["history"], ["snapshot", str(tmp_path)]):
        done = sysmcp(*command, "--state-dir", "", env=env)
        assert done.returncode == EXIT_USAGE, (command, done.stdout, done.stderr)
        assert "--state-dir: names no directory" in done.stderr
    assert not (tmp_path / "home").exists()


def test_a_root_that_is_no_directory_is_refused_as_the_server_refuses_it(tmp_path: Path) -> None:
    """'sysmcp history --root /srv/typo' listed nothing, exit 0, as if nothing were kept under it."""
    state = tmp_path / "state"
    assert sysmcp("snapshot", "--state-dir", str(state), str(tmp_path)).returncode == EXIT_OK
    for command in (["history"], ["history", "--reclaim"], ["snapshot", str(tmp_path)]):
        for root in (str(tmp_path / "typo"), "relative-typo"):
            done = sysmcp(*command, "--state-dir", str(state), "--root", root)
            assert (done.returncode, done.stdout) == (EXIT_USAGE, ""), (command, root, done.stdout)
            assert done.stderr == f"sysmcp {command[0]}: --root must name existing directories: {root}\n"


def test_a_path_that_is_no_directory_is_refused_before_anything_is_made_or_scanned(tmp_path: Path) -> None:
    """'sysmcp snapshot /etc/hostname' made the state directory, its database and lock, then exited 2:
    a bad argument changes nothing, a good one beside it included."""
    state = tmp_path / "state"
    (tmp_path / "file").write_text("x")
    (tmp_path / "tree").mkdir()
    for paths in (
        [str(tmp_path / "file")],
        [str(tmp_path / "tree"), str(tmp_path / "file")],
        [str(tmp_path / "tree"), "--baseline", str(tmp_path / "missing")],
    ):
        done = sysmcp("snapshot", "--state-dir", str(state), *paths)
        assert (done.returncode, done.stdout) == (EXIT_USAGE, ""), (paths, done.stderr)
        assert done.stderr.startswith("sysmcp snapshot: ") and done.stderr.count("\n") == 1, done.stderr
        assert not state.exists(), (paths, done.stderr)


def test_a_baseline_no_hash_takes_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    """A FIFO given as --baseline made the state directory and exited 1 after the scans, when hashing
    refused it: it is refused with the other arguments, and looking at it does not open it (no wait)."""
    state = tmp_path / "state"
    (tmp_path / "tree").mkdir()
    os.mkfifo(tmp_path / "fifo")
    done = sysmcp(
        "snapshot", "--state-dir", str(state), str(tmp_path / "tree"), "--baseline", str(tmp_path / "fifo")
    )
    assert (done.returncode, done.stdout) == (EXIT_USAGE, ""), done.stderr
    assert done.stderr == (
        f"sysmcp snapshot: Cannot hash {tmp_path / 'fifo'}: it is a FIFO (named pipe); give a directory or a "
        "regular file\n"
    )
    assert not state.exists()


def test_a_missing_path_to_scan_is_said_to_be_missing_not_to_be_no_directory(tmp_path: Path) -> None:
    done = sysmcp("snapshot", "--state-dir", str(tmp_path / "state"), str(tmp_path / "missing"))
    assert (done.returncode, done.stderr) == (
        EXIT_USAGE,
        f"sysmcp snapshot: No such file or directory: {tmp_path / 'missing'}\n",
    )


def test_a_path_the_user_may_not_look_at_is_refused_in_words_not_a_traceback() -> None:
    """As a second user, a path under a directory it may not search: Path.is_dir raised PermissionError
    (a traceback, exit 1) and a --baseline there was said not to exist."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the command as another user")
    with tempfile.TemporaryDirectory() as where:  # pytest's own is root's alone: searchable by all here
        os.chmod(where, 0o755)
        refused_as_nobody(Path(where))


def refused_as_nobody(top: Path) -> None:
    locked = top / "locked"
    (locked / "inner").mkdir(parents=True)
    locked.chmod(0o700)
    (top / "tree").mkdir(mode=0o755)
    state = top / "state"
    nobody = pwd.getpwnam("nobody")
    for args in ([str(locked / "inner")], [str(top / "tree"), "--baseline", str(locked / "inner")]):
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                AS_NOBODY,
                str(nobody.pw_uid),
                str(nobody.pw_gid),
                "snapshot",
                "--state-dir",
                str(state),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (done.returncode, done.stdout) == (EXIT_USAGE, ""), (args, done.stderr)
        assert done.stderr == f"sysmcp snapshot: Cannot read {locked / 'inner'}: Permission denied\n", args
        assert not state.exists()


#: ``sysmcp`` run as another user, its modules (and the standard library's it needs) imported first,
#: as root: the tests' own tree need not be readable by that user.
AS_NOBODY = """
import os, sys, importlib, pkgutil
import argparse, pickle, sqlite3, json, fcntl, hashlib, stat, errno, textwrap, locale, gettext
import sysmcp, sysmcp.cli
for module in pkgutil.walk_packages(sysmcp.__path__, "sysmcp."):
    try:
        importlib.import_module(module.name)
    except Exception:
        pass
uid, gid = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([]); os.setgid(gid); os.setuid(uid)
os.environ["HOME"] = "/nonexistent"
sys.argv = ["sysmcp", *sys.argv[3:]]
sys.exit(sysmcp.cli.main())
"""
