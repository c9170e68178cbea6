"""A scratch filesystem on a loop device, mounted in a private mount namespace of its own, so no other
process sees it and it ends with the child that made it: the harness of the tests that need a real
btrfs or ext4. The test runs a child (``python -c SCRIPT`` or ``python -m MODULE``) through
``in_private_namespace``; the child makes its filesystem with ``loop_mount`` and prints one JSON line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.profile import UNDER_POSIX_PROFILE

ROOT = Path(__file__).resolve().parents[1]


def needs_loop_mounts(mkfs: str) -> pytest.MarkDecorator:
    """Skip unless this is root on Linux with unshare(1) and ``mkfs`` (e.g. ``mkfs.btrfs``)."""
    why = (
        "loop devices and mount namespaces are Linux's"
        if UNDER_POSIX_PROFILE
        else "needs root: loop devices, mounts"
        if not hasattr(os, "geteuid") or os.geteuid() != 0
        else "needs unshare(1) from util-linux"
        if shutil.which("unshare") is None
        else f"{mkfs} is not installed (.ci/run installs it)"
        if shutil.which(mkfs) is None
        else ""
    )
    return pytest.mark.skipif(bool(why), reason=why)


def in_private_namespace(child: list[str], prefix: str, timeout: float = 600) -> Any:
    """Run ``python CHILD... WORKDIR`` from the repository in a private mount namespace, WORKDIR a fresh
    directory (mode 0755: an unprivileged scan must reach into it) removed afterwards, and return the
    JSON of the last line it printed. Skips where the kernel gives no loop device."""
    work = Path(tempfile.mkdtemp(prefix=prefix))  # not under pytest's 0700 base
    os.chmod(work, 0o755)
    try:
        done = subprocess.run(
            ["unshare", "-m", "--propagation", "private", sys.executable, *child, str(work)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if done.returncode != 0 and "loop" in done.stderr and "mount" in done.stderr:
        pytest.skip(f"no loop device here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def loop_mount(image: Path, mount_point: Path, size: int, mkfs: list[str]) -> None:
    """In the child: a sparse image of ``size`` bytes made into a filesystem by ``mkfs`` (e.g.
    ``["mkfs.btrfs", "-q", "-f"]``) and loop-mounted at ``mount_point``, which this creates."""
    mount_point.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(size)
    subprocess.run([*mkfs, str(image)], check=True, capture_output=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount_point)], check=True, capture_output=True)
