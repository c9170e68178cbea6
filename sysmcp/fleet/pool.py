"""One persistent MCP session per host, each over one ssh process.

A session is opened on first use (``initialize`` once), reused by later calls and reopened after it
dies. An opening runs in the pool's own task group: a call that stops waiting for it (its fleet
deadline passed) leaves it to finish, so the next call finds the session open. New handshakes through
one jump host are at most ``handshakes`` at once (OpenSSH's ``MaxStartups`` drops the rest). ``open()`` owns them all: when it ends (EOF on our stdin, SIGTERM) every session's ssh is ended
and every ControlMaster on sysmcp's own control path is told to exit, so no ssh is left behind.
Nothing here reads ``/proc``: the gateway may run on a Mac.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import psutil
from anyio.abc import Process, TaskGroup

from sysmcp.fleet.inventory import Host, Inventory
from sysmcp.fleet.ssh import (
    SshSettings,
    accepts_changed_keys,
    bounded,
    classify,
    config_argv,
    control_argv,
    session_argv,
)
from sysmcp.logconfig import get_logger
from sysmcp.protocol.client import ClientSession, NotMcp, PeerGone, RemoteError
from sysmcp.protocol.linebudget import LineBudget, default_line_budget
from sysmcp.protocol.session import MAX_RESULT

log = get_logger("sysmcp.fleet")

STDERR_KEPT = 4096  # bytes of each ssh's stderr kept from its start and from its end, for a failure's reason
EXIT_WAIT = 2.0  # seconds an ssh may take to exit after its session ended, before it is killed
CLOSE_WAIT = 3.0  # seconds for ending everything at shutdown
DEFAULT_HANDSHAKES = 10  # new sessions opening at once through one jump host (sshd's MaxStartups: 10)
#: Seconds an opening may take in all (when longer than the connect timeout): a remote start slowed by a saturated
#: host (200 Python starts on 2 cores) finishes for the next call instead of being killed and started
#: again by every call. A host that does not answer at all is ended by ssh's own ConnectTimeout.
SLOW_START = 120.0
#: Bytes of an unfinished line a host's session may hold while no call waits on it: a sysmcp sends
#: nothing unasked, and a host that stalled mid-line kept up to 80 MiB for as long as its session lived.
IDLE_LINE = 1 << 20


class HostFailure(Exception):
    """A host's session could not be opened (or died): its status and a one-line reason. ``bastion``
    names the jump host whose own failure it is, only for a host the inventory puts behind one: a
    host's words ("bastion jump1 refused: …" on its stderr) never make it one."""

    def __init__(self, status: str, reason: str, bastion: str | None = None) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason
        self.bastion = bastion


#: Where a connection through a jump host failed past it: the bastion forwarded, the host did not answer.
_PAST_BASTION = re.compile(r"open failed|forwarding failed|administratively prohibited", re.I)
#: Who ssh names in "user@host: Permission denied": the host that refused.
_NAMED = re.compile(r"^\S+@(\S+?): ")
REFUSED = re.compile(r"refused|closed by remote host|Permission denied|reset by peer", re.I)


def at_bastion(reason: str, bastion: str) -> bool:
    """Whether a failure behind ``bastion`` happened at the bastion itself: ssh never got past it (no
    forwarding was even tried), and a refusal that names a host names the bastion."""
    if _PAST_BASTION.search(reason):
        return False
    named = _NAMED.match(reason)
    return named is None or named.group(1) in (bastion, f"[{bastion}]")


@dataclass
class _Opening:
    """A session being opened, awaited by every call that wants it."""

    done: anyio.Event = field(default_factory=anyio.Event)
    session: HostSession | None = None
    failure: HostFailure | None = None


@dataclass
class HostSession:
    host: Host
    process: Process
    client: ClientSession
    stderr: bytearray = field(default_factory=bytearray)
    calls: int = 0  # calls started on it: a session that dies under its first call is no stale one
    number: int = 1  # the host's sessions opened so far, this one included: past 1, a reconnection

    @property
    def alive(self) -> bool:
        return self.client.alive and self.process.returncode is None

    async def failure(self) -> HostFailure:
        """Why this session ended: ssh's exit code and stderr, classified. Its stdin is closed first:
        a remote this end stopped reading (it spoke no MCP) sees EOF and exits, and is not waited out.
        A session we ended at a line too long or too complex to read needs neither: its remote, still
        running, is ended by the caller."""
        if self.client.ended_here:  # it answered, in a way we refused (too long, a flood): not ssh's failure
            return HostFailure("remote_error", self.client.closed_reason)
        await _stop(self.process)
        not_mcp = self.client.closed_reason if self.client.not_mcp else None
        status, reason = classify(
            self.process.returncode,
            self.stderr.decode("utf-8", "replace"),
            not_mcp=not_mcp,
            cut=self.client.cut_short,
        )
        return HostFailure(status, reason)


