"""The history store against its faults: permissions, names as bytes, migrations, damage, locks, a
full disk, two writing processes, retention. Real SQLite files in a temporary directory throughout."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from sysmcp.history.snapshots import (
    Baseline,
    BaselineFile,
    DirTotals,
    DiskReading,
    FileRow,
    ScanSnapshot,
    Series,
    Unread,
)
from sysmcp.history.store import DB_NAME, MIGRATIONS, SCHEMA_VERSION, Retention, Store

SERIES = Series("host", "8:1/abc", b"/srv", '{"xdev":true}')


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def snapshot(taken: float, dirs: dict[bytes, int], series: Series = SERIES) -> ScanSnapshot:
    table = {path: DirTotals(size, size, 1) for path, size in dirs.items()}
    return ScanSnapshot(series, taken, False, 1 << 20, table, [FileRow(b"big", 5, 5, taken)])


def test_directory_and_files_are_private_and_names_round_trip_as_bytes(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state", Clock())
    assert store.enabled
    odd = b"caf\xe9/\xff\xfe\n"
    saved = store.save_scan(snapshot(1.0, {b"": 10 << 20, odd: 5 << 20}))
    assert saved.ok and saved.id is not None
    loaded = store.load_scan(saved.id)
    assert loaded is not None and odd in loaded.dirs and loaded.dirs[odd].disk == 5 << 20
    assert store.dir_names(saved.id) == {"", os.fsdecode(odd)}
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700
    for name in (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm"):
        path = tmp_path / "state" / name
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, name
    assert (tmp_path / "state" / DB_NAME).exists()
    with sqlite3.connect(tmp_path / "state" / DB_NAME) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def old_database(directory: Path, version: int) -> None:
    """What release ``version`` wrote: its schema and one scan of 7 bytes (newest NULL, as it kept it)."""
    directory.mkdir()
    with sqlite3.connect(directory / DB_NAME) as db:
        for migration in MIGRATIONS[:version]:
            for statement in migration:
                db.execute(statement)
        db.execute(
            "INSERT INTO snapshots (kind, host, fs_id, root, options, taken, partial, disk, files, threshold)"
            " VALUES ('scan', 'host', '8:1/abc', ?, '{\"xdev\":true}', 5.0, 0, 7, 1, 1048576)",
            (b"/srv",),
        )
        db.execute("INSERT INTO dirs VALUES (1, ?, 7, 7, 1, NULL)", (b"",))
        db.execute(f"PRAGMA user_version = {version}")


def test_a_version_1_database_is_upgraded_and_keeps_its_snapshots(tmp_path: Path) -> None:
    old_database(tmp_path / "s", 1)  # what the first release wrote
    store = Store.open(tmp_path / "s", Clock())
    assert store.enabled
    old = store.load_scan(1)
    assert old is not None and old.total.disk == 7 and old.series == SERIES
    files = {b"etc/passwd": BaselineFile("ab" * 32, 10, 1.0, 0o644, 0, 0)}
    saved = store.save_baseline(Baseline(SERIES, 6.0, "sha256", files))
    assert saved.ok
    again = store.load_baseline(saved.id or 0)
    assert again is not None and again.files == files and again.algorithm == "sha256"
    with sqlite3.connect(tmp_path / "s" / DB_NAME) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_version_2_baseline_is_upgraded_and_reads_back_with_nothing_unread(tmp_path: Path) -> None:
    """A baseline written before baselines recorded what they could not read: it loads with no
    unread rows (so it compares as it did), and the store takes the new rows from then on."""
    old_database(tmp_path / "s", 2)
    with sqlite3.connect(tmp_path / "s" / DB_NAME) as db:
        db.execute(
            "INSERT INTO snapshots (kind, host, fs_id, root, options, taken, partial, disk, files, threshold,"
            " label) VALUES ('baseline', 'host', '8:1/abc', ?, '{\"xdev\":true}', 6.0, 0, 10, 1, 0, 'sha256')",
            (b"/srv",),
        )
        db.execute(
            "INSERT INTO baseline_files VALUES (2, ?, ?, 10, 1.0, 420, 0, 0)", (b"etc/passwd", "ab" * 32)
        )
    store = Store.open(tmp_path / "s", Clock())
    old = store.load_baseline(2)
    assert old is not None and old.files == {b"etc/passwd": BaselineFile("ab" * 32, 10, 1.0, 0o644, 0, 0)}
    assert (old.unread, old.unrecorded) == ({}, 0)
    unread = {
        b"etc/shadow": Unread("permission denied", seen=BaselineFile("", 900, 2.0, 0o640, 0, 42)),
        b"etc/odd": Unread("changed while being hashed"),
        b"etc/ssl/private": Unread("could not be listed", directory=True),
    }
    saved = store.save_baseline(Baseline(SERIES, 7.0, "sha256", {}, unread=unread, unrecorded=5))
    again = store.load_baseline(saved.id or 0)
    assert again is not None and (again.unread, again.unrecorded) == (unread, 5)
    with sqlite3.connect(tmp_path / "s" / DB_NAME) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    assert store.prune(Retention(hourly_s=0, daily_s=0, weekly_s=0, max_bytes=0)).ok  # too old to keep
    with sqlite3.connect(tmp_path / "s" / DB_NAME) as db:  # its unread rows go with it
        assert db.execute("SELECT count(*) FROM baseline_unread").fetchone()[0] == 0


def test_a_baselines_ctimes_are_kept_and_those_of_a_version_2_baseline_read_back_unknown(
    tmp_path: Path,
) -> None:
    """Each file's ctime, read or unread, is kept; a baseline written before sysmcp kept it reads back
    with None (not compared), so it compares as it did."""
    old_database(tmp_path / "s", 2)
    with sqlite3.connect(tmp_path / "s" / DB_NAME) as db:
        db.execute(
            "INSERT INTO snapshots (kind, host, fs_id, root, options, taken, partial, disk, files, threshold,"
            " label) VALUES ('baseline', 'host', '8:1/abc', ?, '{\"xdev\":true}', 6.0, 0, 10, 1, 0, 'sha256')",
            (b"/srv",),
        )
        db.execute(
            "INSERT INTO baseline_files VALUES (2, ?, ?, 10, 1.0, 420, 0, 0)", (b"etc/passwd", "ab" * 32)
        )
    store = Store.open(tmp_path / "s", Clock())
    old = store.load_baseline(2)
    assert old is not None and old.files[b"etc/passwd"].ctime is None
    files = {b"etc/hosts": BaselineFile("cd" * 32, 10, 1.0, 0o644, 0, 0, 1_700_000_000.123456)}
    unread = {
        b"etc/shadow": Unread("permission denied", seen=BaselineFile("", 9, 2.0, 0o640, 0, 42, 3.5)),
        b"etc/gone": Unread("changed while being hashed"),
    }
    saved = store.save_baseline(Baseline(SERIES, 7.0, "sha256", files, unread=unread))
    again = store.load_baseline(saved.id or 0)
    assert again is not None and (again.files, again.unread) == (files, unread)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "malformed pages"])
def test_a_damaged_database_is_moved_aside_and_a_new_one_started(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "s"
    store = Store.open(directory, Clock())
    for i in range(30):
        assert store.save_scan(
            snapshot(float(i), {b"": 1 << 20, **{f"d{j}".encode(): j for j in range(200)}})
        ).ok
    with sqlite3.connect(directory / DB_NAME) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path = directory / DB_NAME
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"this is no database at all\n" * 100)
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2 + 100])
    else:  # a valid header, then pages overwritten: only a read finds out
        path.write_bytes(data[:4096] + b"\x55" * (len(data) - 4096))
    again = Store.open(directory, Clock())
    result = again.snapshots()  # a damaged page is found at the latest here
    saved = again.save_scan(snapshot(100.0, {b"": 1}))
    assert saved.ok, saved.reason
    assert result == [] or all(info.id > 0 for info in result)
    assert [info.taken for info in again.snapshots()] == [100.0]
    aside = [p.name for p in directory.iterdir() if ".corrupt-" in p.name]
    assert aside and aside[0].startswith(f"{DB_NAME}.corrupt-")


def test_an_unusable_state_directory_turns_history_off_without_raising(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("in the way")
    store = Store.open(tmp_path / "file" / "state", Clock())
    assert not store.enabled and store.disabled_reason and "history is off" in store.disabled_reason
    assert f"{tmp_path / 'file'} is a regular file, not a directory" in store.disabled_reason
    saved = store.save_scan(snapshot(1.0, {b"": 1}))
    assert not saved.ok and saved.reason == store.disabled_reason
    assert store.snapshots() == [] and store.load_scan(1) is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a read-only directory anyway")
def test_a_read_only_state_directory_turns_history_off(tmp_path: Path) -> None:
    (tmp_path / "ro").mkdir(mode=0o500)
    store = Store.open(tmp_path / "ro" / "state", Clock())
    assert not store.enabled


def test_a_write_that_cannot_get_the_lock_is_skipped_and_says_so(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s", Clock(), busy_ms=20)
    holder = sqlite3.connect(tmp_path / "s" / DB_NAME, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process in the middle of its write
    try:
        saved = store.save_scan(snapshot(1.0, {b"": 1}))
        assert not saved.ok and saved.reason is not None and "busy" in saved.reason
        assert store.snapshots() == []  # readers are not blocked by a writer in WAL mode
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.save_scan(snapshot(2.0, {b"": 1})).ok


WRITER = textwrap.dedent(
    """
    import sys
    from sysmcp.history.snapshots import DirTotals, ScanSnapshot, Series
    from sysmcp.history.store import Store
    store = Store.open(__import__("pathlib").Path(sys.argv[1]), busy_ms=10_000)
    series = Series("h", "1:1/0", sys.argv[2].encode(), "{}")
    for i in range(40):
        dirs = {b"": DirTotals(i, i, i), **{f"d{j}".encode(): DirTotals(j, j, 1) for j in range(100)}}
        saved = store.save_scan(ScanSnapshot(series, float(i), False, 1, dirs))
        assert saved.ok, saved.reason
    """
)


def test_two_processes_writing_at_once_never_corrupt_the_store(tmp_path: Path) -> None:
    Store.open(tmp_path / "s")
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "s"), f"/root{n}"]) for n in range(2)
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    with sqlite3.connect(tmp_path / "s" / DB_NAME) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        counts = dict(db.execute("SELECT root, count(*) FROM snapshots GROUP BY root").fetchall())
        assert counts == {b"/root0": 40, b"/root1": 40}
        assert db.execute("SELECT count(*) FROM dirs").fetchone()[0] == 80 * 101


FULL_DISK = textwrap.dedent(
    """
    import json, os, subprocess, sys
    target = sys.argv[1]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", target], check=True)
    from sysmcp.history.snapshots import DirTotals, ScanSnapshot, Series
    from sysmcp.history.store import Store
    store = Store.open(__import__("pathlib").Path(target) / "state")
    results = []
    for i in range(40):
        dirs = {b"": DirTotals(1, 1, 1), **{os.urandom(40).hex().encode(): DirTotals(j, j, 1) for j in range(300)}}
        saved = store.save_scan(ScanSnapshot(Series("h", "1:1/0", b"/", "{}"), float(i), False, 1, dirs))
        results.append([saved.ok, saved.reason])
        if not saved.ok:
            break
    readable = store.snapshots(limit=100)
    print(json.dumps({"results": results, "readable": len(readable), "enabled": store.enabled}))
    """
)


def in_private_mount_namespace(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def can_mount() -> str | None:
    if os.geteuid() != 0:
        return "mounting a tiny tmpfs needs root"
    if shutil.which("unshare") is None:
        return "no unshare(1) to make a private mount namespace"
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    return None if probe.returncode == 0 else "this sandbox refuses new mount namespaces"


@pytest.mark.skipif(can_mount() is not None, reason=str(can_mount()))
def test_a_full_disk_skips_the_snapshot_and_says_so(tmp_path: Path) -> None:
    done = in_private_mount_namespace(FULL_DISK, str(tmp_path))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])  # unconfigured structlog logs to stdout first
    oks = [ok for ok, _ in report["results"]]
    assert oks[0] is True and oks[-1] is False, report
    assert "full" in report["results"][-1][1]
    assert report["enabled"] and report["readable"] == oks.count(True)  # what was saved is still there


FULL_AT_START = textwrap.dedent(
    """
    import json, os, subprocess, sys
    from pathlib import Path
    target = Path(sys.argv[1])
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(target)], check=True)
    from sysmcp.history.snapshots import DirTotals, ScanSnapshot, Series
    from sysmcp.history.store import Store
    try:
        with open(target / "filler", "wb") as filler:
            while True:
                filler.write(b"x" * 4096)
                filler.flush()
    except OSError:
        pass
    store = Store.open(target / "state")
    when_full = store.save_scan(ScanSnapshot(Series("h", "1:1/0", b"/", "{}"), 1.0, False, 1, {b"": DirTotals(1, 1, 1)}))
    os.unlink(target / "filler")
    freed = store.save_scan(ScanSnapshot(Series("h", "1:1/0", b"/", "{}"), 2.0, False, 1, {b"": DirTotals(1, 1, 1)}))
    modes = {n: oct(os.stat(target / "state" / n).st_mode & 0o777) for n in os.listdir(target / "state")}
    print(json.dumps({"when_full": [when_full.ok, when_full.reason], "freed": [freed.ok, freed.reason],
                      "enabled": store.enabled, "listed": len(store.snapshots()), "modes": modes}))
    """
)


@pytest.mark.skipif(can_mount() is not None, reason=str(can_mount()))
def test_a_disk_full_when_the_store_opens_leaves_history_on_for_when_space_is_freed(tmp_path: Path) -> None:
    """A server started while its state filesystem is full: each write says the disk is full, and once
    space is freed history records again, instead of being off for the server's life."""
    done = in_private_mount_namespace(FULL_AT_START, str(tmp_path))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["when_full"][0] is False and "full" in report["when_full"][1], report
    assert report["freed"] == [True, None] and report["enabled"] and report["listed"] == 1, report
    assert set(report["modes"].values()) == {"0o600"}, report


