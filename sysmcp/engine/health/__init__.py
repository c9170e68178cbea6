"""disk_health's engine: is a disk failing? SMART/NVMe health, md RAID, btrfs device errors and the
kernel's I/O errors, each device with a verdict (ok / watch / failing, or unknown where SMART could not
be read) and its reasons in words.

The front door: ``HealthRequest`` in, ``run(request, progress, cancel)``, ``Health`` out. The parsers
take text and do no I/O. smartctl runs once per device, up to ``parallel`` at once, each killed after
``timeout_s``; ``cancel`` (which raises) is called while they run.
"""

from __future__ import annotations

import os
import re
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from sysmcp import platform
from sysmcp.engine.calls import Cancel, Progress, StopFlag, never_cancelled, no_progress, wait_for
from sysmcp.engine.faults import Unavailable
from sysmcp.engine.health import _btrfs, _kernel, _mdstat, _smart
from sysmcp.engine.health._btrfs import MISSING as BTRFS_MISSING
from sysmcp.engine.health._btrfs import BtrfsDevice
from sysmcp.engine.health._mdstat import MdArray
from sysmcp.engine.health._smart import Smart
from sysmcp.engine.mounts import parse_mountinfo

__all__ = ["BTRFS_MISSING", "BtrfsDevice", "Device", "Health", "HealthRequest", "MdArray", "Smart", "run"]

ORDER = {"failing": 0, "watch": 1, "unknown": 2, "ok": 3}
#: Words in a virtual disk's sysfs path (lower case), and its SCSI vendor, that name its hypervisor.
VIRTUAL_PATHS = {"/virtio": "virtio", "/vbd-": "Xen", "/vmbus": "Hyper-V"}
VIRTUAL_VENDORS = {"QEMU": "QEMU", "VMware": "VMware", "VBOX": "VirtualBox", "Msft": "Hyper-V"}


@dataclass(frozen=True, slots=True)
class HealthRequest:
    timeout_s: float = 10.0  # per smartctl call
    parallel: int = 8  # smartctl calls at once
    kernel_lines: int = 3  # recent kernel I/O error lines kept per device
    #: The smartctl and btrfs programs, found on PATH; tests point them at stand-ins.
    smartctl: str = "smartctl"
    btrfs: str = "btrfs"
    #: Devices to check (e.g. ``/dev/sda``); None: every physical device found.
    devices: tuple[str, ...] | None = None
    sys_block: str = platform.SYS_BLOCK
    mdstat: str = platform.MDSTAT
    kmsg: str = platform.KMSG
    mountinfo: str = platform.MOUNTINFO


@dataclass(slots=True)
class Device:
    device: str  # /dev/sda
    smart: Smart
    io_errors: list[str] = field(default_factory=list)  # the kernel's most recent I/O error lines
    verdict: str = "ok"  # ok: SMART read and nothing wrong; unknown: not read, nothing else wrong
    reasons: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Health:
    devices: list[Device]
    arrays: list[MdArray]
    btrfs: list[BtrfsDevice]
    btrfs_unread: list[tuple[str, str]]  # (mount point, why its counters could not be read)
    smartctl: bool  # smartctl is installed
    kernel_log: bool  # the kernel log could be read
    mdstat: bool  # /proc/mdstat exists (the md driver is loaded)


def physical_devices(sys_block: str) -> list[str]:
    """Whole disks in ``/sys/block`` that are hardware (not loop, zram, dm or md: their sysfs path is
    under ``/devices/virtual/``)."""
    try:
        names = sorted(os.listdir(sys_block))
    except OSError:
        return []
    return [
        f"/dev/{name}"
        for name in names
        if "/devices/virtual/" not in os.path.realpath(os.path.join(sys_block, name))
    ]


_NVME_CONTROLLER = re.compile(r"/dev/nvme\d+")


def _controller_of(path: str, known: set[str]) -> bool:
    """Whether ``path`` is an NVMe controller (``/dev/nvme0``, as smartctl's scan names it) whose
    namespace (``/dev/nvme0n1``, as /sys/block names it) is already listed: the same drive, one SMART log."""
    return _NVME_CONTROLLER.fullmatch(path) is not None and any(
        re.fullmatch(re.escape(path) + r"n\d+", disk) for disk in known
    )


