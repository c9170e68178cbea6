"""btrfs device error counters: ``btrfs device stats`` per mounted btrfs, its text parsed here, purely."""

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

    @property
    def missing(self) -> bool:
        """The filesystem runs without this device (mounted ``-o degraded``): btrfs names it so."""
        return self.device == MISSING


#: How ``btrfs device stats`` names a device the filesystem is mounted without.
MISSING = "<missing disk>"


def parse_stats(text: str, mount_point: str) -> list[BtrfsDevice]:
    """``btrfs device stats`` output: ``[/dev/sda].write_io_errs   0`` lines, per device in order."""
    found: dict[str, BtrfsDevice] = {}
    for line in text.splitlines():
        if match := _LINE.match(line.strip()):
            device, counter, count = match.groups()
            found.setdefault(device, BtrfsDevice(device, mount_point)).errors[counter] = int(count)
    return list(found.values())


def stats(btrfs: str, mount_point: str, timeout_s: float, cancel: Cancel) -> tuple[list[BtrfsDevice], str]:
    """One mounted btrfs's device counters, and why there are none ("" when read)."""
    try:
        done = commands.run([btrfs, "device", "stats", mount_point], timeout_s, cancel)
    except commands.CommandMissing:
        return [], "btrfs-progs is not installed (no btrfs command)"
    except commands.CommandTimedOut:
        return [], f"btrfs device stats did not answer within {timeout_s:g} s"
    except commands.CommandFailed as fault:  # it could not be started
        return [], fault.detail
    devices = parse_stats(done.text, mount_point)
    why = done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no counters"]
    return devices, "" if devices else why[-1][:200]
