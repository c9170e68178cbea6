"""A filesystem replaced by another at the same mount point (a tmpfs mounted again: the same source,
type and mount point) is never compared with the one before, on a real tmpfs in a private mount
namespace: not its snapshots, not its disk readings, and the answer says why there is nothing to compare."""

from __future__ import annotations

import pytest

from tests.loopfs import in_private_namespace, needs_loop_mounts

_CHILD = """
import json, os, subprocess, sys
from dataclasses import replace
from pathlib import Path
from sysmcp.engine.walk import WalkOptions
from sysmcp.history.compare import Comparison, compare
from sysmcp.history.store import Store
from sysmcp.tools.what_changed import render
work = Path(sys.argv[1])
point = work / "mnt"
point.mkdir()
now = [1_800_000_000.0]
clock = lambda: now[0]
store = Store.open(work / "state", clock)
def mount(megabytes):
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(point)], check=True)
    (point / "data").mkdir()
    (point / "data" / "f").write_bytes(os.urandom(megabytes << 20))
def what_changed():
    asked = Comparison(os.fsencode(point), now[0] - 86400, None, now[0], 60.0, WalkOptions(), 1000,
                       store=lambda: store, clock=clock, monotonic=lambda: 0.0)
    found = compare(asked)
    now[0] += 3600
    text, answer, _ = render(str(point), found, {"top_n": 10, "since": "24h"})
    return {"text": text, "growth": answer.filesystem_growth is not None and answer.filesystem_growth.growth_bytes,
            "fill": answer.filesystem is not None and answer.filesystem.readings, "comparable": answer.comparable}
mount(40)
before = [what_changed() for _ in range(3)]
subprocess.run(["umount", str(point)], check=True)
mount(2)
after = [what_changed() for _ in range(2)]
subprocess.run(["umount", str(point)], check=True)
print(json.dumps({"before": before, "after": after}))
"""


@needs_loop_mounts("mount")
def test_a_tmpfs_mounted_anew_is_compared_with_nothing_of_the_one_before() -> None:
    seen = in_private_namespace(["-c", _CHILD], "sysmcp-replaced-", 120)
    before, after = seen["before"], seen["after"]
    assert before[-1]["comparable"] and before[-1]["fill"] == 3, before[-1]["text"]
    first = after[0]
    assert not first["comparable"] and first["growth"] is False and first["fill"] is False, first["text"]
    assert "another filesystem" in first["text"] and "no baseline yet" not in first["text"], first["text"]
    assert "there now; a snapshot of that one was recorded now, so the next what_changed" in first["text"], (
        first["text"]
    )
    second = after[1]  # the new filesystem's own first two: compared with each other only
    assert second["comparable"] and second["growth"] == 0, second["text"]
    assert "−" not in second["text"].split("Filesystem", 1)[-1].split(".")[0], second["text"]


_REMOUNTED = """
import json, os, subprocess, sys
from pathlib import Path
from sysmcp.engine.walk import WalkOptions
from sysmcp.history.compare import Comparison, compare
from sysmcp.history.store import Store
from sysmcp.tools.what_changed import render
from tests.loopfs import loop_mount
work = Path(sys.argv[1])
point, image = work / "mnt", work / "btrfs.img"
now = [1_800_000_000.0]
clock = lambda: now[0]
store = Store.open(work / "state", clock)
def what_changed():
    asked = Comparison(os.fsencode(point / "data"), now[0] - 86400, None, now[0], 60.0, WalkOptions(), 1000,
                       store=lambda: store, clock=clock, monotonic=lambda: 0.0)
    found = compare(asked)
    now[0] += 3600
    text, answer, _ = render(str(point / "data"), found, {"top_n": 10, "since": "24h"})
    return {"text": text, "comparable": answer.comparable, "delta": answer.total_delta_bytes,
            "dev": os.stat(point / "data").st_dev}
loop_mount(image, point, 300 << 20, ["mkfs.btrfs", "-q", "-f"])
(point / "data").mkdir()
(point / "data" / "f").write_bytes(os.urandom(4 << 20))
before = what_changed()
subprocess.run(["umount", str(point)], check=True)
taken = []  # other mounts take anonymous device numbers first, as a boot that mounts in another order
for n in range(2):
    (work / f"t{n}").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(work / f"t{n}")], check=True)
subprocess.run(["mount", "-o", "loop", str(image), str(point)], check=True)
(point / "data" / "g").write_bytes(os.urandom(2 << 20))
after = what_changed()
print(json.dumps({"before": before, "after": after}))
"""


@needs_loop_mounts("mkfs.btrfs")
def test_the_same_btrfs_mounted_again_with_another_device_number_is_still_compared() -> None:
    """A btrfs volume's device number is handed out as it is mounted: after a reboot that mounted
    things in another order it has another, and its snapshots must still be compared (its fsid, from
    its UUID, is the same)."""
    seen = in_private_namespace(["-c", _REMOUNTED], "sysmcp-remounted-", 120)
    before, after = seen["before"], seen["after"]
    assert before["dev"] != after["dev"], "the device number did not change: nothing tested"
    assert after["comparable"] and after["delta"] >= 2 << 20, after["text"]
    assert "another filesystem" not in after["text"], after["text"]


_OVERLAID = """
import json, os, subprocess, sys
from pathlib import Path
from sysmcp.history.snapshots import filesystem_id, same_filesystem
from tests.loopfs import loop_mount
work = Path(sys.argv[1])
disk = work / "disk"
loop_mount(work / "ext4.img", disk, 64 << 20, ["mkfs.ext4", "-q", "-F"])
for name in ("mnt", "lower", "upper", "work"):
    (disk / name).mkdir()
before = filesystem_id(disk / "mnt")
layers = f"lowerdir={disk / 'lower'},upperdir={disk / 'upper'},workdir={disk / 'work'}"
# uuid=off: an overlay's statfs gives its upper filesystem's fsid, as every overlay did before Linux 6.6
done = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", layers + ",uuid=off", str(disk / "mnt")])
if done.returncode != 0:
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", layers, str(disk / "mnt")], check=True)
after = filesystem_id(disk / "mnt")
print(json.dumps({"before": before, "after": after, "same": same_filesystem(before, after)}))
"""


@needs_loop_mounts("mkfs.ext4")
def test_an_overlay_mounted_over_a_directory_is_another_filesystem_though_it_gives_its_upper_ones_fsid() -> (
    None
):
    """An overlay (before Linux 6.6, or uuid=off) answers statfs with its upper filesystem's fsid: over a
    directory of that filesystem, the fsid alone would take the overlay's merged view for the directory
    it covers, and diff the two. Its device number is an anonymous one, the directory's a disk's."""
    seen = in_private_namespace(["-c", _OVERLAID], "sysmcp-overlaid-", 120)
    before, after = seen["before"], seen["after"]
    if before.split("/")[1] != after.split("/")[1]:
        pytest.skip(f"this kernel's overlay has an fsid of its own ({before} → {after})")
    assert not seen["same"], seen
