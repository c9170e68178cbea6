"""The state directory and the files in it, checked as ssh checks ``~/.ssh`` (StrictModes).

Why: the history store, the snapshot lock and the reclaim plans' key live in one directory that a
root-run server or timer may write, so a directory another user can write would let them point
those names at other files (a symlink to a root-only path, a hard link to root's file), put a FIFO
where a file is opened, or edit a stored plan. The rules:

- the directory is a real directory (never a symlink), owned by this process's euid or root, and
  not writable by group or others; created 0700 when missing, its mode set on its descriptor.
- each parent up to ``/`` is owned by the euid or root and not writable by group or others unless
  sticky (``/tmp``): like ssh's StrictModes, which checks the parents of ``~/.ssh`` up to the home,
  since a parent another user can write lets them replace the whole directory; the sticky bit stops
  that (only an entry's owner may rename it). A symlink on the way is followed only when it is the
  euid's or root's (one another user owns they may re-point at will), and each directory it leads
  through is checked the same. Everything after the check goes through the directory's descriptor
  or its real path, so a parent swapped later leads nowhere.
- every file is opened relative to that descriptor with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO cannot
  hang the opener) and ``fstat``-ed: a regular file, ours (or root's), not writable by group or
  others, one link (a hard link to another file must never become ours). Created
  ``O_CREAT | O_EXCL`` 0600.

Anything else raises ``Unsafe`` (an ``OSError``) with the reason in words; callers turn history off.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import os
import stat
from pathlib import Path

from sysmcp.engine.opens import closing_fd

__all__ = [
    "LOCK_NAME",
    "OTHER_FILES",
    "PLAN_KEY_NAME",
    "SECRET_BYTES",
    "StateDir",
    "Unsafe",
    "check_file",
    "mac",
    "open_dir",
]

SECRET_BYTES = 32
LOCK_NAME = "snapshot.lock"  # sysmcp snapshot's lock
PLAN_KEY_NAME = "reclaim-plans.key"  # the key of the stored reclaim plans' MACs
OTHER_FILES = (LOCK_NAME, PLAN_KEY_NAME)  # besides the database: checked when the store opens
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Unsafe(OSError):
    """The state directory or a file in it is not what it must be; ``str()`` says what it is."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _check(st: os.stat_result, where: str, *, directory: bool, sticky_ok: bool = False) -> None:
    """Raise ``Unsafe`` unless ``st`` is a directory (or a regular file of one link) of ours (or
    root's), not writable by group or others (unless ``sticky_ok`` and sticky)."""
    if not (stat.S_ISDIR if directory else stat.S_ISREG)(st.st_mode):
        raise Unsafe(
            f"{where} is {_kind(st.st_mode)}, not {'a directory' if directory else 'a regular file'}"
        )
    if st.st_uid not in (0, os.geteuid()):
        raise Unsafe(f"{where} is owned by uid {st.st_uid}, not by this user or root")
    if not directory and st.st_nlink != 1:
        raise Unsafe(f"{where} has {st.st_nlink} hard links")
    if st.st_mode & 0o022 and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        raise Unsafe(f"{where} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})")


def check_file(st: os.stat_result, where: str) -> None:
    """Raise ``Unsafe`` unless ``st`` is a regular file of ours (or root's), one link, not g/o-writable."""
    _check(st, where, directory=False)


class StateDir:
    """An open, checked state directory: ``fd`` stays open for the process (``O_CLOEXEC``); ``path``
    has no symlink on the way (open what is in it by that name, never by the name the user gave)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    def open(self, name: str, flags: int = os.O_RDWR, *, create: bool = False) -> int:
        """``name`` opened without following a link or blocking on a FIFO, checked; created 0600
        (``O_EXCL``) when ``create`` and missing. ``FileNotFoundError`` when missing otherwise."""
        where = str(self.path / name)
        try:
            check_file(self.lstat(name), where)  # before opening: a device or FIFO is never opened
            fd = os.open(name, flags | _FILE_FLAGS, dir_fd=self.fd)
        except FileNotFoundError:
            if not create:
                raise
            try:
                fd = os.open(name, flags | _FILE_FLAGS | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=self.fd)
            except FileExistsError:  # made by another process a moment ago: checked like any
                return self.open(name, flags)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):  # swapped after the lstat
                raise Unsafe(f"{where} was replaced while it was opened") from exc
            raise
        try:
            check_file(os.fstat(fd), where)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def lstat(self, name: str) -> os.stat_result:
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False)

    def check(self, name: str) -> os.stat_result | None:
        """``name``'s no-follow stat, None if missing; ``Unsafe`` if it is not a file we may use.

        A stat, not an open, for the files SQLite holds: closing any descriptor of a file drops every
        POSIX lock this process holds on it (SQLite's locks on the database, ``-wal`` and ``-shm``)."""
        try:
            st = self.lstat(name)
        except FileNotFoundError:
            return None
        check_file(st, str(self.path / name))
        return st

    def tighten(self, name: str) -> None:
        """Mode 0600 on ``name`` if it exists, set on its checked descriptor (opened only when the mode
        differs: see ``check`` on what closing a descriptor does to SQLite's locks)."""
        st = self.check(name)
        if st is None or stat.S_IMODE(st.st_mode) == 0o600:
            return
        with contextlib.suppress(FileNotFoundError), closing_fd(self.open(name, os.O_RDONLY)) as fd:
            os.fchmod(fd, 0o600)

    def secret(self, name: str) -> bytes:
        """The key kept in ``name`` (made of ``SECRET_BYTES`` random bytes, 0600, the first time)."""
        try:
            fd = self.open(name, os.O_RDONLY)
        except FileNotFoundError:
            key = os.urandom(SECRET_BYTES)
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, 0o600, dir_fd=self.fd)
            except FileExistsError:  # another process made it first: read theirs
                return self.secret(name)
            with closing_fd(fd):
                os.fchmod(fd, 0o600)
                os.write(fd, key)
                os.fsync(fd)
            return key
        with closing_fd(fd):
            key = os.read(fd, SECRET_BYTES + 1)
        if len(key) != SECRET_BYTES:
            raise Unsafe(f"{self.path / name} holds {len(key)} bytes, not a {SECRET_BYTES}-byte key")
        return key

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:  # a store dropped (tests, a new configure): its descriptor with it
        try:  # noqa: SIM105 - no module globals here: they may be gone in a teardown
            self.close()
        except Exception:
            pass


