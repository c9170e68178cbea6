"""The history database: SQLite through the standard library, WAL, a versioned schema, 0600 files.

Why these rules: several sysmcp processes may share one store (a desktop host's server, the CLI, a
timer), so every connection waits at most ``BUSY_MS`` for a lock and a write that cannot get it is
skipped (``WriteResult.ok`` False, with the reason for the answer to say) instead of holding a tool up.
The store holds path names: its directory is 0700, its files 0600, all checked as ssh checks ``~/.ssh``
(``history.statedir``). A damaged database is moved aside (renamed with a timestamp) and a new one started;
a full disk or an unwritable directory only turns recording off for that write or that process.
Nothing here raises to a tool.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any, TypeAlias, TypeVar

from sysmcp import platform
from sysmcp.engine.opens import closing_fd
from sysmcp.history.snapshots import (
    Baseline,
    BaselineFile,
    BaselineNode,
    DirTotals,
    DiskReading,
    FileRow,
    ScanSnapshot,
    Series,
    SnapshotInfo,
    Unread,
)
from sysmcp.history.statedir import OTHER_FILES, StateDir, Unsafe, open_dir
from sysmcp.logconfig import get_logger

DB_NAME = "history.sqlite3"
BUSY_MS = 200  # the longest any tool waits for another process's lock
SCHEMA_VERSION = 4
SQLITE_HEADER = b"SQLite format 3\0"
_CORRUPT = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_FULL = 13  # SQLITE_FULL
_IOERR = 10  # SQLITE_IOERR: what a full tmpfs gives when the -shm or -wal cannot grow
_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED

HOUR, DAY, WEEK = 3600.0, 86400.0, 7 * 86400.0
VACUUM_FREE_SHARE = 4  # a prune gives space back (VACUUM) only when a quarter or more of the pages are free

T = TypeVar("T")
#: A snapshot's directories by its id: (relative name, totals), in byte order of the names.
DirRows: TypeAlias = Callable[[int], Iterator[tuple[bytes, DirTotals]]]
log = get_logger("sysmcp.history")
_said: set[tuple[str, str]] = set()  # (event, error) already logged by this process


def _warn_once(event: str, error: str, **fields: Any) -> None:
    """Once per process: a read-only store fails every call alike."""
    if (event, error) not in _said:
        _said.add((event, error))
        log.warning(event, error=error, **fields)


# Each migration takes the schema from version N to N + 1 (index N); never edit a shipped one.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # v0 -> v1: scans, their directories and files, disk readings
        """CREATE TABLE snapshots (
            id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, host TEXT NOT NULL,
            fs_id TEXT NOT NULL, root BLOB NOT NULL, options TEXT NOT NULL, taken REAL NOT NULL,
            partial INTEGER NOT NULL, disk INTEGER NOT NULL, files INTEGER NOT NULL,
            threshold INTEGER NOT NULL)""",
        "CREATE INDEX snapshots_series ON snapshots (kind, root, id)",
        """CREATE TABLE dirs (
            snapshot INTEGER NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE, path BLOB NOT NULL,
            disk INTEGER NOT NULL, apparent INTEGER NOT NULL, files INTEGER NOT NULL, newest REAL,
            PRIMARY KEY (snapshot, path)) WITHOUT ROWID""",
        """CREATE TABLE files (
            snapshot INTEGER NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE, path BLOB NOT NULL,
            disk INTEGER NOT NULL, apparent INTEGER NOT NULL, mtime REAL)""",
        "CREATE INDEX files_snapshot ON files (snapshot)",
        """CREATE TABLE readings (
            id INTEGER PRIMARY KEY AUTOINCREMENT, host TEXT NOT NULL, mount BLOB NOT NULL,
            fs_id TEXT NOT NULL, taken REAL NOT NULL, total INTEGER NOT NULL, used INTEGER NOT NULL,
            free INTEGER NOT NULL, inodes_used INTEGER, inodes_free INTEGER)""",
        "CREATE INDEX readings_mount ON readings (mount, id)",
    ),
    (  # v1 -> v2: integrity baselines (hash_tree baseline: true) and a key/value table for plans
        "ALTER TABLE snapshots ADD COLUMN label TEXT NOT NULL DEFAULT ''",
        """CREATE TABLE baseline_files (
            snapshot INTEGER NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE, path BLOB NOT NULL,
            digest TEXT NOT NULL, size INTEGER NOT NULL, mtime REAL NOT NULL, mode INTEGER NOT NULL,
            uid INTEGER NOT NULL, gid INTEGER NOT NULL, PRIMARY KEY (snapshot, path)) WITHOUT ROWID""",
        """CREATE TABLE kv (
            namespace TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, updated REAL NOT NULL,
            PRIMARY KEY (namespace, key)) WITHOUT ROWID""",
    ),
    (  # v2 -> v3: what a baseline could not read (files with what lstat gave, directories as prefixes),
        # and each file's ctime (NULL in the rows of a v2 baseline: not compared)
        "ALTER TABLE snapshots ADD COLUMN unrecorded INTEGER NOT NULL DEFAULT 0",
        """CREATE TABLE baseline_unread (
            snapshot INTEGER NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE, path BLOB NOT NULL,
            directory INTEGER NOT NULL, reason TEXT NOT NULL, size INTEGER, mtime REAL, mode INTEGER,
            uid INTEGER, gid INTEGER, ctime REAL, PRIMARY KEY (snapshot, path)) WITHOUT ROWID""",
        "ALTER TABLE baseline_files ADD COLUMN ctime REAL",
    ),
    (  # v3 -> v4: a baseline's directories, symbolic links (target bytes) and special files (device
        # number), and how many past its bound; that count NULL for a baseline that recorded none
        "ALTER TABLE snapshots ADD COLUMN nodes_unrecorded INTEGER",
        """CREATE TABLE baseline_nodes (
            snapshot INTEGER NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE, path BLOB NOT NULL,
            kind INTEGER NOT NULL, mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL,
            rdev INTEGER, target BLOB, PRIMARY KEY (snapshot, path)) WITHOUT ROWID""",
    ),
)


@dataclass(frozen=True, slots=True)
class Retention:
    """Keep, per series, the newest snapshot of each hour for ``hourly_s``, of each day for
    ``daily_s`` and of each week for ``weekly_s``; nothing older. ``max_bytes``: the size ceiling.
    Pure (rows in, ids out): ``Store.prune`` applies it in one transaction."""

    hourly_s: float = 2 * DAY
    daily_s: float = 5 * WEEK
    weekly_s: float = 52 * WEEK
    max_bytes: int = 100 << 20

    def doomed(self, rows: Sequence[tuple[int, Any, float]], now: float) -> list[int]:
        """Of ``(id, series, taken)`` rows, newest (highest id) first, the ids to delete. A time in
        the future (a clock set back since) counts as now: never deleted for being odd."""
        kept: set[tuple[Any, str, int]] = set()
        doomed = []
        buckets = ((self.hourly_s, "h", HOUR), (self.daily_s, "d", DAY), (self.weekly_s, "w", WEEK))
        for row_id, series, taken in rows:
            age = max(0.0, now - taken)
            if age <= HOUR:  # the last hour's are kept whole: what_changed compares against them
                continue
            # the bucket it is the newest of: its hour, its day or its week (none: too old to keep)
            key = next(
                ((series, tag, int(taken // width)) for span, tag, width in buckets if age <= span), None
            )
            if key is None or key in kept:
                doomed.append(row_id)
            else:
                kept.add(key)
        return doomed


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Whether a write went in, and if not, why (a sentence the tool repeats)."""

    ok: bool
    reason: str | None = None
    id: int | None = None


