"""A bind mount inside a root is not part of the walk, even one of the root's own filesystem.

The real server, confined with ``--root r``, in a private mount namespace where ``outside`` (a sibling
of ``r`` on the same filesystem, same ``st_dev``) is bind-mounted at ``r/bind``. ``du -x`` would walk
into it; every walking tool must leave it out, name nothing below it, and count it as it counts any
mount point it did not enter (``skipped.other_filesystem``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.profile import UNDER_POSIX_PROFILE
from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio

CONTENT = os.urandom(1 << 16)  # one copy in the root, one outside it: duplicates only through the bind
MOUNT_THEN_SERVE = 'mount --bind "$1" "$2" && exec "$3" -m sysmcp --root "$4"'


def namespaced_server(tmp_path: Path) -> tuple[list[str], Path]:
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare to bind-mount in a private mount namespace")
    if subprocess.run([unshare, "-m", "--propagation", "private", "true"], capture_output=True).returncode:
        pytest.skip("unshare -m is not permitted here")
    root, outside = tmp_path / "r", tmp_path / "outside"
    (root / "bind").mkdir(parents=True)
    (root / "keep").mkdir()
    outside.mkdir()
    (root / "keep" / "a.bin").write_bytes(CONTENT)
    (outside / "a.bin").write_bytes(CONTENT)
    (outside / "secret-name.txt").write_bytes(b"not for the model\n")
    assert os.stat(root).st_dev == os.stat(outside).st_dev  # the bind shows the root's own filesystem
    command = [unshare, "-m", "--propagation", "private", "sh", "-c", MOUNT_THEN_SERVE, "sh"]
    return [*command, str(outside), str(root / "bind"), sys.executable, str(root)], root


def named_nowhere(reply: dict[str, Any]) -> None:
    """Neither the text nor the structured content names anything below the bind mount."""
    assert "error" not in reply and not reply["result"].get("isError"), reply
    seen = result_text(reply) + repr(reply["result"].get("structuredContent"))
    assert "secret-name" not in seen and "bind/" not in seen, seen


@pytest.mark.parametrize("tool", ["dir_usage", "hash_tree", "find_duplicates"])
async def test_a_walking_tool_leaves_a_same_filesystem_bind_mount_out_and_counts_it(
    tmp_path: Path, tool: str
) -> None:
    command, root = namespaced_server(tmp_path)
    async with spawn(command=command) as wire:
        await wire.initialize()
        reply = await wire.call(tool, {"path": str(root)})
        named_nowhere(reply)
        found = reply["result"]["structuredContent"]
        assert found["skipped"].get("other_filesystem") == 1, found
        if tool == "find_duplicates":
            assert not found["groups"], found  # the outside copy was never seen


async def test_reclaim_plan_plans_nothing_seen_through_a_same_filesystem_bind_mount(tmp_path: Path) -> None:
    command, root = namespaced_server(tmp_path)
    async with spawn(command=command) as wire:
        await wire.initialize()
        plan = await wire.call("reclaim_plan", {"path": str(root), "classes": ["duplicate"]})
        named_nowhere(plan)
        assert plan["result"]["structuredContent"]["items"] == [], plan


def test_the_bind_mount_really_shows_the_outside_tree(tmp_path: Path) -> None:
    """The fixture's own check: inside the namespace ``r/bind`` shows ``outside``."""
    command, _ = namespaced_server(tmp_path)
    probe = [*command[:6], 'mount --bind "$1" "$2" && exec ls "$2"', "sh", *command[8:10]]
    listed = subprocess.run(probe, capture_output=True, check=True)
    assert listed.stdout.split() == [b"a.bin", b"secret-name.txt"]


@pytest.mark.skipif(
    UNDER_POSIX_PROFILE,
    reason="the portable profile, like macOS, has no mountinfo: no bind mount's directory to withhold",
)
async def test_disk_usage_names_a_bind_mount_in_a_root_but_not_the_directory_outside_it_shows(
    tmp_path: Path,
) -> None:
    command, root = namespaced_server(tmp_path)
    async with spawn(command=command) as wire:
        await wire.initialize()
        for arguments in ({"all": True}, {"path": str(root / "bind")}):  # listed, and asked about
            reply = await wire.call("disk_usage", arguments)
            seen = result_text(reply) + repr(reply["result"]["structuredContent"])
            (bind,) = [
                fs
                for fs in reply["result"]["structuredContent"]["filesystems"]
                if fs["mount_point"] == str(root / "bind")
            ]
            assert bind["fs_root"] is None, bind
            assert f"{tmp_path.name}/outside" not in seen, seen
        assert "bind mount of a directory outside the allowed roots" in result_text(reply)


MOUNT_BIND_THEN_SERVE = (
    'mount -t tmpfs -o size=8m tmpfs "$1" && mkdir "$1/sub" && mount --bind "$1/sub" "$2" '
    '&& exec "$3" -m sysmcp --root "$4"'
)


async def test_explain_of_a_bind_mount_in_a_root_never_names_its_filesystems_own_mount_outside(
    tmp_path: Path,
) -> None:
    """A tmpfs mounted at ``fs-elsewhere`` (outside the root), its ``sub`` bind-mounted at ``r/bind``:
    explain accounts for the whole tmpfs, named by the mount inside the root."""
    command, root = namespaced_server(tmp_path)
    (tmp_path / "fs-elsewhere").mkdir()
    command[6], command[8] = MOUNT_BIND_THEN_SERVE, str(tmp_path / "fs-elsewhere")
    async with spawn(command=command) as wire:
        await wire.initialize()
        reply = await wire.call("disk_usage", {"path": str(root / "bind"), "explain": True, "timeout_s": 20})
        assert not reply["result"].get("isError"), result_text(reply)
        seen = result_text(reply) + repr(reply["result"]["structuredContent"])
        assert "fs-elsewhere" not in seen, seen
        assert reply["result"]["structuredContent"]["explain"]["mount_point"] == str(root / "bind")
