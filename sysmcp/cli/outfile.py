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

from sysmcp import platform

_FLAGS = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC  # a FIFO without a reader: ENXIO, no hang
#: A directory on the way, with O_PATH where there is one: searching it must do (``/home/alice`` 0711),
#: as it does for a plain open; reading it is not needed.
_DIRECTORY = (os.O_PATH if platform.has_o_path() else os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


def open_output(path: str, *, create: bool = True, mode: int = 0o666) -> int:
    """A descriptor to write ``path``'s new content to, a regular file emptied (OSError says why not).

    A new file gets ``mode`` (less the umask). ``create=False`` only checks: a missing file raises
    FileNotFoundError and nothing is emptied.
    """
    parent, name = os.path.split(os.path.abspath(path))
    directory = open_directory(parent)
    try:
        fd = _open_at(directory, name, _FLAGS | (os.O_CREAT if create else 0), mode)
        where = os.fstat(directory)
        shared = _others_may_write(where)
    finally:
        os.close(directory)
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
    """``path`` made if missing, in its parent reached as ``open_directory`` reaches it: a directory on
    the way swapped for a link since the check makes nothing where the link points."""
    parent, name = os.path.split(os.path.abspath(path))
    directory = open_directory(parent)
    try:
        os.mkdir(name, dir_fd=directory)
    except FileExistsError:
        pass
    finally:
        os.close(directory)


def open_directory(path: str) -> int:
    """A descriptor of the directory ``path``, reached one name at a time from ``/``: a link on the way
    is followed only where no other user could have put it (else OSError, naming where it stopped)."""
    fd, walked = os.open("/", _DIRECTORY), ""
    try:
        for name in filter(None, os.path.normpath(path).split("/")):
            walked += "/" + name
            inner = _open_at(fd, name, _DIRECTORY, 0)
            os.close(fd)
            fd = inner
    except OSError as exc:
        os.close(fd)
        raise OSError(exc.errno, f"{walked}: {exc.strerror}") from None
    return fd


def _open_at(directory: int, name: str, flags: int, mode: int) -> int:
    """``name`` in ``directory``, opened without following a link, unless the directory is one only
    root or we may write."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=directory)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        if not stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode):
            raise
        if _others_may_write(os.fstat(directory)):
            raise OSError(errno.ELOOP, "a symbolic link in a directory other users can write") from None
        return os.open(name, flags, mode, dir_fd=directory)


def _others_may_write(directory: os.stat_result) -> bool:
    """Whether someone other than root or this user could add or replace a name in the directory."""
    owners = (0, os.geteuid())
    return directory.st_uid not in owners or bool(directory.st_mode & (stat.S_IWGRP | stat.S_IWOTH))
