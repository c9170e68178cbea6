"""One regular file's digest, opened so that nothing swapped in can lead elsewhere: file_sha256's engine.

Why its own opening: the path was resolved and checked against the roots before, but the file or a
directory on the way may be swapped for a symlink since. So the parent is reached from ``/`` one
component at a time without following any symlink (``opens.open_parent``) and the file is opened
with ``O_NOFOLLOW | O_NONBLOCK`` and checked on the descriptor (``opens.open_regular_at``): a FIFO
or a device is refused without blocking, a swap is refused. Failures are ``EngineError``s with a
``reason`` where the tool layer words a case apart (``tools.errors``); everything here blocks, so
it runs in a worker thread.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass

from sysmcp.engine.calls import Cancel, Progress
from sysmcp.engine.faults import EngineError, NotFound, PermissionRefused, Refused, WrongKind
from sysmcp.engine.hashing._checksums import ALGORITHMS, CHUNK, Algorithm, Digest, KeptGrowing, hash_fd
from sysmcp.engine.opens import (
    FileSwap,
    NotRegularFile,
    closing_fd,
    kind,
    open_parent,
    open_regular_at,
    through_symlink,
)


@dataclass(frozen=True, slots=True)
class FileRequest:
    """What to hash. ``given``, the path as given, tells a dangling symlink from a missing file ('~'
    expanded only then, in the worker: '~user' may ask a network user database)."""

    path: bytes
    shown: str
    given: str
    algorithm: Algorithm = ALGORITHMS["sha256"]


@dataclass(frozen=True, slots=True)
class FileHash:
    """The digest and the seconds it took."""

    digest: Digest
    seconds: float


def open_file(request: FileRequest) -> tuple[int, os.stat_result]:
    """A descriptor on the regular file and its ``fstat``, or an ``EngineError`` that says what the
    path is. The caller closes the descriptor."""
    path, shown = request.path, request.shown
    if path == b"/":
        raise WrongKind("Not a regular file: / is a directory", reason="not_hashable")
    parent = None
    try:
        parent, name = open_parent(os.fsdecode(path))
        return open_regular_at(name, dir_fd=parent)
    except FileNotFoundError:
        given = os.path.expanduser(request.given)
        if os.path.islink(given):  # the name asked about, whichever part of where it leads is gone
            raise NotFound(
                f"No such file: {given} is a symbolic link to {shown}, which does not exist"
            ) from None
        raise NotFound(f"No such file: {shown}") from None
    except PermissionError:  # without O_PATH a directory on the way must be readable, not only searchable
        raise PermissionRefused(f"Permission denied: {shown}") from None
    except NotRegularFile as exc:
        if stat.S_ISLNK(exc.mode):  # the path was resolved, so a link here was swapped in since
            raise Refused(
                f"{shown} was replaced by a symbolic link while it was being opened",
                reason="swapped_for_link",
            ) from None
        raise WrongKind(f"Not a regular file: {shown} is {kind(exc.mode)}", reason="not_hashable") from None
    except FileSwap:
        raise Refused(
            f"{shown} was replaced (for example by a symbolic link) while it was being opened",
            reason="replaced_while_opened",
        ) from None
    except OSError as exc:
        if parent is None and exc.errno == errno.ELOOP:  # a symlink on the way to the parent
            raise through_symlink(shown) from None
        raise EngineError(f"Cannot open {shown}: {exc.strerror or exc}") from None
    finally:
        if parent is not None:
            os.close(parent)


def hash_file(request: FileRequest, progress: Progress, cancel: Cancel) -> FileHash:
    """Open, then stream through the digest; ``cancel()`` after every chunk raises to stop there.

    ``progress(done, total)`` gets the bytes read and the size (grown with a file that grows while
    read, so ``done`` never passes ``total``)."""
    fd, opened = open_file(request)
    with closing_fd(fd):
        total = opened.st_size
        progress(0, total)

        def on_chunk(done: int) -> None:
            nonlocal total
            total = max(total, done)
            progress(done, total)
            cancel()

        started = time.perf_counter()
        try:
            digest = hash_fd(fd, (request.algorithm,), bytearray(CHUNK), on_chunk, opened=opened)
        except OSError as exc:
            reason = "kept_growing" if isinstance(exc, KeptGrowing) else ""
            raise EngineError(
                f"Read error in {request.shown}: {exc.strerror or exc}", reason=reason
            ) from None
        return FileHash(digest, time.perf_counter() - started)