def private_control_dir() -> str:
    """A 0700 directory of our own for ControlPath sockets, short enough for a socket path (macOS's
    ``$TMPDIR`` is too long for ``dir/%C``), so sysmcp never uses or ends the operator's masters."""
    base = "/tmp" if os.path.isdir("/tmp") else None
    return tempfile.mkdtemp(prefix="sysmcp-ssh-", dir=base)


def physical_memory() -> int | None:
    """The machine's memory in bytes, None if psutil cannot say."""
    try:
        return int(psutil.virtual_memory().total)
    except (OSError, RuntimeError, AttributeError):
        return None


class SessionPool:
    """The gateway's sessions, one a host. ``line_budget``: bytes all of them together may hold of
    reply lines not yet ended and of answers kept for a merge (``LineBudget``; default
    ``default_line_budget``)."""

    def __init__(
        self,
        inventory: Inventory,
        settings: SshSettings,
        handshakes: int = DEFAULT_HANDSHAKES,
        line_budget: int | None = None,
    ) -> None:
        self.inventory = inventory
        if line_budget is None:
            line_budget = default_line_budget(physical_memory())
        self.line_budget = LineBudget(line_budget)
        self.settings = settings
        self.handshakes = max(1, handshakes)
        self._sessions: dict[str, HostSession] = {}
        self._opening: dict[str, _Opening] = {}
        self._through: dict[str, anyio.Semaphore] = {}  # jump host → its handshakes under way
        self._used: set[str] = set()  # hosts we ever started an ssh for: their masters to end
        self._opened: dict[str, int] = {}  # host → sessions opened to it so far
        self._loose_keys: dict[str, bool] = {}  # host → its ssh config accepts a changed host key
        self._processes: set[Process] = set()
        self._group: TaskGroup | None = None

    @asynccontextmanager
    async def open(self) -> AsyncIterator[SessionPool]:
        """Run the pool for the duration of the block; close everything at its end, however it ends."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield self
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_WAIT + EXIT_WAIT):
                    await self.aclose()
                group.cancel_scope.cancel()
                self._group = None

    async def session(self, name: str) -> HostSession:
        """The host's live session, opened now if there is none (or the last one died).

        The opening belongs to the pool: a caller cancelled while waiting, or waiting longer than the
        connect timeout (``HostFailure`` timeout), leaves it to finish, for up to ``SLOW_START`` s."""
        current = self.live(name)
        if current is not None:
            return current
        opening = self._opening.get(name)
        if opening is None:
            assert self._group is not None, "SessionPool.open() is not running"
            opening = self._opening[name] = _Opening()
            self._group.start_soon(self._open_into, name, opening)
        timeout = self.settings.connect_timeout
        with anyio.move_on_after(timeout):
            await opening.done.wait()
        if not opening.done.is_set():  # slow, not dead: the opening goes on for the next call
            raise HostFailure(
                "timeout",
                f"no MCP answer within the connect timeout of {timeout:g} s; it goes on connecting "
                "and the next call may find it open",
            )
        if opening.failure is not None:
            failure = opening.failure
            raise HostFailure(failure.status, failure.reason, failure.bastion)
        assert opening.session is not None
        return opening.session

    async def _open_into(self, name: str, opening: _Opening) -> None:
        try:
            current = self._sessions.pop(name, None)
            if current is not None:
                await self._end(current)
            host = self.inventory.hosts[name]
            if host.jump is None:
                opening.session = await self._open(host)
            else:  # through a bastion: its sshd drops handshakes past MaxStartups
                async with self._through.setdefault(host.jump, anyio.Semaphore(self.handshakes)):
                    opening.session = await self._open(host)
            opening.session.number = self._opened[name] = self._opened.get(name, 0) + 1
            self._sessions[name] = opening.session
        except HostFailure as failure:
            jump = self.inventory.hosts[name].jump
            if jump is not None and failure.status != "remote_error":  # one reason for all behind it
                said, bastion = self._behind(jump, failure.reason)
                failure = HostFailure(failure.status, bounded(said), bastion)
            opening.failure = failure
        except Exception as exc:  # never leave a waiter hanging on a bug of ours
            log.exception("opening a session failed", host=name)
            opening.failure = HostFailure("unreachable", bounded(f"cannot open a session: {exc}"))
        finally:
            if opening.session is None and opening.failure is None:  # cancelled: the pool is closing
                opening.failure = HostFailure("cancelled", "the gateway is shutting down")
            self._opening.pop(name, None)
            opening.done.set()

    def _behind(self, jump: str, reason: str) -> tuple[str, str | None]:
        """A failed connection through ``jump``, worded for who failed: the bastion itself ("bastion
        jump1 (127.0.3.21) refused: …", one reason for every host behind it, and its name), or the
        host past it (and None)."""
        bastion = jump.split(",")[0]  # ProxyJump's first hop is the one we connect to
        at = bastion.rpartition("@")[2]
        name = at.rsplit(":", 1)[0] if at.count(":") == 1 else at  # a [v6]:port or a bare v6 stays whole
        if not at_bastion(reason, name):
            return f"via jump host {jump}: {reason}", None
        known = self.inventory.hosts.get(name)
        address = f" ({known.address})" if known is not None and known.address not in (None, name) else ""
        how = "refused" if REFUSED.search(reason) else "failed"
        return f"bastion {name}{address} {how}: {reason}", name

    @property
    def processes(self) -> int:
        """ssh processes running now (sessions, and openings under way)."""
        return len(self._processes)

    def live(self, name: str) -> HostSession | None:
        """The host's session if one is open and alive, without opening one (its results live there)."""
        current = self._sessions.get(name)
        return current if current is not None and current.alive else None

    async def discard(self, session: HostSession) -> None:
        """End a session that can no longer be trusted (a call on it timed out mid-answer, say)."""
        if self._sessions.get(session.host.name) is session:
            del self._sessions[session.host.name]
        await self._end(session)

    def settle(self, session: HostSession) -> None:
        """After a call on ``session``: a session holding part of a line that no call waits for any
        more (the host stalled mid-line, and the call that wanted it ended at its deadline or was
        cancelled) is ended, its buffer freed now and its ssh in the background, and the next call
        opens a new one. Kept, it held what the host sent, up to 80 MiB, for as long as it lived."""
        client = session.client
        if not client.alive or client.waiting or not client.unfinished:
            return
        held = client.unfinished
        client.abandon(f"it stopped in the middle of a line ({held:,} bytes of it) that no call waits for")
        log.info("a session ended at an unfinished line", host=session.host.name, length=held)
        if self._sessions.get(session.host.name) is session:
            del self._sessions[session.host.name]
        if self._group is not None:
            self._group.start_soon(self._end, session)

    async def _open(self, host: Host) -> HostSession:
        assert self._group is not None, "SessionPool.open() is not running"
        if host.connection is not None:  # never run here: --root and the client's roots bound this machine
            raise HostFailure("unreachable", bounded(_not_ssh(host.connection)))
        argv = session_argv(self.settings, host, refuse_changed_keys=await self._accepts_changed_keys(host))
        log.debug("ssh session starting", host=host.name, argv=argv)
        self._used.add(host.name)
        try:
            process = await anyio.open_process(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # the operator's Ctrl-C is ours to handle, not each ssh's
            )
        except OSError as exc:  # no ssh installed, out of processes: this host's failure, not the call's
            raise HostFailure("unreachable", bounded(f"cannot start {argv[0]}: {exc}")) from None
        self._processes.add(process)
        assert process.stdin is not None and process.stdout is not None
        # No line a sysmcp sends is longer than its session's cap: a longer one is refused as it is read.
        client = ClientSession(
            process.stdin,
            process.stdout,
            name=host.name,
            max_line=MAX_RESULT,
            max_idle_line=IDLE_LINE,
            line_budget=self.line_budget,
        )
        session = HostSession(host, process, client)
        self._group.start_soon(self._keep_stderr, session)
        self._group.start_soon(self._read, session)
        limit = max(self.settings.connect_timeout, SLOW_START)
        try:
            with anyio.fail_after(limit):
                await client.initialize()
        except TimeoutError:
            await self._kill(session)  # hung in the connection or the remote start: no goodbye to wait for
            tail = _last_line(session.stderr)
            raise HostFailure(
                "timeout",
                bounded(f"no MCP answer within {limit:g} s" + (f" ({tail})" if tail else "")),
            ) from None
        except (PeerGone, NotMcp, RemoteError) as exc:
            failure = await session.failure()
            if isinstance(exc, NotMcp) and failure.status != "no_sysmcp":
                failure = HostFailure(
                    "remote_error", bounded(f"the remote command does not speak MCP: {exc}")
                )
            elif isinstance(exc, RemoteError):
                failure = HostFailure(
                    "remote_error", bounded(f"the remote refused initialize: {exc.message}")
                )
            await self._end(session)
            raise failure from None
        except BaseException:  # cancelled while connecting: leave nothing running
            await self._kill(session)
            raise
        log.info("ssh session open", host=host.name, pid=process.pid)
        return session

    async def _accepts_changed_keys(self, host: Host) -> bool:
        """Whether the operator's ssh config would go on with this host under a changed host key
        (``StrictHostKeyChecking no``), asked once per host of ``ssh -G`` (a few milliseconds, no
        connection). An ssh that cannot start or exits with an error leaves the setting to the session,
        which meets the same fault; one that does not answer in the time a session may take to open
        (its config's ``Match exec`` hangs) is ``HostFailure``: not knowing, the host is not dialled.
        That time, not less: on a machine loaded by a fan-out's own ssh processes a short bound would
        fail hosts a slow start reaches, and the call waiting leaves the opening to go on regardless."""
        loose = self._loose_keys.get(host.name)
        if loose is None:
            loose = False
            timeout = max(self.settings.connect_timeout, SLOW_START)
            try:
                with anyio.fail_after(timeout), contextlib.suppress(OSError):
                    done = await anyio.run_process(
                        config_argv(self.settings, host),
                        check=False,
                        stdin=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    loose = done.returncode == 0 and accepts_changed_keys(
                        done.stdout.decode("utf-8", "replace")
                    )
            except TimeoutError:
                raise HostFailure(
                    "timeout",
                    bounded(
                        f"ssh -G did not print this host's configuration within {timeout:g} s (a Match exec "
                        "that hangs?): whether it would accept a changed host key is not known, so it is not dialled"
                    ),
                ) from None
            if loose:
                log.info(
                    "StrictHostKeyChecking no in the ssh config: a changed host key is refused",
                    host=host.name,
                )
            self._loose_keys[host.name] = loose
        return loose

    async def _read(self, session: HostSession) -> None:
        await session.client.run()
        with anyio.move_on_after(EXIT_WAIT):  # ssh's exit status and last words say why, if it is ending
            await session.process.wait()
        log.debug(
            "ssh session ended",
            host=session.host.name,
            reason=session.client.closed_reason,
            exit_status=session.process.returncode,
            ssh_said=_last_line(session.stderr),
        )

    async def _keep_stderr(self, session: HostSession) -> None:
        stream = session.process.stderr
        assert stream is not None
        with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            while True:
                session.stderr += await stream.receive()
                if len(session.stderr) > 2 * STDERR_KEPT:  # the first lines say why; the last, how it ended
                    del session.stderr[STDERR_KEPT:-STDERR_KEPT]

    async def _end(self, session: HostSession) -> None:
        """End the session's ssh (``_stop``) and free its pipes."""
        process = session.process
        with anyio.CancelScope(shield=True):
            await _stop(process)
            if process.returncode is not None:  # its pipes too: a reader that stopped early left one full
                with contextlib.suppress(Exception):
                    await process.aclose()
            self._processes.discard(process)

    async def _kill(self, session: HostSession) -> None:
        await _kill(session.process)
        self._processes.discard(session.process)

    async def aclose(self) -> None:
        """End every session and every ControlMaster we started; remove our control directory."""
        sessions, self._sessions = list(self._sessions.values()), {}
        async with anyio.create_task_group() as group:
            for session in sessions:
                group.start_soon(self._end, session)
            for process in list(self._processes):
                group.start_soon(_kill, process)
        async with anyio.create_task_group() as group:
            for name in sorted(self._used):
                group.start_soon(self._exit_master, self.inventory.hosts[name])
        self._used.clear()
        shutil.rmtree(self.settings.control_dir, ignore_errors=True)

    async def _exit_master(self, host: Host) -> None:
        directory = self.settings.control_dir
        if not os.path.isdir(directory) or not os.listdir(directory):
            return  # no socket left: no master to end
        with anyio.move_on_after(CLOSE_WAIT), contextlib.suppress(OSError):
            await anyio.run_process(
                control_argv(self.settings, host),
                check=False,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )


async def _stop(process: Process) -> None:
    """Close its stdin (a remote sysmcp sees EOF and exits), wait ``EXIT_WAIT`` s, then kill it."""
    if process.stdin is not None:
        with contextlib.suppress(Exception):
            await process.stdin.aclose()
    with anyio.move_on_after(EXIT_WAIT):
        await process.wait()
    if process.returncode is None:
        await _kill(process)


async def _kill(process: Process) -> None:
    with contextlib.suppress(ProcessLookupError, OSError):
        process.kill()
    with anyio.CancelScope(shield=True), anyio.move_on_after(EXIT_WAIT):
        await process.wait()


def _not_ssh(connection: str) -> str:
    """Why a host whose ansible_connection is not ssh has no answer. Not even ``local`` is run here: an
    inventory names no command this machine runs, and a sysmcp started here would not be bound by the
    gateway's ``--root``."""
    if connection == "local":
        return (
            "its ansible_connection is local (this machine, not reached over ssh): ask without hosts for "
            "this machine, or give it an ssh address"
        )
    return f"its ansible_connection {connection} is not ssh: sysmcp reaches hosts over ssh only"


def _last_line(data: bytearray) -> str:
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""


__all__ = ["HostFailure", "HostSession", "SessionPool", "private_control_dir"]
