"""sysmcp.engine.pools against a real LVM thin pool on a loop device: a 96 MiB pool overcommitted by two
192 MiB thin volumes, one with ext4 filled until the pool is fuller than the filesystem. Runs only
where the kernel has device-mapper (this project's development VM has none: there the recorded lvs
reports of tests/engine/test_pools.py and tests/tools/test_disk_usage_pools.py stand in)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysmcp.engine.pools import thin_pools

MiB = 1 << 20

pytestmark = [
    pytest.mark.skipif(
        not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root: loop devices, LVM"
    ),
    pytest.mark.skipif(
        not os.path.exists("/dev/mapper/control"),
        reason="this kernel has no device-mapper (/dev/mapper/control)",
    ),
    pytest.mark.skipif(shutil.which("lvcreate") is None, reason="lvm2 is not installed"),
    pytest.mark.skipif(shutil.which("thin_check") is None, reason="thin-provisioning-tools is not installed"),
]


def run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120).stdout


@pytest.fixture
def thin_volume() -> Iterator[tuple[str, Path]]:
    work = Path(tempfile.mkdtemp(prefix="sysmcp-thin-"))
    vg = f"sysmcp{uuid.uuid4().hex[:8]}"
    image = work / "pv.img"
    with open(image, "wb") as handle:
        handle.truncate(256 * MiB)
    loop = run("losetup", "--find", "--show", str(image)).strip()
    mnt = work / "mnt"
    mnt.mkdir()
    try:
        run("pvcreate", "-q", loop)
        run("vgcreate", "-q", vg, loop)
        run("lvcreate", "-q", "--type", "thin-pool", "-L", "96M", "-n", "pool", vg)
        for name in ("thin1", "thin2"):
            run("lvcreate", "-q", "-V", "192M", "--thinpool", f"{vg}/pool", "-n", name)
        device = f"/dev/mapper/{vg}-thin1"
        run("mkfs.ext4", "-q", "-E", "nodiscard", device)
        run("mount", device, str(mnt))
        yield device, mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False, capture_output=True)
        subprocess.run(["vgremove", "-f", "-q", vg], check=False, capture_output=True)
        subprocess.run(["losetup", "-d", loop], check=False, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def test_a_filled_overcommitted_pool_is_fuller_than_its_roomy_filesystem(
    thin_volume: tuple[str, Path],
) -> None:
    device, mnt = thin_volume
    with open(mnt / "fill", "wb") as handle:
        for _ in range(72):
            handle.write(os.urandom(MiB))
        handle.flush()
        os.fsync(handle.fileno())
    fs = os.statvfs(mnt)
    fs_percent = 100 * (fs.f_blocks - fs.f_bfree) / fs.f_blocks
    pool = thin_pools([device], 30.0)[device]
    assert pool.volume.endswith("/thin1") and pool.name.endswith("/pool")
    assert pool.provisioned == 2 * 192 * MiB and pool.overcommitted == 2 * 192 * MiB - pool.size
    assert pool.data_percent > 70 and pool.fuller_than(round(fs_percent)), (pool, fs_percent)
