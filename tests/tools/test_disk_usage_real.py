"""disk_usage against the real machine: the same mounts and the same figures as the real df."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from sysmcp.fs.mounts import PSEUDO_TYPES
from sysmcp.fs.paths import PathPolicy
from sysmcp.protocol.context import RequestContext
from sysmcp.results import ResultStore
from sysmcp.tools.disk_usage import DiskUsage
from sysmcp.tools.registry import ToolContext

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        shutil.which("df") is None or not Path("/proc/self/mountinfo").exists(), reason="needs df"
    ),
]


class NullPeer:
    async def notify(self, method: str, params: dict[str, Any]) -> None:
        pass


def context() -> ToolContext:
    return ToolContext(RequestContext(1, "tools/call", NullPeer()), PathPolicy(), ResultStore())


def df(*args: str) -> dict[str, list[str]]:
    """``df -P …`` rows by mount point: [source, type?, figures…] (a later duplicate row wins)."""
    done = subprocess.run(["df", "-P", *args], capture_output=True, text=True, timeout=30)
    rows: dict[str, list[str]] = {}
    for line in done.stdout.splitlines()[1:]:
        fields = line.split(None, 6 if "-T" in args else 5)
        rows[fields[-1]] = fields[:-1]
    return rows


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


async def test_the_mounts_listed_are_dfs_real_filesystems() -> None:
    ours = await listing()
    theirs = {point for point, row in df("-T").items() if row[1] not in PSEUDO_TYPES}
    assert set(ours) == theirs
    assert all(fs["status"] == "ok" for fs in ours.values())


async def test_with_all_the_mounts_listed_are_those_of_df_a() -> None:
    handler = DiskUsage()
    output = await handler({"unit": "percent", "all": True}, context())
    ours = Counter(fs["mount_point"] for fs in output.structured["filesystems"])
    assert ours == Counter(df_points("-a"))


async def test_bytes_and_inodes_agree_with_df_read_just_before_and_after() -> None:
    bytes_before, inodes_before = df("-B1", "-T"), df("-i", "-T")
    ours = await listing()
    bytes_after, inodes_after = df("-B1", "-T"), df("-i", "-T")
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
    handler = DiskUsage()
    for path in [p for p in candidates if Path(p).exists()]:
        output = await handler({"path": path, "unit": "percent"}, context())
        entry = output.structured["filesystems"][0]
        (theirs,) = df_points(path)
        assert entry["mount_point"] == theirs, path
        assert output.text.startswith(f"{Path(path).resolve()} is on {theirs} ("), output.text