def test_retention_keeps_one_per_hour_day_and_week_and_nothing_older() -> None:
    hour, day = 3600.0, 86400.0
    now = 400 * day
    rows = []
    for i, age in enumerate(
        [
            0.1 * hour,  # the last hour: kept whole
            0.2 * hour,
            5 * hour + 60,  # the same hour twice: the newer kept
            5 * hour + 120,
            10 * day + 3600,  # the same day twice (daily range)
            10 * day + 7200,
            100 * day,  # weekly range
            100 * day + 60,
            380 * day,  # past a year
        ]
    ):
        rows.append((100 - i, "series", now - age))
    doomed = Retention().doomed(rows, now)
    assert sorted(doomed) == sorted([100 - 3, 100 - 5, 100 - 7, 100 - 8])
    future = Retention().doomed([(1, "s", now + 5 * day)], now)  # a clock set back since: kept
    assert future == []


def test_the_size_ceiling_prunes_the_oldest_first(tmp_path: Path) -> None:
    clock = Clock()
    store = Store.open(tmp_path / "s", clock)
    for i in range(20):
        dirs = {b"": 1, **{f"dir-{i}-{j}-{'x' * 60}".encode(): j for j in range(400)}}
        assert store.save_scan(snapshot(clock.now - i, dirs)).ok
    before = [info.id for info in store.snapshots()]
    assert store.prune(Retention(max_bytes=300_000)).ok
    after = [info.id for info in store.snapshots()]
    assert 0 < len(after) < len(before)
    assert after == before[: len(after)]  # the newest kept, the oldest gone
    assert store.size() <= 400_000


