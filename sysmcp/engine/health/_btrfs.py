"""btrfs device error counters: ``btrfs device stats`` per mounted btrfs (its text parsed here, purely),
and the mounted btrfs filesystems from the mount table."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sysmcp.engine import commands
from sysmcp.engine.calls import Cancel

_LINE = re.compile(r"^\[(.+)\]\.(\w+)\s+(\d+)\s*$")


@dataclass(slots=True)
class BtrfsDevice:
    device: str
    mount_point: str
    errors: dict[str, int] = field(default_factory=dict)  # write_io_errs, read_io_errs, flush_io_errs, ...

    @property
    def total(self) -> int:
        return sum(self.errors.values())


def parse_stats(text: str, mount_point: str) -> list[BtrfsDevice]:
    """``btrfs device stats`` output: ``[/dev/sda].write_io_errs   0`` lines, per device in order."""
    found: dict[str, BtrfsDevice] = {}
    for line in text.splitlines():
        if match := _LINE.match(line.strip()):
            device, counter, count = match.groups()
            found.setdefault(device, BtrfsDevice(device, mount_point)).errors[counter] = int(count)
    return list(found.values())


def _unescape(field_: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field_)


def btrfs_mounts(mountinfo: str) -> list[tuple[str, str]]:
    """(source, mount point) of each mounted btrfs filesystem in a mountinfo text, its first mount only."""
    seen: dict[str, str] = {}
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 2 and tail[0] == "btrfs":
            seen.setdefault(tail[1], _unescape(fields[4]))
    return list(seen.items())


NOT_INSTALLED = "btrfs-progs is not installed (no btrfs command)"


def stats(
    btrfs: str | None, mount_point: str, timeout_s: float, cancel: Cancel
) -> tuple[list[BtrfsDevice], str]:
    """One mounted btrfs's device counters, and why there are none ("" when read)."""
    if btrfs is None:
        return [], NOT_INSTALLED
    try:
        done = commands.run([btrfs, "device", "stats", mount_point], timeout_s, cancel)
    except commands.CommandMissing:
        return [], NOT_INSTALLED
    except commands.CommandTimedOut:
        return [], f"btrfs device stats did not answer within {timeout_s:g} s"
    except commands.CommandFailed as fault:  # it could not be started
        return [], fault.detail
    devices = parse_stats(done.text, mount_point)
    why = done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no counters"]
    return devices, "" if devices else why[-1][:200]
