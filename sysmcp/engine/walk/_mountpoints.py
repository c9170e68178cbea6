"""The mount points a walk must know before it meets them: hung network mounts are skipped unseen.

Read once per walk from ``/proc/self/mountinfo`` (or psutil where there is none), so a mount
below the root is skipped by name, never ``lstat``-ed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from sysmcp import platform
from sysmcp.engine.mounts import (
    KERNEL_TYPES,
    MOUNTINFO,
    Mount,
    MountTable,
    parse_mountinfo,
    psutil_partitions,
)
from sysmcp.engine.walk._types import WalkOptions


@dataclass(frozen=True, slots=True)
class MountPoint:
    """A mount as a walk meets it: its point (bytes, as names are), its ``st_dev`` and its type; a
    projection of ``engine.mounts.Mount`` for comparisons in the walk's hot loop."""

    point: bytes
    dev: int
    fstype: str
    mount_id: int = 0  # mountinfo's, as fdinfo's ``mnt_id`` names it (0: unknown)
    parent_id: int = 0  # the mount it sits on (mountinfo's; 0: unknown): which of stacked mounts is on top


UNKNOWN_DEV = -1  # a mount whose device number the table does not give: never equal to an st_dev


def mount_table(mountinfo: str = MOUNTINFO) -> list[MountPoint]:
    """Mount points, device numbers and types from mountinfo (empty when it cannot be read). Without
    mountinfo (macOS, the BSDs), from psutil with ``UNKNOWN_DEV``: every mount below a walk's root is
    still known before the walk reaches it (a hung one is never ``lstat``-ed)."""
    if mountinfo == MOUNTINFO and not platform.has_mountinfo():
        try:
            return [
                MountPoint(os.fsencode(m.mount_point), UNKNOWN_DEV, m.fs_type)
                for m in psutil_partitions().mounts
            ]
        except OSError:
            return []
    try:
        with open(mountinfo, "rb") as handle:
            table = parse_mountinfo(handle.read())
    except OSError:
        return []
    mounts = []
    for mount in table.mounts:
        dev = mount.number(UNKNOWN_DEV)  # UNKNOWN_DEV: mountinfo gave no device number, left out
        if dev != UNKNOWN_DEV:
            point = os.fsencode(mount.mount_point)
            mounts.append(MountPoint(point, dev, mount.fs_type, mount.mount_id, mount.parent_id))
    return mounts


def holding(table: Sequence[MountPoint], path: bytes, st_dev: int | None = None) -> MountPoint | None:
    """The mount that holds ``path`` (absolute), as ``MountTable.holding`` answers it for every other
    tool: the deepest mount point containing it; of several stacked there, the one whose device is
    ``st_dev``'s, else the one on top. Why through it: one rule for stacked mounts, not two."""
    projected: dict[int, MountPoint] = {}
    mounts = []
    for point in table:
        dev = "" if point.dev == UNKNOWN_DEV else f"{os.major(point.dev)}:{os.minor(point.dev)}"
        mount = Mount(
            os.fsdecode(point.point),
            "",
            point.fstype,
            dev=dev,
            mount_id=point.mount_id,
            parent_id=point.parent_id,
        )
        projected[id(mount)] = point
        mounts.append(mount)
    found = MountTable(mounts, sys_dev_block="").holding(os.path.normpath(os.fsdecode(path)), st_dev)
    return None if found is None else projected[id(found)]


def mount_points_below(
    root: bytes, options: WalkOptions, table: Sequence[MountPoint] | None = None
) -> dict[str, dict[str, str]]:
    """Mount points under ``root`` that the walk will not enter, by parent directory: name → reason.

    Known from the mount table, they are skipped without even an ``lstat``: the root of a hung network
    mount would stall the scan (and ``du``) in an uninterruptible system call. A bind mount of the
    root's own filesystem counts too (``du -x`` walks into those): what it shows may lie outside the
    walked tree. Kernel pseudo-filesystems are ``pseudo_filesystem``, the rest ``other_filesystem``
    (only with ``one_file_system``); without it, a bind mount of a directory above its own point is a
    ``directory_loop``: walked, it would count that directory's tree twice.
    """
    prefix = root.rstrip(b"/") + b"/"
    skip: dict[str, dict[str, str]] = {}
    mounts = mount_table() if table is None else table
    points: dict[int, list[bytes]] = {}  # by device number: the mounts a bind mount shares a filesystem with
    for mount in () if options.one_file_system else mounts:
        points.setdefault(mount.dev, []).append(mount.point.rstrip(b"/") + b"/")
    for mount in mounts:
        if not mount.point.startswith(prefix):
            continue
        if options.skip_pseudo and mount.fstype in KERNEL_TYPES:
            reason = "pseudo_filesystem"
        elif options.one_file_system:
            reason = "other_filesystem"
        elif _shows_a_directory_above(mount, points[mount.dev]):
            reason = "directory_loop"
        else:
            continue
        parent, _, name = mount.point[len(prefix) :].rpartition(b"/")
        if name:
            skip.setdefault(os.fsdecode(parent), {})[os.fsdecode(name)] = reason
    return skip


def _shows_a_directory_above(mount: MountPoint, same_device: list[bytes]) -> bool:
    """Whether the directory at a mount point is one of the directories above it (a bind mount of an
    ancestor). Only a mount of a filesystem a mount above it has too (``same_device``: the table's
    points of its device number, which on btrfs is no ``st_dev``, each subvolume having its own) is
    looked at, so a network mount (a device of its own) is never ``stat``-ed, hung or not."""
    point = mount.point
    if mount.dev == UNKNOWN_DEV or not any(point.startswith(other) for other in same_device):
        return False
    try:
        above = [os.stat(head) for head in _heads(point)]
        shown = os.stat(point)
    except OSError:
        return False
    return any((st.st_dev, st.st_ino) == (shown.st_dev, shown.st_ino) for st in above)


def _heads(point: bytes) -> list[bytes]:
    """The directories above an absolute path, ``/`` first: b"/a/b" → [b"/", b"/a"]."""
    parts = point.strip(b"/").split(b"/")[:-1]
    return [b"/"] + [b"/" + b"/".join(parts[: i + 1]) for i in range(len(parts))]