def test_a_prune_that_frees_nothing_does_not_rewrite_the_file(
    tmp_path: Path,
) -> None:
    """Every 25th snapshot a server prunes: with nothing to delete, no VACUUM (which rewrote the whole
    file through the WAL, holding the write lock, so another process's snapshot meanwhile was not saved)."""
    clock = Clock()
    store = Store.open(tmp_path / "s", clock)
    for i in range(5):
        dirs = {b"": 1, **{f"dir-{i}-{j}-{'x' * 60}".encode(): j for j in range(400)}}
        assert store.save_scan(snapshot(clock.now - i, dirs)).ok
    store.close()  # the last connection out merges the WAL into the file
    before = os.stat(tmp_path / "s" / DB_NAME)
    store = Store.open(tmp_path / "s", clock)
    assert store.prune().ok and len(store.snapshots()) == 5
    store.close()
    after = os.stat(tmp_path / "s" / DB_NAME)
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
    # A prune that frees most of the file gives the space back.
    store = Store.open(tmp_path / "s", clock)
    assert store.prune(Retention(max_bytes=1)).ok and len(store.snapshots()) == 1
    assert store.size() < before.st_size // 2


def test_disk_readings_and_the_key_value_room(tmp_path: Path) -> None:
    clock = Clock()
    store = Store.open(tmp_path / "s", clock)
    readings = [DiskReading("h", b"/", "dev|ext4", float(t), 100, 10 + t, 90 - t, 5, 5) for t in range(3)]
    assert store.save_readings(readings).ok
    assert [r.used for r in store.readings(b"/")] == [10, 11, 12]
    assert store.put("reclaim_plans", "p1", b'{"items": []}').ok
    assert store.get("reclaim_plans", "p1") == b'{"items": []}'
    assert store.keys("reclaim_plans") == [("p1", clock.now)]
    assert store.delete("reclaim_plans", "p1").ok and store.get("reclaim_plans", "p1") is None


