"""Opening files and directories so that nothing swapped in after the policy check can lead elsewhere.

``PathPolicy.resolve`` returns a real path that was inside the roots *when it was checked*. Between
that check and the open, any directory on the way could be replaced by a symlink to ``/etc``. So the
open does not hand the path to the kernel in one piece: it walks it from ``/`` one component at a
time, each step relative to the descriptor of the previous directory and opened with ``O_NOFOLLOW``.
A component that has become a symlink is refused, never followed (this also covers ``/proc``'s
magic links such as ``/proc/self/root``). Final opens add ``O_NONBLOCK`` so a FIFO cannot hang us,
and the type is checked on the descriptor itself, not on the name.

Intermediate directories are opened with ``O_PATH`` where the system has it (Linux: nothing is read,
only search permission is needed). Elsewhere (macOS, the BSDs) they are opened ``O_RDONLY`` with
``O_DIRECTORY|O_NONBLOCK|O_NOFOLLOW``: the kernel refuses anything but a directory before opening it,
so the guarantees stay (no FIFO can block, no device is opened, no symlink followed); the one cost is
that a directory on the way must be readable, not just searchable.

For code with its own final open: ``open_parent(path)`` gives the parent's descriptor and the last
name; ``Parents`` does the same for many paths. Walkers keep every step relative to a checked descriptor.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Iterator

from sysmcp import platform
from sysmcp.engine.faults import WrongKind

#: How an intermediate directory is opened: O_PATH where there is one (no read permission needed),
#: else for reading, without blocking; O_DIRECTORY makes either refuse anything but a directory.
_GO_THROUGH = os.O_PATH if platform.has_o_path() else os.O_RDONLY | os.O_NONBLOCK
#: Flags for every intermediate directory: directories only, no symlinks, not inherited.
_STEP = _GO_THROUGH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Flags for the final open: never follow, never block (FIFOs), never become a controlling terminal.
_FINAL = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY

#: The bits of ``st_mode`` that say a file's kind: ``mode & S_IFMT`` is what the function ``stat.S_IFMT``
#: returns, with no call (walks and hashes test every entry's kind).
S_IFMT = 0o170000

KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFREG: "a regular file",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


@contextlib.contextmanager
def closing_fd(fd: int) -> Iterator[int]:
    """``fd``, closed on the way out."""
    try:
        yield fd
    finally:
        os.close(fd)


def kind(mode: int) -> str:
    """'a directory', 'a FIFO (named pipe)', … for an ``st_mode``."""
    return KINDS.get(mode & S_IFMT, "a special file")


class NotRegularFile(OSError):
    """The name is not a regular file; it was looked at (``lstat``), never opened."""

    def __init__(self, mode: int) -> None:
        super().__init__(errno.EINVAL, f"not a regular file: {kind(mode)}")
        self.mode = mode


def open_path(
    path: str | os.PathLike[str], *, directory: bool = False, regular: bool = False, step: int = _STEP
) -> int:
    """Open an absolute, already resolved path without following a symlink in any component.

    Raises ``OSError`` like ``os.open`` would, with ``errno.ELOOP`` when a component is a symlink
    (whatever the kernel said: ``ENOTDIR`` and ``ELOOP`` both arrive for that case). With
    ``regular``, anything but a regular file raises ``NotRegularFile`` *before* being opened, since
    merely opening some devices has effects (a tape rewinds, a terminal is claimed). ``step``: the
    flags of every directory on the way (as ``open_parent``).
    """
    raw = os.fsencode(path)
    flags = _FINAL | (os.O_DIRECTORY if directory else 0)
    if raw.startswith(b"/") and not raw.strip(b"/"):  # the root itself: no parent to reach it from
        if regular:
            raise NotRegularFile(stat.S_IFDIR)
        return os.open(b"/", flags)
    current, last = open_parent(path, step)  # ValueError for a relative or unnormalised path
    try:
        if regular:
            return open_regular_at(last, dir_fd=current, flags=flags)[0]
        return _step(last, current, flags)
    finally:
        os.close(current)


def open_parent(path: str | os.PathLike[str], step: int = _STEP) -> tuple[int, bytes]:
    """The parent directory of a resolved path, reached without following any symlink (the caller
    closes it), and the final name, for ``os.open(name, flags | O_NOFOLLOW, dir_fd=fd)``. ``step``: the
    flags of every directory on the way (a test passes those of a system without ``O_PATH``).
    """
    raw = os.fsencode(path)
    parts = [p for p in raw.split(b"/") if p]
    if not raw.startswith(b"/") or not parts or any(p in (b".", b"..") for p in parts):
        raise ValueError("open_parent needs an absolute, normalised path below /")
    current = os.open(b"/", step)
    try:
        for name in parts[:-1]:
            following = _step(name, current, step)
            os.close(current)
            current = following
    except BaseException:
        os.close(current)
        raise
    return current, parts[-1]


#: The directories ``Parents`` keeps open per thread besides "/": those of the path's last levels. Why a
#: bound: a tree can be nested far deeper than the process may hold descriptors (1,024 is a common soft
#: limit), and one descriptor per level would fail a path thousands of levels deep on ``EMFILE``.
KEPT_LEVELS = 16


class Parents:
    """The parent directories of many resolved paths, each reached as ``open_parent`` reaches it, the
    descriptors on the way kept for the next path: a sorted manifest's next entry costs no ``openat``
    but its own, or the components that differ. Each thread keeps its own (a hashing pool may share
    one); ``close()`` closes them all, once the threads are done (``with Parents() as parents``
    closes them on the way out).

    At most ``kept`` directories of a thread's path stay open besides "/" (its deepest ones), however
    deep the path: a path that leaves the kept ones for a shallower level is reached again by name from
    the nearest directory still open, each step ``O_NOFOLLOW`` as ``open_parent`` takes it, and each
    must be the directory (device, inode) it was when first opened. Why: the deeper levels still open
    are that first directory's, wherever it was moved since; a name that now holds another directory
    (swapped in) would have the paths below it read in two different trees under one path. Such a
    level raises ``DirectoryReplaced`` for every path below it, until the chain leaves it.
    """

    def __init__(self, kept: int = KEPT_LEVELS) -> None:
        self._kept = max(1, kept)
        self._local = threading.local()
        # per thread, "/" first: (component, descriptor, identity); descriptor None: closed to keep the bound,
        # reached again by name, where it must still be identity, its (st_dev, st_ino) when it was closed
        self._chains: list[list[Level]] = []

    def parent(self, path: bytes) -> tuple[int, bytes]:
        """``path``'s parent directory (kept open here: the caller must not close it) and its final name
        (``.`` for ``/``). ``OSError`` and ``ValueError`` as ``open_parent``."""
        head, _, last = path.rpartition(b"/")
        if last in (b".", b".."):
            raise ValueError("Parents needs absolute, normalised paths")
        local = self._local
        if getattr(local, "head", None) == head:
            return local.fd, last or b"."
        parts = [p for p in head.split(b"/") if p]
        if not path.startswith(b"/") or any(p in (b".", b"..") for p in parts):
            raise ValueError("Parents needs absolute, normalised paths")
        chain: list[Level] | None = getattr(local, "chain", None)
        if chain is None:
            chain = local.chain = [(b"/", os.open(b"/", _STEP), None)]
            self._chains.append(chain)
        local.head = None
        kept = 1  # the components the chain shares with this directory, "/" included
        while kept < len(chain) and kept <= len(parts) and chain[kept][0] == parts[kept - 1]:
            kept += 1
        for _, fd, _ in chain[kept:]:
            if fd is not None:
                os.close(fd)
        del chain[kept:]
        current = chain[-1][1]
        if current is None:  # closed for the bound: reached again from the nearest one still open
            current = _reach_again(chain)
        closing = len(chain) - self._kept  # the level whose descriptor the next step closes
        for name in parts[kept - 1 :]:  # an error leaves a shorter chain, still right, for the next path
            current = _step(name, current, _STEP)
            chain.append((name, current, None))
            if closing > 0 and (fd := chain[closing][1]) is not None:
                chain[closing] = (chain[closing][0], None, _identity(fd))
                os.close(fd)
            closing += 1
        local.head, local.fd = head, current
        return current, last or b"."

    def __enter__(self) -> Parents:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        for chain in self._chains:
            for _, fd, _ in chain:
                if fd is not None:
                    os.close(fd)
            chain.clear()
        self._chains.clear()
        self._local = threading.local()


#: One level of a ``Parents`` chain: its name, its descriptor (None: closed for the bound) and, once closed,
#: its (st_dev, st_ino), which the directory reached again by that name must have.
Level = tuple[bytes, int | None, tuple[int, int] | None]


class DirectoryReplaced(OSError):
    """A directory on the way, reached again by name, is another directory than the one first opened
    there (renamed away, another put in its place): nothing below it is looked at through it."""

    def __init__(self, name: bytes) -> None:
        super().__init__(
            errno.ESTALE,
            "a directory on the way was replaced while the paths below it were read",
            os.fsdecode(name),
        )


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _reach_again(chain: list[Level]) -> int:
    """Open the chain's last directory again, step by step from the deepest one still open, holding one
    descriptor on the way, each step the directory first opened there (else ``DirectoryReplaced``); on
    an error the chain ends at that open one, so the next path below it is reached again and refused."""
    start = max(i for i, (_, fd, _) in enumerate(chain) if fd is not None)
    current = chain[start][1]
    assert current is not None
    owned = False
    try:
        for level, (name, _, identity) in enumerate(chain[start + 1 :], start + 1):
            following = _step(name, current, _STEP)
            if owned:
                os.close(current)
            current, owned = following, True
            if identity is not None and _identity(current) != identity:
                del chain[level + 1 :]  # the replaced level stays, closed: every path below it is refused
                raise DirectoryReplaced(name)
    except DirectoryReplaced:
        os.close(current)
        raise
    except BaseException:
        if owned:
            os.close(current)
        del chain[start + 1 :]
        raise
    chain[-1] = (chain[-1][0], current, None)
    return current


def _step(name: bytes, dir_fd: int, flags: int) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) and _is_symlink(name, dir_fd):
            raise OSError(errno.ELOOP, "refusing to follow a symbolic link", os.fsdecode(name)) from None
        raise


class FileSwap(OSError):
    """The name points at another file than the one looked at a moment ago."""

    def __init__(self) -> None:
        super().__init__(errno.ESTALE, "the file was replaced while it was being opened")


def open_regular_at(
    name: bytes,
    *,
    dir_fd: int | None = None,
    follow_symlinks: bool = False,
    expect: os.stat_result | None = None,
    flags: int = _FINAL,
) -> tuple[int, os.stat_result]:
    """Look, then open, then check it is the file looked at: a regular file and nothing swapped in.

    Anything but a regular file raises ``NotRegularFile`` *before* being opened (opening some devices
    has effects); a symlink or another file found at open time raises ``FileSwap``. ``expect`` is a
    look already taken (a walk's ``lstat``).
    """
    looked = expect if expect is not None else os.stat(name, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    if not stat.S_ISREG(looked.st_mode):
        raise NotRegularFile(looked.st_mode)
    fd = _open_final(name, flags, dir_fd, follow_symlinks)
    opened = os.fstat(fd)
    if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (looked.st_dev, looked.st_ino):
        os.close(fd)
        raise NotRegularFile(opened.st_mode) if not stat.S_ISREG(opened.st_mode) else FileSwap()
    return fd, opened


def _open_final(name: bytes, flags: int, dir_fd: int | None, follow_symlinks: bool) -> int:
    """Open the file just looked at; without ``follow_symlinks`` a symlink swapped in since the look
    is ``FileSwap``, not followed (``flags`` carry ``O_NOFOLLOW`` unless symlinks are followed)."""
    try:
        return os.open(name, flags & ~os.O_NOFOLLOW if follow_symlinks else flags, dir_fd=dir_fd)
    except OSError as exc:
        if not follow_symlinks and refused_symlink(exc):
            raise FileSwap() from None
        raise


def refused_symlink(exc: OSError) -> bool:
    """Whether an ``O_NOFOLLOW`` open failed because a symlink now stands where a regular file was
    (Linux says ELOOP, FreeBSD EMLINK)."""
    return exc.errno in (errno.ELOOP, errno.EMLINK)


def read_small_regular_at(
    name: bytes,
    looked: os.stat_result,
    buffer: bytearray,
    *,
    dir_fd: int | None = None,
    follow_symlinks: bool = False,
) -> tuple[int, os.stat_result, OSError | None]:
    """Open, read once into ``buffer`` and close a file that ``looked`` saw as a regular file smaller
    than ``buffer``: the bytes read, the descriptor's ``fstat`` after the read, and the read's error.

    Why: four system calls where ``open_regular_at``, a read and a check for changes take five, and
    for the many small files of a tree the calls are the cost. The guarantees are the same: nothing
    but a regular file gets past the look (so no device is ever opened on purpose), ``O_NONBLOCK``
    keeps a FIFO swapped in from blocking the open or the read, and the descriptor must be the file
    looked at (else ``FileSwap`` or ``NotRegularFile``, as from ``open_regular_at``): checked on the
    one ``fstat`` after the read instead of before it, so nothing read from another file is used.
    The caller compares that ``fstat``'s size and mtime with ``looked`` to tell a file that changed.
    """
    if not stat.S_ISREG(looked.st_mode):
        raise NotRegularFile(looked.st_mode)
    fd = _open_final(name, _FINAL, dir_fd, follow_symlinks)
    failure: OSError | None = None
    try:
        try:
            count = os.readv(fd, [buffer])
        except OSError as exc:
            count, failure = 0, exc
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(after.st_mode):
        raise NotRegularFile(after.st_mode)
    if (after.st_dev, after.st_ino) != (looked.st_dev, looked.st_ino):
        raise FileSwap()
    return count, after, failure


def _is_symlink(name: bytes, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def through_symlink(shown: str) -> WrongKind:
    """The refusal of a path that met a symlink at open time (every component is opened O_NOFOLLOW)."""
    return WrongKind(f"path {shown} leads through a symbolic link at open time", reason="symlink")


def extended_attributes(target: int | bytes) -> dict[str, bytes] | None:
    """A file's extended attributes, ACLs included (``system.posix_acl_access``), by descriptor or by a
    path that is not followed; {} where the filesystem keeps none, None if unreadable (and on a platform
    whose Python cannot read them: two files' ACLs there cannot be shown to match)."""
    if not platform.can_compare_xattrs():
        return None
    follow = isinstance(target, int)
    try:
        names = os.listxattr(target, follow_symlinks=follow)
        return {name: os.getxattr(target, name, follow_symlinks=follow) for name in sorted(names)}
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return {}
        return None
