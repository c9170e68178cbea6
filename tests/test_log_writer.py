"""Logging never blocks the server: lines for stderr go through a bounded queue and a writer thread."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import structlog

from sysmcp.logconfig import DROPPED_EVENT, QueuedLogWriter, configure, log_writer
from tests.wire import read_stderr, spawn

WAIT = 10.0  # a bound on waits that should end at once; never a measure of speed


def fill(fd: int) -> int:
    """Write to the pipe ``fd`` until it is full; return how many bytes it took."""
    os.set_blocking(fd, False)
    total = 0
    try:
        for size in (4096, 1):  # a pipe takes a small write whole or not at all: end byte by byte
            try:
                while True:
                    total += os.write(fd, b"x" * size)
            except BlockingIOError:
                pass
    finally:
        os.set_blocking(fd, True)
    return total


def read_until_eof(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def in_thread(target: Any) -> threading.Event:
    """Run ``target`` in a daemon thread; the event is set once it returned."""
    done = threading.Event()

    def run() -> None:
        target()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


class Pipe:
    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self._open = {self.read_fd, self.write_fd}

    def close(self, fd: int) -> None:
        if fd in self._open:
            self._open.discard(fd)
            os.close(fd)


@pytest.fixture
def pipe() -> Iterator[Pipe]:
    made = Pipe()
    yield made
    made.close(made.read_fd)
    made.close(made.write_fd)


def test_writes_return_at_once_while_the_pipe_is_full_and_the_dropped_count_follows_once_drained(
    pipe: Pipe,
) -> None:
    read_fd, write_fd = pipe.read_fd, pipe.write_fd
    filler = fill(write_fd)
    writer = QueuedLogWriter(write_fd, max_lines=10)
    lines = [json.dumps({"event": "line", "n": n}) + "\n" for n in range(1000)]

    def write_all() -> None:
        for line in lines:
            writer.write(line)
            writer.flush()

    wrote = in_thread(write_all)
    assert wrote.wait(WAIT), "a write blocked on the full pipe"
    stuck = []
    drained = in_thread(lambda: stuck.append(writer.drain(timeout=0.05)))
    assert drained.wait(WAIT) and stuck == [False]  # bounded, and says it could not write everything

    received: list[bytes] = []
    reader = in_thread(lambda: received.append(read_until_eof(read_fd)))
    assert writer.drain(timeout=WAIT) and writer.dropped == 0
    pipe.close(write_fd)  # the reader sees the end
    assert reader.wait(WAIT)

    data = received[0][filler:]
    records = [json.loads(line) for line in data.decode().splitlines()]
    reported = [r for r in records if r["event"] == DROPPED_EVENT]
    assert reported and all(r["level"] == "warning" and "timestamp" in r for r in reported)
    kept = [r["n"] for r in records if r["event"] == "line"]
    assert kept == sorted(kept) and len(kept) < len(lines)
    assert len(kept) + sum(r["dropped"] for r in reported) == len(lines)  # written, or counted as dropped
    assert writer.lost == len(lines) - len(kept)  # still counted once reported: what a caller compares


def test_every_line_arrives_whole_under_concurrent_writers(pipe: Pipe) -> None:
    read_fd, write_fd = pipe.read_fd, pipe.write_fd
    writer = QueuedLogWriter(write_fd, max_lines=1 << 20, max_bytes=1 << 30)
    threads, per_thread = 8, 300
    start = threading.Barrier(threads)

    def line(t: int, n: int) -> str:
        return json.dumps({"t": t, "n": n, "pad": chr(97 + t) * (n * 37 % 9000)})

    def work(t: int) -> None:
        start.wait(WAIT)
        for n in range(per_thread):
            if (t + n) % 2:
                print(line(t, n), file=writer, flush=True)  # as structlog's PrintLogger: text, then "\n"
            else:
                writer.write(line(t, n) + "\n")  # as logging.StreamHandler: one write

    received: list[bytes] = []
    reader = in_thread(lambda: received.append(read_until_eof(read_fd)))
    workers = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(WAIT)
        assert not worker.is_alive()
    assert writer.drain(timeout=WAIT) and writer.dropped == 0
    pipe.close(write_fd)  # the reader sees the end
    assert reader.wait(WAIT)

    got = received[0].decode().splitlines()
    expected = [line(t, n) for t in range(threads) for n in range(per_thread)]
    assert sorted(got) == sorted(expected)


def test_a_stream_with_a_descriptor_gets_one_writer_however_often_it_is_configured(
    pipe: Pipe,
) -> None:
    write_fd = pipe.write_fd
    stream = os.fdopen(os.dup(write_fd), "w")
    try:
        first = log_writer(stream)
        assert isinstance(first, QueuedLogWriter)
        assert log_writer(stream) is first
    finally:
        stream.close()
    memory = io.StringIO()
    assert log_writer(memory) is memory


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    config = structlog.get_config()
    yield
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restore_logging")
def test_an_in_memory_stream_is_written_at_once() -> None:
    memory = io.StringIO()
    configure("info", memory)
    structlog.get_logger("test").info("hello", n=1)
    logging.getLogger("library").warning("from the standard library")
    records = [json.loads(line) for line in memory.getvalue().splitlines()]
    assert [r["event"] for r in records] == ["hello", "from the standard library"]


@pytest.mark.anyio
async def test_the_server_keeps_answering_ping_when_its_stderr_is_never_read() -> None:
    big_id = "r" * 4000  # each response to an unknown id is logged at debug level, id included
    responses = 1500  # some 6 MB of log lines: far past the 64 KiB a pipe holds
    async with spawn("--log-level", "debug") as wire:
        with anyio.fail_after(60):
            await wire.initialize()
            for n in range(responses):
                await wire.send({"jsonrpc": "2.0", "id": f"{big_id}{n}", "result": {}})
            reply = await wire.request("ping")
            assert reply["result"] == {}

            assert wire.process.stderr is not None
            stderr = wire.process.stderr
            text = bytearray()

            async def read_all() -> None:
                try:
                    while True:
                        text.extend(await stderr.receive())
                except anyio.EndOfStream:
                    pass

            async with anyio.create_task_group() as group:
                group.start_soon(read_all)
                assert (await wire.request("ping"))["result"] == {}
                await wire.close_stdin()
                assert await wire.wait_exit(WAIT) == 0

    records = [json.loads(line) for line in text.decode().splitlines()]  # whole JSON lines only
    dropped = [r for r in records if r["event"] == DROPPED_EVENT]
    assert dropped and all(r["dropped"] > 0 for r in dropped)
    ignored = [r for r in records if r["event"] == "response to no request of ours ignored"]
    assert 0 < len(ignored) < responses
    assert len(ignored) + sum(r["dropped"] for r in dropped) == responses


@pytest.mark.anyio
async def test_the_server_exits_at_end_of_input_even_though_its_stderr_is_stuck() -> None:
    async with spawn("--log-level", "debug") as wire:
        with anyio.fail_after(60):
            await wire.initialize()
            for n in range(300):
                await wire.send({"jsonrpc": "2.0", "id": "r" * 4000 + str(n), "result": {}})
            assert (await wire.request("ping"))["result"] == {}
            await wire.close_stdin()
            assert await wire.wait_exit(WAIT) == 0  # the exit drain gives up after its bound
            assert (await read_stderr(wire.process)).startswith("{")  # what the pipe held, read to its end


# structlog is imported only for a line that passes the level: a quiet session never loads it.
QUIET_THEN_LOUD = """
import logging, sys
from sysmcp.logconfig import configure, get_logger
configure("warning")
log = get_logger("sysmcp.test")
log.info("below the level", n=1)
log.debug("below it too")
quiet = "structlog" in sys.modules
log.warning("at the level", n=2)
try:
    raise RuntimeError("boom")
