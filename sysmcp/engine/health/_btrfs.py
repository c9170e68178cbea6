"""btrfs device error counters: ``btrfs device stats`` per mounted btrfs (its text parsed here, purely),
and the mounted btrfs filesystems from the mount table."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

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


def stats(btrfs: str | None, mount_point: str, timeout_s: float) -> tuple[list[BtrfsDevice], str]:
    """One mounted btrfs's device counters, and why there are none ("" when read)."""
    if btrfs is None:
        return [], "btrfs-progs is not installed (no btrfs command)"
    try:
        done = subprocess.run(
            [btrfs, "device", "stats", mount_point],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return [], f"btrfs device stats did not answer within {timeout_s:g} s"
    except OSError as exc:
        return [], f"btrfs could not be started: {exc.strerror or exc}"
    devices = parse_stats(done.stdout, mount_point)
    return devices, "" if devices else (done.stderr.strip().splitlines() or ["no counters"])[-1][:200]
