"""Copy-on-write and thin pools: the space a filesystem draws on that ``df`` of the filesystem alone
does not show — btrfs subvolumes and snapshots, btrfs chunk allocation, ZFS datasets and snapshots,
LVM thin pools.

The front door: the readers (read-only query commands through ``sysmcp.engine.commands``, whose
faults carry the facts) and their pure parsers. Nothing here enables anything (btrfs quotas stay as
they are).
"""

from __future__ import annotations

from sysmcp.engine.pools._chunks import Allocation, Chunks, btrfs_allocation, read_allocation
from sysmcp.engine.pools._cow import (
    Cow,
    CowItem,
    btrfs_cow,
    parse_btrfs_du,
    parse_qgroups,
    parse_subvolume_lines,
    parse_zfs_list,
    subvolume_id_at,
    verified_subvolumes,
    zfs_cow,
)
from sysmcp.engine.pools._lvm import (
    LVS,
    ThinPool,
    could_be_thin,
    parse_lvs,
    snapshots_of_volume,
    thin_pool_of,
    thin_pools,
)
from sysmcp.engine.pools._zpool import (
    ZPOOL_FULL_PERCENT,
    ZfsLimits,
    ZfsPools,
    ZPool,
    parse_zfs_limits,
    parse_zpool_list,
    zfs_pools,
)

__all__ = [
    "LVS",
    "ZPOOL_FULL_PERCENT",
    "Allocation",
    "Chunks",
    "Cow",
    "CowItem",
    "ThinPool",
    "ZPool",
    "ZfsLimits",
    "ZfsPools",
    "btrfs_allocation",
    "btrfs_cow",
    "could_be_thin",
    "parse_btrfs_du",
    "parse_lvs",
    "parse_qgroups",
    "parse_subvolume_lines",
    "parse_zfs_limits",
    "parse_zfs_list",
    "parse_zpool_list",
    "read_allocation",
    "snapshots_of_volume",
    "subvolume_id_at",
    "thin_pool_of",
    "thin_pools",
    "verified_subvolumes",
    "zfs_cow",
    "zfs_pools",
]
