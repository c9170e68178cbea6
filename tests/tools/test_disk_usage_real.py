"""disk_usage against the real machine: the same mounts and the same figures as the real df."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from sysmcp.engine.mounts import MEMORY_TYPES
from sysmcp.engine.mounts._mounts import PSEUDO_TYPES
from sysmcp.tools.disk_usage import DiskUsage
from sysmcp.tools.registry import ToolContext
from tests.harness import tool_context
from tests.profile import UNDER_POSIX_PROFILE
from tests.tools.writer import quiet_filesystem, writing

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        shutil.which("df") is None or not Path("/proc/self/mountinfo").exists(), reason="needs df"
    ),
]


def context() -> ToolContext:
    return tool_context()


def df(*args: str) -> dict[str, list[str]]:
    """``df -P …`` rows by mount point: [source, type?, figures…] (a later duplicate row wins)."""
    done = subprocess.run(["df", "-P", *args], capture_output=True, text=True, timeout=30)
    rows: dict[str, list[str]] = {}
    for line in done.stdout.splitlines()[1:]:
        fields = line.split(None, 6 if "-T" in args else 5)
        rows[fields[-1]] = fields[:-1]
    return rows


def mount_table() -> bytes:
    return Path("/proc/self/mountinfo").read_bytes()


async def while_mounts_hold(
    read: Callable[[], Awaitable[tuple[Any, Any]]], attempts: int = 5
) -> tuple[Any, Any]:
    """``read()`` (sysmcp's answer and df's) again until no mount was made or unmade while it ran:
    other tests (a container's overlay, a loop device) mount in this namespace in parallel, and a
    mount that came or went between the two readings is in one and not the other."""
    for _ in range(attempts):
        before = mount_table()
        got = await read()
        if mount_table() == before:
            return got
    pytest.fail(f"the mount table changed during each of {attempts} readings")


def df_points(*args: str) -> list[str]:
    done = subprocess.run(["df", "-P", *args], capture_output=True, text=True, timeout=30)
    return [line.split(None, 5)[-1] for line in done.stdout.splitlines()[1:]]


async def listing(**args: Any) -> dict[str, dict[str, Any]]:
    handler = DiskUsage()
    with anyio.fail_after(30):
        output = await handler({"unit": "percent", "all": False, **args}, context())
    return {fs["mount_point"]: fs for fs in output.structured["filesystems"]}


def between(value: int, first: int, second: int, slack: int) -> bool:
    return min(first, second) - slack <= value <= max(first, second) + slack


async def test_the_mounts_listed_are_dfs_real_and_memory_filesystems() -> None:
    async def read() -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
        return await listing(), df("-T")

    ours, table = await while_mounts_hold(read)
    theirs = {point for point, row in table.items() if row[1] not in PSEUDO_TYPES - MEMORY_TYPES}
    assert set(ours) == theirs
    assert all(fs["status"] == "ok" for fs in ours.values())


async def test_with_all_the_mounts_listed_are_those_of_df_a() -> None:
    handler = DiskUsage()

    async def read() -> tuple[Counter[str], Counter[str]]:
        output = await handler({"unit": "percent", "all": True}, context())
        return Counter(fs["mount_point"] for fs in output.structured["filesystems"]), Counter(df_points("-a"))

    ours, theirs = await while_mounts_hold(read)
    assert ours == theirs


async def test_bytes_and_inodes_agree_with_df_read_just_before_and_after() -> None:
    async def read() -> tuple[Any, Any]:
        before = df("-B1", "-T"), df("-i", "-T")
        ours = await listing()
        return (before, ours), (df("-B1", "-T"), df("-i", "-T"))

    ((bytes_before, inodes_before), ours), (bytes_after, inodes_after) = await while_mounts_hold(read)
    assert ours
    for point, fs in ours.items():
        # rows: source, type, total, used, available, capacity
        b1, b2 = bytes_before[point], bytes_after[point]
        slack = max(64 << 20, fs["total_bytes"] // 1000)  # what others write between the readings
        assert between(fs["total_bytes"], int(b1[2]), int(b2[2]), slack), point
        assert between(fs["used_bytes"], int(b1[3]), int(b2[3]), slack), point
        assert between(fs["free_bytes"], int(b1[4]), int(b2[4]), slack), point
        assert between(fs["percent_used"], int(b1[5].rstrip("%")), int(b2[5].rstrip("%")), 1), point
        assert fs["total_bytes"] == fs["used_bytes"] + fs["free_bytes"] + fs["reserved_bytes"]
        assert (fs["device"], fs["fs_type"]) == (b1[0], b1[1])
        i1, i2 = inodes_before[point], inodes_after[point]
        if fs["inodes"] is None:
            assert i1[2] in ("0", "-"), point
            continue
        inode_slack = max(1000, fs["inodes"]["total"] // 1000)
        assert between(fs["inodes"]["total"], int(i1[2]), int(i2[2]), inode_slack), point
        assert between(fs["inodes"]["used"], int(i1[3]), int(i2[3]), inode_slack), point
        assert between(fs["inodes"]["free"], int(i1[4]), int(i2[4]), inode_slack), point
        assert between(fs["inodes"]["percent_used"], int(i1[5].rstrip("%")), int(i2[5].rstrip("%")), 1), point


async def test_a_path_resolves_to_the_mount_df_names_for_it(tmp_path: Path) -> None:
    candidates = ["/", str(tmp_path), "/dev/shm", "/proc/self/status", "/sys/fs/cgroup"]
    if UNDER_POSIX_PROFILE:  # /proc and /sys are hidden from sysmcp there, as macOS has neither
        candidates = [p for p in candidates if not p.startswith(("/proc/", "/sys/"))]
    handler = DiskUsage()
    for path in [p for p in candidates if Path(p).exists()]:
        output = await handler({"path": path, "unit": "percent"}, context())
        entry = output.structured["filesystems"][0]
        (theirs,) = df_points(path)
        assert entry["mount_point"] == theirs, path
        assert output.text.startswith(f"{Path(path).resolve()} is on {theirs} ("), output.text


DEAD_FUSE_SCRIPT = """
import ctypes, os, sys, tempfile, threading
import anyio
from sysmcp.engine.mounts import MEMORY_TYPES
from sysmcp.tools.disk_usage import DiskUsage
from tests.tools.test_disk_usage_real import context

target = tempfile.mkdtemp()
fd = os.open("/dev/fuse", os.O_RDWR)  # never read: the filesystem's daemon is dead
options = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
if ctypes.CDLL(None, use_errno=True).mount(b"deadfuse", target.encode(), b"fuse.deadfuse", 0, options):
    print("skip: cannot mount fuse here:", os.strerror(ctypes.get_errno()))
    sys.exit(0)
handler = DiskUsage(timeout=0.3)
args = {"unit": "percent", "all": False}
for attempt in range(3):
    output = anyio.run(handler, args, context())
    entries = {fs["mount_point"]: fs for fs in output.structured["filesystems"]}
    print(entries[target]["status"], entries[target]["reason"], entries["/"]["status"])
one = anyio.run(handler, {"path": target + "/x", "unit": "percent"}, context())
print(one.structured["filesystems"][0]["mount_point"] == target, one.structured["filesystems"][0]["status"])
print("threads", threading.active_count())
"""


def test_a_real_dead_fuse_mount_is_reported_and_not_probed_again() -> None:
    """A FUSE mount whose daemon never answers blocks statfs forever: the real hung mount."""
    unshare = shutil.which("unshare")
    if unshare is None or not Path("/dev/fuse").exists():
        pytest.skip("needs unshare and /dev/fuse")
    if subprocess.run([unshare, "-m", "--propagation", "private", "true"], capture_output=True).returncode:
        pytest.skip("cannot create a private mount namespace here")
    done = subprocess.run(
        [unshare, "-m", "--propagation", "private", sys.executable, "-c", DEAD_FUSE_SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    if done.stdout.startswith("skip:"):
        pytest.skip(done.stdout.strip())
    lines = done.stdout.splitlines()
    assert lines[0] == "no_answer did not answer within 0.3 s (a hung mount?) ok"
    assert all("not probed again" in line and line.endswith(" ok") for line in lines[1:3])
    assert lines[3] == "True no_answer"
    assert lines[4] == "threads 2"  # the main thread and the one stuck probe, however often we ask


async def test_the_default_listing_is_the_mounts_df_shows_by_default() -> None:
    """Memory filesystems with a size (tmpfs, devtmpfs) in, size-less pseudo ones out, as plain df."""
    ours = await listing()
    assert set(ours) == set(df_points())


async def test_a_writer_filling_the_disk_is_seen_at_its_rate_with_a_time_to_full(tmp_path: Path) -> None:
    with quiet_filesystem(tmp_path) as place, writing(place / "growing.bin") as _:
        target = place / "growing.bin"
        before, started = target.stat().st_size, time.monotonic()
        with anyio.fail_after(30):
            output = await DiskUsage()({"path": str(place), "unit": "percent", "sample_s": 2}, context())
        truth = (target.stat().st_size - before) / (time.monotonic() - started)
    rate = output.structured["filesystems"][0]["rate"]
    assert output.structured["sample_s"] == 2 and rate["samples"] >= 5
    assert truth / 2 <= rate["fill_rate_bytes_per_s"] <= truth * 2, (rate, truth)
    assert rate["seconds_to_full"] is not None and rate["seconds_to_full"] > 0
    assert "full in about " in output.text and "/s" in output.text, output.text
