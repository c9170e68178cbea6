"""The single writer of the wire.

A message goes straight to the transport when nothing is queued (no task hop, the common case);
otherwise it waits its turn in a queue drained by one task, so messages never interleave and a slow
reader slows only the writer, never the event loop.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

import anyio

from sysmcp.logconfig import get_logger

log = get_logger("sysmcp.outbox")

HIGH_WATER = 8 << 20  # bytes queued before senders wait for the reader to catch up


class WireWriter(Protocol):
    def write_nowait(self, data: bytes | memoryview) -> int:
        """Write what can be written without waiting; return the number of bytes taken."""
        ...

    async def send(self, data: bytes) -> None:
        """Write all of ``data``, waiting as needed."""
        ...


class Outbox:
    def __init__(self, writer: WireWriter) -> None:
        self.writer = writer
        self._queue: deque[bytes] = deque()
        self._queued = 0
        self._wakeup = anyio.Event()
        self._drained = anyio.Event()
        self._closing = False
        self.broken = anyio.Event()  # set when the client stopped reading (EPIPE and friends)
        self._writes = 0  # messages (or their rests) written by ``run``: what ``finish`` watches
        self._wrote = anyio.Event()

    async def put(self, data: bytes) -> None:
        if self.broken.is_set():
            return
        if not self._queue:
            try:
                taken = self.writer.write_nowait(data)
            except OSError as exc:
                self._break(exc)
                return
            if taken == len(data):
                return
            data = data[taken:]
        self._queue.append(data)
        self._queued += len(data)
        self._wakeup.set()
        while self._queued > HIGH_WATER and not self.broken.is_set():
            self._drained = anyio.Event() if self._drained.is_set() else self._drained
            await self._drained.wait()

    async def run(self) -> None:
        """Drain the queue until ``close`` is called and everything queued is written."""
        while True:
            while self._queue:
                data = self._queue[0]
                try:
                    await self.writer.send(data)
                except OSError as exc:
                    self._break(exc)
                    return
                self._queue.popleft()
                self._queued -= len(data)
                self._writes += 1
                self._wrote.set()
                if self._queued <= HIGH_WATER:
                    self._drained.set()
            if self._closing:
                return
            self._wakeup = anyio.Event()
            await self._wakeup.wait()

    async def finish(self, stall: float) -> bool:
        """After ``close``: wait until all that is queued is written, for as long as the client keeps
        reading — a client that closed its stdin may still be reading replies, and each one it takes
        starts the wait again. False if it took nothing for ``stall`` seconds (the rest is dropped)."""
        while self._queue and not self.broken.is_set():
            before = self._writes
            self._wrote = anyio.Event()
            with anyio.move_on_after(stall):
                await self._wrote.wait()
            if self._writes == before:
                return False
        return True

    def close(self) -> None:
        """No more messages: let ``run`` finish once the queue is empty."""
        self._closing = True
        self._wakeup.set()

    def _break(self, exc: OSError) -> None:
        log.info("the client stopped reading", error=type(exc).__name__)
        self._queue.clear()
        self._queued = 0
        self._drained.set()
        self.broken.set()
