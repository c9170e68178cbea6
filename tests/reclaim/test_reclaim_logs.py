"""reclaim empties a container's log itself, as a hostile second user (nobody, through ``setpriv``) would
try to turn that into a way to another file: each log is named by a container engine (a Unix-socket
server answering with Podman's recorded API, its LogPath pointed at the test's file), planned through
``reclaim_plan``'s own finder, and emptied by ``apply_items`` on a private tmpfs (so the bytes freed
are this test's alone). The last test does it against a real dockerd whose container keeps logging."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.faults import Refused
from sysmcp.reclaim import ApplyRequest, Item, Plan, PlanRequest, apply_items, build_plan, render_script
from sysmcp.reclaim._classes import RootsLayout
from sysmcp.tools.reclaim import _listing
from sysmcp.tools.reclaim_plan import item_view, render
from tests.tools.recorded_engine import recorded_engine

NOBODY = 65534
MIB = 1 << 20
RECORDED = Path(__file__).parents[1] / "tools" / "data" / "podman-4.3.1-compat.json"
RECORDED_LOG = (
    "/tmp/containers-pm/root/overlay-containers/"
    "7032c57663aa019b5555976b1071bd826893b0edec6b0407a44aaa4fd98f7b17/userdata/ctr.log"
)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root (tmpfs, chown) and setpriv(1)"
)


def as_nobody(*argv: str) -> str:
    """Run a command as the second user (no groups, no capabilities); its stdout."""
    done = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    return done.stdout


@pytest.fixture
def base() -> Iterator[Path]:
    """A private tmpfs, searchable by nobody."""
    top = Path(tempfile.mkdtemp(prefix="sysmcp-logs-", dir="/tmp"))
    os.chmod(top, 0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=64m", "sysmcp-logs", str(top)], check=True)
    try:
        yield top
    finally:
        subprocess.run(["umount", "-l", str(top)], check=False)
        shutil.rmtree(top, ignore_errors=True)


def engine_naming(log: Path, where: Path) -> Generator[str, None, None]:
    """An engine socket (world-connectable) whose one container's LogPath is ``log``."""
    answers = json.loads(RECORDED.read_text().replace(RECORDED_LOG, json.dumps(str(log))[1:-1]))
    path = str(where / "engine.sock")
    try:
        with recorded_engine(answers, path, mode=0o666):
            yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


