"""disk_usage explain on a filesystem whose files share blocks (reflinked copies on xfs and btrfs): a
walk counts each copy's blocks in full, as ``du`` does, so the parts add up to more than df's used.
The answer says so, by how much, and why, instead of "0 B unexplained ... this small is metadata"
over a remainder of minus twice the data. On real loop filesystems in a private mount namespace."""

from __future__ import annotations

from typing import Any

import pytest

from tests.loopfs import in_private_namespace, needs_loop_mounts

MiB = 1 << 20

_CHILD = r"""
import json, subprocess, sys
from pathlib import Path
import anyio
from tests.loopfs import loop_mount
from tests.tools.explain_scenario import explain, write
kind, work = sys.argv[1], Path(sys.argv[2])
mnt = work / "mnt"
loop_mount(work / "fs.img", mnt, 512 << 20, [f"mkfs.{kind}", "-q", "-f"])
write(mnt / "original", 24 << 20)
for copy in ("copy1", "copy2"):
    done = subprocess.run(["cp", "--reflink=always", str(mnt / "original"), str(mnt / copy)], capture_output=True)
    if done.returncode != 0:  # an xfs made without reflink (old xfsprogs)
        print(json.dumps({"skip": f"no reflinks on this {kind}: {done.stderr.decode().strip()}"}))
        sys.exit(0)
subprocess.run(["sync"], check=True)
print(json.dumps(anyio.run(explain, str(mnt))))
"""


@pytest.mark.parametrize(
    "kind", [pytest.param(kind, marks=needs_loop_mounts(f"mkfs.{kind}")) for kind in ("xfs", "btrfs")]
)
def test_files_sharing_blocks_are_said_to_add_up_to_more_than_used_not_called_zero_unexplained(
    kind: str,
) -> None:
    answer: Any = in_private_namespace(["-c", _CHILD, kind], f"sysmcp-shared-{kind}-", timeout=300)
    if "skip" in answer:
        pytest.skip(answer["skip"])
    text, part = answer["text"], answer["structured"]["explain"]
    assert part["files"]["bytes"] >= 3 * 24 * MiB  # every copy counted in full, as du -x counts them
    over = -part["remainder"]["bytes"]
    assert over >= 40 * MiB, text  # two copies' worth, less the overhead
    assert "0 B (0.0 %) unexplained" not in text
    assert "this small is metadata" not in text
    assert "more than used" in text, text
    assert "share blocks" in text, text  # the reason, in words
    assert "7. Counted more than once: " in text, text
    assert "reflink" in part["remainder"]["next_step"] or "shared" in part["remainder"]["next_step"]
