"""find_duplicates' memory does not grow with the number of files, counting its worker processes.

Measured on a spawned server: the peak resident set (``VmHWM``) of the server plus that of every
process it forks, sampled while the call runs, after searching 10,000 and then 100,000 files (each
in a fresh server) of which every one shares its size with others, so every file is a candidate.
Forked workers count the parent's resident pages again, so a size index built before forking (names
and identities of every file in arrays, about 100 bytes a file with these long names) would be paid
once per process: 25 MB and more of growth for the bigger tree. Listing
into sorted runs on disk, merged one size at a time, keeps the growth to a few buffers.
"""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from tests.wire import result_text, spawn

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is read from /proc"),
]

# Bytes of summed peak RSS the 90,000 more files may add. See the module docstring for what an index
# built before forking would take; what may grow is run buffers, the merge's read-ahead and the allocator's slack.
GROWTH_CEILING = 12 << 20
NAME = "a-rather-long-file-name-as-real-trees-have-{:06d}.dat"  # 50 bytes a name


def build(root: Path, files: int, per_dir: int = 1000) -> None:
    """Files of 1 to 200 random bytes: every size shared by hundreds of files, few real copies."""
    rng = random.Random(files)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for i in range(files):
        if not i % per_dir:
            directory = root / f"directory-{i // per_dir:03d}"
            directory.mkdir()
        fd = os.open(directory / NAME.format(i), flags, 0o644)
        os.write(fd, rng.randbytes(rng.randint(1, 200)))
        os.close(fd)


def _status(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for task in tasks:
        try:
            found += [int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


class SummedPeak:
    """The server's peak RSS plus the peak of every child seen, sampled every few milliseconds."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peaks: dict[int, int] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.done.wait(0.003):
            self.sample()

    def sample(self) -> None:
        for pid in [self.pid, *_children(self.pid)]:
            self.peaks[pid] = max(self.peaks.get(pid, 0), _status(pid, "VmHWM:"))

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        self.sample()
        return sum(self.peaks.values())


async def peak_after_searching(root: Path, files: int) -> int:
    async with spawn() as wire:
        await wire.initialize()
        sampler = SummedPeak(wire.process.pid)
        try:
            await wire.start_call("find_duplicates", {"path": str(root), "timeout_s": 120}, msg_id=1)
            reply = await wire.response(1, timeout=120)
        finally:
            peak = sampler.stop()
        assert reply["result"]["isError"] is False, result_text(reply)
        structured = reply["result"]["structuredContent"]
        assert structured["complete"] is True and structured["files_scanned"] == files
        assert structured["files_read"] == files  # every file was a candidate, and was read
        return peak


async def test_summed_peak_memory_barely_grows_from_ten_thousand_to_a_hundred_thousand_files(
    tmp_path: Path,
) -> None:
    small, big = tmp_path / "small", tmp_path / "big"
    small.mkdir()
    big.mkdir()
    build(small, 10_000)
    build(big, 100_000)
    at_10k = await peak_after_searching(small, 10_000)
    at_100k = await peak_after_searching(big, 100_000)
    growth = at_100k - at_10k
    assert growth < GROWTH_CEILING, f"summed peak RSS {at_10k / 1e6:.0f} MB -> {at_100k / 1e6:.0f} MB"
