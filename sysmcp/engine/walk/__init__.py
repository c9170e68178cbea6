"""The walk every engine shares: ``Scanner``, its options and events, time budgets, what a walk skips
(every mount point, binds included), sorted runs spilled to disk, and a totals-only walk (``walk_totals``).

This is the room's front door: other rooms import these names from here, never a private module.
"""

from sysmcp.engine.walk._budget import (
    Budget,
    OutOfDescriptors,
    ScanStopped,
    more_time_helps,
    out_of_descriptors,
    throttled,
)
from sysmcp.engine.walk._mountpoints import MountPoint, mount_points_below, mount_table
from sysmcp.engine.walk._spill import RUN_BYTES, SortedRuns, read_run
from sysmcp.engine.walk._totals import Totals, walk_totals
from sysmcp.engine.walk._types import (
    GONE,
    Listing,
    Node,
    ScanConfig,
    SkipCounter,
    Subtree,
    SubtreeTotals,
    WalkOptions,
)
from sysmcp.engine.walk._walk import NEVER, PART, Scanner, join, walk_files

__all__ = [
    "GONE",
    "NEVER",
    "PART",
    "RUN_BYTES",
    "Budget",
    "Listing",
    "MountPoint",
    "Node",
    "OutOfDescriptors",
    "ScanConfig",
    "ScanStopped",
    "Scanner",
    "SkipCounter",
    "SortedRuns",
    "Subtree",
    "SubtreeTotals",
    "Totals",
    "WalkOptions",
    "join",
    "more_time_helps",
    "mount_points_below",
    "mount_table",
    "out_of_descriptors",
    "read_run",
    "throttled",
    "walk_files",
    "walk_totals",
]
