"""disk_usage under ``--root`` measures the filesystem of what was checked: a directory swapped for a
symlink between the policy's check and the statvfs is refused, not followed to another filesystem."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from sysmcp.engine.faults import WrongKind
from sysmcp.engine.mounts import inodes_in_use, statvfs_usage
from sysmcp.engine.paths import PathPolicy
from tests.harness import call_tool, python_as_nobody, tool_context
from tests.profile import PROFILE_DIR

pytestmark = pytest.mark.anyio


async def test_a_directory_swapped_for_a_symlink_out_of_the_roots_once_checked_is_not_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """statvfs took the resolved path string, so the swap led it to an outside filesystem, whose
    figures the answer gave under the inside path's name."""
    base = tmp_path.resolve()
    inside, outside = base / "inside", base / "outside"
    (inside / "data").mkdir(parents=True)
    outside.mkdir()
    resolve = PathPolicy.resolve_str

    def swapped(self: PathPolicy, raw: str) -> str:  # another user's swap, between the check and the use
        real = resolve(self, raw)
        if raw == str(inside / "data") and not (inside / "data").is_symlink():
            (inside / "data").rename(inside / "kept")
            (inside / "data").symlink_to(outside)
        return real

    assert (await call_tool("disk_usage", tool_context([inside]), path=str(inside / "data"))).structured
    monkeypatch.setattr(PathPolicy, "resolve_str", swapped)
    with pytest.raises(WrongKind, match="symbolic link"):
        await call_tool("disk_usage", tool_context([inside]), path=str(inside / "data"))


def test_the_statvfs_of_a_path_follows_no_symlink_on_the_way_nor_at_the_end(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_bytes(b"")
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    for followed in (tmp_path / "link", tmp_path / "link" / "x"):
        with pytest.raises(OSError, match="symbolic link"):
            statvfs_usage(str(followed))
    for kept in ("/", str(tmp_path / "dir"), str(tmp_path / "file")):
        assert statvfs_usage(kept).blocks > 0


def test_the_inode_count_a_scan_gives_as_its_progress_total_is_not_of_a_mount_reached_through_a_symlink(
    tmp_path: Path,
) -> None:
    """dir_usage's progress total: the used inodes of the filesystem it scans, when the path is its
    mount point. Through a symlink on the way (swapped in after the check) it counted another mount's."""
    counted = ("/dev", "/run", "/dev/shm", "/tmp", "/boot", "/home")
    mount = next((m for m in counted if os.path.ismount(m) and os.statvfs(m).f_files > 0), None)
    if mount is None:
        pytest.skip("no mount point with an inode count below / to lead to")
    (tmp_path / "way").symlink_to("/")
    assert inodes_in_use(tmp_path / "way" / mount.lstrip("/")) is None
    assert inodes_in_use(Path("/")) is not None


def test_without_o_path_a_path_under_a_directory_that_may_be_searched_not_read_is_still_measured() -> None:
    """Without O_PATH (macOS) every directory on the no-follow way is opened for reading: one that may
    be searched but not read (0711, a home on a shared host) refused disk_usage a path df measures."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("a root-owned 0711 directory and a second user need root and setpriv")
    with tempfile.TemporaryDirectory(prefix="sysmcp-0711-", dir="/tmp") as box:
        os.chmod(box, 0o755)
        shut = Path(box) / "shut"
        (shut / "open").mkdir(parents=True)
        os.chmod(shut, 0o711)
        probe = (
            "import os, runpy\n"  # the profile, unless this run's PYTHONPATH gave it already
            f"hasattr(os, 'O_PATH') and runpy.run_path({str(PROFILE_DIR / 'sitecustomize.py')!r})\n"
            "from sysmcp import platform\n"
            "assert not platform.has_o_path()\n"
            "from sysmcp.engine.mounts import statvfs_usage\n"
            f"print(statvfs_usage({str(shut / 'open')!r}).blocks > 0)\n"
        )
        done = python_as_nobody(probe)
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr
