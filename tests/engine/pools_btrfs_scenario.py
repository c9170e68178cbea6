"""A real btrfs with a subvolume, a read-only snapshot of it and two subvolumes named across lines
(one naming a subvolume that is not there), read by sysmcp.engine.pools before
and after the TEST turns quotas on (sysmcp never does), then the snapshot deleted and the bytes that
came back measured.

Run by tests/engine/test_pools_btrfs_real.py as root in a private mount namespace of its own
(``tests.loopfs.in_private_namespace``); prints one JSON object.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio

from sysmcp.engine.pools import btrfs_cow
from tests.loopfs import loop_mount
from tests.tools.explain_scenario import MiB, explain, write

OLD, SHARED = 48 * MiB, 24 * MiB  # what only the snapshot keeps; what it shares with the live files
FORGING = "x\nID 999 gen 1 top level 5 path forged"  # a name any user may give a subvolume
TWO_LINES = "two\nlines"


def run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def used(point: Path) -> int:
    fs = os.statvfs(point)
    return (fs.f_blocks - fs.f_bfree) * fs.f_frsize


def items(point: Path) -> list[dict[str, Any]]:
    cow = btrfs_cow(str(point), "", 30.0, 60.0)
    return [dataclasses.asdict(item) for item in cow.items] + [
        {"source": cow.source, "faults": [str(f) for f in cow.faults]}
    ]


def main(work: Path) -> dict[str, Any]:
    mnt = work / "mnt"
    loop_mount(work / "btrfs.img", mnt, 512 * MiB, ["mkfs.btrfs", "-q", "-f"])
    try:
        run("btrfs", "subvolume", "create", str(mnt / "data"))
        write(mnt / "data" / "a", OLD, 0x11)
        write(mnt / "data" / "b", SHARED, 0x22)
        (mnt / "snaps").mkdir()
        run("btrfs", "subvolume", "snapshot", "-r", str(mnt / "data"), str(mnt / "snaps" / "s1"))
        write(mnt / "data" / "a", OLD, 0x33)  # new extents: the old ones are the snapshot's alone
        run("btrfs", "subvolume", "create", str(mnt / FORGING))
        run("btrfs", "subvolume", "create", str(mnt / TWO_LINES))
        run("btrfs", "filesystem", "sync", str(mnt))
        answer: dict[str, Any] = {"quotas_off": items(mnt)}
        answer["explain"] = anyio.run(explain, str(mnt))
        run("btrfs", "quota", "enable", str(mnt))  # the test's own scratch filesystem, never sysmcp
        run("btrfs", "quota", "rescan", "-w", str(mnt))
        run("btrfs", "filesystem", "sync", str(mnt))
        answer["quotas_on"] = items(mnt)
        before = used(mnt)
        run("btrfs", "subvolume", "delete", str(mnt / "snaps" / "s1"))
        run("btrfs", "subvolume", "sync", str(mnt))  # waits until the cleaner has dropped it
        run("btrfs", "filesystem", "sync", str(mnt))
        answer["freed"] = before - used(mnt)
        return answer
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
