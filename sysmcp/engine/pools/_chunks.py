"""btrfs chunk allocation: how much of a btrfs filesystem's devices is given to data, metadata and
system chunks, and how much is left unallocated. Why it matters: btrfs stores metadata only in
metadata chunks; once every device byte is in some chunk and the metadata chunks are full, creating a
file fails with ENOSPC while ``df`` still shows the free room inside half-empty data chunks.

Read from the kernel's ``/sys/fs/btrfs/<uuid>/`` (no command, no privilege): ``devices/`` names the
block devices (each a link to its sysfs directory, whose ``size`` is in 512-byte sectors) and
``allocation/<type>/`` gives each type's ``total_bytes`` and ``bytes_used`` (logical) and
``disk_total`` (raw bytes on the devices, copies included), as ``btrfs filesystem usage`` shows them.
Where the filesystem's directory can be opened, each device's own size and allocated bytes come from
``BTRFS_IOC_DEV_INFO`` (no privilege either), as ``btrfs filesystem usage`` reads them: a filesystem
shrunk inside its block device uses less than the device's size, and a new RAID1 chunk needs room on
two devices, which a sum over devices cannot tell.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

from sysmcp import platform

#: A device's (size, allocated, path) by its btrfs devid; None where it cannot be read.
DeviceSpace = Callable[[int], "tuple[int, int, str] | None"]

#: The chunk types as sysfs names them: 'mixed' holds data and metadata together (mkfs.btrfs --mixed, a
#: small filesystem's choice), where no data or metadata directory exists.
TYPES = ("data", "metadata", "mixed", "system")
#: Metadata at least this full (its used bytes and the global reserve, of its chunks' size), with no
#: room left for another metadata chunk, is where btrfs starts failing writes with ENOSPC.
METADATA_FULL_PERCENT = 75
#: The smallest metadata chunk counted as room to grow: btrfs makes a chunk smaller than its usual
#: size (at most a tenth of the filesystem) when the devices have less room left, down to a few MiB.
SMALLEST_CHUNK = 8 << 20
#: Data chunks with at least this share of their size free hold room a balance gives back.
SLACK_PERCENT = 10
#: The fewest devices a new chunk of a profile spans, each with room for its stripe (the kernel's
#: ``devs_min``); a profile not named takes one (single, dup, raid0).
DEVICES_MIN = {"raid1": 2, "raid1c3": 3, "raid1c4": 4, "raid10": 2, "raid5": 2, "raid6": 3}


@dataclass(frozen=True, slots=True)
class Chunks:
    """One chunk type's allocation."""

    kind: str  # data, metadata, mixed, system
    profile: str  # single, dup, raid1, …: the first btrfs names under allocation/<type>/
    size: int  # bytes its chunks hold (logical)
    used: int
    on_disk: int  # raw device bytes its chunks take (size × copies)
    chunk_size: int  # the size btrfs gives a new chunk of this type, at most


