"""The process's one history store: configured at start-up, opened on first use.

Why a process-wide setting and not a field of every tool's context: the server, the CLI's
``snapshot`` and tests choose where history lives (or that there is none) once, and the tools that
record (dir_usage, disk_usage, hash_tree) only ask ``active()``. Unconfigured means off, so code
that never asked for history (a library caller, most tests) writes nothing anywhere.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sysmcp import platform

if TYPE_CHECKING:  # the store (and sqlite3) is imported when history is first used, not at start
    from sysmcp.history.store import Store

STATE_ENV = "SYSMCP_STATE_DIR"
#: Why history can be off, said the same way by the tools and the command line.
OFF_BECAUSE = "--no-history, or the state directory cannot be written"

_lock = threading.Lock()
_directory: Path | None = None
_store: Store | None = None
_clock: Callable[[], float] = time.time
_busy_ms: int | None = None  # the store's own wait for another process's lock (None: its BUSY_MS)


def default_directory() -> Path:
    """``$SYSMCP_STATE_DIR``, else the platform's state directory."""
    return Path(os.environ.get(STATE_ENV) or platform.state_directory())


def configure(
    directory: Path | str | None, clock: Callable[[], float] = time.time, *, busy_ms: int | None = None
) -> None:
    """Record history in ``directory`` from now on (None: no history); ``busy_ms``, how long a lock
    another process holds is waited for (None: the store's ``BUSY_MS``; tests holding one pass less)."""
    global _directory, _store, _clock, _busy_ms
    with _lock:
        _directory = Path(directory) if directory is not None else None
        if _store is not None:
            _store.close()
        _store = None
        _clock, _busy_ms = clock, busy_ms


def configured() -> bool:
    """Whether history is on for this process, without opening the store: the store may still turn
    out unusable when ``active()`` first opens it. For the event loop, which must not do that I/O."""
    return _directory is not None


def directory() -> Path | None:
    """Where history is kept (None: off), without opening the store."""
    return _directory


def active() -> Store | None:
    """The store, opened on first use; None when history is off (not configured, or unusable)."""
    global _store
    with _lock:
        if _directory is None:
            return None
        if _store is None:
            from sysmcp.history.store import BUSY_MS, Store

            _store = Store.open(_directory, _clock, busy_ms=BUSY_MS if _busy_ms is None else _busy_ms)
        return _store if _store.enabled else None


def off_because() -> str:
    """Why history is off, for "history is off (…)": the store's own reason once it was found
    unusable (a state directory another user can write, a symlink or FIFO in it, …), else the
    general ``OFF_BECAUSE``."""
    with _lock:
        store = _store
    if store is not None and not store.enabled and store.disabled_cause:
        return store.disabled_cause
    return OFF_BECAUSE


def release() -> None:
    """Close the calling thread's connection to the store, if it has one: what the interpreter's
    teardown would do, for an exit that skips it (the last connection's close checkpoints the WAL)."""
    with _lock:
        if _store is not None:
            _store.close()


def now() -> float:
    """The time history uses (the configured clock: tests inject one)."""
    return _clock()


def host_name() -> str:
    return os.uname().nodename