class _CloseWithThread:
    """Closes a thread's connection when that thread ends (its locals go, and this with them).

    sqlite3's ``Connection`` sits in a reference cycle (through its statement cache), so a worker
    thread's connection would otherwise stay open until the cyclic collector ran, and a process that
    ends without tearing down (``cli.serve._exit_now``) would leave the WAL unmerged. Never in a forked
    child: closing the parent's connection there would drop the parent's locks."""

    __slots__ = ("db", "pid")
    _getpid = staticmethod(os.getpid)  # bound here: the main thread's locals go late in a teardown

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.pid = os.getpid()

    def __del__(self) -> None:
        if self._getpid() == self.pid:
            try:  # noqa: SIM105 - no module globals (contextlib, sqlite3) here: they may be gone
                self.db.close()
            except Exception:
                pass


class Store:
    """One history database. Each thread keeps one connection to it (``_connect``); processes
    share nothing but the file."""

    def __init__(self, directory: Path, clock: Callable[[], float] = time.time, *, busy_ms: int = BUSY_MS):
        self.directory = directory
        self.path = directory / DB_NAME
        self.clock = clock
        self.busy_ms = busy_ms
        self.enabled = True
        self.disabled_reason: str | None = None
        self.disabled_cause: str | None = None  # the fact alone, for "history is off (…)"
        self._dir: StateDir | None = None
        self._local = threading.local()
        self._generation = 0  # bumped when the file is moved aside: every cached connection is stale
        self._open_lock = threading.Lock()  # one thread makes a removed state directory again

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def open(
        cls, directory: Path, clock: Callable[[], float] = time.time, *, busy_ms: int = BUSY_MS
    ) -> Store:
        """The store in ``directory``, created 0700 if missing; ``enabled`` False (with one log line)
        when it cannot be written or is not safe to use (``history.statedir``: another user could write it,
        or a name in it is a symlink, a FIFO, a hard link, another's file), so every tool still works
        without history."""
        store = cls(directory, clock, busy_ms=busy_ms)
        try:
            store._dir = open_dir(directory)
            store.path = store._dir.path / DB_NAME  # the checked parents, not a link re-pointed later
            if not os.access(".", os.W_OK | os.X_OK, dir_fd=store._dir.fd):
                raise PermissionError(f"{directory} is not writable")
            for name in OTHER_FILES:  # the database's own files are checked as they are opened
                store._dir.check(name)
            store._check_file()
            for suffix in ("", "-wal", "-shm"):  # before this process's first connection: see StateDir.check
                store.state_dir.tighten(f"{DB_NAME}{suffix}")
            with store._connect() as db:
                store._migrate(db)
        except (OSError, sqlite3.Error) as exc:
            if isinstance(exc, sqlite3.Error) and store._is_busy(exc):
                store.close()  # a moment's lock (another process merging its WAL): the next use tries again
                return store
            if store._dir is not None and store._is_full(exc):
                # A full disk is freed again: each write until then says it was not saved, and the first
                # one after makes the schema (``_connect``), instead of history off for the process's life.
                store.close()
                _warn_once("history write failed: disk full", "disk full", what="the history store")
                return store
            if isinstance(exc, sqlite3.DatabaseError) and store._is_corrupt(exc):
                try:
                    store._start_afresh("the database could not be read")
                    return store
                except (OSError, sqlite3.Error) as again:
                    exc = again
            store._off(exc)
        return store

    @property
    def state_dir(self) -> StateDir:
        """The checked state directory (open while the store is on): the reclaim plans' key lives there."""
        if self._dir is None:
            raise Unsafe(self.disabled_reason or "history is off")
        return self._dir

    def _off(self, exc: BaseException) -> None:
        """History off for this process, said once in the log and in every answer that needs it."""
        self.enabled = False
        self.disabled_cause = str(exc)
        self.disabled_reason = f"history is off: the state directory {self.directory} cannot be used ({exc})"
        _warn_once("history off", str(exc), directory=str(self.directory))

    def _check_file(self) -> None:
        """Move aside a file that is no database or was cut short (its size no whole number of pages):
        cheaper than an integrity check, and what a crash or a full disk leaves behind."""
        with closing_fd(self.state_dir.open(DB_NAME, os.O_RDONLY, create=True)) as fd:
            header = os.pread(fd, 100, 0)
            size = os.fstat(fd).st_size
        if size == 0:
            return
        page = int.from_bytes(header[16:18], "big") if len(header) >= 18 else 0
        page = 65536 if page == 1 else page
        if not header.startswith(SQLITE_HEADER) or page < 512 or size % page:
            self._move_aside("the database file is damaged or truncated")

    def _move_aside(self, why: str) -> None:
        self.close()
        self._generation += 1
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self.clock()))
        fd = self.state_dir.fd
        n = 1
        while True:  # one moved aside this second already (by this process or another) is never replaced
            aside = f"{DB_NAME}.corrupt-{stamp}" + (f".{n}" if n > 1 else "")
            try:
                platform.rename_exclusive(fd, os.fsencode(DB_NAME), fd, os.fsencode(aside))
                break
            except FileExistsError:
                n += 1
        for suffix in ("-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{DB_NAME}{suffix}", f"{aside}{suffix}", src_dir_fd=fd, dst_dir_fd=fd)
        moved_to = str(self.directory / aside)
        log.warning("history database moved aside, a new one started", reason=why, moved_to=moved_to)
        os.close(self.state_dir.open(DB_NAME, create=True))

    def _start_afresh(self, why: str) -> None:
        self._move_aside(why)
        with self._connect() as db:
            self._migrate(db)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, opened on first use and kept: opening one (and its WAL setup)
        cost several times the small write it served. Per thread because a connection must not be
        shared between threads, per process because it must not cross a fork; a database moved
        aside (``_generation``), or deleted or replaced by someone else (its inode changed: a kept
        connection would write into the old, unlinked file), makes a thread open a new one."""
        key = (os.getpid(), self._generation, self._identity())
        held: tuple[tuple[int, int, tuple[int, int]], sqlite3.Connection] | None = getattr(
            self._local, "db", None
        )
        if held is not None and held[0] == key:
            yield held[1]
            return
        self.close()  # this process's connection to the old file (a forked child leaves the parent's)
        # SQLite opens them by name, and plays a hot -journal back into the database even in WAL mode:
        # what is there must be ours.
        for suffix in ("-wal", "-shm", "-journal"):
            self.state_dir.check(f"{DB_NAME}{suffix}")
        db = sqlite3.connect(self.path, timeout=self.busy_ms / 1000, isolation_level=None)
        try:
            db.execute(f"PRAGMA busy_timeout = {int(self.busy_ms)}")
            db.execute("PRAGMA foreign_keys = ON")
            # The version and the tables read in one transaction: another sysmcp's first migration,
            # committed between the two, would show sysmcp's tables at version 0, another program's file.
            db.execute("BEGIN")
            try:
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version == 0 or version > SCHEMA_VERSION:
                    _not_foreign(db, self.path, version)
            finally:  # read alone: ended without masking what the reads raised (a damaged file, a lock)
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
            if version > SCHEMA_VERSION:  # its rows may mean what this version cannot tell: not touched
                raise Unsafe(
                    f"{self.path} is from a newer sysmcp, schema {version} where this one knows "
                    f"{SCHEMA_VERSION}: left as it is"
                )
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            if version < SCHEMA_VERSION:  # a file made afresh
                self._migrate(db)
        except BaseException:
            db.close()
            raise
        self._local.db = (key, db)
        self._local.closer = _CloseWithThread(db)  # SQLite gives the -wal and -shm the db's mode
        yield db

    def _identity(self) -> tuple[int, int]:
        """The database file's (device, inode), checked (``history.statedir``); a missing one is created
        empty (0600) first, in the state directory made again if it was removed (``rm -rf`` of it to
        start history afresh): nothing can be made in a removed directory, so every later write failed."""
        if os.fstat(self.state_dir.fd).st_nlink == 0:
            self._reopen_directory()
        st = self.state_dir.check(DB_NAME)
        if st is None:
            self._check_file()
            st = self.state_dir.lstat(DB_NAME)
        return st.st_dev, st.st_ino

    def _reopen_directory(self) -> None:
        """The state directory opened (made, checked) again at its path, every cached connection stale."""
        with self._open_lock:
            if self._dir is not None and os.fstat(self._dir.fd).st_nlink != 0:
                return  # another thread made it again a moment ago
            again = open_dir(self.directory)
            # The old one is not closed here: another thread may be opening a name relative to it this
            # moment, and its descriptor's number could be reused. It closes when the last use lets go.
            self._dir = again
            self.path = again.path / DB_NAME
            self._generation += 1
            log.warning("history state directory was removed: made again", directory=str(self.directory))

    def close(self) -> None:
        """Close this thread's connection (others close with their threads, or on their next use
        after a database was moved aside)."""
        held = getattr(self._local, "db", None)
        self._local.db = None
        if held is not None and held[0][0] == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                held[1].close()

    def _migrate(self, db: sqlite3.Connection) -> None:
        """Bring the schema to ``SCHEMA_VERSION``, one migration per transaction (``PRAGMA user_version``)."""
        version = db.execute("PRAGMA user_version").fetchone()[0]
        while version < SCHEMA_VERSION:
            with self._transaction(db):
                if db.execute("PRAGMA user_version").fetchone()[0] == version:  # nobody beat us to it
                    for statement in MIGRATIONS[version]:
                        db.execute(statement)
                    db.execute(f"PRAGMA user_version = {version + 1}")
            version = db.execute("PRAGMA user_version").fetchone()[0]

    @contextlib.contextmanager
    def _transaction(self, db: sqlite3.Connection) -> Iterator[None]:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
            db.execute("COMMIT")
        except BaseException:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                self.close()  # a connection in an unknown state is not kept
            raise

    @staticmethod
    def _is_busy(exc: sqlite3.Error) -> bool:
        code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
        return code in _BUSY or "locked" in str(exc)

    def _is_full(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the state filesystem being full (or over quota)."""
        if isinstance(exc, OSError):
            return exc.errno in (errno.ENOSPC, errno.EDQUOT)
        if not isinstance(exc, sqlite3.Error):
            return False
        code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
        return code == _FULL or "full" in str(exc) or (code == _IOERR and self._disk_full())

    @staticmethod
    def _is_corrupt(exc: sqlite3.Error) -> bool:
        code = getattr(exc, "sqlite_errorcode", None)
        return (code is not None and code & 0xFF in _CORRUPT) or "not a database" in str(exc)

    # -- the one way in: reads and writes that never raise to a tool ----------------------------

    def _write(self, what: str, work: Callable[[sqlite3.Connection], Any]) -> WriteResult:
        if not self.enabled:
            return WriteResult(False, self.disabled_reason)
        for attempt in (1, 2):
            try:
                with self._connect() as db, self._transaction(db):
                    row_id = work(db)
                return WriteResult(True, None, row_id if isinstance(row_id, int) else None)
            except sqlite3.Error as exc:
                if self._is_busy(exc):
                    return WriteResult(
                        False, f"the history store was busy (another sysmcp writing): {what} not saved"
                    )
                if self._is_full(exc):
                    _warn_once("history write failed: disk full", "disk full", what=what)
                    return WriteResult(False, f"the disk holding the history store is full: {what} not saved")
                if self._is_corrupt(exc) and attempt == 1:
                    with contextlib.suppress(OSError, sqlite3.Error):
                        self._start_afresh(str(exc))
                        continue
                _warn_once("history write failed", str(exc), what=what)
                return WriteResult(False, f"the history store could not be written ({exc}): {what} not saved")
            except OSError as exc:
                if isinstance(exc, Unsafe):
                    self._off(exc)
                    return WriteResult(False, self.disabled_reason)
                _warn_once("history write failed", str(exc), what=what)
                return WriteResult(
                    False, f"the history store could not be written ({exc.strerror}): {what} not saved"
                )
        return WriteResult(False, f"the history store could not be written: {what} not saved")

    def _disk_full(self) -> bool:
        try:
            vfs = os.fstatvfs(self.state_dir.fd)
        except OSError:
            return False
        return vfs.f_bavail * (vfs.f_frsize or vfs.f_bsize) < 64 * 1024

    def _read(self, work: Callable[[sqlite3.Connection], T], default: T) -> T:
        self._local.unread = self.disabled_cause
        if not self.enabled:
            return default
        try:
            with self._connect() as db:
                return work(db)
        # A key with a lone surrogate ("\ud800"): SQLite cannot hold one, so no row has it.
        except UnicodeEncodeError:
            return default
        except (sqlite3.Error, OSError) as exc:
            self._local.unread = str(exc)
            if isinstance(exc, Unsafe):
                self._off(exc)
            elif isinstance(exc, sqlite3.Error) and self._is_corrupt(exc):
                with contextlib.suppress(OSError, sqlite3.Error):
                    self._start_afresh(str(exc))
            else:
                _warn_once("history read failed", str(exc))
            return default

    def unread(self) -> str | None:
        """Why this thread's last read gave its default instead of the rows (a lock another process
        held, damage, history off); None when it read: an empty answer is then the truth."""
        return getattr(self._local, "unread", None)

    # -- scans --------------------------------------------------------------------------------

    def save_scan(self, snap: ScanSnapshot) -> WriteResult:
        def work(db: sqlite3.Connection) -> int:
            total = snap.total
            head = ("scan", snap.taken, int(snap.partial), total.disk, total.files, snap.threshold, "")
            sid = _insert_head(db, snap.series, *head)
            db.executemany(
                "INSERT INTO dirs VALUES (?, ?, ?, ?, ?, ?)",
                ((sid, path, d.disk, d.apparent, d.files, d.newest) for path, d in snap.dirs.items()),
            )
            db.executemany(
                "INSERT INTO files VALUES (?, ?, ?, ?, ?)",
                ((sid, f.path, f.disk, f.apparent, f.mtime) for f in snap.files),
            )
            return sid

        saved = self._write("the snapshot", work)
        if saved.ok:
            snap.id = saved.id
        return saved

    def snapshots(
        self,
        kind: str | None = None,
        root: bytes | None = None,
        limit: int = 1000,
        *,
        count_rows: bool = True,
        shown: Callable[[bytes], bool] | None = None,
    ) -> list[SnapshotInfo]:
        """Stored snapshots, newest (last written) first, the first ``limit`` of those whose root
        ``shown`` lets a caller show (None: all). ``count_rows`` False leaves ``rows`` 0: a caller
        choosing what to diff needs only the heads, and counting reads every row's index."""

        def work(db: sqlite3.Connection) -> list[SnapshotInfo]:
            wanted = {name: value for name, value in (("kind", kind), ("root", root)) if value is not None}
            where = " AND ".join(f"s.{name} = ?" for name in wanted)
            counted = (
                "(SELECT count(*) FROM dirs WHERE snapshot = s.id)"
                " + (SELECT count(*) FROM baseline_files WHERE snapshot = s.id)"
                if count_rows
                else "0"
            )
            # Without ``shown`` SQLite stops at the limit; with it, the rows are read (and counted) one by one
            # until ``limit`` of them are shown: the roots' test is Python's, not SQL's.
            rows = db.execute(
                "SELECT s.id, s.kind, s.host, s.fs_id, s.root, s.options, s.taken, s.partial, s.disk, s.files,"
                f" {counted} FROM snapshots s {'WHERE ' + where if where else ''} ORDER BY s.id DESC LIMIT ?",
                (*wanted.values(), -1 if shown is not None else min(limit, _MAX_INTEGER)),
            )
            infos: list[SnapshotInfo] = []
            for r in rows:
                if len(infos) >= limit:
                    break
                if shown is None or shown(bytes(r[4])):
                    series = Series(r[2], r[3], bytes(r[4]), r[5])
                    infos.append(SnapshotInfo(r[0], r[1], series, r[6], bool(r[7]), r[8], r[9], r[10]))
            return infos

        return self._read(work, [])

    def load_scan(self, sid: int, *, dirs: bool = True) -> ScanSnapshot | None:
        """A scan snapshot; with ``dirs`` False only its root's totals of its directories (a million
        rows are read as they are compared instead: ``with_dir_rows``)."""
        loaded = self._load(sid, "scan", "threshold", _DIRS_OF if dirs else _ROOT_OF, _FILES_OF)
        if loaded is None:
            return None
        (series, taken, partial, threshold), (dirs_of, files) = loaded
        totals = {bytes(p): DirTotals(d, a, f, n) for p, d, a, f, n in dirs_of}
        rows = [FileRow(bytes(p), d, a, m) for p, d, a, m in files]
        return ScanSnapshot(series, taken, partial, threshold, totals, rows, sid)

    def with_dir_rows(self, work: Callable[[DirRows], T], default: T) -> T:
        """``work`` given the directories of any scan snapshot as rows, in byte order of their names,
        read as they are asked for on one connection; ``default`` when the store cannot be read
        (``unread`` says why). An exception ``work`` raises (a cancel) ends the reading.

        The rows are read in one read transaction, each snapshot's asked to be there first: its head
        was read before, in another, and a prune since (another process's retention) would leave it
        no rows, every directory of the other side then 'appeared'. One deleted raises ``Pruned``."""

        def read(db: sqlite3.Connection) -> T:
            def rows(sid: int) -> Iterator[tuple[bytes, DirTotals]]:
                if db.execute("SELECT 1 FROM snapshots WHERE id = ?", (sid,)).fetchone() is None:
                    raise Pruned(f"snapshot {sid} was deleted, by a prune, while it was being compared")
                for p, d, a, f, n in db.execute(_DIRS_IN_ORDER, (sid,)):
                    yield bytes(p), DirTotals(d, a, f, n)

            db.execute("BEGIN")
            try:
                return work(rows)
            finally:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("COMMIT")  # read alone: ended, the rows not read dropped

        return self._read(read, default)

    def _load(
        self, sid: int, kind: str, column: str, *queries: str
    ) -> tuple[tuple[Series, float, bool, Any], list[list[Any]]] | None:
        """A stored snapshot of ``kind``: its series, time, partial flag and one more column of its kind,
        and the rows each query selects of it (None: none)."""

        def work(db: sqlite3.Connection) -> tuple[tuple[Series, float, bool, Any], list[list[Any]]] | None:
            row = db.execute(
                f"SELECT host, fs_id, root, options, taken, partial, {column} FROM snapshots WHERE id = ? AND kind = ?",
                (sid, kind),
            ).fetchone()
            if row is None:
                return None
            head = Series(row[0], row[1], bytes(row[2]), row[3]), row[4], bool(row[5]), row[6]
            return head, [db.execute(q, (sid,)).fetchall() for q in queries]

        return self._read(work, None)

    def dir_names(self, sid: int) -> frozenset[str]:
        """The relative names (as a scan spells them) a snapshot kept: kept again by the next one."""

        def work(db: sqlite3.Connection) -> frozenset[str]:
            rows = db.execute("SELECT path FROM dirs WHERE snapshot = ?", (sid,))
            return frozenset(os.fsdecode(bytes(p)) for (p,) in rows)

        return self._read(work, frozenset())

    # -- disk readings ------------------------------------------------------------------------

    def save_readings(self, readings: Sequence[DiskReading]) -> WriteResult:
        if not readings:
            return WriteResult(True)
        rows = [astuple(r)[:-1] for r in readings]  # every field but the id
        return self._write(
            "the disk reading",
            lambda db: db.executemany(
                "INSERT INTO readings (host, mount, fs_id, taken, total, used, free, inodes_used, inodes_free)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            ),
        )

    def readings(self, mount: bytes, limit: int = 10_000) -> list[DiskReading]:
        """A mount point's readings in the order they were written (oldest first)."""

        def work(db: sqlite3.Connection) -> list[DiskReading]:
            rows = db.execute(
                "SELECT host, mount, fs_id, taken, total, used, free, inodes_used, inodes_free, id"
                " FROM readings WHERE mount = ? ORDER BY id DESC LIMIT ?",
                (mount, limit),
            ).fetchall()
            return [DiskReading(r[0], bytes(r[1]), *r[2:]) for r in reversed(rows)]

        return self._read(work, [])

    # -- integrity baselines ------------------------------------------------------------------

    def save_baseline(self, baseline: Baseline) -> WriteResult:
        def work(db: sqlite3.Connection) -> int:
            size = sum(f.size for f in baseline.files.values())
            head = ("baseline", baseline.taken, int(baseline.partial), size, len(baseline.files))
            sid = _insert_head(db, baseline.series, *head, 0, baseline.algorithm)  # no threshold; the digest
            db.executemany(
                "INSERT INTO baseline_files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    (sid, p, f.digest, f.size, f.mtime, f.mode, f.uid, f.gid, f.ctime)
                    for p, f in baseline.files.items()
                ),
            )
            db.executemany(
                "INSERT INTO baseline_unread VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    (sid, p, int(u.directory), u.reason, *_seen_row(u.seen))
                    for p, u in baseline.unread.items()
                ),
            )
            if baseline.unrecorded:
                db.execute("UPDATE snapshots SET unrecorded = ? WHERE id = ?", (baseline.unrecorded, sid))
            if baseline.nodes is not None:
                db.executemany(
                    "INSERT INTO baseline_nodes VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        (sid, p, n.kind, n.mode, n.uid, n.gid, n.rdev, n.target)
                        for p, n in baseline.nodes.items()
                    ),
                )
                db.execute(
                    "UPDATE snapshots SET nodes_unrecorded = ? WHERE id = ?", (baseline.nodes_unrecorded, sid)
                )
            return sid

        saved = self._write("the integrity baseline", work)
        if saved.ok:
            baseline.id = saved.id
        return saved

    def load_baseline(self, sid: int) -> Baseline | None:
        loaded = self._load(
            sid,
            "baseline",
            "label",
            _BASELINE_FILES_OF,
            _BASELINE_UNREAD_OF,
            _UNRECORDED_OF,
            _BASELINE_NODES_OF,
        )
        if loaded is None:
            return None
        (series, taken, partial, algorithm), (rows, unread_rows, [(unrecorded, uncounted)], node_rows) = (
            loaded
        )
        files = {bytes(r[0]): BaselineFile(*r[1:]) for r in rows}
        unread = {
            bytes(path): Unread(
                reason,
                bool(directory),
                None if seen[0] is None else BaselineFile("", *seen),  # no size: lstat gave nothing
            )
            for path, directory, reason, *seen in unread_rows
        }
        # NULL: a baseline an older sysmcp recorded, with no directories, links or special files (not "none")
        nodes = None if uncounted is None else dict(filter(None, map(_node_row, node_rows)))
        return Baseline(
            series, taken, algorithm, files, partial, sid, unread, unrecorded, nodes, uncounted or 0
        )

    # -- a small key/value room (reclaim plans) -------------------------------------------------

    def put(self, namespace: str, key: str, value: bytes) -> WriteResult:
        """Store ``value`` under (namespace, key), replacing what was there."""
        return self.put_many(namespace, [(key, value)], f"{namespace} {key}")

    def get(self, namespace: str, key: str) -> bytes | None:
        def work(db: sqlite3.Connection) -> bytes | None:
            row = db.execute(
                "SELECT value FROM kv WHERE namespace = ? AND key = ?", (namespace, key)
            ).fetchone()
            return None if row is None else bytes(row[0])

        return self._read(work, None)

    def keys(self, namespace: str) -> list[tuple[str, float]]:
        """(key, updated) of a namespace, newest first."""
        return self._read(
            lambda db: db.execute(
                "SELECT key, updated FROM kv WHERE namespace = ? ORDER BY updated DESC", (namespace,)
            ).fetchall(),
            [],
        )

    def delete(self, namespace: str, key: str) -> WriteResult:
        where = (namespace, key)
        return self._write(
            f"{namespace} {key}",
            lambda db: db.execute("DELETE FROM kv WHERE namespace = ? AND key = ?", where),
        )

    def put_many(
        self, namespace: str, rows: Sequence[tuple[str, bytes]], what: str | None = None
    ) -> WriteResult:
        """Store several (key, value) rows of a namespace in one transaction (a log written in batches);
        ``what`` names them when the write fails."""
        now = self.clock()
        values = [(namespace, k, v, now) for k, v in rows]
        return self._write(
            what or f"{len(rows)} {namespace} rows",
            lambda db: db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?, ?, ?)", values),
        )

    # -- retention ----------------------------------------------------------------------------

    def prune(self, policy: Retention | None = None) -> WriteResult:
        """Apply the retention policy, then the size ceiling (oldest snapshots first)."""
        policy = policy or Retention()
        now = self.clock()

        def work(db: sqlite3.Connection) -> int:
            heads = db.execute(
                "SELECT id, kind, host, fs_id, root, options, taken FROM snapshots ORDER BY id DESC"
            ).fetchall()
            doomed = policy.doomed([(r[0], (r[1], r[2], r[3], bytes(r[4]), r[5]), r[6]) for r in heads], now)
            readings = db.execute(
                "SELECT id, host, mount, fs_id, taken FROM readings ORDER BY id DESC"
            ).fetchall()
            doomed_readings = policy.doomed([(r[0], (r[1], bytes(r[2]), r[3]), r[4]) for r in readings], now)
            db.executemany(_DELETE, ((i,) for i in doomed))
            db.executemany("DELETE FROM readings WHERE id = ?", ((i,) for i in doomed_readings))
            return len(doomed) + len(doomed_readings)

        saved = self._write("the pruning", work)
        if saved.ok and policy.max_bytes:
            self._ceiling(policy.max_bytes)
        return saved

    def size(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                total += self.state_dir.lstat(f"{DB_NAME}{suffix}").st_size
        return total

    def _ceiling(self, max_bytes: int) -> None:
        """Delete the oldest snapshots until the live pages fit ``max_bytes``, then give the space back."""

        def live(db: sqlite3.Connection) -> int:
            pages = (
                db.execute("PRAGMA page_count").fetchone()[0]
                - db.execute("PRAGMA freelist_count").fetchone()[0]
            )
            return int(pages * db.execute("PRAGMA page_size").fetchone()[0])

        while self.enabled and self._read(live, 0) > max_bytes:
            oldest = self._read(
                lambda db: db.execute("SELECT min(id), count(*) FROM snapshots").fetchone(), None
            )
            if not oldest or oldest[1] <= 1:
                break

            def delete(db: sqlite3.Connection, sid: int = int(oldest[0])) -> Any:
                return db.execute(_DELETE, (sid,))

            if not self._write("the pruning", delete).ok:
                return
        free = self._read(
            lambda db: (
                db.execute("PRAGMA freelist_count").fetchone()[0],
                db.execute("PRAGMA page_count").fetchone()[0],
            ),
            (0, 0),
        )
        if free[0] * VACUUM_FREE_SHARE < free[1]:
            # Few free pages: new rows reuse them. A VACUUM rewrites the whole file through the WAL (its size
            # again on disk) holding the write lock, so another process's writes meanwhile are not saved.
            return
        with contextlib.suppress(sqlite3.Error, OSError), self._connect() as db:
            db.execute("VACUUM")  # written through the WAL: the checkpoint then gives the space back
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


class Pruned(Exception):
    """A snapshot read in parts was deleted between them (``with_dir_rows``); ``str()`` says which."""


_DELETE = "DELETE FROM snapshots WHERE id = ?"
_MAX_INTEGER = (1 << 63) - 1  # SQLite's largest: a larger limit (``sysmcp history --limit 1e30``) is all
_DIRS_OF = "SELECT path, disk, apparent, files, newest FROM dirs WHERE snapshot = ?"
_DIRS_IN_ORDER = _DIRS_OF + " ORDER BY path"  # the primary key's order: no sort
_ROOT_OF = _DIRS_OF + " AND path = x''"
_FILES_OF = "SELECT path, disk, apparent, mtime FROM files WHERE snapshot = ?"
_BASELINE_FILES_OF = (
    "SELECT path, digest, size, mtime, mode, uid, gid, ctime FROM baseline_files WHERE snapshot = ?"
)
_BASELINE_UNREAD_OF = (
    "SELECT path, directory, reason, size, mtime, mode, uid, gid, ctime"
    " FROM baseline_unread WHERE snapshot = ?"
)
_UNRECORDED_OF = "SELECT unrecorded, nodes_unrecorded FROM snapshots WHERE id = ?"
_BASELINE_NODES_OF = "SELECT path, kind, mode, uid, gid, rdev, target FROM baseline_nodes WHERE snapshot = ?"


MAX_LINK_TARGET = 4096  # PATH_MAX: symlink(2) makes no longer target, so no walk recorded one


def _node_row(row: Sequence[Any]) -> tuple[bytes, BaselineNode] | None:
    """A ``baseline_nodes`` row as a name and its node; None for one no walk could have recorded (a
    damaged or forged store: text where bytes belong, a mode or number out of range, a target longer
    than any link), which is left out rather than raised from or shown whole."""
    path, kind, mode, uid, gid, rdev, target = row
    if not isinstance(path, bytes) or not all(type(n) is int and n >= 0 for n in (kind, mode, uid, gid)):
        return None
    if mode > 0o7777 or not (rdev is None or (type(rdev) is int and 0 <= rdev < 1 << 64)):
        return None
    if not (target is None or (isinstance(target, bytes) and len(target) <= MAX_LINK_TARGET)):
        return None
    return path, BaselineNode(kind, mode, uid, gid, rdev, target)


def _seen_row(seen: BaselineFile | None) -> tuple[int | float | None, ...]:
    """An unread file's ``lstat`` columns (size, mtime, mode, uid, gid, ctime), NULL where lstat gave nothing."""
    return (None,) * 6 if seen is None else (seen.size, seen.mtime, seen.mode, seen.uid, seen.gid, seen.ctime)


def _not_foreign(db: sqlite3.Connection, path: Path, version: int) -> None:
    """Raise ``Unsafe`` for another program's SQLite database where sysmcp's history should be (a
    --state-dir naming the wrong directory): a version 0 with tables of its own, or a later version with
    no snapshots. Migrating it would write sysmcp's tables into that program's file (or fail on a name
    both use); moving it aside would bury it under a name that says it was damaged. Left as it is."""
    tables = sorted(
        name
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not name.startswith("sqlite_")
    )
    if (version == 0 and tables) or (version > SCHEMA_VERSION and "snapshots" not in tables):
        shown = ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5 else "")
        raise Unsafe(
            f"{path} is another program's SQLite database (its tables: {shown or 'none'}; version {version}), "
            "not sysmcp's history: left as it is"
        )


def _insert_head(db: sqlite3.Connection, series: Series, *values: Any) -> int:
    """A snapshot's row, its series then ``(kind, taken, partial, disk, files, threshold, label)``; its id."""
    cursor = db.execute(
        "INSERT INTO snapshots (host, fs_id, root, options, kind, taken, partial, disk, files, threshold, label)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (series.host, series.fs_id, series.root, series.options, *values),
    )
    return int(cursor.lastrowid or 0)
