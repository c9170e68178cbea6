"""Which paths a tool may look at, and how names are shown.

The operator's roots bound everything; client roots can only narrow them. Containment is decided
on resolved real paths, component by component — never by string prefix, so ``/srv-evil`` is not
inside ``/srv`` and a symlink inside a root that points out of it does not lead out. Resolution is
only half of the defence: the names it returns are opened with ``sysmcp.fs.safeopen``, which
refuses to follow any symlink, so a path swapped for a symlink after the check still cannot lead out.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import anyio
import structlog

from sysmcp.protocol.errors import ToolError
from sysmcp.protocol.threads import run_in_thread

log = structlog.get_logger("sysmcp.paths")

#: How long a client gets to answer ``roots/list`` before the operator's scope is kept.
ROOTS_TIMEOUT = 5.0

#: How much of a model-supplied path is echoed back in a refusal.
MAX_ECHO = 200
#: How many roots a refusal lists (a client may send thousands).
MAX_LISTED = 10
#: Linux's limits: longer names fail in every system call, so refuse them up front with a clear rule.
PATH_MAX = 4096
NAME_MAX = 255

OUTSIDE_OPERATOR = "the operator's roots (--root / SYSMCP_ROOTS)"
OUTSIDE_CLIENT = "the client's roots (roots/list)"


def display(path: str | bytes | os.PathLike[str]) -> str:
    """A name safe to put in JSON: undecodable bytes shown as \\xNN instead of lone surrogates."""
    if isinstance(path, str):
        try:
            path.encode("utf-8")  # the common case, and a hot path: nothing to escape
        except UnicodeEncodeError:
            pass
        else:
            return path
    raw = os.fsencode(path)
    return raw.decode("utf-8", "backslashreplace")


def printable(name: str | bytes) -> str:
    """A name on one line, for text and tab-separated lists: undecodable bytes as \\xNN, and newline,
    carriage return and tab escaped, since a file name may hold any of them."""
    text = display(name) if isinstance(name, bytes) else name
    return text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def is_within(path: Path, root: Path) -> bool:
    """True if ``path`` is ``root`` or below it, comparing whole components (never string prefixes)."""
    return path.parts[: len(root.parts)] == root.parts


def real_root(raw: str | os.PathLike[str]) -> Path:
    """A root as the policy stores it: absolute, normalised, with every symlink resolved."""
    return Path(os.path.realpath(os.path.abspath(os.fspath(raw))))


def intersect(first: Sequence[Path], second: Sequence[Path]) -> list[Path]:
    """The roots both lists allow: for each overlapping pair, the deeper of the two."""
    both: list[Path] = []
    for a in first:
        for b in second:
            deeper = a if is_within(a, b) else b if is_within(b, a) else None
            if deeper is not None and deeper not in both:
                both.append(deeper)
    return both


def roots_from_uris(uris: Iterable[object]) -> tuple[list[Path], list[str]]:
    """Client roots (``file://`` URIs) as real paths, and the entries that could not be used."""
    roots: list[Path] = []
    unusable: list[str] = []
    for uri in uris:
        path = _file_uri_path(uri)
        if path is None:
            unusable.append(str(uri)[:MAX_ECHO])
        else:
            roots.append(real_root(path))
    return roots, unusable


def _file_uri_path(uri: object) -> str | None:
    if not isinstance(uri, str) or "\x00" in uri:
        return None
    try:
        parts = urlsplit(uri)
    except ValueError:
        return None
    if parts.scheme.lower() != "file" or parts.netloc not in ("", "localhost"):
        return None
    path = unquote(parts.path)
    if not path.startswith("/") or "\x00" in path:
        return None
    return path


@dataclass
class PathPolicy:
    """The operator's roots (None: the whole filesystem) narrowed by the client's roots, if any."""

    operator_roots: Sequence[Path] | None = None
    client_roots: Sequence[Path] | None = field(default=None)

    def resolve(self, raw: str) -> Path:
        """An absolute, symlink-free path inside the allowed roots, or a ``ToolError`` naming the rule.

        The error never shows what the path resolved to: a symlink's hidden target stays hidden.
        """
        return Path(self.resolve_str(raw))

    def resolve_str(self, raw: str) -> str:
        """``resolve`` as a ``str``, without building a ``Path`` when no roots need comparing."""
        real = _realpath(raw)
        if self.operator_roots is not None or self.client_roots is not None:
            self.check(Path(real), echo(raw))
        return real

    def check(self, real: Path, shown: str) -> None:
        """Refuse a resolved path outside the roots, naming the rule that refused it."""
        for roots, who in ((self.operator_roots, OUTSIDE_OPERATOR), (self.client_roots, OUTSIDE_CLIENT)):
            if roots is not None and not any(is_within(real, root) for root in roots):
                in_force = self.allowed or []
                allowed = ", ".join(display(r) for r in in_force[:MAX_LISTED]) or "none"
                if len(in_force) > MAX_LISTED:
                    allowed += f" … and {len(in_force) - MAX_LISTED} more"
                raise ToolError(
                    f"path {shown} is outside {who}: refused. Containment is checked after resolving "
                    f"'..' and symlinks, so a link inside a root that points out of it is refused too. "
                    f"Allowed roots: {allowed}"
                )

    def narrow(self, client_roots: Sequence[Path] | None) -> None:
        """Apply the client's roots; None (or an empty list) means the client does not narrow."""
        self.client_roots = list(client_roots) if client_roots else None

    @property
    def allowed(self) -> list[Path] | None:
        """The roots in force, or None for the whole filesystem."""
        if self.client_roots is None:
            return list(self.operator_roots) if self.operator_roots is not None else None
        if self.operator_roots is None:
            return list(self.client_roots)
        return intersect(self.client_roots, self.operator_roots)


def expands_locally(raw: str) -> bool:
    """True if ``os.path.expanduser(raw)`` needs no user database lookup (which may go to the network:
    LDAP, NIS, sssd): no leading ``~``, or ``~`` / ``~/…`` with ``$HOME`` set."""
    if not raw.startswith("~"):
        return True
    return (raw == "~" or raw.startswith("~/")) and "HOME" in os.environ


def _realpath(raw: str) -> str:
    """``raw`` expanded and resolved (absolute, normalised, no symlinks), or a ``ToolError`` naming the rule."""
    if not raw:
        raise ToolError("path is empty: give an absolute path, e.g. '/var/log'")
    if "\x00" in raw:
        raise ToolError(f"path {echo(raw)} contains a NUL byte")
    try:
        expanded = os.path.expanduser(raw)
        if not os.path.isabs(expanded):
            raise ToolError(
                f"path {echo(raw)} is relative: give an absolute path (sysmcp has no useful working directory)"
            )
        encoded = os.fsencode(expanded)  # lone surrogates from JSON cannot name a file
        if len(encoded) >= PATH_MAX or (
            len(encoded) > NAME_MAX and any(len(part) > NAME_MAX for part in encoded.split(b"/"))
        ):
            raise ToolError(
                f"path {echo(raw)} is too long: at most {PATH_MAX - 1} bytes, {NAME_MAX} per component"
            )
        return os.path.realpath(expanded)
    except OSError as exc:
        raise ToolError(f"path {echo(raw)} cannot be resolved: {exc.strerror or 'error'}") from None
    except ValueError:
        raise ToolError(f"path {echo(raw)} is not a usable file name") from None


def echo(raw: str) -> str:
    """A client's path as quoted back in an error: repr, cut to MAX_ECHO characters."""
    shown = raw if len(raw) <= MAX_ECHO else raw[:MAX_ECHO] + "…"
    return repr(shown)


class RootsPeer(Protocol):
    """The session side that can ask the client something (``Session.request``)."""

    async def request(
        self, method: str, params: dict[str, Any] | None = None, timeout: float = 10
    ) -> Any: ...


Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]


