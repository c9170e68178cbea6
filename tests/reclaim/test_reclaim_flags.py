"""Files marked immutable or append-only (``chattr +i`` / ``+a``, lsattr's ``i`` and ``a``): someone
chose to keep them, so the plan leaves them out and says so, and ``reclaim`` checks the flags again at
the moment of acting: a file marked since the plan is never removed, emptied or replaced, and the answer
says why in those words (not "Operation not permitted", not a file left under a private name unsaid)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysmcp import platform
from sysmcp.reclaim import (
    ApplyRequest,
    Item,
    Plan,
    PlannedFile,
    PlanRequest,
    apply_items,
    build_plan,
    render_script,
)
from sysmcp.reclaim import _classes as classes
from sysmcp.reclaim._plan import Identity
from sysmcp.tools import reclaim
from sysmcp.tools.reclaim import REASONS
from sysmcp.tools.reclaim_plan import render
from tests.profile import UNDER_POSIX_PROFILE
from tests.reclaim.test_reclaim import layout, run_script, write


def _why_not(probe: Path) -> str:
    if UNDER_POSIX_PROFILE:
        return "chattr's flags are Linux's (the BSDs' chflags are read from st_flags, not tested here)"
    if shutil.which("chattr") is None:
        return "no chattr(1)"
    probe.touch()
    done = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, text=True, check=False)
    subprocess.run(["chattr", "-i", str(probe)], capture_output=True, check=False)
    probe.unlink()
    return "" if done.returncode == 0 else f"chattr +i refused here: {done.stderr.strip()}"


@pytest.fixture
def chattr(tmp_path: Path) -> Iterator[list[Path]]:
    """Files to mark with ``mark(path, '+i')``; every one unmarked afterwards (or pytest could not
    remove them). Skips where the filesystem or the user cannot mark files."""
    why = _why_not(tmp_path / ".probe")
    if why:
        pytest.skip(why)
    marked: list[Path] = []
    yield marked
    for path in marked:
        subprocess.run(["chattr", "-i", "-a", str(path)], capture_output=True, check=False)
    for aside in tmp_path.rglob(".sysmcp-aside-*"):
        subprocess.run(["chattr", "-i", "-a", str(aside)], capture_output=True, check=False)


def mark(marked: list[Path], path: Path, flag: str) -> None:
    subprocess.run(["chattr", flag, str(path)], check=True, capture_output=True)
    marked.append(path)


def test_the_plan_leaves_out_immutable_and_append_only_files_and_says_so(
    tmp_path: Path, chattr: list[Path]
) -> None:
    logs = tmp_path / "var/log"
    write(logs / "kept.1", 20_000)
    write(logs / "audit.1", 30_000)
    plain = write(logs / "old.1", 10_000)
    mark(chattr, logs / "kept.1", "+i")
    mark(chattr, logs / "audit.1", "+a")
    plan = build_plan(PlanRequest(layout=layout(tmp_path), classes=("rotated_log",)))
    (item,) = plan.items
    assert [e.path for e in item.entries] == [os.fsencode(logs / "old.1")] and item.bytes == plain
    assert sorted(plan.protected) == sorted(os.fsencode(logs / n) for n in ("kept.1", "audit.1"))
    text = render(plan, str(tmp_path))
    assert "2 files left out: marked immutable or append-only" in text, text
    assert f"{logs / 'kept.1'}" in text and f"{logs / 'audit.1'}" in text


def test_a_duplicate_marked_immutable_is_no_extra_and_one_whose_every_extra_is_marked_is_no_item(
    tmp_path: Path, chattr: list[Path]
) -> None:
    data = os.urandom(30_000)
    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(data)
        os.utime(tmp_path / name, (1_000_000_000, 1_000_000_000 + ord(name)))
    mark(chattr, tmp_path / "a", "+i")  # the kept copy may be marked: it stays
    mark(chattr, tmp_path / "b", "+i")
    groups = [[os.fsencode(tmp_path / n) for n in ("a", "b", "c")]]
    (item,) = build_plan(PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups)).items
    assert item.keep is not None and item.keep.path == groups[0][0]
    assert [e.path for e in item.entries] == [groups[0][2]]
    mark(chattr, tmp_path / "c", "+a")
    plan = build_plan(PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups))
    assert plan.items == () and sorted(plan.protected) == groups[0][1:]


@pytest.mark.parametrize("flag", ["+i", "+a"])
@pytest.mark.parametrize("when", ["after the plan", "after the look", "while set aside"])
def test_a_file_marked_since_the_plan_is_never_removed_and_the_answer_says_so(
    tmp_path: Path, chattr: list[Path], flag: str, when: str
) -> None:
    """Marked after the plan (its ctime moved too), between the look and the rename aside (``between``),
    or while it is aside and compared with its kept copy (the comparison's ``cancel()``): it stays, under
    its name or, where the flag forbids even the rename back, under the private name the reason gives."""
    data = os.urandom(30_000)
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(data)
        os.utime(tmp_path / name, (1_000_000_000, 1_000_000_000 + (name == "b")))
    groups = [[os.fsencode(tmp_path / n) for n in ("a", "b")]]
    plan = build_plan(PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups))
    if when == "after the plan":
        mark(chattr, tmp_path / "b", flag)

    def between(path: bytes) -> None:
        if when == "after the look":
            mark(chattr, tmp_path / "b", flag)

    def cancel() -> None:
        asides = [tmp_path / n for n in os.listdir(tmp_path) if n.startswith(".sysmcp-aside-")]
        if when == "while set aside" and asides and asides[0] not in chattr:
            mark(chattr, asides[0], flag)

    request = ApplyRequest(plan, [plan.items[0].id], lambda path: True, between=between)
    (applied,) = apply_items(request, cancel=cancel)
    (outcome,) = applied.outcomes
    word = "immutable" if flag == "+i" else "append_only"
    assert not outcome.done and outcome.reason is not None
    assert outcome.reason.partition(";")[0] == word, outcome.reason
    left = [n for n in os.listdir(tmp_path) if n.startswith(".sysmcp-aside-")]
    if left:  # the flag forbids the rename back too: the reason says where the file is
        assert when == "while set aside" and f"left as {left[0]}" in outcome.reason
        assert (tmp_path / left[0]).read_bytes() == data
    else:
        assert (tmp_path / "b").read_bytes() == data
    assert word in REASONS


@pytest.mark.parametrize("flag", ["+i", "+a"])
def test_a_log_to_empty_marked_since_the_plan_is_not_emptied(
    tmp_path: Path, chattr: list[Path], flag: str
) -> None:
    log = tmp_path / "c-json.log"
    log.write_bytes(os.urandom(20_000))
    identity = Identity.of(os.lstat(log))
    item = Item(
        "container-log", "container", (PlannedFile(os.fsencode(log), identity),), identity.disk,
        None, "the log", "review", "stat", "truncate",
    )  # fmt: skip
    mark(chattr, log, flag)
    plan = Plan("p", 0.0, (b"/",), (item,))
    (applied,) = apply_items(ApplyRequest(plan, [item.id], lambda path: True))
    assert [o.reason for o in applied.outcomes] == ["immutable" if flag == "+i" else "append_only"]
    assert log.stat().st_size == 20_000


def test_no_hard_link_is_offered_to_a_kept_copy_marked_immutable(tmp_path: Path, chattr: list[Path]) -> None:
    """A name linked to a marked file would be marked too, and the kernel refuses the link: the plan says
    why ``:link`` is not offered, rather than every link failing with "Operation not permitted"."""
    data = os.urandom(30_000)
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(data)
        os.utime(tmp_path / name, (1_000_000_000, 1_000_000_000 + (name == "b")))
    mark(chattr, tmp_path / "a", "+i")
    groups = [[os.fsencode(tmp_path / n) for n in ("a", "b")]]
    (item,) = build_plan(PlanRequest(layout=layout(tmp_path / "none"), duplicates=groups)).items
    assert not item.linkable and "the kept copy is marked immutable" in (item.no_link or ""), item.no_link


@pytest.mark.parametrize("flag", ["+i", "+a"])
def test_a_file_in_a_directory_marked_immutable_or_append_only_is_left_out_of_a_removal(
    tmp_path: Path, chattr: list[Path], flag: str
) -> None:
    """``chattr +a /var/log`` (a hardening some admins do): no name in it may be removed or renamed, so
    each rotated log there was planned and then failed "Operation not permitted". Left out and named,
    as a marked file is."""
    logs = tmp_path / "var/log"
    write(logs / "old.1", 10_000)
    mark(chattr, logs, flag)
    plan = build_plan(PlanRequest(layout=layout(tmp_path), classes=("rotated_log",)))
    assert plan.items == () and plan.protected == (os.fsencode(logs / "old.1"),), plan
    text = render(plan, str(tmp_path))
    assert "1 file left out: marked immutable or append-only, or in a directory so marked" in text, text


def _inotify_opens(path: Path) -> int:
    """An inotify descriptor told of every open of ``path`` (``IN_OPEN``), read without waiting."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0 and libc.inotify_add_watch(fd, os.fsencode(path), 0x20) >= 0, ctypes.get_errno()
    return int(fd)


def _opened(watch: int) -> bool:
    try:
        return bool(os.read(watch, 4096))
    except BlockingIOError:
        return False


@pytest.mark.skipif(UNDER_POSIX_PROFILE, reason="statx and inotify are Linux's")
def test_reading_the_flags_opens_neither_the_file_nor_a_fifo_swapped_in_for_it(
    tmp_path: Path, chattr: list[Path]
) -> None:
    """An open breaks a lease (Samba's oplocks), and an open of a FIFO or device swapped in after the plan
    has side effects of its own (a writer waiting on the FIFO goes on, a tape rewinds): ``statx`` tells
    the flags (``stx_attributes``) without one. inotify sees every open (``IN_OPEN``)."""
    log = tmp_path / "app.log.1"
    log.write_bytes(b"x" * 10_000)
    mark(chattr, log, "+a")
    planned = os.lstat(log)
    watch = _inotify_opens(log)
    try:
        assert classes.protection(None, os.fsencode(log), planned) == "append_only"
        assert not _opened(watch), "the file was opened to read its flags"
    finally:
        os.close(watch)
    fifo = tmp_path / "swapped"
    os.mkfifo(fifo)
    watch = _inotify_opens(fifo)
    try:
        assert classes.protection(None, os.fsencode(fifo), planned) is None
        assert not _opened(watch), "the FIFO swapped in was opened"
    finally:
        os.close(watch)


@pytest.mark.skipif(UNDER_POSIX_PROFILE, reason="FS_IOC_GETFLAGS is Linux's")
def test_without_statx_the_flags_are_read_by_the_ioctl_on_the_planned_inode_only(
    tmp_path: Path, chattr: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel before 4.11, a C library before glibc 2.28, a filesystem whose ``statx`` does not report
    the flags: ``FS_IOC_GETFLAGS`` (its number this machine's), on the inode pinned with ``O_PATH`` and
    found to be the planned regular file or directory; a FIFO swapped in is never opened."""
    monkeypatch.setattr(platform, "_statx_call", lambda: None, raising=False)
    log = tmp_path / "app.log.1"
    log.write_bytes(b"x" * 10_000)
    mark(chattr, log, "+i")
    planned = os.lstat(log)
    assert classes.protection(None, os.fsencode(log), planned) == "immutable"
    assert classes.directory_protection(os.fsencode(tmp_path / "d" / "x"), {}) is None
    (tmp_path / "d").mkdir()
    mark(chattr, tmp_path / "d", "+a")
    assert classes.directory_protection(os.fsencode(tmp_path / "d" / "x"), {}) == "append_only"
    fifo = tmp_path / "swapped"
    os.mkfifo(fifo)
    watch = _inotify_opens(fifo)
    try:
        assert classes.protection(None, os.fsencode(fifo), planned) is None
        assert not _opened(watch), "the FIFO swapped in was opened"
    finally:
        os.close(watch)


@pytest.mark.parametrize("flag", ["+i", "+a"])
def test_a_directory_marked_since_the_plan_says_which_and_how_to_go_on(
    tmp_path: Path, chattr: list[Path], flag: str
) -> None:
    """``chattr +i /var/log/app`` after the plan: the rename aside failed with a bare "Operation not
    permitted". Now the answer names the directory and what to do."""
    logs = tmp_path / "var/log/app"
    write(logs / "old.1", 10_000)
    plan = build_plan(PlanRequest(layout=layout(tmp_path), classes=("rotated_log",)))
    mark(chattr, logs, flag)
    results = apply_items(ApplyRequest(plan, [plan.items[0].id], lambda path: True))
    word = "immutable" if flag == "+i" else "append_only"
    assert [o.reason for o in results[0].outcomes] == [f"directory_{word}"]
    assert (logs / "old.1").exists() and os.listdir(logs) == ["old.1"]
    text = reclaim.render(reclaim.report(plan, results))
    assert f"its directory {logs} is marked {word.replace('_', '-')}" in text, text
    assert f"run chattr {flag.replace('+', '-')} {logs} and reclaim again, or leave it" in text, text


def test_the_command_to_unmark_a_directory_names_it_as_one_shell_word(
    tmp_path: Path, chattr: list[Path]
) -> None:
    """A directory with a space, a quote and a ``;`` in its name marked since the plan: the answer said
    ``run chattr -i /…/my logs; x's and reclaim again``, a command that unmarks nothing (or runs what
    follows the ``;``) when pasted, as the model or the operator is told to. The command now quotes it."""
    logs = tmp_path / "var/log/my logs; x's"
    write(logs / "old.1", 10_000)
    plan = build_plan(PlanRequest(layout=layout(tmp_path), classes=("rotated_log",)))
    mark(chattr, logs, "+i")
    results = apply_items(ApplyRequest(plan, [plan.items[0].id], lambda path: True))
    assert [o.reason for o in results[0].outcomes] == ["directory_immutable"]
    text = reclaim.render(reclaim.report(plan, results))
    assert f"its directory {logs} is marked immutable" in text, text
    command = text.split("run ", 1)[1].split(" and reclaim again")[0]
    assert shlex.split(command) == ["chattr", "-i", str(logs)], text


def test_the_script_skips_a_file_or_a_directory_marked_since_the_plan_and_says_which(
    tmp_path: Path, chattr: list[Path]
) -> None:
    """The script an admin runs by hand re-checks the flags as it re-checks identity: marking moves only
    the ctime, which the script does not compare, so a marked file reached ``rm`` and was skipped as
    "rm failed", its directory unnamed. Now it is left before ``rm``, in the dry run too, with its reason."""
    logs, audit = tmp_path / "var/log", tmp_path / "var/log/audit"
    for path in (logs / "kept.1", logs / "old.1", audit / "audit.log.1"):
        write(path, 10_000)
    plan = build_plan(PlanRequest(layout=layout(tmp_path), classes=("rotated_log",)))
    assert sorted(e.path for item in plan.items for e in item.entries) == sorted(
        os.fsencode(p) for p in (logs / "kept.1", logs / "old.1", audit / "audit.log.1")
    )
    mark(chattr, logs / "kept.1", "+i")
    mark(chattr, audit, "+a")
    script = render_script(plan)
    dry = run_script(script, cwd=tmp_path).stdout.decode()
    done = run_script(script, "--apply", cwd=tmp_path)
    for out in (dry, done.stdout.decode()):
        assert f"skipped: {logs / 'kept.1'}: marked immutable (chattr/chflags), so it stays" in out, out
        assert (
            f"skipped: {audit / 'audit.log.1'}: its directory {audit} is marked append-only, so no name in it "
            "can be removed: unmark it (chattr -i or -a) and run again, or leave it"
        ) in out, out
        assert "rm failed" not in out
    assert f"removed: {logs / 'old.1'}" in done.stdout.decode() and not done.stderr, done
    assert (logs / "kept.1").exists() and (audit / "audit.log.1").exists() and not (logs / "old.1").exists()


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_the_command_to_unmark_a_directory_names_one_whose_name_is_shown_escaped(
    tmp_path: Path, chattr: list[Path], shell: str
) -> None:
    """A directory whose name holds a backslash and an ESC, marked since the plan: the answer's text
    shows it escaped (``a\\\\b\\033``), and the command it gave was that shown form single-quoted,
    ``chattr -i '…/a\\\\b\\033'``, which names a directory with two backslashes and no ESC: pasted, it
    unmarked nothing. The command's word is now read back by the shell as the very directory."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    logs = tmp_path / "var/log/a\\b\x1b"
    write(logs / "old.1", 10_000)
    plan = build_plan(PlanRequest(layout=layout(tmp_path), classes=("rotated_log",)))
    mark(chattr, logs, "+i")
    results = apply_items(ApplyRequest(plan, [plan.items[0].id], lambda path: True))
    assert [o.reason for o in results[0].outcomes] == ["directory_immutable"]
    text = reclaim.render(reclaim.report(plan, results))
    word = text.split("run chattr -i ", 1)[1].split(" and reclaim again")[0]
    said = subprocess.run([shell, "-c", f"ls -di {word}"], capture_output=True, check=False)
    assert said.stdout.split()[:1] == [str(logs.stat().st_ino).encode()], (word, said)
