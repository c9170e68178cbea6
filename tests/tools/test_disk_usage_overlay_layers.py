"""An overlay mount's layer directories (lowerdir=, upperdir=, workdir= in its options) are paths: under
roots, disk_usage names none outside them, on a real overlay in a private mount namespace."""

from __future__ import annotations

from typing import Any

from tests.loopfs import in_private_namespace, needs_loop_mounts

_CHILD = """
import json, subprocess, sys
from pathlib import Path
import anyio
from sysmcp.engine.mounts._mounts import MountInfoReader
from sysmcp.tools.disk_usage import DiskUsage
from tests.harness import tool_context
work = Path(sys.argv[1])
lower, upper, scratch, merged = (work / n for n in ("lower-secret", "upper-secret", "work-secret", "merged"))
for directory in (lower, upper, scratch, merged):
    directory.mkdir()
(lower / "app").mkdir()
layers = f"lowerdir={lower},upperdir={upper},workdir={scratch}"
subprocess.run(["mount", "-t", "overlay", "overlay", "-o", layers, str(merged)], check=True)
async def ask(roots):
    args = {"path": str(merged / "app"), "unit": "percent", "all": False, "explain": False, "timeout_s": 10}
    output = await DiskUsage(MountInfoReader())(args, tool_context(roots))
    return {"text": output.text, "fs": output.structured["filesystems"][0]}
print(json.dumps([anyio.run(ask, None), anyio.run(ask, [merged]), anyio.run(ask, [work])]))
"""


@needs_loop_mounts("mount")
def test_an_overlays_layer_directories_outside_the_roots_are_withheld_from_its_options() -> None:
    everything, confined, wide = in_private_namespace(["-c", _CHILD], "sysmcp-overlay-", 60)
    plain: dict[str, Any] = everything["fs"]
    assert plain["fs_type"] == "overlay" and any("lower-secret" in o for o in plain["options"]), plain
    mine: dict[str, Any] = confined["fs"]  # the root is the merged view: its layers lie outside
    assert "secret" not in repr(mine) + confined["text"], mine
    assert {"lowerdir", "upperdir", "workdir"} <= set(mine["options"]), mine["options"]
    # A root holding the layers too: they are named.
    assert any(o.startswith("lowerdir=") and "lower-secret" in o for o in wide["fs"]["options"]), wide
