"""``sysmcp`` (``sysmcp serve``): MCP on stdin/stdout until the client goes, then a quick, clean exit."""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from sysmcp import __version__, platform
from sysmcp.logconfig import configure, drain_logs, get_logger

if TYPE_CHECKING:
    from anyio.abc import TaskStatus


HINT = """\
sysmcp {version} speaks the Model Context Protocol on stdin/stdout; it is meant to be started by an MCP
client (Claude Desktop, Claude Code, VS Code, Cursor), not typed at. For example, in Claude Code,
from a checkout of sysmcp (plain `uvx sysmcp` once it is published on PyPI):

    claude mcp add sysmcp -- uvx --from /path/to/sysmcp sysmcp

To try a tool from this shell:

    sysmcp call disk_usage path=/
    sysmcp call dir_usage path=/var/log top_n=10

Waiting for JSON-RPC on stdin (Ctrl-D or Ctrl-C to quit).
"""


def serve(log_level: str, roots: Sequence[str], fleet: Any = None, *, allow_reclaim: bool = False) -> int:
    configure(log_level)
    log = get_logger("sysmcp.cli")
    lacking = platform.missing_facilities()
    if lacking:
        log.info("running with POSIX fallbacks", missing=lacking)
    missing = [root for root in roots if not os.path.isdir(root)]
    if missing:
        print(f"sysmcp: --root must name existing directories: {', '.join(missing)}", file=sys.stderr)
        return 2
    from sysmcp.protocol.stdio import FdTransport, StdioWire

    wire = StdioWire.claim()
    workers: list[threading.Thread] = []

    async def session() -> None:
        try:
            await _serve(
                FdTransport(wire.read_fd, wire.write_fd), roots, wire.interactive, fleet, allow_reclaim
            )
        finally:  # the worker threads, alive until the run ends: joined before the exit (_exit_now)
            workers.extend(threading.enumerate())

    # What the start made lives as long as the process: frozen, the collector never walks it again.
    # A gateway's start did real work (its inventory): whatever of that is garbage goes first.
    if fleet is not None:
        gc.collect()
    gc.freeze()
    gc.enable()  # __main__ turned it off for the start
    try:
        anyio.run(session)
    except KeyboardInterrupt:
        pass
    except BaseException as exc:
        if _is_broken_pipe(exc):
            log.info("client went away")
        else:
            log.exception("server stopped on an unexpected error")
            return 1
    log.info("stopped")
    _exit_now(log, workers)
    return 0  # not reached: _exit_now ends the process


def _exit_now(log: Any, workers: Sequence[threading.Thread] = ()) -> None:
    """End the process once the session is over, without the interpreter's teardown.

    Freeing every module and object at exit costs a fresh process some 15-30 ms of CPU (as much as
    a third of a fleet host's whole start, paid on every host of a cold call) and achieves nothing the
    operating system does not. What the teardown would do that matters is done here first: worker
    threads are joined (they close their history connections as they end), the main thread's
    connection is closed (the last close checkpoints SQLite's WAL), the ``atexit`` hooks run (the
    log writers' drain, ``logging.shutdown``) and stdout and stderr are flushed.

    A worker thread blocked in the kernel (a dead mount) is not waited for: Python would join it
    for ever. Then the hooks are skipped too (a stuck thread may hold a lock they take), and only the
    queued log lines are written out.
    """
    stuck = [
        t
        for t in dict.fromkeys([*workers, *threading.enumerate()])  # a worker may be ending, not yet ended
        if t is not threading.main_thread() and not t.daemon
    ]
    deadline = time.monotonic() + 0.1  # idle pool threads are on their way out: a moment for all of them
    for thread in stuck:
        thread.join(timeout=max(deadline - time.monotonic(), 0))
    stuck = [thread for thread in stuck if thread.is_alive()]
    if stuck:
        log.warning("exiting with worker threads still blocked", threads=len(stuck))
    else:
        from sysmcp.history import state

        state.release()
        atexit._run_exitfuncs()
    with contextlib.suppress(OSError, ValueError):  # a broken stderr must not keep the process from ending
        sys.stdout.flush()
        sys.stderr.flush()
    if stuck:
        drain_logs()  # the atexit hooks were skipped: the queued log lines are written here
    os._exit(0)


async def _serve(
    transport: Any, roots: Sequence[str], interactive: bool, fleet: Any = None, allow_reclaim: bool = False
) -> None:
    from sysmcp.protocol.session import Session
    from sysmcp.server import build_server
    from sysmcp.tools import served_tools

    async with contextlib.AsyncExitStack() as stack:
        caller = None
        if fleet is not None:
            from sysmcp.fleet.setup import running_fleet

            # The stack's end ends the fleet, and with it every ssh it started.
            caller = await stack.enter_async_context(running_fleet(fleet))
        server = build_server(served_tools(allow_reclaim), roots=roots or None, fleet=caller)
        session = Session(server, transport)
        async with anyio.create_task_group() as group:
            server.client_roots.peer, server.client_roots.spawn = session, group.start_soon

            async def stop_on_signal(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    task_status.started()
                    async for _ in signals:
                        group.cancel_scope.cancel()
                        return

            await group.start(stop_on_signal)
            if interactive:  # only now, so a SIGTERM right after the hint already finds its handler
                print(HINT.format(version=__version__), file=sys.stderr, flush=True)
            await session.run()
            group.cancel_scope.cancel()


def _is_broken_pipe(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_broken_pipe(inner) for inner in exc.exceptions)
    return isinstance(exc, (BrokenPipeError, ConnectionResetError))
