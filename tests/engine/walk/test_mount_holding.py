"""Which mount holds a walk's root: asked of the mount table's one lookup (``MountTable.holding``), so the
walk and every other tool agree, stacked mounts included (the one mounted last is the one seen)."""

from __future__ import annotations

import os

from sysmcp.engine.walk import MountPoint, Scanner, SkipCounter, WalkOptions

BTRFS = MountPoint(b"/data", os.makedev(0, 40), "btrfs")
TMPFS_OVER_IT = MountPoint(b"/data", os.makedev(0, 41), "tmpfs")
ROOT = MountPoint(b"/", os.makedev(8, 1), "ext4")


def on_btrfs(root: bytes, mounts: list[MountPoint]) -> bool:
    return Scanner(root, WalkOptions(), SkipCounter(), mounts=mounts)._root_on_btrfs()


def test_the_deepest_mount_point_above_the_root_holds_it() -> None:
    assert on_btrfs(b"/data/x", [ROOT, BTRFS])
    assert on_btrfs(b"/data", [ROOT, BTRFS])
    assert not on_btrfs(b"/database", [ROOT, BTRFS])  # a name that only begins like the point
    assert not on_btrfs(b"/srv", [ROOT, BTRFS])


def test_of_two_mounts_on_one_point_the_one_mounted_last_holds_the_root() -> None:
    """A tmpfs mounted over a btrfs hides it: a directory with inode 256 on another device below the
    root is then another filesystem, not a btrfs subvolume of the hidden one."""
    assert not on_btrfs(b"/data/x", [ROOT, BTRFS, TMPFS_OVER_IT])
    assert on_btrfs(b"/data/x", [ROOT, TMPFS_OVER_IT, BTRFS])
