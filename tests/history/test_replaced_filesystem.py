"""A filesystem replaced by another at the same mount point (a tmpfs mounted again: the same source,
type and mount point) is never compared with the one before, on a real tmpfs in a private mount
namespace: not its snapshots, not its disk readings, and the answer says why there is nothing to compare."""

from __future__ import annotations

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
    second = after[1]  # the new filesystem's own first two: compared with each other only
    assert second["comparable"] and second["growth"] == 0, second["text"]
    assert "−" not in second["text"].split("Filesystem", 1)[-1].split(".")[0], second["text"]