@dataclass(frozen=True, slots=True)
class Allocation:
    """One mounted btrfs's chunk allocation."""

    fsid: str
    device_size: int  # the bytes btrfs uses of its devices (their block sizes where it was not asked)
    chunks: tuple[Chunks, ...]
    global_reserve: int  # metadata btrfs keeps back for itself (counted against metadata)
    #: Each device's unallocated bytes, where btrfs said them (empty: only the sum is known)
    device_room: tuple[int, ...] = ()

    @property
    def allocated(self) -> int:
        return sum(c.on_disk for c in self.chunks)

    @property
    def unallocated(self) -> int:
        if self.device_room:
            return sum(self.device_room)
        return max(self.device_size - self.allocated, 0)

    def of(self, kind: str) -> Chunks | None:
        return next((c for c in self.chunks if c.kind == kind), None)

    @property
    def metadata_percent(self) -> float | None:
        """Metadata's used bytes and the global reserve, as a percentage of its chunks' size."""
        meta = self.of("metadata")
        if meta is None or meta.size <= 0:
            return None
        return round(100 * (meta.used + self.global_reserve) / meta.size, 1)

    @property
    def metadata_devices(self) -> int:
        """The fewest devices a new metadata chunk spans (2 for RAID1): as many need room."""
        meta = self.of("metadata")
        return 1 if meta is None else DEVICES_MIN.get(meta.profile, 1)

    @property
    def metadata_can_grow(self) -> bool:
        """Whether the unallocated room holds one more metadata chunk, however small btrfs makes it
        when room is short (``SMALLEST_CHUNK``): on as many devices as its profile spans, each with room
        for its stripe (both copies on one device for dup), where each device's room is known; else
        in the sum, each byte as many times as the profile keeps copies."""
        meta = self.of("metadata")
        if meta is None or meta.size <= 0:
            return True
        copies = max(meta.on_disk // meta.size, 1)
        wanted = min(meta.chunk_size or meta.size, max(self.device_size // 10, 1), SMALLEST_CHUNK)
        if self.device_room:
            stripe = wanted * copies if meta.profile == "dup" else wanted
            return sum(room >= stripe for room in self.device_room) >= self.metadata_devices
        return self.unallocated >= wanted * copies

    @property
    def data_slack(self) -> int:
        """Bytes free inside data chunks: what ``df`` counts as free and metadata cannot use."""
        data = self.of("data")
        return 0 if data is None else max(data.size - data.used, 0)

    @property
    def stuck(self) -> bool:
        """Metadata near full with no room for another metadata chunk: new files and even deletes
        can fail with ENOSPC, whatever free space ``df`` shows."""
        percent = self.metadata_percent
        return percent is not None and percent >= METADATA_FULL_PERCENT and not self.metadata_can_grow

    @property
    def balance_helps(self) -> bool:
        """Whether data chunks hold enough free room that compacting them (balance) gives some back."""
        data = self.of("data")
        return data is not None and data.size > 0 and self.data_slack * 100 >= data.size * SLACK_PERCENT


def _number(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except (OSError, ValueError):
        return None
    return int(text) if text.isascii() and text.isdigit() else None


def _profile(directory: str) -> str:
    """The profile btrfs names in a type's directory (a subdirectory: single, dup, raid1, …)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return ""
    return next(
        (
            n
            for n in names
            if n in ("single", "dup", "raid0", "raid1", "raid1c3", "raid1c4", "raid10", "raid5", "raid6")
        ),
        "",
    )


def _device_space(fs_dir: str, space: DeviceSpace | None) -> tuple[int, tuple[int, ...]] | None:
    """The devices' sizes added up and each one's unallocated bytes, by the devids sysfs lists under
    ``devinfo/`` (Linux 5.9 and later); None unless every device answers and each one with a path is
    one sysfs lists under ``devices/`` (a directory mounted over since is another filesystem)."""
    if space is None:
        return None
    try:
        devids = sorted(int(name) for name in os.listdir(os.path.join(fs_dir, "devinfo")) if name.isdigit())
        members = set(os.listdir(os.path.join(fs_dir, "devices")))
    except OSError:
        return None
    found = [space(devid) for devid in devids]
    sizes = [f for f in found if f is not None]
    if not sizes or len(sizes) != len(found):
        return None
    if any(path and os.path.basename(os.path.realpath(path)) not in members for _, _, path in sizes):
        return None
    return sum(size for size, _, _ in sizes), tuple(max(size - used, 0) for size, used, _ in sizes)


def read_allocation(fs_dir: str, space: DeviceSpace | None = None) -> Allocation | None:
    """The allocation in one ``/sys/fs/btrfs/<uuid>`` directory; None where it cannot be read whole.
    ``space``: each device's size and allocated bytes by devid (``BTRFS_IOC_DEV_INFO``), where the
    filesystem could be opened; else the block devices' sizes stand for its size."""
    size = 0
    try:
        devices = sorted(os.listdir(os.path.join(fs_dir, "devices")))
    except OSError:
        return None
    for name in devices:
        sectors = _number(os.path.join(fs_dir, "devices", name, "size"))
        if sectors is None:
            return None
        size += sectors * 512
    chunks = []
    for kind in TYPES:
        where = os.path.join(fs_dir, "allocation", kind)
        figures = [_number(os.path.join(where, f)) for f in ("total_bytes", "bytes_used", "disk_total")]
        if any(f is None for f in figures):
            continue  # no chunks of this type (mixed block groups: data and metadata in one)
        total, used, on_disk = (f or 0 for f in figures)
        chunk_size = _number(os.path.join(where, "chunk_size")) or 0
        chunks.append(Chunks(kind, _profile(where), total, used, on_disk, chunk_size))
    if not devices or not chunks:
        return None
    reserve = _number(os.path.join(fs_dir, "allocation", "global_rsv_size")) or 0
    per_device = _device_space(fs_dir, space)
    if per_device is not None:
        size, room = per_device
        return Allocation(os.path.basename(fs_dir), size, tuple(chunks), reserve, room)
    return Allocation(os.path.basename(fs_dir), size, tuple(chunks), reserve)


def btrfs_allocation(
    device: str, sys_fs_btrfs: str = platform.SYS_FS_BTRFS, mount_point: str | None = None
) -> Allocation | None:
    """The chunk allocation of the mounted btrfs ``device`` (a mount's source) is a member of; None
    where the kernel shows none (not Linux, not btrfs, a source that is no block device). With the
    ``mount_point`` it is mounted at, each device's size and allocation are asked of btrfs too."""
    name = os.path.basename(os.path.realpath(device))
    try:
        filesystems = sorted(os.listdir(sys_fs_btrfs))
    except OSError:
        return None
    for fsid in filesystems:
        fs_dir = os.path.join(sys_fs_btrfs, fsid)
        if name and os.path.lexists(os.path.join(fs_dir, "devices", name)):
            return read_allocation(fs_dir) if mount_point is None else _read_at(fs_dir, mount_point)
    return None


def _read_at(fs_dir: str, mount_point: str) -> Allocation | None:
    """``read_allocation`` with each device's space asked of the filesystem open at ``mount_point``
    (the sysfs reading alone where it cannot be opened)."""
    try:
        fd = os.open(mount_point, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return read_allocation(fs_dir)
    try:
        return read_allocation(fs_dir, functools.partial(platform.btrfs_device_space, fd))
    finally:
        os.close(fd)
