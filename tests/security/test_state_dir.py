"""The state directory as a hostile second user leaves it, and root's server and CLI using it.

Each case is prepared by a real second user (``setpriv`` to uid/gid 65534), then run by root: the
state directory must be checked as ssh checks ``~/.ssh`` (issue #32, finding 4). Waits are bounded:
a hang fails the test, it never holds the suite.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from sysmcp.cli.snapshot import EXIT_NO_HISTORY
from sysmcp.engine.faults import Refused
from sysmcp.reclaim import PlanKeeper
from sysmcp.reclaim._keep import PLAN_NAMESPACE
from sysmcp.tools.errors import words
from tests.reclaim.test_reclaim_keep import Clock, a_plan
from tests.wire import result_text, spawn

NOBODY = 65534
BOUND_S = 60  # a guard against a hang, not a measure


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "a second user needs root"
    if shutil.which("setpriv") is None:
        return "no setpriv(1) to become a second user"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))


def as_nobody(*argv: str) -> None:
    """Run ``argv`` as uid/gid 65534 with no supplementary groups."""
    subprocess.run(
        ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", *argv],
        check=True,
        timeout=BOUND_S,
    )


@pytest.fixture
def box() -> Iterator[Path]:
    """A root-owned 0755 directory under /tmp (sticky) that the second user can reach."""
    path = Path(tempfile.mkdtemp(prefix="sysmcp-statedir-", dir="/tmp"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def hostile_state(box: Path, *commands: str) -> Path:
    """``box/state``, filled by the second user with a shell's ``commands`` (run inside it), then
    taken back by root (chown, 0700) as it would be after a `chown -R` or a restored backup: the
    entries stay the second user's."""
    state = box / "state"
    state.mkdir()
    os.chown(state, NOBODY, NOBODY)
    as_nobody("sh", "-c", 'cd "$1" && ' + " && ".join(commands), "sh", str(state))
    os.chown(state, 0, 0)
    os.chmod(state, 0o700)
    return state


def snapshot(state: Path, tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sysmcp", "snapshot", "--state-dir", str(state), str(tree)],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
    )


def root_only(box: Path) -> Path:
    private = box / "rootonly"
    private.mkdir(mode=0o700)
    return private


@pytest.mark.parametrize("name", ["history.sqlite3", "snapshot.lock", "reclaim-plans.key"])
def test_a_state_file_symlinked_to_a_root_only_path_creates_nothing_there_and_turns_history_off(
    box: Path, name: str
) -> None:
    target = root_only(box) / "x"
    state = hostile_state(box, f"ln -s {target} {name}")
    done = snapshot(state, box)
    assert not target.exists(), "root created the file the symlink named"
    assert done.returncode == EXIT_NO_HISTORY
    assert f"{state / name} is a symlink" in done.stderr, done.stderr


@pytest.mark.parametrize("name", ["history.sqlite3-wal", "history.sqlite3-shm", "snapshot.lock"])
def test_a_fifo_beside_the_database_is_refused_before_sqlite_or_the_lock_opens_it(
    box: Path, name: str
) -> None:
    state = hostile_state(box, f"mkfifo {name}")
    done = snapshot(state, box)  # the bound fails the test if it hangs
    assert done.returncode == EXIT_NO_HISTORY
    assert f"{state / name} is a FIFO, not a regular file" in done.stderr, done.stderr


def test_a_parent_another_user_can_write_is_refused_and_a_sticky_one_is_not(box: Path) -> None:
    shared = box / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # another user could rename the state directory away and plant their own
    done = snapshot(shared / "state", box)
    assert done.returncode == EXIT_NO_HISTORY
    assert f"{shared} is writable by group or others (mode 0777)" in done.stderr, done.stderr
    os.chmod(shared, 0o1777)  # like /tmp: only an entry's owner may rename it
    assert snapshot(shared / "state", box).returncode == 0