except RuntimeError:
    log.exception("failed")
logging.getLogger("library").warning("from the standard library")
sys.stdout.write(f"{quiet} {'structlog' in sys.modules}")
"""


def test_lines_below_the_level_import_no_structlog_and_lines_at_it_are_json() -> None:
    done = subprocess.run(
        [sys.executable, "-c", QUIET_THEN_LOUD], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "False True"  # not imported for the quiet lines, imported for the first loud one
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(r["event"], r["level"]) for r in records] == [
        ("at the level", "warning"),
        ("failed", "error"),
        ("from the standard library", "warning"),
    ]
    assert records[0]["n"] == 2 and "RuntimeError: boom" in records[1]["exception"]
    assert records[2]["logger"] == "library" and all("timestamp" in r for r in records)


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/task"), reason="a thread's signal mask is read from /proc (Linux)"
)
def test_the_writer_thread_leaves_ctrl_c_kill_and_hang_up_to_the_main_thread() -> None:
    """A signal sent to the process goes to any thread that does not block it. Taken by the writer thread,
    Ctrl-C did not interrupt the main thread's blocking read of an ``--inventory`` pipe: ``sysmcp call``
    hung until the pipe was written. The writer blocks them, so they interrupt the main thread."""
    read_fd, write_fd = os.pipe()
    try:
        writer = QueuedLogWriter(write_fd)
        writer.write("one line\n")
        assert os.read(read_fd, 100) == b"one line\n"  # the thread runs: its mask is set
        blocked = blocked_signals(writer._thread.native_id)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            assert blocked & (1 << (signum - 1)), (signum, hex(blocked))
        assert not blocked_signals(threading.main_thread().native_id) & (1 << (signal.SIGINT - 1))
    finally:
        os.close(read_fd)


def blocked_signals(thread_id: int | None) -> int:
    """The thread's blocked-signal mask, as /proc shows it (``SigBlk``: bit N-1 for signal N)."""
    with open(f"/proc/self/task/{thread_id}/status") as status:
        line = next(line for line in status if line.startswith("SigBlk:"))
    return int(line.split()[1], 16)
