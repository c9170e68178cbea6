"""disk_usage explain over roots that overlap in the filesystem though not by path: ``b`` is a bind mount
of ``a/keep``, so everything under ``b`` is already under ``a``. The walk of part 1 counts it once, as
``du -x a b`` does (it counts each inode once over its arguments), so the remainder is not understated.

The real server, confined with ``--root a --root b``, in a private mount namespace that holds the bind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.profile import UNDER_POSIX_PROFILE
from tests.wire import result_text, spawn

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        UNDER_POSIX_PROFILE,
        reason="the portable profile, like macOS, has no mountinfo: a bind mount's directory is not known",
    ),
]

BIND_THEN_SERVE = 'mount --bind "$1" "$2" && exec "$3" -m sysmcp --no-history --root "$4" --root "$2"'


async def test_a_root_that_is_a_bind_mount_of_a_directory_inside_another_root_is_walked_once(
    tmp_path: Path,
) -> None:
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare to bind-mount in a private mount namespace")
    if subprocess.run([unshare, "-m", "--propagation", "private", "true"], capture_output=True).returncode:
        pytest.skip("unshare -m is not permitted here")
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "keep").mkdir(parents=True)
    b.mkdir()
    (a / "top.bin").write_bytes(os.urandom(1 << 16))
    (a / "keep" / "kept.bin").write_bytes(os.urandom(1 << 16))  # one name only: st_nlink 1
    shell = [unshare, "-m", "--propagation", "private", "sh", "-c", BIND_THEN_SERVE, "sh"]
    async with spawn(command=[*shell, str(a / "keep"), str(b), sys.executable, str(a)]) as wire:
        await wire.initialize()
        reply = await wire.call("disk_usage", {"path": str(a), "explain": True, "timeout_s": 60})
        assert not reply["result"].get("isError"), result_text(reply)
        explained = reply["result"]["structuredContent"]["explain"]
        if explained["mount_point"] == str(a):
            pytest.skip("the root is itself a mount point here: its whole filesystem lies inside it")
        files = explained["files"]
        assert files["roots_walked"] == [str(a)], files  # b shows a/keep: counted in a's walk
        assert files["files"] == 2, files