def test_a_symlink_to_an_existing_empty_root_file_leaves_it_empty_and_no_database(box: Path) -> None:
    victim = box / "empty"
    victim.touch(mode=0o644)
    state = hostile_state(box, f"ln -s {victim} history.sqlite3")
    done = snapshot(state, box)
    assert victim.stat().st_size == 0 and stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert done.returncode == EXIT_NO_HISTORY and "is a symlink" in done.stderr


def test_a_hard_link_to_a_root_file_never_becomes_a_database(box: Path) -> None:
    state = box / "state"
    state.mkdir(mode=0o700)
    victim = box / "empty"
    victim.touch(mode=0o644)
    os.link(victim, state / "history.sqlite3")  # as a user could, where protected_hardlinks is off
    done = snapshot(state, box)
    assert victim.stat().st_size == 0
    assert done.returncode == EXIT_NO_HISTORY and "2 hard links" in done.stderr


def test_a_state_directory_that_is_a_symlink_is_refused_and_its_target_keeps_its_mode(box: Path) -> None:
    target = box / "target"
    target.mkdir(mode=0o755)
    mine = box / "nobody"
    mine.mkdir()
    os.chown(mine, NOBODY, NOBODY)
    as_nobody("ln", "-s", str(target), str(mine / "state"))
    done = snapshot(mine / "state", box)
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert list(target.iterdir()) == []
    assert done.returncode == EXIT_NO_HISTORY and "history is off" in done.stderr


def test_a_state_directory_another_user_owns_is_refused(box: Path) -> None:
    state = box / "shared"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, NOBODY)
    done = snapshot(state, box)
    assert done.returncode == EXIT_NO_HISTORY
    assert f"{state} is owned by uid {NOBODY}" in done.stderr, done.stderr
    assert list(state.iterdir()) == []


def test_a_fifo_at_the_database_hangs_no_call_and_snapshot_exits_with_a_message(box: Path) -> None:
    state = hostile_state(box, "mkfifo history.sqlite3")
    done = snapshot(state, box)  # the bound fails the test if it hangs
    assert done.returncode == EXIT_NO_HISTORY
    assert f"{state / 'history.sqlite3'} is a FIFO" in done.stderr, done.stderr
    (box / "f").write_bytes(b"abc")

    async def session() -> tuple[list[str], str]:
        async with spawn("--state-dir", str(state)) as wire:
            await wire.initialize()
            ids = list(range(100, 108))
            for msg_id in ids:  # more than one worker's worth: a hang would fill every slot
                await wire.start_call("what_changed", {"path": str(box), "since": "1h"}, msg_id=msg_id)
            await wire.start_call("file_sha256", {"path": str(box / "f")}, msg_id=200)
            answers: dict[int, str] = {}
            while len(answers) < len(ids) + 1:  # in whatever order they come; a hang fails the bound
                reply = await wire.receive(BOUND_S)
                if "id" in reply:
                    answers[reply["id"]] = result_text(reply)
            texts = [answers[i] for i in [200, *ids]]
            await wire.close_stdin()
            await wire.wait_exit(BOUND_S)
            assert wire.process.stderr is not None
            err = b""
            with anyio.fail_after(BOUND_S):
                async for chunk in wire.process.stderr:
                    err += chunk
            return texts, err.decode()

    texts, err = anyio.run(session)
    assert "ba7816bf" in texts[0]  # sha256("abc")
    assert all("history is off on this host" in t and "is a FIFO" in t for t in texts[1:]), texts[1]
    assert err.count('"history off"') == 1, err


def test_a_group_writable_state_directory_turns_history_off_and_the_answer_says_why(box: Path) -> None:
    state = box / "state"
    state.mkdir()
    os.chmod(state, 0o770)
    os.chown(state, 0, NOBODY)

    async def ask() -> str:
        async with spawn("--state-dir", str(state)) as wire:
            await wire.initialize()
            return result_text(await wire.call("what_changed", {"path": str(box), "since": "1h"}))

    text = anyio.run(ask)
    assert "history is off on this host" in text
    assert f"{state} is writable by group or others (mode 0770)" in text, text
    assert list(state.iterdir()) == []


