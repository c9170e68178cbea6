"""dir_usage's progress total: the used inodes of a whole filesystem, so a client can show a percentage."""

from __future__ import annotations

import os
from pathlib import Path

from sysmcp.engine.mounts import inodes_in_use


def test_a_mount_point_has_its_used_inodes_as_the_total() -> None:
    fs = os.statvfs("/")
    total = inodes_in_use(Path("/"))
    if fs.f_files == 0:  # a filesystem without inode counts (btrfs reports 0): no total to give
        assert total is None
    else:
        assert total is not None and 0 < total <= fs.f_files


def test_below_a_mount_point_there_is_no_total(tmp_path: Path) -> None:
    assert not os.path.ismount(tmp_path)
    assert inodes_in_use(tmp_path) is None
