"""Processes: deleted files still held open, and disk I/O by device and process.

This is the room's front door: other rooms import these names from here, never a private module.
"""

from sysmcp.engine.procs._diskio import (
    ProcessIo,
    Reading,
    device_deltas,
    device_mount_points,
    files_written,
    process_deltas,
    take_reading,
)
from sysmcp.engine.procs._openfiles import (
    PROC,
    DeletedFile,
    Holder,
    Scan,
    filesystem_of,
    link_confined,
    mapped_anywhere,
    scan_processes,
)

__all__ = [
    "PROC",
    "DeletedFile",
    "Holder",
    "ProcessIo",
    "Reading",
    "Scan",
    "device_deltas",
    "device_mount_points",
    "files_written",
    "filesystem_of",
    "link_confined",
    "mapped_anywhere",
    "process_deltas",
    "scan_processes",
    "take_reading",
]
