"""file_sha256 through the real server over real pipes, plus the worker's stop and change rules."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from sysmcp.engine.calls import never_cancelled, no_progress
from sysmcp.engine.faults import EngineError
from sysmcp.engine.hashing import CHUNK, FileRequest, hash_file
from sysmcp.protocol.failures import ToolError
from sysmcp.tools.errors import words
from tests.profile import needs_proc
from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio


@pytest.fixture
def specials(tmp_path: Path) -> Iterator[dict[str, str]]:
    """One of each thing that is not a regular file; reading any of them naively would hang or never end."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    listener.listen(1)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    try:
        yield {
            "FIFO": str(fifo),
            "character device": "/dev/zero",
            "socket": str(sock_path),
            "directory": str(tmp_path),
            "does not exist": str(dangling),
        }
    finally:
        listener.close()


async def test_special_files_are_refused_at_once_without_blocking(specials: dict[str, str]) -> None:
    async with spawn() as wire:
        await wire.initialize()
        for expected, path in specials.items():
            with anyio.fail_after(5):  # a FIFO opened for reading, or /dev/zero read, would never return
                reply = await wire.call("file_sha256", {"path": path}, progress="p")
            assert reply["result"]["isError"] is True, path
            assert expected in result_text(reply), result_text(reply)
        stdin = await wire.call("file_sha256", {"path": "/dev/stdin"})
        assert stdin["result"]["isError"] is True


async def test_digest_equals_sha256sum_and_expected_is_compared_in_any_case(tmp_path: Path) -> None:
    target = tmp_path / "release file.iso"
    target.write_bytes(os.urandom(3 * CHUNK + 17))
    reference = subprocess.run(["sha256sum", str(target)], capture_output=True, check=True).stdout.split()[0]
    digest = reference.decode()
    async with spawn() as wire:
        await wire.initialize()
        plain = await wire.call("file_sha256", {"path": str(target)})
        assert plain["result"]["structuredContent"]["sha256"] == digest
        assert plain["result"]["structuredContent"]["size_bytes"] == 3 * CHUNK + 17
        assert f"{digest}  {target}" in result_text(plain)
        assert "match" not in plain["result"]["structuredContent"]

        matching = await wire.call("file_sha256", {"path": str(target), "expected": digest.upper()})
        assert matching["result"]["isError"] is False
        assert matching["result"]["structuredContent"]["match"] is True
        assert "MATCH" in result_text(matching)

        other = hashlib.sha256(b"something else").hexdigest()
        mismatching = await wire.call("file_sha256", {"path": str(target), "expected": other})
        assert mismatching["result"]["isError"] is False  # a mismatch is an answer, not a failure
        assert mismatching["result"]["structuredContent"]["match"] is False
        assert "MISMATCH" in result_text(mismatching) and other in result_text(mismatching)

        malformed = await wire.call("file_sha256", {"path": str(target), "expected": "abc"})
        assert malformed["result"]["isError"] is True and "expected" in result_text(malformed)


@pytest.mark.parametrize("name", ["new\nline", "back\\slash", "both\\and\nnewline"])
async def test_the_digest_line_is_sha256sums_own_line_for_names_that_need_escaping(
    tmp_path: Path, name: str
) -> None:
    target = tmp_path / name
    target.write_bytes(b"abc")
    reference = subprocess.run(["sha256sum", str(target)], capture_output=True, check=True).stdout
    async with spawn() as wire:
        await wire.initialize()
        text = result_text(await wire.call("file_sha256", {"path": str(target)}))
    assert reference.startswith(b"\\")  # sha256sum marks an escaped line this way
    assert text.splitlines()[0] == reference.decode().rstrip("\n")


async def test_progress_counts_bytes_of_the_size_with_throughput(tmp_path: Path) -> None:
    target = tmp_path / "big.bin"
    with target.open("wb") as out:
        out.truncate(256 << 20)  # sparse: cheap to make, still 256 MiB to read and hash
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("file_sha256", {"path": str(target)}, progress="bytes")
        assert reply["result"]["structuredContent"]["sha256"] == hashlib.sha256(bytes(256 << 20)).hexdigest()
    progress = [n["params"] for n in wire.notifications if n["method"] == "notifications/progress"]
    assert progress[-1]["progress"] == progress[-1]["total"] == 256 << 20
    assert all(p["total"] == 256 << 20 for p in progress)
    assert all("/s" in p["message"] and "of 256.0 MiB" in p["message"] for p in progress)


