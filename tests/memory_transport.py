"""An in-process transport for session tests: bytes fed in, what the session wrote collected."""

from __future__ import annotations

import anyio


class MemoryTransport:
    """An in-process transport for tests: feed bytes in, collect what the session wrote."""

    def __init__(self) -> None:
        self._incoming_send, self._incoming = anyio.create_memory_object_stream[bytes](1 << 16)
        self.written = bytearray()
        self.wrote = anyio.Event()

    def feed(self, data: bytes) -> None:
        """Queue bytes for the session to read; ``b""`` ends the stream."""
        if data:
            self._incoming_send.send_nowait(data)
        else:
            self._incoming_send.close()

    async def receive(self) -> bytes:
        try:
            return await self._incoming.receive()
        except anyio.EndOfStream:
            return b""

    def write_nowait(self, data: bytes | memoryview) -> int:
        self.written += data
        self.wrote.set()
        self.wrote = anyio.Event()
        return len(data)

    async def send(self, data: bytes) -> None:
        self.write_nowait(data)
