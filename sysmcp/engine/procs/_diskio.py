"""What each block device and each process moved between two readings: the engine of disk_io.

Two readings of the kernel's counters, some seconds apart, per block device (psutil's
``disk_io_counters``) and per process (``io_counters``: bytes that reached the storage layer, as iotop
shows); their differences are the answer. A process's counters are readable by its own user and root
only, so a reading counts the processes it could not see instead of pretending they wrote nothing.
The waiting between the readings and the words are the tool's (``sysmcp.tools.disk_io``).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import psutil

from sysmcp import platform
from sysmcp.engine.calls import Cancel, Progress, never_cancelled, no_progress
from sysmcp.engine.mounts import Mount, MountTable
from sysmcp.engine.procs._openfiles import PROC, MountView, WrittenFile, open_for_writing


class ProcessIo(NamedTuple):
    """One process's storage I/O: cumulative in a reading, over the window in ``process_deltas``'."""

    pid: int
    started: float  # create time: with the pid, which process this is (pids are reused)
    command: str
    user: str | None
    read_bytes: int
    write_bytes: int


@dataclass(slots=True)
class ProcessReading:
    """Every readable process's counters at one moment, and which could not be read.

    A process is known by its pid and create time (pids are reused). Whether one in a later reading
    was already running at this one is told by this reading having met it, never by comparing its
    create time with a clock: psutil's create time rests on the boot time /proc/stat gives in whole
    seconds, so it reads up to a second early, and a process started just after this reading would
    look older than it."""

    processes: dict[tuple[int, float], ProcessIo] = field(default_factory=dict)
    refused: set[tuple[int, float]] = field(default_factory=set)  # met, but its counters were refused

    @property
    def unreadable(self) -> int:
        """How many processes' counters could not be read."""
        return len(self.refused)


def read_processes(cancel: Cancel = never_cancelled) -> ProcessReading:
    """Every readable process's cumulative storage I/O."""
    reading = ProcessReading()
    for process in psutil.process_iter(["pid", "name", "username", "create_time"]):
        cancel()
        info = process.info
        key = (info["pid"], info["create_time"] or 0.0)
        try:
            counters = process.io_counters()
        except psutil.AccessDenied:
            reading.refused.add(key)
            continue
        except psutil.Error:  # gone, or a zombie with nothing left to read
            continue
        reading.processes[key] = ProcessIo(
            info["pid"],
            info["create_time"] or 0.0,
            info["name"] or "?",
            info["username"],
            counters.read_bytes,
            counters.write_bytes,
        )
    return reading


def process_deltas(first: ProcessReading, second: ProcessReading) -> list[ProcessIo]:
    """What each process read and wrote between the readings. A process the first reading did not
    meet started during the window (the first reading lists the processes after it begins) and did all
    its I/O within it; one it met but could not read is left out: its share is unknown."""
    moved = []
    for key, now in second.processes.items():
        before = first.processes.get(key)
        if before is None:
            if key in first.refused:
                continue  # running at the start, unreadable then: its share of the window is unknown
            read, written = now.read_bytes, now.write_bytes
        else:
            read, written = now.read_bytes - before.read_bytes, now.write_bytes - before.write_bytes
        if read > 0 or written > 0:
            moved.append(now._replace(read_bytes=max(read, 0), write_bytes=max(written, 0)))
    return moved


class Reading(NamedTuple):
    """One reading of everything: when (monotonic), the devices' and the processes' counters."""

    taken: float
    devices: dict[str, Any]
    processes: ProcessReading | None  # None: not asked for (no per-process counters here)


def take_reading(
    with_processes: bool, progress: Progress = no_progress, cancel: Cancel = never_cancelled
) -> Reading:
    """The devices' counters, then (if asked) every process's; ``cancel`` before each process (the
    engines' run shape; no progress: it is one pass over the counters)."""
    taken = time.monotonic()
    try:
        devices: dict[str, Any] = psutil.disk_io_counters(perdisk=True, nowrap=True) or {}
    except (OSError, RuntimeError):
        devices = {}  # the system gives none (some containers)
    processes = read_processes(cancel) if with_processes else None
    return Reading(taken, devices, processes)


