"""Mounts: the mount table and its devices, and each filesystem's figures (disk_usage's engine).

This is the room's front door: other rooms import these names from here, never a private module.
"""

from sysmcp.engine.mounts._disks import (
    ALERT_PERCENT,
    MAX_STUCK_PROBES,
    MEMORY_TYPES,
    STATVFS_TIMEOUT,
    Disks,
    Figures,
    FilesystemUsage,
    FsStats,
    PartitionsProvider,
    Rate,
    SampleClock,
    Status,
    UsageProvider,
    inodes_in_use,
    percent_used,
    statvfs_usage,
)
from sysmcp.engine.mounts._mounts import (
    KERNEL_TYPES,
    MOUNTINFO,
    Mount,
    MountTable,
    apfs_container,
    container_siblings,
    default_partitions,
    layer_directories,
    parse_mountinfo,
    psutil_partitions,
)

__all__ = [
    "ALERT_PERCENT",
    "KERNEL_TYPES",
    "MAX_STUCK_PROBES",
    "MEMORY_TYPES",
    "MOUNTINFO",
    "STATVFS_TIMEOUT",
    "Disks",
    "Figures",
    "FilesystemUsage",
    "FsStats",
    "Mount",
    "MountTable",
    "PartitionsProvider",
    "Rate",
    "SampleClock",
    "Status",
    "UsageProvider",
    "apfs_container",
    "container_siblings",
    "default_partitions",
    "inodes_in_use",
    "layer_directories",
    "parse_mountinfo",
    "percent_used",
    "psutil_partitions",
    "statvfs_usage",
]