# -- one connection per thread (and per process) --------------------------------------------------


def counting_connects(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every connection the store module opens (a spy on the real sqlite3.connect)."""
    import sysmcp.history.store as module

    opened: list[object] = []
    real = sqlite3.connect

    def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
        db = real(*args, **kwargs)  # type: ignore[call-overload]
        opened.append(db)
        return db  # type: ignore[no-any-return]

    monkeypatch.setattr(module.sqlite3, "connect", connect)  # type: ignore[attr-defined]
    return opened


def test_a_thread_keeps_one_connection_for_all_its_writes_and_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(tmp_path / "s", Clock())
    opened = counting_connects(monkeypatch)
    for i in range(20):
        assert store.put("ns", f"k{i}", b"v").ok
        assert store.get("ns", f"k{i}") == b"v"
        assert store.save_readings([DiskReading("h", b"/", "d", float(i), 10, 5, 5)]).ok
    assert len(opened) <= 1  # the one Store.open made is kept (0), or one more


def test_each_thread_gets_its_own_connection_and_all_writes_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    store = Store.open(tmp_path / "s", Clock(), busy_ms=10_000)
    opened = counting_connects(monkeypatch)
    failures: list[str | None] = []

    def writer(n: int) -> None:
        for i in range(10):
            saved = store.put("ns", f"{n}-{i}", b"v")
            if not saved.ok:
                failures.append(saved.reason)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(opened) == 4  # one per thread, none per write
    assert len(store.keys("ns")) == 40


def test_a_database_moved_aside_in_one_thread_is_left_by_the_others_too(tmp_path: Path) -> None:
    import threading

    store = Store.open(tmp_path / "s", Clock())
    assert store.put("ns", "before", b"1").ok  # this thread's connection, to the old file
    other = threading.Thread(target=lambda: store._start_afresh("a test"))
    other.start()
    other.join()
    assert store.put("ns", "after", b"2").ok
    assert store.get("ns", "before") is None and store.get("ns", "after") == b"2"
    with sqlite3.connect(tmp_path / "s" / DB_NAME) as db:  # the new file holds the write
        assert db.execute("SELECT key FROM kv").fetchall() == [("after",)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s", Clock())
    assert store.put("ns", "parent", b"1").ok
    pid = os.fork()
    if pid == 0:  # the child: the parent's connection must not be used across the fork
        ok = store.put("ns", "child", b"2").ok and store.get("ns", "parent") == b"1"
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.get("ns", "child") == b"2" and store.put("ns", "parent-again", b"3").ok
    with sqlite3.connect(tmp_path / "s" / DB_NAME) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_the_files_are_0600_under_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        store = Store.open(tmp_path / "s", Clock())
        assert store.put("ns", "k", b"v").ok
    finally:
        os.umask(old)
    for name in (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm"):
        assert stat.S_IMODE((tmp_path / "s" / name).stat().st_mode) == 0o600, name


def test_a_version_2_database_reads_its_old_rows_without_newest_and_keeps_new_ones_with_it(
    tmp_path: Path,
) -> None:
    """dirs.newest exists since version 1 but was always NULL before: old rows read as unknown."""
    old_database(tmp_path / "s", 2)
    store = Store.open(tmp_path / "s", Clock())
    old = store.load_scan(1)
    assert old is not None and old.total.newest is None
    dirs = {b"": DirTotals(9, 9, 2, 1234.5), b"empty": DirTotals(0, 0, 0, None)}
    saved = store.save_scan(ScanSnapshot(SERIES, 6.0, False, 1, dirs))
    again = store.load_scan(saved.id or 0)
    assert again is not None and again.dirs == dirs


def test_a_database_deleted_while_the_store_is_open_is_started_again_not_written_into_the_void(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path / "s", Clock())
    assert store.put("ns", "before", b"1").ok  # the thread's connection is open now
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / "s" / f"{DB_NAME}{suffix}").unlink(missing_ok=True)  # an admin cleaning up
    assert store.put("ns", "after", b"2").ok
    assert store.get("ns", "after") == b"2"
    assert stat.S_IMODE((tmp_path / "s" / DB_NAME).stat().st_mode) == 0o600
    with sqlite3.connect(tmp_path / "s" / DB_NAME) as db:  # the file on disk holds it
        assert db.execute("SELECT key FROM kv").fetchall() == [("after",)]
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_state_directory_removed_while_the_store_is_open_is_made_again_not_written_into_the_void(
    tmp_path: Path,
) -> None:
    """'rm -rf ~/.local/state/sysmcp' to start history afresh while a server runs: nothing can be made in
    the removed directory, so every write failed until the server restarted."""
    directory = tmp_path / "s"
    store = Store.open(directory, Clock())
    assert store.save_scan(snapshot(1.0, {b"": 7})).ok
    shutil.rmtree(directory)
    assert store.save_scan(snapshot(2.0, {b"": 8})).ok
    assert [info.taken for info in store.snapshots()] == [2.0] and store.unread() is None
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(directory / DB_NAME).st_mode) == 0o600


def test_choosing_a_snapshot_reads_only_the_heads_and_a_listing_counts_the_rows(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s", Clock())
    assert store.save_scan(snapshot(1.0, {b"": 10, b"a": 5, b"b": 5})).ok
    assert [info.rows for info in store.snapshots()] == [3]
    assert [info.rows for info in store.snapshots(count_rows=False)] == [0]


def test_a_worker_threads_connection_closes_with_its_thread_and_the_last_one_merges_the_wal(
    tmp_path: Path,
) -> None:
    """sqlite3 keeps a connection in a reference cycle: without the store closing it as its thread
    ends, it would stay open (its WAL unmerged) until the cyclic collector ran, or for good in a
    process that exits without tearing down (cli.serve._exit_now)."""
    store = Store.open(tmp_path, Clock())
    store.close()  # the opening thread's connection: now the worker's is the only one
    saved: list[bool] = []
    worker = threading.Thread(
        target=lambda: saved.append(store.save_readings([DiskReading("h", b"/", "d", 1.0, 10, 5, 5)]).ok)
    )
    worker.start()
    worker.join()
    assert saved == [True]
    assert sorted(p.name for p in tmp_path.iterdir()) == [DB_NAME]  # closed: no -wal or -shm left
    assert [r.used for r in store.readings(b"/")] == [5]


READ_ONLY = textwrap.dedent(
    """
    import pathlib, subprocess, sys
    from sysmcp.history.snapshots import DiskReading
    from sysmcp.history.store import Store
    state = pathlib.Path(sys.argv[1]) / "state"
    store = Store.open(state)
    subprocess.run(["mount", "--bind", str(state), str(state)], check=True)
    subprocess.run(["mount", "-o", "remount,ro,bind", str(state)], check=True)
    store.close()  # the next write opens the file anew, on the read-only mount
    for i in range(6):
        saved = store.save_readings([DiskReading("h", b"/", "1:1", float(i), 10, 5, 5, None, None)])
        print("SAVED", saved.ok, flush=True)
    """
)


@pytest.mark.skipif(can_mount() is not None, reason=str(can_mount()))
def test_a_read_only_state_directory_logs_history_write_failed_once_not_once_per_call(tmp_path: Path) -> None:
    done = in_private_mount_namespace(READ_ONLY, str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr
    assert out.count("SAVED False") == 6, out
    assert out.count("history write failed") == 1, out


def test_a_database_from_a_newer_schema_turns_history_off_and_is_neither_written_nor_moved_aside(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "s"
    store = Store.open(directory, Clock())
    assert store.save_scan(snapshot(1.0, {b"": 7})).ok and store.put("plans", "p1", b"kept").ok
    store.close()
    db = sqlite3.connect(directory / DB_NAME)  # a later release: one more column, one more version
    db.execute("ALTER TABLE readings ADD COLUMN unit INTEGER NOT NULL DEFAULT 1")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    before = (directory / DB_NAME).read_bytes()
    newer = Store.open(directory, Clock(2_000_000_000.0))
    assert not newer.enabled and newer.disabled_reason is not None
    assert f"is from a newer sysmcp, schema {SCHEMA_VERSION + 1}" in newer.disabled_reason
    assert not newer.save_readings([DiskReading("host", b"/", "8:1", 5.0, 100, 50, 50)]).ok
    assert not newer.put("plans", "p2", b"new").ok and not newer.prune(Retention(max_bytes=1)).ok
    assert newer.snapshots() == [] and newer.get("plans", "p1") is None  # nothing read as if it were ours
    newer.close()
    assert (directory / DB_NAME).read_bytes() == before
    assert not [p.name for p in directory.iterdir() if ".corrupt-" in p.name]


def test_a_database_locked_while_the_store_opens_leaves_history_on_for_the_next_call(tmp_path: Path) -> None:
    """Another process holding the database a moment (the last one out merging a large WAL, here a
    connection in exclusive locking mode) is no reason to turn history off for this process's life."""
    directory = tmp_path / "s"
    store = Store.open(directory, Clock())
    assert store.save_scan(snapshot(1.0, {b"": 1})).ok
    store.close()
    holder = sqlite3.connect(directory / DB_NAME, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("COMMIT")  # the lock is kept until the connection closes
    try:
        again = Store.open(directory, Clock(), busy_ms=20)
        assert again.enabled, again.disabled_reason
    finally:
        holder.close()
    assert [info.taken for info in again.snapshots()] == [1.0]
    assert again.save_scan(snapshot(2.0, {b"": 1})).ok


def test_two_databases_moved_aside_within_one_second_are_both_kept(tmp_path: Path) -> None:
    """Two processes finding damage at once (or damage found again at once): the first copy moved
    aside, the one a recovery would start from, is never replaced by the second."""
    directory = tmp_path / "s"
    clock = Clock()
    Store.open(directory, clock).close()
    for garbage in (b"the first damaged copy\n" * 200, b"the second damaged copy\n" * 200):
        (directory / DB_NAME).write_bytes(garbage)
        assert Store.open(directory, clock).enabled
    aside = sorted(p for p in directory.iterdir() if ".corrupt-" in p.name)
    assert [p.read_bytes()[:12] for p in aside] == [b"the first da", b"the second d"]


def test_the_process_store_waits_for_a_lock_as_long_as_it_was_configured_to(tmp_path: Path) -> None:
    from sysmcp.history import state
    from sysmcp.history.store import BUSY_MS

    try:
        state.configure(tmp_path / "default")
        default = state.active()
        assert default is not None and default.busy_ms == BUSY_MS
        state.configure(tmp_path / "brief", busy_ms=20)
        brief = state.active()
        assert brief is not None and brief.busy_ms == 20
    finally:
        state.configure(None)


@pytest.mark.parametrize("version", [0, SCHEMA_VERSION + 5])
def test_another_programs_database_turns_history_off_says_whose_and_is_left_as_it_is(
    tmp_path: Path, version: int
) -> None:
    """A --state-dir naming the wrong directory, where another program keeps a history.sqlite3: its file
    gets no sysmcp table, is not moved aside as damaged, and the reason says what it is."""
    directory = tmp_path / "s"
    directory.mkdir(mode=0o700)
    theirs = sqlite3.connect(directory / DB_NAME)
    theirs.execute("CREATE TABLE visits (url TEXT, at REAL)")
    theirs.execute("INSERT INTO visits VALUES ('https://example.org', 1.0)")
    theirs.execute(f"PRAGMA user_version = {version}")
    theirs.commit()
    theirs.close()
    os.chmod(directory / DB_NAME, 0o600)
    before = (directory / DB_NAME).read_bytes()
    store = Store.open(directory, Clock())
    assert not store.enabled and store.disabled_reason is not None
    assert "another program's SQLite database (its tables: visits" in store.disabled_reason, (
        store.disabled_reason
    )
    assert not store.save_scan(snapshot(1.0, {b"": 7})).ok and store.snapshots() == []
    store.close()
    assert (directory / DB_NAME).read_bytes() == before
    assert sorted(p.name for p in directory.iterdir()) == [DB_NAME]


def test_a_scan_that_could_not_read_the_previous_snapshot_is_not_kept_without_its_directories(
    tmp_path: Path,
) -> None:
    """The previous snapshot's directories are kept again by the next (so a directory that shrank below
    the resolution is diffed exactly): when another process held the store while they were read, the
    next snapshot kept without them would have such a directory diffed as gone."""
    from sysmcp.engine.usage import UsageRequest, scan_usage
    from sysmcp.engine.walk import WalkOptions
    from sysmcp.history.recording import record_scan

    tree = tmp_path / "tree"
    (tree / "small").mkdir(parents=True)
    (tree / "small" / "f").write_bytes(os.urandom(3 << 20))
    directory, clock = tmp_path / "s", Clock()
    store = Store.open(directory, clock, busy_ms=20)
    request = UsageRequest(100, 0, 1, True, 0, 60.0, root=os.fsencode(tree), options=WalkOptions())
    assert record_scan(store, request, scan_usage, clock).snapshot is not None
    (tree / "small" / "f").write_bytes(os.urandom(100_000))  # shrank below the 1 MiB resolution
    store.close()
    holder = sqlite3.connect(directory / DB_NAME, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("COMMIT")  # held while the previous snapshot is read; let go before the save

    def scan_then_let_go(asked: UsageRequest) -> Any:
        holder.close()
        return scan_usage(asked)

    clock.now += 3600
    kept = record_scan(store, request, scan_then_let_go, clock)
    saved = store.snapshots()
    if kept.snapshot is not None:  # kept: then with the directory the one before kept
        assert b"small" in kept.snapshot.dirs, kept.snapshot.dirs
    else:
        assert kept.unsaved is not None and "could not be read (database is locked)" in kept.unsaved
        assert len(saved) == 1


def test_a_database_another_sysmcp_makes_while_this_one_opens_it_is_not_taken_for_another_programs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sysmcp starting on a fresh state directory (the timer's first snapshot and a server): the
    other's first migration committed between this one's reading of the version (0) and of the tables
    (sysmcp's) must not be read as 'another program's database', which turned history off for good."""
    directory = tmp_path / "s"
    Store.open(directory, Clock()).close()  # the directory and the database's file
    (directory / DB_NAME).unlink()
    os.close(os.open(directory / DB_NAME, os.O_CREAT | os.O_WRONLY, 0o600))  # as a crashed first run left it
    other = Store(directory, Clock())  # the other process, which commits its migration at the worst moment

    class Racing(sqlite3.Connection):
        raced = False

        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            if "sqlite_master" in sql and not Racing.raced:
                Racing.raced = True
                theirs = sqlite3.connect(directory / DB_NAME, timeout=0.05, isolation_level=None)
                try:  # the other process: refused (busy) where this one's reads are one transaction
                    other._migrate(theirs)
                except sqlite3.OperationalError as exc:
                    assert "locked" in str(exc), exc
                finally:
                    theirs.close()
            return super().execute(sql, *args)

    connect = sqlite3.connect
    monkeypatch.setattr(
        sqlite3, "connect", lambda *a, **k: connect(*a, **{**k, "factory": k.get("factory", Racing)})
    )
    store = Store.open(directory, Clock())
    monkeypatch.undo()
    assert Racing.raced
    assert store.enabled, store.disabled_reason
    assert store.save_scan(snapshot(1.0, {b"": 7})).ok
    store.close()
