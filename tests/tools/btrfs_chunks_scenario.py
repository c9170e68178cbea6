"""A real btrfs driven into chunk exhaustion: every device byte allocated to chunks, the data chunks
half empty, the metadata chunks full, so creating a file fails with ENOSPC while ``df`` shows free
space. Then disk_usage (plain and with explain) is asked about it, and a balance as the answer says is
run to see that it gives room back.

Run by tests/tools/test_btrfs_chunks_real.py as root in a private mount namespace of its own
(``tests.loopfs.in_private_namespace``); prints one JSON object.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio

from sysmcp.engine.mounts._mounts import MountInfoReader
from sysmcp.tools.disk_usage import DiskUsage
from tests.harness import tool_context
from tests.loopfs import loop_mount

MiB = 1 << 20
SMALL = b"x" * 2000  # stored inline, in metadata (max_inline=2048)


async def ask(mount: Path, explain: bool) -> dict[str, Any]:
    args = {"path": str(mount), "unit": "percent", "all": False, "explain": explain, "timeout_s": 60}
    output = await DiskUsage(MountInfoReader())(args, tool_context(None))
    return {"text": output.text, "structured": output.structured}


def fill(mount: Path) -> dict[str, Any]:
    """Data chunks over every device byte, half of them freed again; then small files until ENOSPC."""
    (mount / "big").mkdir()
    block, written = b"\x5a" * MiB, 0
    try:
        while True:
            with open(mount / "big" / str(written), "wb") as handle:
                handle.write(block)
                handle.flush()
                os.fsync(handle.fileno())
            written += 1
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    for at in range(0, written, 2):  # every other MiB: each data chunk about half empty
        os.unlink(mount / "big" / str(at))
    subprocess.run(["btrfs", "filesystem", "sync", str(mount)], check=True)
    (mount / "small").mkdir()
    made = 0
    try:
        while True:
            folder = mount / "small" / str(made // 1000)
            folder.mkdir(exist_ok=True)
            with open(folder / str(made), "wb") as handle:
                handle.write(SMALL)
            made += 1
    except OSError as exc:
        enospc = exc.errno == errno.ENOSPC
    subprocess.run(["btrfs", "filesystem", "sync", str(mount)], check=True)
    fs = os.statvfs(mount)
    return {"enospc": enospc, "small_files": made, "df_free": fs.f_bavail * fs.f_frsize}


def run(*argv: str) -> int:
    return subprocess.run(argv, capture_output=True, check=False).returncode


def follow_the_answer(work: Path, mount: Path) -> dict[str, int]:
    """What the answer tells an admin whose balance has no room: -dusage=0 first (it fails with nothing
    to relocate? it frees empty chunks), then a device added for the while, the balance, the device
    removed again. Each step's exit status."""
    spare = work / "spare.img"
    with open(spare, "wb") as handle:
        handle.truncate(256 * MiB)
    loop = subprocess.run(["losetup", "-f", "--show", str(spare)], capture_output=True, text=True, check=True)
    device = loop.stdout.strip()
    try:
        return {
            "usage0": run("btrfs", "balance", "start", "-dusage=0", str(mount)),
            "usage50_alone": run("btrfs", "balance", "start", "-dusage=50", str(mount)),
            "add": run("btrfs", "device", "add", "-f", device, str(mount)),
            "usage50": run("btrfs", "balance", "start", "-dusage=50", str(mount)),
            "remove": run("btrfs", "device", "remove", device, str(mount)),
        }
    finally:
        run("losetup", "-d", device)


def main(work: Path) -> dict[str, Any]:
    mount = work / "mnt"
    loop_mount(work / "btrfs.img", mount, 512 * MiB, ["mkfs.btrfs", "-q", "-f"])
    subprocess.run(["mount", "-o", "remount,max_inline=2048", str(mount)], check=True)
    answer: dict[str, Any] = {"fill": fill(mount)}
    answer["plain"] = anyio.run(ask, mount, False)
    answer["explain"] = anyio.run(ask, mount, True)
    answer["balance"] = follow_the_answer(work, mount)
    answer["after"] = anyio.run(ask, mount, False)
    subprocess.run(["umount", str(mount)], check=True)
    return answer


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
