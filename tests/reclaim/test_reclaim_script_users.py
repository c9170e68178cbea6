"""The generated script run by root while a second user (nobody) attacks it at the worst moment.

The script cannot act relative to an open directory, nor pin a file before it opens it: every step
resolves its path again. A ``stat`` placed first on the script's ``PATH`` hands the real one's answer
back and then lets the second user move, right after the look the script trusts (a deterministic
race, no sleeps): a directory of theirs swapped for a symlink to root's, or the descriptor of a deleted
file they hold swapped for an ``O_PATH`` one of root's file (which a write through ``/proc/PID/fd/N``
reopens with root's rights)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysmcp.reclaim import PlanRequest, build_plan, render_script
from sysmcp.reclaim._classes import RootsLayout
from tests.profile import UNDER_POSIX_PROFILE
from tests.reclaim.test_reclaim import layout, write

NOBODY = 65534

pytestmark = pytest.mark.skipif(
    UNDER_POSIX_PROFILE or os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs Linux, root (chown, another user's process) and setpriv(1)",
)


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory of root's that nobody can search (not under pytest's 0700 base)."""
    top = Path(tempfile.mkdtemp(prefix="sysmcp-script-", dir="/tmp"))
    os.chmod(top, 0o755)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def after_stat(base: Path, matching: str, then: str) -> dict[str, str]:
    """An environment whose ``stat`` is the real one, then, the first time its arguments end with
    ``matching``, runs the shell line ``then``."""
    return after_stats(base, (matching, then))


def after_stats(base: Path, *hooks: tuple[str, str]) -> dict[str, str]:
    """``after_stat`` with several hooks, each run once (the first marks ``hooks/done``, the next
    ``hooks/done1``, and so on)."""
    directory = base / "hooks"
    directory.mkdir()
    cases = "".join(
        f"  *'{matching}') if mkdir '{directory}/done{number or ''}' 2>/dev/null; then {then}; fi ;;\n"
        for number, (matching, then) in enumerate(hooks)
    )
    wrapper = directory / "stat"
    wrapper.write_text(f'#!/bin/sh\n{shutil.which("stat")} "$@"; r=$?\ncase "$*" in\n{cases}esac\nexit $r\n')
    wrapper.chmod(0o755)
    return {**os.environ, "PATH": f"{directory}:{os.environ['PATH']}"}


def as_nobody(line: str) -> str:
    return f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups sh -c '{line}'"