def virtual_disk(sys_block: str, device: str) -> str | None:
    """The hypervisor a disk comes from (virtio, Xen, Hyper-V, QEMU ...), from its sysfs entry; None
    for hardware, or where sysfs does not say."""
    entry = os.path.join(sys_block, os.path.basename(device))
    path = os.path.realpath(entry).lower()
    found = next((kind for word, kind in VIRTUAL_PATHS.items() if word in path), None)
    vendor = (_read(os.path.join(entry, "device", "vendor")) or b"").decode("ascii", "replace").strip()
    return found or VIRTUAL_VENDORS.get(vendor)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def run(request: HealthRequest, progress: Progress = no_progress, cancel: Cancel = never_cancelled) -> Health:
    stop = StopFlag()  # checked in the smartctl threads: ``cancel`` is asked on this one only

    def read(devices: list[tuple[str, str | None]]) -> list[Future[Smart]]:
        return [
            pool.submit(_smart.read, request.smartctl, *device, request.timeout_s, stop.check)
            for device in devices
        ]

    with ThreadPoolExecutor(max_workers=max(1, request.parallel) + 1) as pool:
        try:
            # smartctl's scan runs beside the reads of /sys/block's disks: a hung smartctl costs one timeout
            scan = (
                pool.submit(_smart.scan, request.smartctl, request.timeout_s, stop.check)
                if request.devices is None
                else None
            )
            paths = request.devices if request.devices is not None else physical_devices(request.sys_block)
            listed: list[tuple[str, str | None]] = [(path, None) for path in paths]
            reads = read(listed)
            if scan is not None:
                known = {os.path.realpath(path) for path, _ in listed}
                # disks only smartctl sees (behind a RAID controller: megaraid,N ...)
                extra = [
                    (path, kind)
                    for path, kind in wait_for([scan], cancel)[0]
                    if os.path.realpath(path) not in known and not _controller_of(path, known)
                ]
                reads += read(extra)
                listed += extra
            smarts = wait_for(reads, cancel, progress)
        finally:
            stop.set()  # on a cancel: every smartctl still running is killed, then the pool ends
    mdstat = _read(request.mdstat)
    arrays = _mdstat.parse(mdstat.decode("utf-8", "replace")) if mdstat is not None else []
    installed = shutil.which(request.smartctl) is not None
    if request.devices is None and not listed and not arrays:
        missing = (
            "" if installed else "; smartctl is not installed (smartmontools), which lists them elsewhere"
        )
        raise Unavailable(f"no physical block device was found to check (none in /sys/block{missing})")
    records = _kernel.read_records(request.kmsg)
    errors: dict[str, list[str]] = {}
    for name, lines in _kernel.parse(records or [], request.kernel_lines).items():
        errors.setdefault(_kernel.disk_of(name), []).extend(lines)
    root = getattr(os, "geteuid", lambda: 0)() == 0
    devices = [
        _judge(
            path,
            smart,
            errors.get(os.path.basename(path), []),
            _smart.unread_step(smart, virtual_disk(request.sys_block, path), root)
            if smart.status not in ("read", "timeout", "gone")
            else None,
        )
        for (path, _), smart in zip(listed, smarts, strict=True)
    ]
    devices.sort(key=lambda d: (ORDER[d.verdict], d.device))
    btrfs: list[BtrfsDevice] = []
    unread: list[tuple[str, str]] = []
    first_mounts: dict[str, str] = {}  # each mounted btrfs once, at its first mount point
    for mount in parse_mountinfo(_read(request.mountinfo) or b"").mounts:
        if mount.fs_type == "btrfs":
            first_mounts.setdefault(mount.device, mount.mount_point)
    for mount_point in first_mounts.values():
        found, why = _btrfs.stats(request.btrfs, mount_point, request.timeout_s, cancel)
        btrfs += found
        if why:
            unread.append((mount_point, why))
    return Health(devices, arrays, btrfs, unread, installed, records is not None, mdstat is not None)


def _judge(path: str, smart: Smart, io_errors: list[str], unread: str | None = None) -> Device:
    """failing, watch, unknown (SMART not read, or read in part, and nothing else wrong), else ok.
    ``unread``: why SMART was not read and what to do, where it was not."""
    watch = list(smart.watch)
    if smart.status in ("timeout", "gone"):
        watch.append(smart.note)
    if io_errors:
        watch.append(
            f"the kernel logged I/O errors for it recently ({len(io_errors)} shown); check cabling and SMART"
        )
    unknown = [*smart.unknown, *([unread] if unread else [])]
    verdict = "failing" if smart.failing else "watch" if watch else "unknown" if unknown else "ok"
    return Device(path, smart, io_errors, verdict, [*smart.failing, *watch, *unknown])
