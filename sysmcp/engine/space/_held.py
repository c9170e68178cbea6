"""Space a walk cannot see because the filesystem itself holds it: LVM thin and APFS local snapshots
(btrfs and ZFS snapshots: ``sysmcp.engine.pools``), and the filesystem's own overhead (btrfs metadata
and global reserve, XFS's in-memory reservations), read with read-only query commands with a timeout;
a command that is missing or fails is a fact, not an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sysmcp import platform
from sysmcp.engine.commands import run_command
from sysmcp.engine.faults import EngineError, Unavailable
from sysmcp.engine.mounts import Mount
from sysmcp.engine.pools import LVS, parse_lvs, snapshots_of_volume

COMMAND_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    name: str
    exclusive: int | None  # bytes only it holds (freed if it were deleted); None: not known
    is_snapshot: bool = True


@dataclass(slots=True)
class Snapshots:
    """What the filesystem keeps beyond the live tree; ``kind`` names the mechanism ('' when none)."""

    kind: str = ""
    items: list[Snapshot] = field(default_factory=list)
    bytes: int = 0  # the exclusive bytes known
    exact: bool = True  # False: some are not sized (btrfs quotas off, a command missing)
    note: str = ""  # why not (a fact: "quotas are off", "lvs not installed")


@dataclass(frozen=True, slots=True)
class Overhead:
    bytes: int | None  # None: the filesystem does not say (then it is in the remainder)
    source: str  # how it was read


def _read(argv: list[str], timeout_s: float) -> str | None:
    """The output of a query command, or None when it is missing, fails or does not answer in time."""
    try:
        return run_command(argv, timeout_s)
    except Unavailable:
        return None


def snapshots_of(mount: Mount) -> Snapshots:
    """The snapshots (and, on btrfs, other subvolumes) of the filesystem at ``mount``."""
    kind = mount.fs_type
    if kind in ("btrfs", "zfs"):
        return Snapshots()  # read by sysmcp.engine.pools (_space.read_cow), with shared bytes
    if kind == "apfs" or platform.is_macos():
        return _apfs(mount.mount_point)
    if mount.device.startswith("/dev/mapper/") or mount.device.startswith("/dev/dm-"):
        return _lvm(mount.device)
    return Snapshots()


def _lvm(device: str) -> Snapshots:
    try:
        found = snapshots_of_volume(device, parse_lvs(run_command(LVS, COMMAND_TIMEOUT)))
    except EngineError:  # lvs missing, failing, silent, or not giving its report: nothing to say
        return Snapshots()
    if not found:
        return Snapshots()
    items = [Snapshot(volume.name, None) for volume in found]
    if all(volume.attr.startswith("V") for volume in found):
        return Snapshots(
            "lvm thin snapshots", items, 0, False, "their blocks are in the thin pool, not on this filesystem"
        )
    # A classic snapshot (``lvcreate -s -L``, of a plain volume or a thin one) keeps its copy-on-write
    # blocks in a volume of its own.
    thin = ", a thin one's in its thin pool" if any(volume.attr.startswith("V") for volume in found) else ""
    note = f"their blocks are in volumes of their own in the volume group{thin}, not on this filesystem"
    return Snapshots("lvm snapshots", items, 0, False, note)


def _apfs(point: str) -> Snapshots:
    out = _read(["tmutil", "listlocalsnapshots", point], COMMAND_TIMEOUT)
    if out is None:
        return Snapshots()
    names = [line.strip() for line in out.splitlines() if "com.apple" in line]
    note = "APFS does not say how much each local snapshot holds (tmutil thinlocalsnapshots frees them)"
    return Snapshots("apfs local snapshots", [Snapshot(n, None) for n in names], 0, not names, note)


def overhead_of(mount: Mount, free_bytes: int) -> Overhead:
    """The filesystem's own share of ``used`` where it says it; ``free_bytes`` is statvfs's f_bfree."""
    if mount.fs_type == "btrfs":
        out = _read(["btrfs", "filesystem", "df", "-b", mount.mount_point], COMMAND_TIMEOUT)
        if out is not None:
            total = 0
            for m in re.finditer(r"^(Metadata|System), (\w+): total=\d+, used=(\d+)", out, re.M):
                copies = 2 if m.group(2).upper() in ("DUP", "RAID1") else 1
                total += int(m.group(3)) * copies
            reserve = re.search(r"^GlobalReserve, \w+: total=(\d+)", out, re.M)
            total += int(reserve.group(1)) if reserve else 0
            return Overhead(total, "btrfs filesystem df: metadata and system used, and the global reserve")
    elif mount.fs_type == "xfs":
        out = _read(["xfs_io", "-r", "-c", "fsmap", mount.mount_point], COMMAND_TIMEOUT)
        if out is not None:
            on_disk_free = 512 * sum(int(m.group(1)) for m in re.finditer(r"free space\s+(\d+)$", out, re.M))
            if on_disk_free:
                return Overhead(
                    max(on_disk_free - free_bytes, 0),
                    "xfs: blocks free on disk but held back in memory (per-group metadata reservations)",
                )
    elif mount.fs_type.startswith("ext"):
        return Overhead(0, "ext4 leaves its journal, inode tables and bitmaps out of used")
    return Overhead(None, "not reported by this filesystem: it is in the remainder")
