"""Real btrfs filesystems whose chunk figures a sysfs-only reading gets wrong: one shrunk with
``btrfs filesystem resize`` (its block device is bigger than the filesystem: slack), and a RAID1 whose
metadata is full and cannot grow, before and after one device is added (a RAID1 chunk needs room on
two devices, so one added device is not enough). Each time disk_usage is asked, and ``btrfs
filesystem usage -b`` is read for comparison; the RAID1's advice is then followed.

Run by tests/tools/test_btrfs_profiles_real.py as root in a private mount namespace of its own
(``tests.loopfs.in_private_namespace``); prints one JSON object.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio

from tests.tools.btrfs_chunks_scenario import ask, fill, run

MiB = 1 << 20


def loop(work: Path, name: str, size: int) -> str:
    image = work / name
    with open(image, "wb") as handle:
        handle.truncate(size)
    made = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True, check=True)
    return made.stdout.strip()


def usage(mount: Path) -> dict[str, int]:
    """``btrfs filesystem usage -b``'s overall figures, by name."""
    text = subprocess.run(
        ["btrfs", "filesystem", "usage", "-b", str(mount)], capture_output=True, text=True, check=True
    ).stdout
    return {
        key: int(found.group(1))
        for key in ("Device size", "Device allocated", "Device unallocated", "Device slack")
        if (found := re.search(rf"^\s*{key}:\s+(\d+)", text, re.M))
    }


def shrunk(work: Path) -> dict[str, Any]:
    """1 GiB made, 100 MiB written, the filesystem shrunk by 400 MiB (the loop device stays 1 GiB)."""
    mount = work / "shrunk"
    mount.mkdir()
    device = loop(work, "shrunk.img", 1024 * MiB)
    try:
        subprocess.run(["mkfs.btrfs", "-q", "-f", device], check=True, capture_output=True)
        subprocess.run(["mount", device, str(mount)], check=True)
        with open(mount / "file", "wb") as handle:
            handle.write(b"\x5a" * (100 * MiB))
        subprocess.run(["btrfs", "filesystem", "sync", str(mount)], check=True)
        subprocess.run(
            ["btrfs", "filesystem", "resize", "-400M", str(mount)], check=True, capture_output=True
        )
        answer = {"usage": usage(mount), "reply": anyio.run(ask, mount, False)}
        subprocess.run(["umount", str(mount)], check=True)
        return answer
    finally:
        run("losetup", "-d", device)


def raid1(work: Path) -> dict[str, Any]:
    """Two 512 MiB devices, data and metadata RAID1, driven to full metadata as the single-device
    scenario is; then one device added; then the answer's steps for RAID1."""
    mount = work / "raid1"
    mount.mkdir()
    devices = [loop(work, f"raid1-{n}.img", 512 * MiB) for n in range(2)]
    spares = [loop(work, f"spare-{n}.img", 256 * MiB) for n in range(2)]
    try:
        subprocess.run(
            ["mkfs.btrfs", "-q", "-f", "-d", "raid1", "-m", "raid1", *devices],
            check=True,
            capture_output=True,
        )
        subprocess.run(["mount", "-o", "max_inline=2048", devices[0], str(mount)], check=True)
        answer: dict[str, Any] = {"fill": fill(mount), "full": anyio.run(ask, mount, False)}
        answer["add_one"] = run("btrfs", "device", "add", "-f", spares[0], str(mount))
        answer["balance_one"] = run("btrfs", "balance", "start", "-dusage=50", str(mount))
        answer["one_added"] = anyio.run(ask, mount, False)
        answer["add_two"] = run("btrfs", "device", "add", "-f", spares[1], str(mount))
        answer["balance_two"] = run("btrfs", "balance", "start", "-dusage=50", str(mount))
        answer["remove"] = run("btrfs", "device", "remove", *spares, str(mount))
        answer["after"] = anyio.run(ask, mount, False)
        subprocess.run(["umount", str(mount)], check=True)
        return answer
    finally:
        for device in devices + spares:
            run("losetup", "-d", device)


def main(work: Path) -> dict[str, Any]:
    return {"shrunk": shrunk(work), "raid1": raid1(work)}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