def run(script: str, base: Path, env: dict[str, str]) -> str:
    (base / "plan.sh").write_text(script, encoding="ascii")
    done = subprocess.run(
        ["sh", str(base / "plan.sh"), "--apply"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_directory_swapped_for_a_symlink_after_the_look_never_leads_rm_to_roots_file(base: Path) -> None:
    """nobody owns /var and /var/log here (as a user owns their home and caches): right after the script
    looked at their rotated log, they put a symlink to root's directory in place of /var/log, and ``rm``
    followed it to root's file of the same name. The script now skips every file another user could
    reach so, saying whose directory it is and what to use instead."""
    logs = base / "var/log"
    write(logs / "old.1", 10_000)
    for path in (base / "var", logs, logs / "old.1"):
        os.chown(path, NOBODY, NOBODY)
    roots = base / "roots"
    roots.mkdir()
    (roots / "old.1").write_bytes(b"root's own\n")
    plan = build_plan(PlanRequest(layout=layout(base), classes=("rotated_log",)))
    assert [e.path for item in plan.items for e in item.entries] == [os.fsencode(logs / "old.1")]
    swap = (
        f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups "
        f"sh -c 'mv {logs} {logs}.gone && ln -s {roots} {logs}'"
    )
    out = run(render_script(plan), base, after_stat(base, f"%d:%i:%s:%Y -- {logs}/old.1", swap))
    assert (roots / "old.1").read_bytes() == b"root's own\n", out
    assert f"skipped: {logs}/old.1: another user may rename or replace names in {base / 'var'} " in out, out
    assert "run this step as that user, or use reclaim" in out and (base / "hooks/done").exists()


def test_a_rotated_log_in_a_group_writable_log_directory_is_removed_and_a_swapped_name_leads_nowhere(
    base: Path,
) -> None:
    """/var/log on Ubuntu is root:syslog 0775. The script skipped every rotated log in it (a directory
    another user may write), though ``rm`` never follows the name it removes: only a directory *above*
    /var/log could lead it elsewhere. Now such a log is removed; a member of the group who swaps a log's
    name for a symlink to root's file right after the look makes ``rm`` remove their symlink, nothing more."""
    logs = base / "var/log"
    for name in ("old.1", "old.2"):
        write(logs / name, 10_000)
    os.chown(logs, 0, NOBODY)
    logs.chmod(0o775)
    roots = base / "roots"
    roots.mkdir()
    (roots / "secret").write_bytes(b"root's own\n")
    plan = build_plan(PlanRequest(layout=layout(base), classes=("rotated_log",)))
    assert sorted(e.path for item in plan.items for e in item.entries) == [
        os.fsencode(logs / "old.1"),
        os.fsencode(logs / "old.2"),
    ]
    swap = (
        f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups "
        f"sh -c 'mv {logs}/old.2 {logs}/old.2.gone && ln -s {roots}/secret {logs}/old.2'"
    )
    out = run(render_script(plan), base, after_stat(base, f"%d:%i:%s:%Y -- {logs}/old.2", swap))
    assert (base / "hooks/done").exists() and (roots / "secret").read_bytes() == b"root's own\n", out
    assert f"removed: {logs}/old.1" in out and f"removed: {logs}/old.2" in out, out
    assert sorted(os.listdir(logs)) == ["old.2.gone"], out


def test_another_users_stray_core_in_a_sticky_directory_is_removed_and_a_swapped_name_leads_nowhere(
    base: Path,
) -> None:
    """/tmp is sticky and everyone's: a core file nobody left there was skipped (an entry not root's in a
    directory others write). ``rm`` acts on the name, not on what it leads to, and nobody can put under
    that name only what they could remove themselves, so it goes now; swapped for a symlink to root's
    file after the look, the symlink goes and root's file stays."""
    tmp = base / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    roots = base / "roots"
    roots.mkdir()
    (roots / "secret").write_bytes(b"root's own\n")
    for name in ("core", "core.7"):
        write(tmp / name, 20_000)
        os.chown(tmp / name, NOBODY, NOBODY)
    plan = build_plan(PlanRequest(layout=layout(base), classes=("core_dump",)))
    assert sorted(e.path for item in plan.items for e in item.entries) == [
        os.fsencode(tmp / "core"),
        os.fsencode(tmp / "core.7"),
    ]
    swap = (
        f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups "
        f"sh -c 'rm {tmp}/core.7 && ln -s {roots}/secret {tmp}/core.7'"
    )
    out = run(render_script(plan), base, after_stat(base, f"%d:%i:%s:%Y -- {tmp}/core.7", swap))
    assert (base / "hooks/done").exists() and (roots / "secret").read_bytes() == b"root's own\n", out
    assert f"removed: {tmp}/core" in out and f"removed: {tmp}/core.7" in out, out
    assert os.listdir(tmp) == [], out


def test_a_directory_above_a_group_writable_one_swapped_for_a_symlink_still_leads_rm_nowhere(
    base: Path,
) -> None:
    """The log's own directory may be written by others; the one above it may not: nobody, owning /var,
    moves /var/log away right after the look and puts a symlink to root's directory in its place."""
    logs = base / "var/log"
    write(logs / "old.1", 10_000)
    os.chown(base / "var", NOBODY, NOBODY)
    os.chown(logs, 0, NOBODY)
    logs.chmod(0o775)
    roots = base / "roots"
    roots.mkdir()
    (roots / "old.1").write_bytes(b"root's own\n")
    plan = build_plan(PlanRequest(layout=layout(base), classes=("rotated_log",)))
    swap = (
        f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups "
        f"sh -c 'mv {logs} {logs}.gone && ln -s {roots} {logs}'"
    )
    out = run(render_script(plan), base, after_stat(base, f"%d:%i:%s:%Y -- {logs}/old.1", swap))
    assert (roots / "old.1").read_bytes() == b"root's own\n", out
    assert f"skipped: {logs}/old.1: another user may rename or replace names in {base / 'var'} " in out, out
    assert (base / "hooks/done").exists()


def test_a_duplicate_in_a_sticky_directory_is_not_compared_and_stays(base: Path) -> None:
    """A duplicate goes only after ``cmp`` finds its bytes the kept copy's, and ``cmp`` opens the name,
    following a symlink: nobody could put one to a device whose open acts (a watchdog) or to root's file
    (``cmp`` telling whether its bytes are the kept copy's) there. So a copy in a directory others write
    is not compared, and stays, while ``rm`` alone would be safe there."""
    shared = base / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    data = os.urandom(30_000)
    for name in ("a", "b"):
        (shared / name).write_bytes(data)
        os.chown(shared / name, NOBODY, NOBODY)
    groups = [[os.fsencode(shared / n) for n in ("a", "b")]]
    plan = build_plan(PlanRequest(layout=layout(base / "none"), duplicates=groups))
    out = run(render_script(plan), base, dict(os.environ))
    assert f"skipped: {shared}/b: another user may rename or replace names in {shared} " in out, out
    assert (shared / "b").read_bytes() == data


HOLDER = textwrap.dedent(
    """
    import os, sys
    os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, b"x" * 3_000_000); os.fsync(fd); os.unlink(sys.argv[1])
    roots = os.open(sys.argv[2], os.O_PATH)  # search permission on its directory is all this needs
    print(fd, flush=True)
    with open(sys.argv[3]) as go:  # the script's stat has looked: now
        go.readline()
    os.dup2(roots, fd)
    with open(sys.argv[4], "w") as done:
        done.write("swapped\\n")
    sys.stdin.read()
    """
)


def test_a_deleted_file_held_by_another_users_process_is_not_truncated_through_its_descriptor(
    base: Path,
) -> None:
    """nobody holds a deleted file; right after the script looked at ``/proc/PID/fd/N`` they ``dup2`` an
    ``O_PATH`` descriptor of root's file (0600, unreadable to them) onto N, and ``: >`` reopened it for
    writing as root: root's file emptied. The script now believes only a holder that is root or the
    user running it (``/proc/PID/status``: not ``/proc/PID``'s owner, which is root for a process that
    is not dumpable)."""
    mine = base / "nobodys"
    mine.mkdir()
    os.chown(mine, NOBODY, NOBODY)
    shadow = base / "shadow"
    shadow.write_bytes(b"root:$y$secret:19000:0:99999:7:::\n")
    shadow.chmod(0o600)
    go, done = base / "go", base / "done"
    for fifo in (go, done):
        os.mkfifo(fifo)
        fifo.chmod(0o666)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(mine / "app.log"), str(shadow), str(go), str(done)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        number = int(holder.stdout.readline())
        request = PlanRequest(
            layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(os.fsencode(base),)
        )
        plan = build_plan(request)
        (item,) = plan.items
        link = f"/proc/{holder.pid}/fd/{number}"
        assert [e.path for e in item.entries] == [os.fsencode(link)]
        swap = f"echo go > {go}; read answer < {done}"
        env = after_stat(base, f"%d:%i:%u -- {link}", swap)
        out = run(render_script(plan), base, env)
        assert stat.S_ISREG(os.stat(shadow).st_mode) and shadow.read_bytes().startswith(b"root:"), out
        assert f"skipped: {link}: held by another user's process" in out, out
        assert os.stat(link).st_size == 3_000_000  # what it held is not emptied either: reclaim does that
    finally:
        if not (base / "hooks/done").exists():  # the script never looked: let the holder go on
            with open(go, "w") as release:
                release.write("go\n")
            with open(done) as released:
                released.readline()
        if holder.stdin is not None:
            holder.stdin.close()
        holder.wait(timeout=30)


def test_a_directory_its_owner_moves_out_of_a_sticky_one_is_looked_at_again_when_another_user_takes_its_name(
    base: Path,
) -> None:
    """Root's directory d in a sticky directory (a /tmp) holds two duplicates; the script looked at d for
    the first and kept d's pass for the second. Then d's owner moved it away (a cleanup, a build done), and
    nobody took the free name with a directory of theirs holding a hard link of their own copy, so the
    second duplicate's identity was the planned one; right after that look they swapped their d for a
    symlink to root's directory, and ``rm`` removed root's file of the same name. A pass through a
    sticky directory now stands only while the entry below it is the directory looked at."""
    keep, tmp, roots = base / "keep", base / "tmp", base / "roots"
    keep.mkdir()
    tmp.mkdir()
    tmp.chmod(0o1777)
    roots.mkdir()
    (roots / "f2").write_bytes(b"root's own\n")
    first, second = os.urandom(40_000), os.urandom(30_000)  # the plan lists the larger first
    (keep / "k1").write_bytes(first)
    (keep / "k2").write_bytes(second)
    (tmp / "d").mkdir()
    (tmp / "d/f1").write_bytes(first)
    (tmp / "d/f2").write_bytes(second)
    for path in (keep / "k2", tmp / "d/f2"):
        os.chown(path, NOBODY, NOBODY)
    os.utime(keep / "k2", (1e9, 1e9))  # the older copy of nobody's two is the kept one
    os.utime(keep / "k1", (1e9, 1e9))
    groups = [[os.fsencode(keep / k), os.fsencode(tmp / "d" / f)] for k, f in (("k1", "f1"), ("k2", "f2"))]
    plan = build_plan(PlanRequest(layout=layout(base / "none"), duplicates=groups))
    assert [(e.path, item.keep.path if item.keep else None) for item in plan.items for e in item.entries] == [
        (os.fsencode(tmp / "d/f1"), os.fsencode(keep / "k1")),
        (os.fsencode(tmp / "d/f2"), os.fsencode(keep / "k2")),
    ]
    moved = f"mv {tmp}/d {tmp}/d.old && " + as_nobody(
        f"mkdir {tmp}/n && ln {tmp}/d.old/f2 {tmp}/n/f2 && mv {tmp}/n {tmp}/d"
    )
    swap = as_nobody(f"mv {tmp}/d {tmp}/d.x && ln -s {roots} {tmp}/d")
    env = after_stats(base, (f"%d:%i:%s:%Y -- {keep}/k2", moved), (f"%d:%i:%s:%Y -- {tmp}/d/f2", swap))
    out = run(render_script(plan), base, env)
    assert (base / "hooks/done").exists() and (roots / "f2").read_bytes() == b"root's own\n", out
    assert f"removed: {tmp}/d/f1" in out, out
    assert f"skipped: {tmp}/d/f2: another user may rename or replace names in {tmp}/d " in out, out


def test_what_the_script_keeps_of_its_looks_is_never_taken_from_its_environment(base: Path) -> None:
    """The script keeps each directory's pass in a variable named by the directory's number, and took
    one it found set in its environment (``DF0=1``, an ``env_keep``, a leftover export) for a pass of
    its own: nobody's /var was not looked at, and a symlink nobody put in place of /var/log after the
    look led ``rm`` to root's file. Those variables are now unset before the first step."""
    logs = base / "var/log"
    write(logs / "old.1", 10_000)
    for path in (base / "var", logs, logs / "old.1"):
        os.chown(path, NOBODY, NOBODY)
    roots = base / "roots"
    roots.mkdir()
    (roots / "old.1").write_bytes(b"root's own\n")
    plan = build_plan(PlanRequest(layout=layout(base), classes=("rotated_log",)))
    swap = as_nobody(f"mv {logs} {logs}.gone && ln -s {roots} {logs}")
    env = after_stat(base, f"%d:%i:%s:%Y -- {logs}/old.1", swap)
    out = run(render_script(plan), base, {**env, "DF0": "1", "DC0": "1", "DM0": "-"})
    assert (roots / "old.1").read_bytes() == b"root's own\n", out
    assert f"skipped: {logs}/old.1: another user may rename or replace names in {base / 'var'} " in out, out


ROOT_HOLDER = textwrap.dedent(
    """
    import os, sys
    for name in sys.argv[1:]:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"x" * 300_000); os.fsync(fd); os.unlink(name)
        print(fd, flush=True)
    sys.stdin.read()
    """
)


def test_a_deleted_file_held_open_and_given_to_another_user_since_the_plan_is_left_by_the_script(
    base: Path,
) -> None:
    """Root's process holds two deleted files; after the plan one of them was given to nobody (chown
    through ``/proc/PID/fd/N``: the same nameless inode). ``reclaim`` leaves such a file (``owner``: the
    approval named its owner); the script compared device and inode only and emptied it. It now compares
    the owner too, run for real by dash, and says why it left the file."""
    holder = subprocess.Popen(
        [sys.executable, "-c", ROOT_HOLDER, str(base / "given.log"), str(base / "kept.log")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        given, kept = (f"/proc/{holder.pid}/fd/{int(holder.stdout.readline())}" for _ in range(2))
        request = PlanRequest(
            layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(os.fsencode(base),)
        )
        plan = build_plan(request)
        assert sorted(e.path for item in plan.items for e in item.entries) == sorted(
            [os.fsencode(given), os.fsencode(kept)]
        )
        os.chown(given, NOBODY, NOBODY)
        shell = shutil.which("dash") or "sh"
        (base / "plan.sh").write_text(render_script(plan), encoding="ascii")
        done = subprocess.run(
            [shell, str(base / "plan.sh"), "--apply"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert (
            f"skipped: {given}: another user's file now (its owner changed since the plan)" in done.stdout
        ), done.stdout
        assert os.stat(given).st_size == 300_000
        assert f"truncated: {kept}" in done.stdout and os.stat(kept).st_size == 0, done.stdout
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