def open_dir(path: Path) -> StateDir:
    """The state directory at ``path``, checked (made 0700 first when missing, parents too). A '..' in
    ``path`` is taken where the kernel takes it, after the link before it (``_resolve``), never by the
    text."""
    path = Path(os.getcwd(), path)
    # The parents resolved once, through no symlink another user owns, every directory on the way
    # checked before anything is made in it (another's home); then used for every later open by name
    # (SQLite's): the real parents cannot be re-pointed after the checks.
    parent, missing = _resolve(path.parent)
    _make(parent, (*missing, path.name))
    path = parent.joinpath(*missing, path.name)
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Unsafe(f"{path} is {_kind(os.lstat(path).st_mode)}, not a directory") from exc
        raise
    try:
        _check(os.fstat(fd), str(path), directory=True)
        os.fchmod(fd, 0o700)  # on the descriptor: never through a symlink
    except BaseException:
        os.close(fd)
        raise
    return StateDir(path, fd)


#: Symlinks followed on the way to the state directory before it is refused (the kernel's own limit).
_MAX_LINKS = 40


def _resolve(directory: Path) -> tuple[Path, tuple[str, ...]]:
    """The real path of the longest part of ``directory`` (absolute) that exists, and the names after it.

    Each directory whose entries are read on the way (so each of the real path too) must be ours or
    root's, not writable by group or others unless sticky (``_check``); a symlink is followed only when
    it is ours or root's: one another user owns (in ``/tmp``, in their home) they can re-point at any
    moment, so it would let them choose where a root-run sysmcp keeps, and writes, its state."""
    real = Path("/")
    _check(os.stat(real), str(real), directory=True, sticky_ok=True)
    names, links = list(directory.parts[1:]), 0
    while names:
        name = names.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            real = real.parent  # ``real`` has no symlink in it: its parent is its parent
            continue
        here = real / name
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return real, (name, *names)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (0, os.geteuid()):
                raise Unsafe(f"{here} is a symlink owned by uid {st.st_uid}, not by this user or root")
            links += 1
            if links > _MAX_LINKS:
                raise Unsafe(f"{directory} has more than {_MAX_LINKS} symlinks on the way")
            target = os.readlink(here)
            if target.startswith("/"):
                real = Path("/")
            names = [*Path(target).parts[1 if target.startswith("/") else 0 :], *names]
            continue
        _check(st, str(here), directory=True, sticky_ok=True)
        real = here
    return real, ()


def _make(parent: Path, names: tuple[str, ...]) -> None:
    """Each of ``names`` made 0700 below ``parent`` (a checked real directory), one inside the other, when
    missing: each made and then opened relative to the one before, never following a symlink (one another
    user put there meanwhile, in a sticky ``/tmp``, is refused, and nothing is made through it)."""
    fd = os.open(parent, _DIR_FLAGS)
    try:
        for depth, name in enumerate(names):
            try:
                os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):  # made by another process a moment ago
                    os.mkdir(name, 0o700, dir_fd=fd)
            if depth == len(names) - 1:
                return  # the state directory itself: opened and checked by the caller
            try:
                inner = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    where = parent.joinpath(*names[: depth + 1])
                    raise Unsafe(f"{where} is {_kind(os.lstat(where).st_mode)}, not a directory") from exc
                raise
            os.close(fd)
            fd = inner
            _check(os.fstat(fd), str(parent.joinpath(*names[: depth + 1])), directory=True, sticky_ok=True)
    finally:
        os.close(fd)


def mac(key: bytes, data: bytes) -> bytes:
    """HMAC-SHA-256 of ``data``."""
    return hmac.new(key, data, "sha256").digest()