def _tamper(store_db: Path, plan_id: str, old: bytes, new: bytes) -> None:
    """Edit a stored plan in place, as someone who can write the database would: one path's bytes
    swapped for another of the same length, the rest of the row (and any MAC before it) kept."""
    with sqlite3.connect(store_db) as db:
        (row,) = db.execute(
            "SELECT value FROM kv WHERE namespace = ? AND key = ?", (PLAN_NAMESPACE, plan_id)
        ).fetchone()
        row = bytes(row)
        start = next(i for i in range(0, 64) if row[i : i + 1] == b"x" and _inflates(row[i:]))
        body = zlib.decompress(row[start:])
        assert old in body and len(old) == len(new)
        changed = row[:start] + zlib.compress(body.replace(old, new))
        db.execute("UPDATE kv SET value = ? WHERE key = ?", (changed, plan_id))


def _inflates(data: bytes) -> bool:
    try:
        zlib.decompress(data)
    except zlib.error:
        return False
    return True


def test_a_stored_plan_edited_in_place_is_refused_with_the_reason(box: Path) -> None:
    from sysmcp.history.store import Store

    plan = a_plan(box / "tree")
    clock = Clock()
    state = box / "state"
    store = Store.open(state, clock)
    assert PlanKeeper(lambda: store, clock).put(plan).durable
    store.close()
    _tamper(state / "history.sqlite3", plan.id, b"syslog.1", b"passwd.1")
    fresh = Store.open(state, clock)  # another server process reading it back
    with pytest.raises(Refused) as refused:
        PlanKeeper(lambda: fresh, clock).get(plan.id)
    assert refused.value.reason == "tampered"
    said = words(refused.value)
    assert f"reclaim plan {plan.id} was changed after it was kept" in said
    assert "nothing removed: make a new plan" in said
    assert (state / "reclaim-plans.key").stat().st_mode & 0o777 == 0o600


def test_a_stored_plan_copied_under_another_id_is_refused(box: Path) -> None:
    from sysmcp.history.store import Store

    plan = a_plan(box / "tree")
    clock = Clock()
    store = Store.open(box / "state", clock)
    keeper = PlanKeeper(lambda: store, clock)
    assert keeper.put(plan).durable
    row = store.get(PLAN_NAMESPACE, plan.id)
    assert row is not None and store.put(PLAN_NAMESPACE, "0123456789ab", row).ok
    with pytest.raises(Refused) as refused:
        PlanKeeper(lambda: store, clock).get("0123456789ab")
    assert refused.value.reason == "tampered"
    assert PlanKeeper(lambda: store, clock).get(plan.id) == plan  # the genuine one still reads


@pytest.mark.parametrize("where", ["their own directory", "a sticky shared directory"])
def test_a_symlink_on_the_way_that_another_user_owns_is_refused_and_nothing_is_made_where_it_leads(
    box: Path, where: str
) -> None:
    """``--state-dir /tmp/link/state`` with ``link`` the second user's: they may re-point it at will (in
    their own directory, or in a sticky ``/tmp``, where only they may), so they would choose where root
    keeps and writes its state. Refused, saying whose link it is; history is off, every tool still works,
    and nothing is made where the link leads."""
    real = box / "real"
    real.mkdir()
    if where == "their own directory":
        holder = box / "theirs"
        holder.mkdir()
        os.chown(holder, NOBODY, NOBODY)
    else:
        holder = box / "shared"
        holder.mkdir()
        os.chmod(holder, 0o1777)
    as_nobody("ln", "-s", str(real), str(holder / "link"))
    done = snapshot(holder / "link" / "state", box)
    assert done.returncode == EXIT_NO_HISTORY, done.stderr
    owned = holder if where == "their own directory" else holder / "link"
    assert f"{owned} is {'owned by' if owned == holder else 'a symlink owned by'} uid {NOBODY}" in done.stderr
    assert list(real.iterdir()) == [], "root made its state where the other user's link led"

    async def ask() -> str:
        async with spawn("--state-dir", str(holder / "link" / "state")) as wire:
            await wire.initialize()
            return result_text(await wire.call("what_changed", {"path": str(box), "since": "1h"}))

    text = anyio.run(ask)
    assert "history is off on this host" in text and f"uid {NOBODY}" in text, text
    assert list(real.iterdir()) == []


