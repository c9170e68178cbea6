"""A btrfs subvolume mounted on its own (Fedora and openSUSE mount /home with subvol=home) is described
as a subvolume, never as a bind mount, on a real loop btrfs in a private mount namespace."""

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
from tests.loopfs import loop_mount
work = Path(sys.argv[1])
image, top, home = work / "btrfs.img", work / "top", work / "home"
loop_mount(image, top, 256 << 20, ["mkfs.btrfs", "-q", "-f"])
subprocess.run(["btrfs", "subvolume", "create", str(top / "home")], check=True, capture_output=True)
subprocess.run(["umount", str(top)], check=True)
home.mkdir()
subprocess.run(["mount", "-o", "loop,subvol=home", str(image), str(home)], check=True)
(home / "alice").mkdir()
async def ask(roots):
    args = {"path": str(home / "alice"), "unit": "percent", "all": False, "explain": False, "timeout_s": 10}
    output = await DiskUsage(MountInfoReader())(args, tool_context(roots))
    return {"text": output.text, "fs": output.structured["filesystems"][0]}
print(json.dumps([anyio.run(ask, None), anyio.run(ask, [home / "alice"])]))
"""


@needs_loop_mounts("mkfs.btrfs")
def test_a_btrfs_subvolume_mounted_on_its_own_is_described_as_a_subvolume_and_its_name_withheld_under_roots() -> (
    None
):
    everything, confined = in_private_namespace(["-c", _CHILD], "sysmcp-subvol-", 120)
    plain: dict[str, Any] = everything["fs"]
    assert plain["fs_type"] == "btrfs" and plain["fs_root"] == "/home" and "subvol=/home" in plain["options"]
    assert ", subvolume /home)" in everything["text"] and "bind mount" not in everything["text"]
    mine: dict[str, Any] = confined["fs"]  # the root is alice's directory: the subvolume's name lies outside
    assert mine["fs_root"] is None and not any(o.startswith("subvol=") for o in mine["options"])
    assert "bind mount" not in confined["text"], confined["text"]
    assert "subvolume (name withheld: outside the allowed roots)" in confined["text"]
