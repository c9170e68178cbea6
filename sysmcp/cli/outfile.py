"""Opening an output file the operator named (``-o FILE``) as root may do it in a directory others can write.

In such a directory (``/tmp``, a shared drop box) another user can plant a symbolic link or a hard link
under the name, or swap one in while the call runs: writing through it would truncate whatever it
points at (``/etc/shadow``); or plant a FIFO or a file of their own, to read what is written. So each
name on the way is opened without following a link, and there a link, a file with another name
elsewhere or a file another user owns (but the directory's owner) is refused, as the kernel's
``protected_regular`` does. A link in a directory only root or we may write (``/dev/stdout``,
``/dev/fd/N``) nobody else could have put there: it is followed.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from dataclasses import dataclass

from sysmcp import platform

_FLAGS = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC  # a FIFO without a reader: ENXIO, no hang
#: A directory on the way, with O_PATH where there is one: searching it must do (``/home/alice`` 0711),
#: as it does for a plain open; reading it is not needed.
_OPENED_TO_SEARCH = platform.has_o_path()
_DIRECTORY = (os.O_PATH if _OPENED_TO_SEARCH else os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


def split(path: str) -> tuple[str, str]:
    """``path``'s directory (absolute) and last name, as the kernel reads them: no '..' is taken out by
    the text (after a symlink it leaves where the link led), and a trailing '/' leaves the name empty."""
    return os.path.split(path if path.startswith("/") else os.path.join(os.getcwd(), path))


def names_a_directory(name: str) -> bool:
    """Whether a last name (``split``'s) can only be a directory: empty (a trailing '/'), '.' or '..'."""
    return name in ("", ".", "..")


def open_output(path: str, *, create: bool = True, mode: int = 0o666) -> int:
    """A descriptor to write ``path``'s new content to, a regular file emptied (OSError says why not).

    A new file gets ``mode`` (less the umask). ``create=False`` only checks: a missing file raises
    FileNotFoundError and nothing is emptied.
    """
    parent, name = split(path)
    if names_a_directory(name):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    directory = reach(parent)
    try:
        fd = _open_at(directory, name, _FLAGS | (os.O_CREAT if create else 0), mode)
        where = directory.looked
        shared = _others_may_write(where)
    finally:
        directory.close()
    try:
        st = os.fstat(fd)
        if shared and stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            raise OSError(errno.EPERM, "a file with other hard links, in a directory other users can write")
        # Theirs to read (a FIFO they listen on, a file): unless the directory is theirs, where they could
        # replace any name anyway (on a root-squashed NFS, root's own directory and files are nobody's).
        if shared and st.st_uid not in (0, os.geteuid(), where.st_uid):
            raise OSError(errno.EPERM, "a file another user owns, in a directory other users can write")
        if create and stat.S_ISREG(st.st_mode):
            os.ftruncate(fd, 0)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except OSError:
        os.close(fd)
        raise
    return fd


def make_directory(path: str) -> None:
    """``path`` made if missing, in its parent reached as ``reach`` reaches it: a directory on the way
    swapped for a link since the check makes nothing where the link points."""
    parent, name = split(path.rstrip("/") or "/")
    if names_a_directory(name):  # '/', '.', '..': there already
        return
    directory = reach(parent)
    try:
        os.mkdir(directory.below + name, dir_fd=directory.fd)
    except FileExistsError:
        pass
    finally:
        directory.close()


@dataclass(slots=True)
class Reached:
    """A directory reached from ``/`` without a link another user could have put on the way: a
    descriptor of the nearest directory on the way this process could open, and the path from there.

    Why a path from there: without ``O_PATH`` (macOS) a directory is opened to be read, and one this
    user may only search (``/home/alice`` 0711, a drop box 0733) cannot be opened at all. It is gone
    through by name instead, as a plain ``open`` goes through it, where no other user could have
    replaced it since (``_by_name``); its names are then opened relative to ``fd`` as ``below + name``.
    """

    fd: int
    below: str  # "" or the directories gone through by name from ``fd``, each followed by "/"
    looked: os.stat_result  # the directory reached

    def close(self) -> None:
        os.close(self.fd)


def reach(path: str) -> Reached:
    """The directory ``path`` (absolute), reached one name at a time from ``/``: a link on the way is
    followed only where no other user could have put it (else OSError, naming where it stopped); a '..'
    is the parent of the directory reached, as the kernel takes it."""
    fd = os.open("/", _DIRECTORY)
    directory, walked = Reached(fd, "", os.fstat(fd)), ""
    try:
        for name in (name for name in path.split("/") if name not in ("", ".")):
            walked += "/" + name
            try:
                inner = _open_at(directory, name, _DIRECTORY, 0)
            except PermissionError:
                if _OPENED_TO_SEARCH:  # refused even that: no search permission, as a plain open is
                    raise
                directory.below, directory.looked = _by_name(directory, name)
                continue
            directory.close()
            directory = Reached(inner, "", os.fstat(inner))
    except OSError as exc:
        directory.close()
        raise OSError(exc.errno, f"{walked}: {exc.strerror}") from None
    return directory


def _by_name(directory: Reached, name: str) -> tuple[str, os.stat_result]:
    """``name`` in ``directory``, a directory this process may search but not open (no ``O_PATH``), gone
    through by name: ``directory``'s new ``below`` and the look at ``name``. Only where no other user
    could have replaced it (else PermissionError saying what to do), and only if it may be searched."""
    below = directory.below + name
    entry = os.stat(below, dir_fd=directory.fd, follow_symlinks=False)
    looked = os.stat(below + "/.", dir_fd=directory.fd)  # "." in it: refused unless it may be searched
    if _others_may_replace(directory.looked, entry):
        raise PermissionError(
            errno.EACCES,
            "Permission denied: this system opens each directory on the way to read it, and this one may "
            "only be searched, in a directory other users can write; write to a directory you may read",
        )
    return below + "/", looked


def _open_at(directory: Reached, name: str, flags: int, mode: int) -> int:
    """``name`` in ``directory``, opened without following a link, unless the directory is one only
    root or we may write."""
    path = directory.below + name
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode, dir_fd=directory.fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        if not stat.S_ISLNK(os.stat(path, dir_fd=directory.fd, follow_symlinks=False).st_mode):
            raise
        if _others_may_write(directory.looked):
            raise OSError(errno.ELOOP, "a symbolic link in a directory other users can write") from None
        return os.open(path, flags, mode, dir_fd=directory.fd)


def _others_may_write(directory: os.stat_result) -> bool:
    """Whether someone other than root or this user could add or replace a name in the directory."""
    owners = (0, os.geteuid())
    return directory.st_uid not in owners or bool(directory.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _others_may_replace(directory: os.stat_result, entry: os.stat_result) -> bool:
    """Whether someone other than root or this user could put something else under ``entry``'s name in
    ``directory``: where they may write, unless it is sticky (``/tmp``) and both are root's or ours."""
    if not _others_may_write(directory):
        return False
    owners = (0, os.geteuid())
    sticky = bool(directory.st_mode & stat.S_ISVTX) and directory.st_uid in owners
    return not (sticky and entry.st_uid in owners and not stat.S_ISLNK(entry.st_mode))
