"""ZFS pools under datasets: how full each pool is and whether it is healthy, and the limits a dataset
is held to (quota, refquota, reservation, refreservation). Why: a ZFS dataset's ``df`` size is its
own used plus what it may still take, so a pool at 90 % (where ZFS allocates slowly and fragments) or a
dataset at its quota looks like any full filesystem, and a degraded pool looks like none.

``zpool list -Hp -o ZPOOL_COLUMNS`` (tabs, no header, exact bytes; capacity and fragmentation whole
percents; '-' where a figure is not known, every figure of a pool that cannot be opened) and ``zfs
list -Hp -o ZFS_LIMIT_COLUMNS DATASET…`` ('none' written as 0) are parsed apart from running them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sysmcp.engine.commands import BadOutput, CommandMissing, run_command
from sysmcp.engine.faults import EngineError

Runner = Callable[[list[str], float], str]
ZPOOL_COLUMNS = "name,size,allocated,free,fragmentation,capacity,health"
ZFS_LIMIT_COLUMNS = "name,used,available,referenced,quota,refquota,reservation,refreservation"
#: At this capacity or more a pool is flagged: ZFS finds free blocks slowly and fragments past it
#: (OpenZFS switches its allocator to best-fit near 96 %, and writes slow well before).
ZPOOL_FULL_PERCENT = 80
#: Health states (zpool(8)): ONLINE is whole; DEGRADED runs on lost redundancy; FAULTED, UNAVAIL,
#: SUSPENDED, REMOVED, OFFLINE cannot serve I/O. libzfs also says SPLIT and UNKNOWN, so any word in
#: capitals is read as a health (not ONLINE: unhealthy), lest one odd pool lose every pool's figures.
HEALTH_WORD = re.compile(r"[A-Z][A-Z_]{0,31}")


@dataclass(frozen=True, slots=True)
class ZPool:
    name: str
    size: int | None  # None: not known (a pool that cannot be opened)
    allocated: int | None
    free: int | None
    fragmentation: int | None  # percent of free space in small pieces
    capacity: int | None  # percent allocated
    health: str

    @property
    def full(self) -> bool:
        return self.capacity is not None and self.capacity >= ZPOOL_FULL_PERCENT

    @property
    def unhealthy(self) -> bool:
        return self.health != "ONLINE"


@dataclass(frozen=True, slots=True)
class ZfsLimits:
    """A dataset's limits; None where it has none."""

    name: str
    used: int  # with its descendants and snapshots: what its quota counts
    available: int
    referenced: int  # its own data: what its refquota counts
    quota: int | None
    refquota: int | None
    reservation: int | None
    refreservation: int | None

    @property
    def held_by(self) -> str | None:
        """'quota' or 'refquota' where that limit is what leaves the dataset the room it has (ZFS gives
        ``available`` as the limit less what it counts, when that is the least; within 1 % for writes
        in flight): None where the pool, or a parent's quota, holds it to less, and raising its own
        limit would give nothing."""
        reached = [
            (limit, name)
            for name, limit, counted in (
                ("quota", self.quota, self.used),
                ("refquota", self.refquota, self.referenced),
            )
            if limit and counted + self.available >= limit - limit // 100
        ]
        return min(reached)[1] if reached else None


@dataclass(slots=True)
class ZfsPools:
    pools: dict[str, ZPool] = field(default_factory=dict)
    limits: dict[str, ZfsLimits] = field(default_factory=dict)
    limits_fault: EngineError | None = None  # why zfs list gave no limits (the pools stand)

    def pool_of(self, dataset: str) -> ZPool | None:
        return self.pools.get(dataset.split("/", 1)[0].split("@", 1)[0])


def _figure(value: str, command: str) -> int | None:
    if value == "-":
        return None
    if not (value.isascii() and value.isdigit()):
        raise BadOutput(f"{command} gave {value[:40]!r} where -p gives a number", reason="zfs")
    return int(value)


def _rows(text: str, columns: int, command: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != columns:
            raise BadOutput(f"{command} gave {len(cells)} columns where {columns} were asked", reason="zfs")
        rows.append(cells)
    return rows


def parse_zpool_list(text: str) -> list[ZPool]:
    """``zpool list -Hp -o ZPOOL_COLUMNS``."""
    pools = []
    for name, *figures, health in _rows(text, 7, "zpool list"):
        if not HEALTH_WORD.fullmatch(health):
            raise BadOutput(f"zpool list gave the health {health[:20]!r}", reason="zfs")
        size, allocated, free, fragmentation, capacity = (_figure(v, "zpool list") for v in figures)
        if (capacity is not None and capacity > 100) or (fragmentation is not None and fragmentation > 100):
            raise BadOutput(f"zpool list gave a percent over 100 for {name[:60]}", reason="zfs")
        pools.append(ZPool(name, size, allocated, free, fragmentation, capacity, health))
    return pools


def parse_zfs_limits(text: str) -> list[ZfsLimits]:
    """``zfs list -Hp -o ZFS_LIMIT_COLUMNS``: 0 (-p's 'none') is no limit."""
    found = []
    for name, *cells in _rows(text, 8, "zfs list"):
        used, available, referenced, *limits = (_figure(v, "zfs list") for v in cells)
        quota, refquota, reservation, refreservation = (limit or None for limit in limits)
        found.append(
            ZfsLimits(
                name, used or 0, available or 0, referenced or 0, quota, refquota, reservation, refreservation
            )
        )
    return found


def zfs_pools(datasets: Sequence[str], timeout: float, run: Runner = run_command) -> ZfsPools | None:
    """Every pool (one ``zpool list``) and the limits of ``datasets`` (one ``zfs list``); None when
    there is no zpool command (no ZFS here: nothing to say). zpool's other faults are raised; a zfs
    list that fails (it exits 1 when one dataset it is named is gone) leaves the pools standing, its
    fault in ``limits_fault``."""
    wanted = list(dict.fromkeys(datasets))
    try:
        pools = parse_zpool_list(run(["zpool", "list", "-Hp", "-o", ZPOOL_COLUMNS], timeout))
    except CommandMissing:
        return None
    found = ZfsPools({p.name: p for p in pools})
    if wanted:
        try:
            limits = parse_zfs_limits(run(["zfs", "list", "-Hp", "-o", ZFS_LIMIT_COLUMNS, *wanted], timeout))
        except EngineError as exc:
            found.limits_fault = exc
        else:
            found.limits = {limit.name: limit for limit in limits}
    return found
