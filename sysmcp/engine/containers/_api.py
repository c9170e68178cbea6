"""HTTP/1.1 GETs to a container engine's API over its Unix socket, standard library only.

Each GET, its connect and all its reads, is bounded by ``timeout_s`` in all, so a socket that
accepts and never answers, or drips its answer a byte at a time, costs that long and no longer.
Faults are the engine layer's exceptions with the facts (the socket, its owner and mode, the time).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import http.client
import json
import math
import os
import socket
import stat
import time
from collections.abc import Callable
from typing import Any

from sysmcp import platform
from sysmcp.engine.faults import NotFound, PermissionRefused, Unavailable, WrongKind
from sysmcp.engine.opens import closing_fd, kind, open_parent
from sysmcp.engine.paths import escaped, one_line

MAX_BODY = 64 * 1024 * 1024  # an answer larger than this is not an engine's API answer
#: JSON brackets, commas and colons in one answer at most, counted before it is parsed (each array,
#: object, element and member has one or two): 64 MiB of '[],[],…' would be 21 million lists (1.5 GiB
#: and 18 s of parsing that no timeout stops); this many is some 300 MiB at most, and twenty thousand
#: containers' worth of /system/df.
MAX_TOKENS = 8_000_000
MESSAGE_MAX = 64 * 1024  # bytes of an error answer parsed for its message


def _owner(looked: Callable[[], os.stat_result]) -> str:
    """Whose the socket is, for the refusal of one this user may not connect to ("" if unknown)."""
    try:
        st = looked()
    except OSError:
        return ""
    return f" (owner uid {st.st_uid}, group gid {st.st_gid}, mode {stat.S_IMODE(st.st_mode):04o})"


def _message(body: bytes) -> str:
    """``": <message>"`` of an engine's error answer (Docker's and Podman's JSON ``{"message": …}``),
    "" for any other body: what another service that speaks HTTP says is not repeated. An engine's
    error answer is one short line: a larger body is not parsed (megabytes of '[],[],…' would be
    millions of lists, for a message that is never in them)."""
    if len(body) > MESSAGE_MAX:
        return ""
    try:
        said = json.loads(body)
    except (ValueError, RecursionError):
        return ""
    message = said.get("message") if isinstance(said, dict) else None
    return f": {one_line(message[:200].strip())}" if isinstance(message, str) else ""


class _Bounded(socket.socket):
    """A Unix socket whose reads share one deadline (``until()``, monotonic), not a timeout each."""

    def __init__(self, until: Callable[[], float]) -> None:
        super().__init__(socket.AF_UNIX, socket.SOCK_STREAM)
        self.until = until

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        left = self.until() - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self.settimeout(left)
        return super().recv_into(buffer, nbytes, flags)


class Api(http.client.HTTPConnection):
    """GETs to one engine socket: ``http.client`` over AF_UNIX, the host name only filling the Host
    header; ``close`` when done (a context manager). ``pinned``: ``path`` was resolved inside the
    roots, and is reached without a symlink on the way (one swapped in since is refused)."""

    def __init__(self, path: str, timeout_s: float, pinned: bool = False) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self.path, self.timeout_s, self.pinned = path, timeout_s, pinned and platform.has_o_path()
        self.deadline = 0.0  # the GET being asked must be answered by then (monotonic)
        self.aborted = False  # ``abort``: no GET is answered any more
        self.shown = escaped(path)  # as its messages say it: a name given may hold any character
        self.owner = ""  # whose the socket is, once connecting to it was refused (``_owner``)
        #: The uid owning the socket file this connection reached (its first connect's; a later one to a
        #: socket of another owner is refused): whose engine answers, as ``_engine_user`` judges it.
        self.socket_uid: int | None = None

    def connect(self) -> None:
        fd = self._pinned() if self.pinned else self._opened()
        # Looked at through the pinned descriptor where there is one: the socket connected to (or
        # refused), not whatever a symlink swapped in since would lead to.
        look = functools.partial(os.stat, self.path) if fd is None else functools.partial(os.fstat, fd)
        try:
            sock = _Bounded(lambda: -math.inf if self.aborted else self.deadline)
            try:
                sock.settimeout(self.timeout)
                owner = look().st_uid
                if self.socket_uid is not None and owner != self.socket_uid:
                    raise OSError(
                        errno.ECONNABORTED,
                        f"the socket is another's now (uid {owner}'s, uid {self.socket_uid}'s when first reached)",
                    )
                sock.connect(self.path if fd is None else f"/proc/self/fd/{fd}")
                self.socket_uid = owner
            except ConnectionRefusedError:
                sock.close()
                self._refused(look)
                raise
            except PermissionError:
                sock.close()
                self.owner = _owner(look)
                raise
            except BaseException:
                sock.close()
                raise
        finally:
            if fd is not None:
                os.close(fd)
        self.sock = sock

    def _refused(self, look: Callable[[], os.stat_result]) -> None:
        """``WrongKind`` when what refused the connection is no socket (a FIFO, a regular file, a
        directory: the kernel refuses them all as it refuses a socket nobody listens on)."""
        try:
            mode = look().st_mode
        except OSError:
            return
        if not stat.S_ISSOCK(mode):
            raise WrongKind(f"{self.shown} is {kind(mode)}, not a socket", reason="not_socket")

    def _opened(self) -> int | None:
        """The socket's ``O_PATH`` descriptor, reached as a name is (its symlinks followed), where there
        is ``/proc/self/fd`` to connect through: whose socket it is is then told of the socket connected
        to, not of whatever the name leads to a moment later (its user's directory, its user's to
        re-point). None elsewhere: connected to by name, its owner looked up by name."""
        if not platform.has_o_path():
            return None
        fd = os.open(self.path, os.O_PATH | os.O_CLOEXEC)
        if not os.path.exists(f"/proc/self/fd/{fd}"):  # no /proc mounted
            os.close(fd)
            return None
        return fd

    def _pinned(self) -> int:
        """The socket's ``O_PATH`` descriptor, reached without a symlink: connected to as ``/proc/self/fd/N``."""
        parent, name = open_parent(self.path)
        with closing_fd(parent):
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        if stat.S_ISLNK(os.fstat(fd).st_mode):  # O_NOFOLLOW named the symlink itself
            os.close(fd)
            raise OSError(errno.ELOOP, "refusing to follow a symbolic link", self.path)
        return fd

    def abort(self) -> None:
        """Ends the GET under way on another thread now, and fails every later one: the survey stopped
        (cancelled, or another part failed), so a slow engine holds it no longer than its next read,
        not until its GET's timeout (up to a minute)."""
        self.aborted = True
        sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # closed already
                sock.shutdown(socket.SHUT_RDWR)  # a read blocked on it returns: the answer ended

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def get(self, url: str, gone: Any = None) -> Any:
        """The decoded JSON answer to ``GET url``; a fault as ``NotFound`` (no engine at the path),
        ``WrongKind`` (the path is no socket), ``PermissionRefused`` or ``Unavailable`` (no answer in
        time, an error status, not JSON). ``gone``: what an HTTP 404 answers instead of a fault (a
        container removed since it was listed), where it is not None."""
        self.deadline = time.monotonic() + self.timeout_s
        try:
            self.request("GET", url, headers={"Accept": "application/json"})
            response = self.getresponse()
            body = response.read(MAX_BODY + 1)
        except WrongKind:
            self.close()
            raise
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            self.close()
            what = "no socket" if isinstance(exc, FileNotFoundError) else "nothing listening on the socket"
            raise NotFound(f"No container engine at {self.shown}: {what}", reason="no_engine") from None
        except PermissionError:
            self.close()
            raise PermissionRefused(
                f"Permission denied on the engine socket {self.shown}{self.owner}",
                reason="engine_socket",
            ) from None
        except TimeoutError:
            self.close()
            raise Unavailable(
                f"The engine socket {self.shown} did not answer GET {url} within {self.timeout:g} s",
                reason="engine_silent",
            ) from None
        except (OSError, ValueError, http.client.HTTPException) as exc:  # ValueError: an unencodable path
            self.close()
            # A status line that is not HTTP's is the peer's own words, of any socket named: not repeated.
            bad = isinstance(exc, http.client.BadStatusLine | http.client.UnknownProtocol)
            said = "an answer that is not HTTP" if bad and not isinstance(exc, OSError) else exc
            raise Unavailable(
                f"The engine socket {self.shown} failed on GET {url}: {said}", reason="engine_fault"
            ) from None
        if response.status == 404 and gone is not None:
            return gone
        if response.status != 200:
            raise Unavailable(
                f"The engine at {self.shown} answered GET {url} with HTTP {response.status}{_message(body)}",
                reason="engine_fault",
            )
        if len(body) > MAX_BODY:
            raise Unavailable(
                f"The engine's answer to GET {url} is over {MAX_BODY} bytes", reason="engine_fault"
            )
        if response.length:  # closed before the length it announced: what came may parse all the same
            raise Unavailable(
                f"The engine at {self.shown} closed its answer to GET {url} {response.length} bytes short",
                reason="engine_fault",
            )
        # Each array, object, element and member costs a Python object once parsed: counted first (those
        # in strings too: an overcount).
        tokens = sum(map(body.count, (b"[", b"{", b",", b":")))
        if tokens > MAX_TOKENS:
            raise Unavailable(
                f"The engine's answer to GET {url} has {tokens:,} JSON brackets, commas and colons, over "
                f"the {MAX_TOKENS:,} of any engine's answer: not parsed",
                reason="engine_fault",
            )
        try:
            return json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: arrays nested beyond the parser's depth
            raise Unavailable(
                f"The engine at {self.shown} answered GET {url} with something not JSON",
                reason="engine_fault",
            ) from None
