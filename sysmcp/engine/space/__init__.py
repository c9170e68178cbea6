"""Space accounting: the parts of a filesystem's used bytes (disk_usage ``explain``), hidden bytes under
mount points, LVM thin and APFS snapshots, and what ``sysmcp.engine.pools`` reads of btrfs and ZFS.

This is the room's front door: other rooms import these names from here, never a private module.
"""

from sysmcp.engine.space._held import Snapshot, Snapshots
from sysmcp.engine.space._space import (
    Accounting,
    ExplainRequest,
    HeldOpen,
    KeptScan,
    explain,
    explain_request,
    own_mount,
)

__all__ = [
    "Accounting",
    "ExplainRequest",
    "HeldOpen",
    "KeptScan",
    "Snapshot",
    "Snapshots",
    "explain",
    "explain_request",
    "own_mount",
]
