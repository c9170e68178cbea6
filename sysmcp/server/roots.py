"""The client's roots kept in step with the path policy: the session's half of ``--root``.

Why not in ``sysmcp.engine.paths._paths``: this part talks to the client (``roots/list``) and to the
protocol's worker threads, which an engine module never imports; the policy itself stays there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from sysmcp.engine.paths import PathPolicy, display, root_names, roots_from_uris
from sysmcp.logconfig import get_logger
from sysmcp.protocol.failures import ToolError
from sysmcp.protocol.threads import run_in_thread

if TYPE_CHECKING:
    from sysmcp.protocol.session import Session

log = get_logger("sysmcp.paths")

#: How long a client gets to answer ``roots/list`` before the operator's scope is kept.
ROOTS_TIMEOUT = 5.0


Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]


class ClientRoots:
    """Keeps the policy's client roots in step with the client's ``roots/list`` (protocol 2024-11-05…2025-11-25).

    Roots are fetched in the background after ``notifications/initialized`` and again after
    ``notifications/roots/list_changed``; a tool call waits for a fetch in progress, so no call runs
    with a scope wider than the client meant. A client that fails to answer leaves the scope as it
    was (the operator's, at first); an empty list does not narrow (MCP Inspector declares roots and
    answers ``[]``).
    """

    def __init__(self, policy: PathPolicy) -> None:
        self.policy = policy
        self.peer: Session | None = None  # the session that asks the client
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
                response = await self.peer.request("roots/list", None, timeout=ROOTS_TIMEOUT)
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
            # ToolError: too many threads already stuck.
            resolved: tuple[list[Path], list[str]] | None = None
            with anyio.move_on_after(ROOTS_TIMEOUT), contextlib.suppress(ToolError):
                resolved = await run_in_thread(roots_from_uris, uris, None)
            if resolved is None:
                log.warning("client roots not resolved in time (a hung mount?); keeping the current scope")
                return
            roots, unusable = resolved
            if unusable:
                log.warning("client roots ignored: not local file:// URIs", count=len(unusable))
                log.debug("ignored client roots", roots=unusable)
            self.policy.narrow(roots, ignored=len(unusable), named=root_names(uris))
            log.info("client roots applied", count=len(roots), narrowing=bool(roots))
            log.debug("roots in force", roots=[display(r) for r in self.policy.allowed or []])
