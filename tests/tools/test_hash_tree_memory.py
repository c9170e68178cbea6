"""hash_tree's memory does not grow with the number of files: the manifest is merged from sorted runs.

Measured in a spawned server (its ``VmHWM``, the peak resident set) after hashing 10,000 and then
100,000 files, each in a fresh process. Keeping every manifest line as Python objects, as hash_tree
once did, costs about 500 bytes a file more: 45 MB more for the bigger tree. What may grow is the kept
manifest itself (its bytes and the stored text: about 2 x 8 MB here) and fixed-size buffers.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from tests.wire import result_text, spawn

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is read from /proc"),
]

# Bytes of peak RSS the 90,000 more files may add. Measured: 17 MB now (the kept manifest twice, one
# run buffer), 23 MB where nothing forks (every run buffered here), 45 MB with every line kept as objects.
GROWTH_CEILING = 30 << 20


def build(root: Path, files: int, per_dir: int = 1000) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for i in range(files):
        if not i % per_dir:
            directory = root / f"d{i // per_dir:03d}"
            directory.mkdir()
        fd = os.open(directory / f"f{i:06d}", flags, 0o644)
        os.write(fd, b"%d" % i)
        os.close(fd)


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


async def peak_after_hashing(root: Path, files: int) -> int:
    async with spawn() as wire:
        await wire.initialize()
        with anyio.fail_after(120):
            reply = await wire.call("hash_tree", {"path": str(root), "max_lines": 0, "timeout_s": 120})
        assert reply["result"]["isError"] is False, result_text(reply)
        structured = reply["result"]["structuredContent"]
        assert structured["complete"] is True and structured["files"] == files
        return peak_rss(wire.process.pid)


async def test_peak_memory_barely_grows_from_ten_thousand_to_a_hundred_thousand_files(tmp_path: Path) -> None:
    small, big = tmp_path / "small", tmp_path / "big"
    small.mkdir()
    big.mkdir()
    build(small, 10_000)
    build(big, 100_000)
    at_10k = await peak_after_hashing(small, 10_000)
    at_100k = await peak_after_hashing(big, 100_000)
    growth = at_100k - at_10k
    assert growth < GROWTH_CEILING, f"peak RSS {at_10k / 1e6:.0f} MB -> {at_100k / 1e6:.0f} MB"