@pytest.fixture
def log(base: Path) -> Path:
    """A 1 MiB container log in a directory of nobody's (a hostile directory on its way), owned by root."""
    directory = base / "containers" / "c1"
    directory.mkdir(parents=True)
    os.chown(base / "containers", NOBODY, NOBODY)
    os.chown(directory, NOBODY, NOBODY)
    path = directory / "c1-json.log"
    path.write_bytes(b'{"log":"line\\n"}\n' * (MIB // 17 + 1))
    return path


@pytest.fixture
def engine(log: Path, base: Path) -> Iterator[str]:
    yield from engine_naming(log, base)


def plan_for(socket_path: str, scope: tuple[bytes, ...] = (b"/",)) -> Plan:
    layout = RootsLayout(container_socket=socket_path)
    return build_plan(PlanRequest(scope=scope, layout=layout, classes=("container",)))


def the_log(plan: Plan, log: Path) -> Item:
    [item] = [item for item in plan.items if [e.path for e in item.entries] == [os.fsencode(log)]]
    return item


def empty(plan: Plan, item: Item, roots: Path | None = None, **hooks: Any) -> tuple[bool, str | None, int]:
    top = os.fsencode(roots) if roots is not None else None
    [done] = apply_items(
        ApplyRequest(plan, [item.id], lambda p: top is None or p.startswith(top + b"/"), **hooks)
    )
    [outcome] = done.outcomes
    return outcome.done, outcome.reason, outcome.freed


SHADOW = b"root:$y$j9T$secret:19000:0:99999:7:::\n"


@pytest.fixture
def shadow(base: Path) -> Path:
    """A stand-in for /etc/shadow (root's, 0640): a test that fails must not empty the host's own."""
    path = base / "etc-shadow"
    path.write_bytes(SHADOW)
    os.chmod(path, 0o640)
    return path


# -- planning ------------------------------------------------------------------------------------


def test_a_container_log_is_an_item_reclaim_empties_in_place_and_the_engine_keeps_the_same_file(
    engine: str, log: Path
) -> None:
    plan = plan_for(engine)
    item = the_log(plan, log)
    assert item.action == "truncate" and item.klass == "container" and item.safety == "review"
    assert "its container is stopped" in (item.note or "") and "--log-opt max-size" in (item.note or "")
    view = item_view(item)
    assert view.action == "truncate" and view.command == f"truncate -s 0 {log}"
    question, _total = _listing(plan, [item.id])
    assert "truncate 1 file, 1.0 MiB" in question and "note: its container is stopped" in question
    before = os.stat(log)
    done, reason, freed = empty(plan, item)
    after = os.stat(log)
    assert (done, reason) == (True, None)
    assert (after.st_ino, after.st_uid, after.st_size) == (before.st_ino, 0, 0)
    assert freed == before.st_blocks * 512 >= MIB  # a private tmpfs: its blocks come back at once
    with log.open("ab") as writer:  # the engine's append-only writer goes on from the start
        writer.write(b"after\n")
    assert log.read_bytes() == b"after\n"


def test_a_log_is_planned_within_the_scope_like_any_file(engine: str, log: Path, base: Path) -> None:
    assert the_log(plan_for(engine, (os.fsencode(base),)), log).action == "truncate"
    assert plan_for(engine, (os.fsencode(base / "elsewhere"),)).items == ()


def test_a_log_of_another_user_stays_the_engines_command_and_the_servers_own_is_emptied_by_it(
    log: Path, base: Path
) -> None:
    """Rootless Podman's log is its user's: a server running as another (non-root) user does not plan
    to empty it; one running as that user does."""
    ours = base / "containers" / "c1" / "nobodys.log"
    as_nobody("sh", "-c", f"head -c 100000 /dev/zero > '{ours}'")
    seen = {}
    for target in (log, ours):
        for socket_path in engine_naming(target, base):
            [[action, path, note]] = planned_as_nobody(socket_path)
            seen[Path(path)] = (action, note)
    assert seen[log][0] == "command" and "uid 0's file: only that user or root empties it" in seen[log][1]
    assert seen[ours][0] == "truncate"


def test_an_engine_on_another_users_socket_empties_no_file_but_that_users_own(
    base: Path, shadow: Path
) -> None:
    """Root's server asks the engine at DOCKER_HOST (or XDG_RUNTIME_DIR's Podman socket): when that is a
    rootless engine of the second user's, its LogPath is their word. Naming root's file (here a stand-in
    for /etc/shadow), it is planned as the engine's command, not emptied; their own log is emptied."""
    (base / "home").mkdir()
    os.chown(base / "home", NOBODY, NOBODY)
    theirs = base / "home" / "theirs.log"
    as_nobody("sh", "-c", f"head -c 100000 /dev/zero > '{theirs}'")
    seen = {}
    for target in (shadow, theirs):
        for socket_path in engine_naming(target, base):
            os.chown(socket_path, NOBODY, NOBODY)  # a socket of the second user's: their engine
            item = the_log(plan_for(socket_path), target)
            seen[target] = (item.action, item.note or "")
    assert seen[shadow][0] == "command", seen
    assert f"listens on a socket of uid {NOBODY}'s, and it is uid 0's file" in seen[shadow][1], seen
    assert seen[theirs][0] == "truncate", seen
    assert shadow.read_bytes() == SHADOW


def test_an_engine_whose_socket_is_gone_after_the_survey_is_judged_by_the_socket_it_answered_on(
    base: Path, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The socket the engine answered on is gone by the time the plan is made (the daemon restarted):
    whose engine named the log is the owner of the socket the survey reached (root's here), told as it
    connected, not looked up by name afterwards (what is there then is anyone's to have put there)."""
    from sysmcp.engine.containers import survey as real_survey
    from sysmcp.reclaim import _classes

    def then_gone(request: Any, *args: Any, **kwargs: Any) -> Any:
        found = real_survey(request, *args, **kwargs)
        os.unlink(found.socket)
        return found

    monkeypatch.setattr(_classes, "survey", then_gone)
    for socket_path in engine_naming(log, base):
        item = the_log(plan_for(socket_path), log)
    assert item.action == "truncate", item
    assert "uid -1" not in (item.note or "") and "could not be looked at" not in (item.note or "")


def planned_as_nobody(socket_path: str) -> Any:
    """The container class's items as a server running as nobody plans them (a forked child that
    drops to nobody first; its answer as JSON through a pipe)."""
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            plan = plan_for(socket_path)
            rows = [[i.action, i.entries[0].path.decode(), i.note] for i in plan.items if i.entries]
            os.write(writer, json.dumps(rows).encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as answer:
        data = answer.read()
    os.waitpid(child, 0)
    return json.loads(data)


# -- acting, as an attacker would try it ----------------------------------------------------------


def test_a_log_swapped_for_a_symlink_to_shadow_is_skipped_and_shadow_is_untouched(
    engine: str, log: Path, shadow: Path
) -> None:
    plan = plan_for(engine)
    item = the_log(plan, log)
    as_nobody("sh", "-c", f"mv '{log}' '{log}.old' && ln -s '{shadow}' '{log}'")
    assert empty(plan, item)[:2] == (False, "symlink")
    assert shadow.read_bytes() == SHADOW


def test_a_log_that_is_a_hard_link_to_shadow_before_the_plan_is_never_emptied(
    engine: str, log: Path, shadow: Path, base: Path
) -> None:
    """The second user owns the log's directory: where protected_hardlinks is off they can put a hard
    link to root's file at the log's name before the plan (made by root here, as they could). Root's
    plan must not offer to empty it (emptying one name empties every one), and a plan made while the
    log had one name skips it at the moment of acting once it has another."""
    os.unlink(log)
    os.link(shadow, log)
    item = the_log(plan_for(engine), log)
    assert item.action == "command" and "2 names (hard links)" in (item.note or ""), item
    assert shadow.read_bytes() == SHADOW
    os.unlink(log)  # the log again, with one name when planned, then a second one before the act
    log.write_bytes(b"line\n" * 1000)
    planned = plan_for(engine)
    os.link(log, base / "elsewhere")
    assert empty(planned, the_log(planned, log))[:2] == (False, "hard_linked")
    assert (base / "elsewhere").read_bytes() == b"line\n" * 1000
    script = base / "plan.sh"
    script.write_text(render_script(planned))
    applied = subprocess.run(["sh", str(script), "--apply"], capture_output=True, text=True, check=True)
    assert f"skipped: {log}: another file, another owner or another name" in applied.stdout, applied.stdout
    assert (base / "elsewhere").read_bytes() == b"line\n" * 1000


def test_a_fifo_swapped_in_is_refused_without_hanging_before_or_after_the_look(
    engine: str, log: Path
) -> None:
    plan = plan_for(engine)
    item = the_log(plan, log)
    as_nobody("sh", "-c", f"mv '{log}' '{log}.old' && mkfifo '{log}'")
    assert empty(plan, item)[:2] == (False, "not_regular")

    os.unlink(log)  # the log back, planned again; this time the FIFO comes after the look
    os.rename(f"{log}.old", log)
    plan = plan_for(engine)
    item = the_log(plan, log)

    def fifo_after_the_look(path: bytes) -> None:
        as_nobody("sh", "-c", f"mv '{log}' '{log}.new' && mkfifo '{log}'")

    outcome: list[tuple[bool, str | None, int]] = []
    worker = threading.Thread(target=lambda: outcome.append(empty(plan, item, between=fifo_after_the_look)))
    worker.start()
    worker.join(timeout=60)
    if worker.is_alive():  # an open that waits for a reader: release it, and say so
        os.close(os.open(log, os.O_RDONLY | os.O_NONBLOCK))
        worker.join()
        pytest.fail("emptying the log hung on a FIFO swapped in after the look")
    assert outcome[0][:2] == (False, "not_regular")
    assert os.stat(f"{log}.new").st_size >= MIB


def test_a_log_replaced_by_another_inode_is_kept_before_or_after_the_look(engine: str, log: Path) -> None:
    plan = plan_for(engine)
    item = the_log(plan, log)
    as_nobody("sh", "-c", f"mv '{log}' '{log}.old' && echo theirs > '{log}'")
    assert empty(plan, item)[:2] == (False, "changed")
    assert log.read_bytes() == b"theirs\n"

    as_nobody("sh", "-c", f"rm '{log}' && mv '{log}.old' '{log}'")
    plan = plan_for(engine)
    item = the_log(plan, log)

    def swap_after_the_look(path: bytes) -> None:
        as_nobody("sh", "-c", f"mv '{log}' '{log}.old' && echo theirs > '{log}'")

    assert empty(plan, item, between=swap_after_the_look)[:2] == (False, "changed")
    assert log.read_bytes() == b"theirs\n" and os.stat(f"{log}.old").st_size >= MIB


def test_a_log_whose_owner_changed_since_the_plan_is_kept(engine: str, log: Path, base: Path) -> None:
    """By reclaim and by the plan's script alike: the same inode given to another user is not the file
    the approval named."""
    plan = plan_for(engine)
    item = the_log(plan, log)
    os.chown(log, NOBODY, NOBODY)  # the same inode, another user's now
    assert empty(plan, item)[:2] == (False, "owner")
    assert os.stat(log).st_size >= MIB
    script = base / "plan.sh"
    script.write_text(render_script(plan))
    applied = subprocess.run(["sh", str(script), "--apply"], capture_output=True, text=True, check=True)
    assert f"skipped: {log}: another file, another owner or another name" in applied.stdout, applied.stdout
    assert os.stat(log).st_size >= MIB


def test_a_directory_on_the_way_swapped_for_a_symlink_leads_nowhere(
    engine: str, log: Path, base: Path
) -> None:
    """nobody owns ``containers``: they set ``c1`` aside and point a symlink at a directory of root's
    holding a file of the log's name."""
    victim = base / "victim"
    victim.mkdir()
    (victim / log.name).write_bytes(SHADOW)
    plan = plan_for(engine)
    item = the_log(plan, log)
    as_nobody("sh", "-c", f"mv '{log.parent}' '{log.parent}.old' && ln -s '{victim}' '{log.parent}'")
    assert empty(plan, item)[:2] == (False, "symlink")
    assert (victim / log.name).read_bytes() == SHADOW


def test_a_plan_naming_a_log_outside_the_roots_is_refused_whole(engine: str, log: Path, base: Path) -> None:
    plan = plan_for(engine)
    item = the_log(plan, log)
    with pytest.raises(Refused, match="outside the roots"):
        empty(plan, item, roots=base / "elsewhere")
    assert os.stat(log).st_size >= MIB


def test_a_cancellation_at_the_last_moment_leaves_the_log_whole(engine: str, log: Path) -> None:
    plan = plan_for(engine)
    item = the_log(plan, log)
    calls: list[int] = []

    class Stop(Exception):
        pass

    def cancel() -> None:
        calls.append(1)
        if len(calls) > 1:  # the first is before the file; the next is right before ftruncate
            raise Stop

    with pytest.raises(Stop):
        apply_items(ApplyRequest(plan, [item.id], lambda p: True), cancel=cancel)
    assert os.stat(log).st_size >= MIB


def test_the_plans_script_empties_the_log_and_skips_one_that_became_a_symlink(
    engine: str, log: Path, shadow: Path, base: Path
) -> None:
    """The script empties a log on a way only root can change; in a directory of nobody's it skips it
    (nobody could swap the directory for a symlink between the look and ``: >``, which follows it), and
    one that already became a symlink is skipped as such."""
    plan = plan_for(engine)
    script = base / "plan.sh"
    script.write_text(render_script(plan))
    applied = subprocess.run(
        ["sh", str(script), "--apply"], capture_output=True, text=True, check=True
    ).stdout
    assert f"skipped: {log}: another user may rename or replace names in {log.parent}" in applied, applied
    assert os.stat(log).st_size >= MIB
    for directory in (base / "containers", log.parent):
        os.chown(directory, 0, 0)
    dry = subprocess.run(["sh", str(script)], capture_output=True, text=True, check=True).stdout
    assert f"would truncate: {log}" in dry and os.stat(log).st_size >= MIB
    applied = subprocess.run(
        ["sh", str(script), "--apply"], capture_output=True, text=True, check=True
    ).stdout
    assert f"truncated: {log}" in applied and os.stat(log).st_size == 0

    log.write_bytes(b"x" * 10000)
    script.write_text(render_script(plan_for(engine)))
    for directory in (base / "containers", log.parent):
        os.chown(directory, NOBODY, NOBODY)
    as_nobody("sh", "-c", f"mv '{log}' '{log}.old' && ln -s '{shadow}' '{log}'")
    applied = subprocess.run(
        ["sh", str(script), "--apply"], capture_output=True, text=True, check=True
    ).stdout
    assert f"skipped: {log}: a symbolic link is on its path now" in applied
    assert shadow.read_bytes() == SHADOW


def test_the_plans_script_never_empties_a_log_in_a_group_writable_directory(
    engine: str, log: Path, shadow: Path, base: Path
) -> None:
    """Removing a name may go on in a directory others write (root:syslog 0775); emptying may not: ``: >``
    follows the final name, so a member of the group could put a symlink to root's file there between
    the look and the open, and root would empty that file."""
    os.chown(base / "containers", 0, 0)
    os.chown(log.parent, 0, NOBODY)
    log.parent.chmod(0o775)
    script = base / "plan.sh"
    script.write_text(render_script(plan_for(engine)))
    applied = subprocess.run(
        ["sh", str(script), "--apply"], capture_output=True, text=True, check=True
    ).stdout
    assert f"skipped: {log}: another user may rename or replace names in {log.parent} " in applied, applied
    assert "(its owner 0, mode 775)" in applied and os.stat(log).st_size >= MIB
    assert shadow.read_bytes() == SHADOW


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_the_command_a_plan_gives_for_a_log_names_it_whatever_its_directory_is_called(
    base: Path, shell: str
) -> None:
    """A data root whose path holds a backslash and an ESC (an engine may be configured anywhere): the
    plan's 'vendor command' was ``truncate -s 0 '…/c\\1\033/…'``, the shown form single-quoted, which
    pasted made an empty file of another name. Pasted into dash or bash, it now empties the very log."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    directory = base / "containers" / "c\\1\x1b"
    directory.mkdir(parents=True)
    log = directory / "c1-json.log"
    log.write_bytes(b"line\n" * (MIB // 5))
    naming = engine_naming(log, base)
    try:
        plan = plan_for(next(naming))
    finally:
        naming.close()
    text = render(plan, "/")
    [command] = [
        line.split("vendor command: ", 1)[1] for line in text.split("\n") if "command: truncate" in line
    ]
    subprocess.run([shell, "-c", command], check=True, cwd=base)
    assert log.stat().st_size == 0, (command, text)
    assert sorted(os.listdir(directory)) == ["c1-json.log"]


# -- a real engine ---------------------------------------------------------------------------------


def test_a_real_dockerd_containers_log_is_planned_emptied_and_written_again() -> None:
    from tests.tools.docker_lab import running_docker, why_not

    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    with running_docker() as lab:
        lab.busybox_image("bb:1")
        lab.docker(
            "run", "-d", "--name", "talker", "bb:1",
            "sh", "-c", "i=0; while :; do echo line $i; i=$((i+1)); sleep 0.05; done",
        )  # fmt: skip
        path = Path(lab.docker("inspect", "talker", "--format", "{{.LogPath}}"))
        for _ in range(600):  # until the log holds a few lines: polling the engine, not ordering ours
            if path.exists() and path.stat().st_size > 2000:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        plan = plan_for(str(lab.socket))
        item = the_log(plan, path)
        assert item.action == "truncate" and item.command == f"truncate -s 0 {path}"
        assert "no rotation limit" in (item.note or "")
        before = path.stat()
        [done] = apply_items(ApplyRequest(plan, [item.id], lambda p: True))
        assert [o.done for o in done.outcomes] == [True]
        assert path.stat().st_ino == before.st_ino and path.stat().st_size < before.st_size
        for _ in range(600):  # until the engine has written again: polling it, not ordering ours
            if path.stat().st_size > 0:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        again = path.read_text(errors="replace").splitlines()
        assert again and all(json.loads(line)["log"].startswith("line ") for line in again)
        assert path.stat().st_ino == before.st_ino
        assert "line" in lab.docker("logs", "--tail", "1", "talker")
