"""The portable profile itself: what it hides from sysmcp, and sysmcp serving under it.

These run in every test run (the profile is applied to a child Python here), so the harness is
checked even where the second, profiled run of the suite is not made.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.profile import PROFILE_DIR

PROBE = """
import json, os, sys
import psutil
from sysmcp import platform
from sysmcp.engine.mounts import _mounts as mounts
from sysmcp.engine.opens import _safeopen as safeopen
seen = {"O_PATH": hasattr(os, "O_PATH"), "platform_sees": platform.sys.platform, "real": sys.platform}
try:
    mounts.MountInfoReader()()
    seen["sysmcp_reads_proc"] = True
except FileNotFoundError:
    seen["sysmcp_reads_proc"] = False
seen["tests_read_proc"] = bool(open("/proc/self/mountinfo").read())
seen["psutil_reads_proc"] = bool(psutil.disk_partitions(all=True))
seen["provider"] = type(mounts.default_partitions()).__name__
seen["missing"] = len(platform.missing_facilities())
seen["sysmcp_has_fadvise"] = hasattr(safeopen.os, "posix_fadvise")
seen["tests_have_fadvise"] = hasattr(os, "posix_fadvise")
print(json.dumps(seen))
"""


def profiled(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROFILE_DIR), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def test_the_profile_hides_linux_facilities_from_sysmcp_only() -> None:
    done = profiled("-c", PROBE)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {
        "O_PATH": False,
        "platform_sees": "darwin",
        "real": "linux",  # the interpreter and libraries keep their own platform
        "sysmcp_reads_proc": False,
        "tests_read_proc": True,
        "psutil_reads_proc": True,
        "provider": "PartitionsReader",
        "missing": 6,
        "sysmcp_has_fadvise": False,  # Linux-only calls are absent for sysmcp, as on macOS
        "tests_have_fadvise": True,
    }


def test_under_the_profile_disk_usage_lists_filesystems_from_psutil() -> None:
    done = profiled("-m", "sysmcp", "call", "disk_usage")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    root = os.stat("/").st_dev
    shown = [line.split()[0] for line in done.stdout.splitlines()[1:] if line.startswith("/")]
    assert shown, done.stdout
    assert any(os.stat(point).st_dev == root for point in shown if os.path.exists(point)), done.stdout


def test_under_the_profile_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    done = profiled("-m", "sysmcp", "call", "file_sha256", f"path={tmp_path / 'pipe'}", timeout=30)
    assert done.returncode == 1  # the tool's refusal, not a hang (the timeout) or a crash
    assert "FIFO" in done.stderr  # sysmcp call prints a tool error on stderr


def test_under_the_profile_dir_usage_counts_what_du_counts(tmp_path: Path) -> None:
    for name in "abc":
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_bytes(b"x" * 5000)
    done = profiled("-m", "sysmcp", "call", "dir_usage", f"path={tmp_path}")
    assert done.returncode == 0, done.stderr
    assert "in 3 files and 4 directories" in done.stdout


def test_under_the_profile_a_file_bigger_than_the_read_buffer_hashes_right(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 << 20))  # several reads: the read-ahead advice is asked for
    done = profiled("-m", "sysmcp", "call", "file_sha256", f"path={big}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert hashlib.sha256(big.read_bytes()).hexdigest() in done.stdout
