"""FdTransport on real pipes: the asyncio read watch wakes on input, survives stale wake-ups and cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
from collections.abc import Iterator

import anyio
import pytest

from sysmcp.protocol.outbox import Outbox
from sysmcp.protocol.stdio import FdTransport

pytestmark = pytest.mark.anyio


@pytest.fixture
def pipe() -> Iterator[tuple[int, int, int]]:
    """A client→server pipe (read end, write end) and a sink for what the server writes."""
    read_fd, write_fd = os.pipe()
    sink = os.open(os.devnull, os.O_WRONLY)
    yield read_fd, write_fd, sink
    for fd in (read_fd, write_fd, sink):
        with contextlib.suppress(OSError):
            os.close(fd)


def _watched(read_fd: int) -> bool:
    selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
    try:
        selector.get_key(read_fd)
    except KeyError:
        return False
    return True


async def test_reads_what_arrives_while_waiting_and_ends_unwatched(pipe: tuple[int, int, int]) -> None:
    read_fd, write_fd, sink = pipe
    transport = FdTransport(read_fd, sink)
    async with anyio.create_task_group() as group:

        async def later() -> None:
            await anyio.sleep(0.01)
            os.write(write_fd, b"one\n")

        group.start_soon(later)
        assert await transport.receive() == b"one\n"
    os.write(write_fd, b"two\n")
    await anyio.sleep(0.01)  # input while nobody waits: the watch lets go instead of spinning
    assert not _watched(read_fd)
    assert await transport.receive() == b"two\n"
    os.close(write_fd)
    assert await transport.receive() == b""
    assert not _watched(read_fd)


async def test_a_wake_up_with_nothing_to_read_waits_again(pipe: tuple[int, int, int]) -> None:
    read_fd, write_fd, sink = pipe
    transport = FdTransport(read_fd, sink)
    os.write(write_fd, b"x\n")
    assert await transport.receive() == b"x\n"
    # The read end is non-blocking now: a wake-up the loop queued before a read drained the pipe
    # costs a retry, never a read that blocks the whole loop.
    assert not os.get_blocking(read_fd)
    os.write(write_fd, b"stolen\n")
    assert os.read(read_fd, 100) == b"stolen\n"  # drained behind the transport's back
    with anyio.move_on_after(0.05) as scope:
        await transport.receive()
    assert scope.cancelled_caught
    assert not _watched(read_fd)


async def test_one_reader_at_a_time(pipe: tuple[int, int, int]) -> None:
    read_fd, write_fd, sink = pipe
    transport = FdTransport(read_fd, sink)
    async with anyio.create_task_group() as group:
        group.start_soon(transport.receive)
        await anyio.sleep(0.01)
        with pytest.raises(anyio.BusyResourceError):
            await transport.receive()
        os.write(write_fd, b"for the first\n")


async def test_a_cancelled_receive_leaves_nothing_registered(pipe: tuple[int, int, int]) -> None:
    read_fd, write_fd, sink = pipe
    transport = FdTransport(read_fd, sink)
    with anyio.move_on_after(0.01):
        await transport.receive()
    assert not _watched(read_fd)
    os.write(write_fd, b"after\n")
    assert await transport.receive() == b"after\n"


def _read_line(fd: int) -> bytes:
    """What ``fd`` gives up to a newline, or until nothing more comes for a few seconds."""
    got = b""
    while not got.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], 5)
        if not ready:
            break
        got += os.read(fd, 1 << 16)
    return got


async def test_a_line_the_outbox_began_is_finished_when_its_writer_is_cancelled() -> None:
    """A reply longer than the pipe holds: ``put`` writes what fits at once and queues the rest; a
    signal then cancels the writer waiting for the client, which must still get the whole line."""
    read_end, write_end = os.pipe()
    try:
        outbox = Outbox(FdTransport(read_end, write_end))
        line = b"x" * (1 << 20) + b"\n"
        await outbox.put(line)  # part written, the rest queued
        writer = anyio.CancelScope()

        async def write() -> None:
            with writer:
                await outbox.run()

        async with anyio.create_task_group() as group:
            group.start_soon(write)
            await anyio.wait_all_tasks_blocked()  # the writer waits for the client to read
            writer.cancel()  # SIGTERM
            got = await anyio.to_thread.run_sync(_read_line, read_end)
        assert got == line
    finally:
        os.close(read_end)
        os.close(write_end)