def test_a_symlink_on_the_way_that_root_owns_still_leads_to_the_state_directory(box: Path) -> None:
    """A link only root (or the user) may re-point is followed as before, every directory it leads
    through checked: history stays on, kept in the real directory."""
    real = box / "real"
    real.mkdir()
    shared = box / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    (shared / "link").symlink_to(real)
    assert snapshot(shared / "link" / "state", box).returncode == 0
    assert (real / "state" / "history.sqlite3").stat().st_size > 0
    os.chmod(real, 0o777)  # a directory the link leads through that others may write: checked too
    done = snapshot(shared / "link" / "state", box)
    assert done.returncode == EXIT_NO_HISTORY and f"{real} is writable by group or others" in done.stderr


def test_a_missing_state_directory_is_made_without_following_a_link_put_in_its_way(box: Path) -> None:
    """The part of the path that does not exist yet is made one directory in the other, never through a
    symlink: one the second user plants at the missing name after the look is refused, nothing made there."""
    from sysmcp.history import statedir

    shared = box / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    elsewhere = root_only(box)
    parent, missing = statedir._resolve(shared / "deep")
    assert (parent, missing) == (shared, ("deep",))
    as_nobody("ln", "-s", str(elsewhere), str(shared / "deep"))
    with pytest.raises(statedir.Unsafe, match="deep is a symlink, not a directory"):
        statedir._make(parent, (*missing, "state"))
    assert list(elsewhere.iterdir()) == []


_HOT_JOURNAL = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode = DELETE")
db.execute("CREATE TABLE planted (v TEXT)")
db.execute("INSERT INTO planted VALUES ('theirs')")
db.execute("PRAGMA cache_size = 1")
db.execute("BEGIN")
for _ in range(4):
    db.execute("INSERT INTO planted SELECT hex(randomblob(3000)) FROM planted")
os._exit(0)  # a crash mid-transaction: the rollback journal stays hot, holding the pages before it
"""


def test_a_rollback_journal_another_user_planted_beside_the_database_is_never_played_back_into_it(
    box: Path,
) -> None:
    """SQLite plays a hot ``-journal`` back into the database it sits beside, whoever wrote it (and
    even when the database is in WAL mode): one the second user left while they could write the
    directory would rewrite root's snapshots and integrity baselines with their own pages."""
    from sysmcp.history.store import Store

    state = box / "state"
    store = Store.open(state)
    assert store.enabled and store.put("probe", "k", b"root's").ok
    store.close()
    theirs = box / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    os.chown(state, NOBODY, NOBODY)  # a directory they could write for a while
    as_nobody(sys.executable, "-c", _HOT_JOURNAL, str(theirs / "their.db"))
    as_nobody("cp", str(theirs / "their.db-journal"), str(state / "history.sqlite3-journal"))
    os.chown(state, 0, 0)
    os.chmod(state, 0o700)
    before = (state / "history.sqlite3").read_bytes()
    again = Store.open(state)
    assert not again.enabled and again.get("probe", "k") is None
    assert f"{state / 'history.sqlite3-journal'} is owned by uid {NOBODY}" in str(again.disabled_reason)
    assert (state / "history.sqlite3").read_bytes() == before, (
        "their journal was played back into root's database"
    )


def test_a_state_directory_under_another_users_home_is_refused_before_anything_is_made_there(
    box: Path,
) -> None:
    """Root with the invoking user's HOME (sudo keeps it on some systems): the default state directory
    ~/.local/state/sysmcp lies in their home. Refused, and no root-owned ~/.local/state left in it to
    break their own programs."""
    home = box / "home"
    home.mkdir(mode=0o755)
    os.chown(home, NOBODY, NOBODY)
    done = snapshot(home / ".local" / "state" / "sysmcp", box)
    assert done.returncode == EXIT_NO_HISTORY
    assert f"{home} is owned by uid {NOBODY}" in done.stderr, done.stderr
    assert list(home.iterdir()) == []
