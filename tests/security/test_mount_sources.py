"""A mount's source is a path when a FUSE program (bindfs, squashfuse) or the admin's ``mount -t tmpfs
SOURCE`` makes it one: a filesystem mounted inside the root whose source names a directory outside it
must not name that directory, in any tool that shows mount sources.

The server runs in a private mount namespace (``unshare -m``) where a tmpfs whose source reads
``…/other/secret-project`` is mounted at ``…/jail/mnt``; a process there holds a deleted file on it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.paths import real_root
from tests.profile import needs_proc
from tests.wire import SERVER, result_text, spawn

pytestmark = [pytest.mark.anyio, needs_proc]

#: Mount the tmpfs, leave a deleted file held open by a child that dies with the server, serve.
MOUNT_HOLD_SERVE = (
    'mount -t tmpfs -o size=8m "$1" "$2" && exec 3>"$2/held.log" && head -c 65536 /dev/zero >&3 && '
    'rm "$2/held.log" && { setpriv --pdeathsig KILL sleep 3600 </dev/null >/dev/null 2>&1 & } && exec 3>&- && shift 2 && exec "$@"'
)


def in_namespace(source: Path, target: Path) -> list[str]:
    unshare = shutil.which("unshare")
    if unshare is None or shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root, unshare and setpriv to mount a tmpfs in a private mount namespace")
    if subprocess.run([unshare, "-m", "--propagation", "private", "true"], capture_output=True).returncode:
        pytest.skip("unshare -m is not permitted here")
    private = [unshare, "-m", "--propagation", "private"]
    return [*private, "sh", "-c", MOUNT_HOLD_SERVE, "sh", str(source), str(target)]


async def test_a_mount_source_naming_a_directory_outside_the_root_is_not_named(tmp_path: Path) -> None:
    base = real_root(tmp_path)
    jail, secret = base / "jail", base / "other" / "secret-project"
    (jail / "mnt").mkdir(parents=True)
    secret.mkdir(parents=True)
    command = [*in_namespace(secret, jail / "mnt"), *SERVER]
    asked: list[tuple[str, dict[str, Any]]] = [
        ("disk_usage", {}),
        ("disk_usage", {"path": str(jail / "mnt")}),
        ("disk_usage", {"path": str(jail / "mnt"), "explain": True}),
        ("deleted_open_files", {"path": str(jail / "mnt")}),
    ]
    async with spawn("--no-history", "--root", str(jail), command=command) as wire:
        await wire.initialize()
        for tool, arguments in asked:
            reply = await wire.call(tool, arguments)
            text = result_text(reply)
            everything = text + json.dumps(reply["result"].get("structuredContent", {}))
            assert not reply["result"].get("isError"), text
            assert str(jail / "mnt") in everything, (tool, arguments, text)  # the mount itself is shown
            assert "secret-project" not in everything, (tool, arguments, text)
        held = await wire.call("deleted_open_files", {"path": str(jail / "mnt")})
        assert "held.log" in result_text(held)  # the deleted file was seen, under its filesystem's line
