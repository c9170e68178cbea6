"""The stdio transport: a thin shell around raw file descriptors.

At start-up the real stdout is duplicated for the wire and fd 1 is pointed at stderr, so a stray
``print`` anywhere in the process lands in the log instead of corrupting the protocol. Reads come
straight from the stdin fd: buffered text wrappers stall on pipes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from dataclasses import dataclass
from typing import Literal

import anyio
import anyio.to_thread

READ_SIZE = 1 << 16
LINE_GRACE = 2.0  # seconds a cancelled write may take to finish the line it began


@dataclass
class StdioWire:
    """The private descriptors of the wire, after ``claim``."""

    read_fd: int
    write_fd: int
    interactive: bool = False  # stdin was a terminal: a person, not a client, started us

    @classmethod
    def claim(cls) -> StdioWire:
        """Take fd 0 and fd 1 for the protocol and leave harmless ones in their place."""
        sys.stdout.flush()
        interactive = os.isatty(0)
        write_fd = os.dup(1)
        os.dup2(2, 1)  # fd 1 is stderr from now on: stray prints become log noise, not protocol errors
        read_fd = os.dup(0)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # nothing else may consume the client's bytes
        os.close(devnull)
        return cls(read_fd, write_fd, interactive)


class FdTransport:
    """Reads and writes raw descriptors without blocking the event loop."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd = read_fd
        self.write_fd = write_fd
        self._pollable = True  # until epoll refuses the descriptor
        self._watch: _ReadWatch | Literal[False] | None = None  # False: not on asyncio, use anyio's wait
        # Non-blocking, so a full pipe waits in the event loop instead of freezing it.
        self._nonblocking = _own_nonblocking(write_fd)
        self._mid_line = False  # the last write ended inside a line (a partial write, ours or the outbox's)

    async def receive(self) -> bytes:
        if self._watch is None:
            self._watch = _ReadWatch.for_running_loop(self.read_fd)
        while self._pollable:
            try:
                if self._watch:
                    await self._watch.wait()
                else:
                    await anyio.wait_readable(self.read_fd)
            except OSError:
                # epoll refuses regular files and /dev/null (``sysmcp < file``, a service with no
                # input); reading those never blocks, so a thread reads them from now on.
                self._pollable = False
                break
            try:
                data = os.read(self.read_fd, READ_SIZE)
            except BlockingIOError:
                continue  # a spurious wake-up on a descriptor someone made non-blocking
            if not data and self._watch:
                self._watch.close()  # end of input stays readable for ever: stop watching it
            return data
        return await anyio.to_thread.run_sync(os.read, self.read_fd, READ_SIZE, abandon_on_cancel=True)

    def write_nowait(self, data: bytes | memoryview) -> int:
        if not self._nonblocking:
            write_all(self.write_fd, data)
            return len(data)
        try:
            taken = os.write(self.write_fd, data)
        except BlockingIOError:
            return 0
        if taken:
            self._mid_line = data[taken - 1] != 0x0A  # b"\n"
        return taken

    async def send(self, data: bytes) -> None:
        """Write all of ``data``. Cancelled (a SIGTERM) with part of its line written (here, or by the
        outbox that queued the rest), it still writes the rest, for ``LINE_GRACE`` seconds at most: a
        client that reads never gets half a line."""
        view = memoryview(data)
        while view:
            taken = self.write_nowait(view)  # no copy of the rest per partial write
            view = view[taken:]
            if view:
                try:
                    await anyio.wait_writable(self.write_fd)
                except anyio.get_cancelled_exc_class():
                    if self._mid_line:
                        with anyio.CancelScope(shield=True), anyio.move_on_after(LINE_GRACE):
                            await self._finish(view)
                    raise

    async def _finish(self, view: memoryview) -> None:
        with contextlib.suppress(OSError):  # the client went away: nothing left to finish
            while view:
                await anyio.wait_writable(self.write_fd)
                view = view[self.write_nowait(view) :]


class _ReadWatch:
    """asyncio only: the read descriptor stays registered with the loop between reads.

    ``anyio.wait_readable`` registers and unregisters the descriptor on every wait (two epoll_ctl
    calls and the selector's bookkeeping): about a quarter of a small request's time. Here the
    registration persists while a wait is pending or the descriptor is idle; a wake-up with nobody
    waiting (input arrived while a request was being served) unregisters it, so unread input never
    makes the loop spin. Cancelling a wait, and the end of input, unregister it too.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self.loop = loop
        self.fd = fd
        self.registered = False
        self.waiter: asyncio.Future[None] | None = None

    @classmethod
    def for_running_loop(cls, fd: int) -> _ReadWatch | Literal[False]:
        """A watch of a pipe or socket on the running asyncio loop; False for anything else.

        The descriptor is made non-blocking (a pipe or socket from the client is ours alone): a
        wake-up the loop queued before the previous read drained the pipe then costs one
        ``BlockingIOError`` instead of a read that blocks the loop.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False  # trio
        if not isinstance(loop, asyncio.selector_events.BaseSelectorEventLoop):
            return False  # uvloop, Windows' proactor: anyio's way works everywhere
        if not _own_nonblocking(fd):
            return False  # a terminal may be shared with the shell, and epoll refuses files
        return cls(loop, fd)

    async def wait(self) -> None:
        """Return when the descriptor is readable; raise ``OSError`` if the loop cannot watch it."""
        if self.waiter is not None:
            raise anyio.BusyResourceError("reading from")  # as anyio.wait_readable: one reader at a time
        waiter = self.waiter = self.loop.create_future()
        try:
            if not self.registered:
                self.loop.add_reader(self.fd, self._readable)
                self.registered = True
            await waiter
        except BaseException:
            self.close()  # cancelled (or refused): leave nothing registered behind
            raise
        finally:
            self.waiter = None

    def _readable(self) -> None:
        waiter = self.waiter
        if waiter is None:
            self.close()  # nobody is waiting: stop watching until someone is
        elif not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        if self.registered:
            self.registered = False
            self.loop.remove_reader(self.fd)


def _own_nonblocking(fd: int) -> bool:
    """Make a pipe or socket to the client non-blocking (it is ours alone); True if it was one.

    A terminal or a file may be shared with the shell, so it is left as it is.
    """
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        os.set_blocking(fd, False)
        return True
    return False


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of ``data`` to a blocking descriptor."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