async def test_cancelled_hash_of_a_large_file_gets_no_response_and_the_server_keeps_serving(
    tmp_path: Path,
) -> None:
    target = tmp_path / "huge.bin"
    with target.open("wb") as out:
        out.truncate(64 << 30)  # 64 GiB of holes: a minute or more to hash, so only a cancel ends it soon
    async with spawn() as wire:
        await wire.initialize()
        await wire.start_call("file_sha256", {"path": str(target)}, msg_id="hash", progress="h")
        first = await wire.receive()
        assert first["method"] == "notifications/progress"
        await wire.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "hash"}}
        )
        await wire.send({"jsonrpc": "2.0", "id": "after", "method": "ping"})
        with anyio.fail_after(5):
            while (message := await wire.receive()).get("id") != "after":
                assert message.get("id") != "hash"
        small = tmp_path / "small"
        small.write_bytes(b"still serving")
        reply = await wire.call("file_sha256", {"path": str(small)})
        assert reply["result"]["structuredContent"]["sha256"] == hashlib.sha256(b"still serving").hexdigest()
        for message in wire.notifications:
            assert message.get("id") != "hash"


class Cancelled(Exception):
    """Stands in for the cancellation anyio raises at a checkpoint (no event loop in a plain test)."""


class StopAfter:
    """A request 'cancelled' after ``chunks`` checkpoints, as anyio would signal it; it keeps the
    progress the engine reported."""

    def __init__(self, chunks: int) -> None:
        self.calls = 0
        self.chunks = chunks
        self.done = 0.0

    def report(self, done: float, total: float | None) -> None:
        self.done = done

    def cancel(self) -> None:
        self.calls += 1
        if self.calls >= self.chunks:
            raise Cancelled()


def request(path: Path) -> FileRequest:
    return FileRequest(os.fsencode(path), str(path), str(path))


def test_cancellation_stops_the_worker_within_one_chunk(tmp_path: Path) -> None:
    target = tmp_path / "big.bin"
    with target.open("wb") as out:
        out.truncate(64 * CHUNK)
    stop = StopAfter(3)
    with pytest.raises(Cancelled):
        hash_file(request(target), stop.report, stop.cancel)
    assert stop.done == 3 * CHUNK


def appender(path: Path) -> Callable[[], None]:
    """Writes to the file being hashed after the first chunk, like a log that is still growing."""
    appended: list[bool] = []

    def check() -> None:
        if not appended:
            appended.append(True)
            with path.open("ab") as out:
                out.write(b"more")

    return check


def test_a_file_that_grows_while_hashed_is_reported(tmp_path: Path) -> None:
    target = tmp_path / "growing.log"
    target.write_bytes(b"x" * (2 * CHUNK))
    outcome = hash_file(request(target), no_progress, appender(target))
    assert not isinstance(outcome, ToolError)
    digest = outcome.digest
    assert digest.changed is not None and "size changed" in digest.changed


async def test_a_changed_file_is_flagged_in_the_result_and_a_quiet_one_is_not(tmp_path: Path) -> None:
    quiet = tmp_path / "quiet"
    quiet.write_bytes(b"q")
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("file_sha256", {"path": str(quiet)})
    assert reply["result"]["structuredContent"]["changed_while_hashing"] is False
    assert "WARNING" not in result_text(reply)


def test_a_path_swapped_for_a_symlink_after_resolving_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_bytes(b"data")
    swapped = tmp_path / "swapped"
    swapped.symlink_to(real)  # as if it had been a regular file when the path was resolved
    with pytest.raises(EngineError) as refused:
        hash_file(request(swapped), no_progress, never_cancelled)
    assert "symbolic link" in words(refused.value)


def test_a_directory_swapped_for_a_symlink_after_resolving_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret").write_bytes(b"not for you")
    (tmp_path / "dir").symlink_to(elsewhere)  # as if 'dir' had been a directory when the path was resolved
    target = tmp_path / "dir" / "secret"
    with pytest.raises(EngineError) as refused:
        hash_file(request(target), no_progress, never_cancelled)
    assert "symbolic link" in words(refused.value)


@needs_proc
async def test_a_pseudo_file_that_never_ends_is_refused_instead_of_hashed_for_ever() -> None:
    """/proc/<pid>/pagemap reports size 0 and yields hundreds of GiB: stop past the growth allowance."""
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("file_sha256", {"path": "/proc/self/pagemap"})
    assert reply["result"]["isError"] is True
    assert "kept growing while being read" in result_text(reply)


async def test_a_tiny_file_is_said_without_a_rate_and_one_byte_in_the_singular(tmp_path: Path) -> None:
    """Issue 27: 'hashed in 0.00 s (0.0 MB/s)' for a 3-byte file; and once 'size: 1 bytes'."""
    (tmp_path / "three").write_bytes(b"abc")
    (tmp_path / "one").write_bytes(b"a")
    async with spawn() as wire:
        await wire.initialize()
        three = result_text(await wire.call("file_sha256", {"path": str(tmp_path / "three")}))
        one = result_text(await wire.call("file_sha256", {"path": str(tmp_path / "one")}))
    size_line = three.splitlines()[1]
    assert size_line.startswith("size: 3 bytes (3 B), hashed in ") and "/s" not in size_line
    assert one.splitlines()[1].startswith("size: 1 byte (1 B), hashed in ")