class ClientRoots:
    """Keeps the policy's client roots in step with the client's ``roots/list`` (protocol 2024-11-05…2025-11-25).

    Roots are fetched in the background after ``notifications/initialized`` and again after
    ``notifications/roots/list_changed``; a tool call waits for a fetch in progress, so no call runs
    with a scope wider than the client meant. A client that fails to answer leaves the scope as it
    was (the operator's, at first); an empty list does not narrow (MCP Inspector declares roots and
    answers ``[]``).
    """

    def __init__(self, policy: PathPolicy, timeout: float = ROOTS_TIMEOUT) -> None:
        self.policy = policy
        self.timeout = timeout
        self.peer: RootsPeer | None = None
        self.spawn: Spawn | None = None
        self._stale = False
        self._scheduled = False  # a background fetch is started or running: a flood starts no more
        self._lock = anyio.Lock()

    def changed(self) -> None:
        """The client's roots may have changed: fetch them (now, if we can start a task)."""
        if self.peer is None:
            return
        self._stale = True
        if self.spawn is not None and not self._scheduled:
            self._scheduled = True
            self.spawn(self._refresh_in_background)

    async def _refresh_in_background(self) -> None:
        try:
            await self.refresh()
        finally:
            self._scheduled = False

    @property
    def settled(self) -> bool:
        """No fetch is due or running: ``current()`` would return without waiting on the client."""
        return not self._stale and not self._lock.locked()

    async def current(self) -> None:
        """Make sure the policy reflects the client's latest roots before a tool uses it."""
        if not self.settled:
            await self.refresh()

    async def refresh(self) -> None:
        async with self._lock:
            if not self._stale or self.peer is None:
                return
            self._stale = False
            try:
                response = await self.peer.request("roots/list", None, timeout=self.timeout)
            except Exception as exc:  # the client went away or never answered: keep the scope we have
                log.warning("roots/list unanswered; keeping the current scope", error=type(exc).__name__)
                return
            listed = response.result.get("roots") if isinstance(response.result, dict) else None
            if response.error is not None or not isinstance(listed, list):
                log.warning("roots/list failed; keeping the current scope", error=response.error)
                return
            uris = [r.get("uri") if isinstance(r, dict) else r for r in listed]
            # Resolving a root stats each component: in a thread, so a hung mount cannot stall the loop,
            # and within the same time a client gets to answer, or the scope stays as it was.
            resolved: tuple[list[Path], list[str]] | None = None
            with (
                anyio.move_on_after(self.timeout),
                contextlib.suppress(ToolError),
            ):  # ToolError: too many stuck
                resolved = await run_in_thread(roots_from_uris, uris, None)
            if resolved is None:
                log.warning("client roots not resolved in time (a hung mount?); keeping the current scope")
                return
            roots, unusable = resolved
            if unusable:
                log.warning("client roots ignored: not local file:// URIs", count=len(unusable))
                log.debug("ignored client roots", roots=unusable)
            self.policy.narrow(roots)
            log.info("client roots applied", count=len(roots), narrowing=bool(roots))
            log.debug("roots in force", roots=[display(r) for r in self.policy.allowed or []])
