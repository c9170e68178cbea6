"""The kernel's recent I/O errors per block device, from ``/dev/kmsg``: the reader (non-blocking, the
ring buffer as it is now) and a pure parser of its records."""

from __future__ import annotations

import os
import re
from collections import deque

#: "I/O error, dev sda, sector 12 op 0x0:(READ)" (blk_update_request / blk_print_req_error),
#: "Buffer I/O error on dev sda1, logical block 3", "critical medium error, dev sdb, sector 7".
_ERROR = re.compile(r"(?:I/O error|medium error|critical target error),? (?:on )?dev (\w[\w.-]*)")


def parse(records: list[str], keep: int) -> dict[str, list[str]]:
    """The last ``keep`` I/O error messages per device named in kmsg records (``prio,seq,usec,-;text``),
    each as ``[seconds since boot] text``."""
    found: dict[str, deque[str]] = {}
    for record in records:
        head, _, text = record.partition(";")
        text = text.split("\n", 1)[0]
        match = _ERROR.search(text)
        if not match:
            continue
        parts = head.split(",")
        stamp = f"[{int(parts[2]) / 1e6:.1f} s] " if len(parts) > 2 and parts[2].isdigit() else ""
        found.setdefault(match[1], deque(maxlen=keep)).append(stamp + text.strip()[:300])
    return {device: list(lines) for device, lines in found.items()}


def read_records(path: str, limit: int = 100_000) -> list[str] | None:
    """The kernel log's records now in its ring buffer (at most ``limit``), or None where it cannot be
    read (not root with dmesg_restrict, no /dev/kmsg)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    records: list[str] = []
    try:
        while len(records) < limit:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # overwritten while read: skip to the next record
                continue
            except OSError:
                return records or None
            if not chunk:
                break
            records.append(chunk.decode("utf-8", "replace"))
    finally:
        os.close(fd)
    return records


def disk_of(name: str, sys_class_block: str = "/sys/class/block") -> str:
    """The whole disk a partition belongs to (``sda1`` → ``sda``); the name itself otherwise."""
    if os.path.exists(os.path.join(sys_class_block, name, "partition")):
        return os.path.basename(os.path.dirname(os.path.realpath(os.path.join(sys_class_block, name))))
    return name
