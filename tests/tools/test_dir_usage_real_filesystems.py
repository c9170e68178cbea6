"""dir_usage's totals against the real ``du -sxb``, ``du -sxB1`` and ``find -xdev`` on real ext4, xfs and
btrfs loop filesystems in a private mount namespace, planted with what a real system has: hard links
inside and out of the walked tree, a sparse file, blocks preallocated past a file's end, reflinked copies
(xfs, btrfs), a subvolume and a snapshot of it below the path (btrfs: not entered, as with ``du -x``),
a tmpfs mounted below the path, names with a newline and undecodable bytes, a symlink and a FIFO."""

from __future__ import annotations

from typing import Any

import pytest

from tests.loopfs import in_private_namespace, needs_loop_mounts

_CHILD = r"""
import json, os, subprocess, sys
from pathlib import Path
import anyio
from tests.harness import call_tool
from tests.loopfs import loop_mount
kind, work = sys.argv[1], Path(sys.argv[2])
mnt = work / "mnt"
loop_mount(work / "fs.img", mnt, 512 << 20, [f"mkfs.{kind}", "-q", "-F" if kind == "ext4" else "-f"])
top = mnt / "top"
(top / "a").mkdir(parents=True)
(mnt / "outside").write_bytes(os.urandom(70_000))
os.link(mnt / "outside", top / "a" / "from-outside")
(top / "a" / "f").write_bytes(os.urandom(100_000))
os.link(top / "a" / "f", top / "f-again")
with open(top / "sparse", "wb") as handle:
    handle.seek(64 << 20)
    handle.write(b"end")
(top / "log").write_bytes(os.urandom(10_000))
subprocess.run(["fallocate", "-n", "-l", str(6 << 20), str(top / "log")], check=True)
(top / "a" / "new\nline").write_bytes(b"n")
(top / "a" / os.fsdecode(b"bad\xff")).write_bytes(b"u")
os.symlink("a/f", top / "link")
os.mkfifo(top / "fifo")
if kind != "ext4":
    (top / "original").write_bytes(os.urandom(3 << 20))
    subprocess.run(["cp", "--reflink=auto", str(top / "original"), str(top / "clone")], check=True)
if kind == "btrfs":
    subprocess.run(["btrfs", "subvolume", "create", str(top / "sub")], check=True, capture_output=True)
    (top / "sub" / "in-sub").write_bytes(os.urandom(2 << 20))
    subprocess.run(["btrfs", "subvolume", "snapshot", str(top / "sub"), str(top / "snap")], check=True, capture_output=True)
(top / "tm").mkdir()
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "none", str(top / "tm")], check=True)
(top / "tm" / "on-tmpfs").write_bytes(b"t" * 5000)
subprocess.run(["sync"], check=True)

def du(*options):
    done = subprocess.run(["du", "-sx", *options, str(top)], capture_output=True, check=True)
    return int(done.stdout.split()[0])

found = subprocess.run(["find", str(top), "-xdev", "-type", "f", "-printf", "%i\n"], capture_output=True, check=True)
output = anyio.run(lambda: call_tool("dir_usage", path=str(top)))
print(json.dumps({
    "du_b": du("-b"), "du_B1": du("-B1"), "files": len(set(found.stdout.split())),
    "totals": output.structured["totals"], "skipped": output.structured["skipped"], "text": output.text,
}))
"""


@pytest.mark.parametrize(
    "kind", [pytest.param(kind, marks=needs_loop_mounts(f"mkfs.{kind}")) for kind in ("ext4", "xfs", "btrfs")]
)
def test_totals_equal_du_and_find_on_a_real_filesystem_with_what_real_systems_have(kind: str) -> None:
    answer: Any = in_private_namespace(["-c", _CHILD, kind], f"sysmcp-du-{kind}-", timeout=300)
    totals, text = answer["totals"], answer["text"]
    assert totals["apparent_bytes"] == answer["du_b"], text
    assert totals["disk_bytes"] == answer["du_B1"], text
    assert totals["files"] == answer["files"], text
    assert totals["hard_linked_files"] == 2
    assert totals["sparse_bytes"] >= 60 << 20
    assert totals["preallocated_bytes"] >= 5 << 20
    skipped = answer["skipped"]
    assert skipped["other_filesystem"] == 1  # the tmpfs
    assert skipped.get("btrfs_subvolume", 0) == (2 if kind == "btrfs" else 0)  # the subvolume, its snapshot
    assert skipped["special_file"] == 1


_SUBVOLUMES = r"""
import json, subprocess, sys
from pathlib import Path
import anyio
from tests.harness import call_tool
from tests.loopfs import loop_mount
work = Path(sys.argv[1])
mnt = work / "mnt"
loop_mount(work / "fs.img", mnt, 256 << 20, ["mkfs.btrfs", "-q", "-f"])
(mnt / "top" / "snapshots").mkdir(parents=True)
subprocess.run(["btrfs", "subvolume", "create", str(mnt / "top" / "home")], check=True, capture_output=True)
(mnt / "top" / "home" / "data").write_bytes(b"d" * (1 << 20))
for n in (1, 2):
    subprocess.run(
        ["btrfs", "subvolume", "snapshot", "-r", str(mnt / "top" / "home"), str(mnt / "top" / "snapshots" / str(n))],
        check=True, capture_output=True,
    )
(mnt / "top" / "tm").mkdir()
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(mnt / "top" / "tm")], check=True)
output = anyio.run(lambda: call_tool("dir_usage", path=str(mnt / "top")))
print(json.dumps({"skipped": output.structured["skipped"], "text": output.text}))
"""


@needs_loop_mounts("mkfs.btrfs")
def test_btrfs_subvolumes_and_snapshots_below_the_path_are_named_as_such_not_as_other_filesystems() -> None:
    """A snapshot below the path holds space on this very filesystem: calling it one of "3 other
    filesystems" (beside a real tmpfs mount) sent the reader to df for space dir_usage left out."""
    answer: Any = in_private_namespace(["-c", _SUBVOLUMES], "sysmcp-subvolumes-", timeout=300)
    assert answer["skipped"] == {"btrfs_subvolume": 3, "other_filesystem": 1}, answer["text"]
    assert "Skipped: 3 btrfs subvolumes, 1 other filesystem" in answer["text"]


_ANOTHER_BTRFS = r"""
import json, sys
from pathlib import Path
import anyio
from tests.harness import call_tool
from tests.loopfs import loop_mount
work = Path(sys.argv[1])
loop_mount(work / "fs.img", work / "mnt", 256 << 20, ["mkfs.btrfs", "-q", "-f"])
(work / "mnt" / "top").mkdir()
loop_mount(work / "other.img", work / "mnt" / "top" / "disk2", 256 << 20, ["mkfs.btrfs", "-q", "-f"])
output = anyio.run(lambda: call_tool("dir_usage", path=str(work / "mnt" / "top")))
print(json.dumps({"skipped": output.structured["skipped"], "text": output.text}))
"""


@needs_loop_mounts("mkfs.btrfs")
def test_another_btrfs_filesystem_mounted_below_the_path_is_another_filesystem_not_a_subvolume() -> None:
    """A second disk's btrfs mounted below a btrfs path: its root is inode 256 on another device too,
    but its space is on that disk, which df shows, not on this filesystem."""
    answer: Any = in_private_namespace(["-c", _ANOTHER_BTRFS], "sysmcp-btrfs2-", timeout=300)
    assert answer["skipped"] == {"other_filesystem": 1}, answer["text"]