@dataclass(frozen=True, slots=True)
class DeviceIo:
    """One block device over the window: bytes moved, rates, operations per second, busy share."""

    device: str
    read_bytes: int
    write_bytes: int
    read_bytes_per_s: float
    write_bytes_per_s: float
    read_iops: float
    write_iops: float
    busy_percent: float | None  # None where the system reports no busy time

    @property
    def busy(self) -> bool:
        """It moved bytes or was busy in the window (an idle device is only named)."""
        return bool(self.read_bytes or self.write_bytes or self.busy_percent)


def device_deltas(first: dict[str, Any], second: dict[str, Any], seconds: float) -> list[DeviceIo]:
    """What each device present in both readings did over ``seconds``, the most bytes first."""
    rows = []
    for name, now in second.items():
        before = first.get(name)
        if before is None:
            continue
        busy = getattr(now, "busy_time", None)
        busy_before = getattr(before, "busy_time", None)
        busy_percent = (
            None
            if busy is None or busy_before is None
            else round(min(100.0, max(0.0, (busy - busy_before) / 10 / seconds)), 1)  # ms → percent
        )
        read, written = now.read_bytes - before.read_bytes, now.write_bytes - before.write_bytes
        reads, writes = now.read_count - before.read_count, now.write_count - before.write_count
        rows.append(
            DeviceIo(
                name,
                read,
                written,
                round(read / seconds, 1),
                round(written / seconds, 1),
                round(reads / seconds, 1),
                round(writes / seconds, 1),
                busy_percent,
            )
        )
    rows.sort(key=lambda row: (-(row.read_bytes + row.write_bytes), row.device))
    return rows


# -- which files, on which mount ------------------------------------------------------------------


def device_name(dev: str, sys_dev_block: str = platform.SYS_DEV_BLOCK) -> str | None:
    """The kernel's name of the block device ``dev`` ("major:minor"), as the device counters name it
    ("sda1", "dm-0", "nvme0n1p2"); None for what is no block device (tmpfs, overlay, NFS)."""
    try:
        return os.path.basename(os.readlink(os.path.join(sys_dev_block, dev)))
    except OSError:
        return None


def mount_device_name(mount: Mount, sys_dev_block: str = platform.SYS_DEV_BLOCK) -> str | None:
    """The kernel's name of the block device ``mount``'s filesystem is on: by its number, or by its
    source's where the number is no block device's (btrfs numbers its filesystems anonymously, 0:N)."""
    name = device_name(mount.dev, sys_dev_block) if mount.dev else None
    if name is None and mount.device.startswith("/dev/"):
        try:
            st = os.stat(mount.device)
        except OSError:
            return None
        if stat.S_ISBLK(st.st_mode):
            name = device_name(f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}", sys_dev_block)
    return name


def device_mount_points(table: MountTable) -> dict[str, list[str]]:
    """Each block device's mount points (visible ones, shortest first), by the counters' device name."""
    points: dict[str, list[str]] = {}
    for mount in table.mounts:
        name = mount_device_name(mount, table.sys_dev_block) if table.visible(mount) else None
        if name is not None:
            points.setdefault(name, []).append(mount.mount_point)
    return {name: sorted(set(found), key=lambda p: (len(p), p)) for name, found in points.items()}


def files_written(
    pids: Iterable[int],
    keep: Callable[[WrittenFile], bool] = lambda _: True,
) -> dict[int, tuple[list[WrittenFile], int]]:
    """Per process: the regular files on block devices it has open for writing that ``keep`` accepts
    (the caller's roots), each with its ``device`` named, and how many more it has open that ``keep``
    refused."""
    names: dict[int, str | None] = {}
    found: dict[int, tuple[list[WrittenFile], int]] = {}
    view = MountView(PROC)
    for pid in pids:
        kept: list[WrittenFile] = []
        refused = 0
        for item in open_for_writing(PROC, pid, view):
            if item.dev not in names:
                mounts = [] if view.table is None else view.table.mounts
                mount = next((m for m in mounts if m.dev_matches(item.dev)), None)
                names[item.dev] = (
                    device_name(f"{os.major(item.dev)}:{os.minor(item.dev)}")
                    if mount is None
                    else mount_device_name(mount)
                )
            device = names[item.dev]
            if device is None:
                continue  # not storage: a tmpfs, a pipe's filesystem, a network mount
            if keep(item):
                kept.append(replace(item, device=device))
            else:
                refused += 1
        found[pid] = (kept, refused)
    return found
