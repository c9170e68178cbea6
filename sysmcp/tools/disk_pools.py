"""disk_usage's view of the pools under filesystems: the LVM thin pool each filesystem draws on (its
data and metadata percent, overcommitment, a flag when it is fuller than the filesystem, and its own
time to full when sampled), and for ``explain`` what btrfs and ZFS snapshots hold, in words and
figures. The engine is ``sysmcp.engine.pools``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple, cast

import anyio.to_thread

from sysmcp.engine.faults import EngineError
from sysmcp.engine.mounts import Figures, FilesystemUsage, Rate, SampleClock
from sysmcp.engine.paths import escaped, is_within, shell_word, within_roots
from sysmcp.engine.pools import (
    ZPOOL_FULL_PERCENT,
    Allocation,
    Cow,
    CowItem,
    ThinPool,
    ZfsPools,
    btrfs_allocation,
    could_be_thin,
    thin_pools,
    zfs_pools,
)
from sysmcp.render import age, human_bytes
from sysmcp.tools.errors import words
from sysmcp.tools.typed import prop, result

if TYPE_CHECKING:
    from sysmcp.engine.space import Snapshots

__all__ = [
    "BtrfsChunks",
    "FilesystemPool",
    "Pool",
    "PoolReader",
    "PoolSampler",
    "ZfsPool",
    "as_snapshots",
    "btrfs_chunks",
    "chunk_line",
    "chunks_of",
    "cow_lines",
    "read_pools",
    "read_zfs",
    "zfs_lines",
    "zfs_of",
]

POOL_TIMEOUT = 5.0  # seconds lvs is given
POOL_MAX_AGE = 2.0  # seconds an answer's first lvs reading may be old (a sampling round's: fresh)
#: (mount sources, the age a reading may have) → the pool under each
PoolReader = Callable[[Sequence[str], float], dict[str, ThinPool]]


def read_pools(devices: Sequence[str], max_age: float) -> dict[str, ThinPool]:
    return thin_pools(devices, POOL_TIMEOUT, max_age=max_age)


@result
class Pool:
    """The LVM thin pool under a filesystem of the answer."""

    kind: Literal["lvm-thin"] = prop("What pools it: an LVM thin pool.")
    name: str = prop("The pool, 'vg/pool'.")
    volume: str = prop("The thin volume the filesystem is on, 'vg/lv'.")
    size_bytes: int = prop("The pool's data size.")
    free_bytes: int = prop("The pool's data bytes not yet given to any thin volume.")
    data_percent: float = prop("How full the pool's data is.")
    metadata_percent: float | None = prop("How full the pool's metadata is (null: not reported).")
    provisioned_bytes: int = prop("The sizes of all thin volumes in the pool, added up.")
    overcommitted_bytes: int = prop("Provisioned beyond the pool's size (0: not overcommitted).")
    fuller_than_filesystem: bool = prop("Data or metadata percent above the filesystem's percent_used.")
    fill_rate_bytes_per_s: float | None = prop("With sample_s: the pool's data growth.")
    seconds_to_full: float | None = prop("With sample_s: at that rate, until the pool's data is full.")


@result
class ChunkType:
    """One btrfs chunk type's allocation."""

    type: Literal["data", "metadata", "mixed", "system"] = prop("mixed: data and metadata together.")
    profile: str = prop("single, dup, raid1, …")
    size_bytes: int = prop("What its chunks hold.")
    used_bytes: int = prop()
    device_bytes: int = prop("Device bytes its chunks take, copies included.")


@result
class BtrfsChunks:
    """How a btrfs filesystem's devices are allocated to chunks: metadata grows only into unallocated."""

    device_bytes: int = prop("The bytes btrfs uses of its devices, added up.")
    unallocated_bytes: int = prop("Device bytes in no chunk.")
    types: list[ChunkType] = prop("Per chunk type: its profile, size and use.")
    global_reserve_bytes: int = prop("Metadata btrfs keeps back for itself.")
    metadata_percent: float | None = prop("(metadata used + global reserve) / metadata size.")
    metadata_full: bool = prop(
        "Metadata at 75 % or more with no room for another chunk: ENOSPC while df shows free space."
    )


def btrfs_chunks(mounts: Sequence[tuple[str, str]]) -> dict[str, Allocation]:
    """The chunk allocation of each btrfs mount source the kernel shows one for, by source (in a
    worker: sysfs, and an ioctl on the mount point). ``mounts``: (source, mount point)."""
    found = {device: btrfs_allocation(device, mount_point=point) for device, point in dict(mounts).items()}
    return {device: allocation for device, allocation in found.items() if allocation is not None}


def chunks_of(allocation: Allocation) -> BtrfsChunks:
    kinds = cast("list[Literal['data', 'metadata', 'mixed', 'system']]", [c.kind for c in allocation.chunks])
    return BtrfsChunks(
        allocation.device_size,
        allocation.unallocated,
        [
            ChunkType(kind, c.profile, c.size, c.used, c.on_disk)
            for kind, c in zip(kinds, allocation.chunks, strict=True)
        ],
        allocation.global_reserve,
        allocation.metadata_percent,
        allocation.stuck,
    )


def chunk_line(mount_point: str, allocation: Allocation) -> str | None:
    """The warning for a btrfs whose metadata is full and cannot grow, with the steps an admin takes
    (None when it is not): a balance compacts half-empty data chunks into fewer, giving their device
    bytes back to unallocated, where metadata can grow; with metadata full, the balance itself has no
    room to work in, so a device is added for the while (or files deleted) first: as many devices as a
    metadata chunk of its profile spans (two for RAID1, where one added device leaves no room)."""
    if not allocation.stuck:
        return None
    point, word = escaped(mount_point), shell_word(mount_point)
    meta = allocation.of("metadata")
    data = allocation.of("data")
    assert meta is not None
    count = allocation.metadata_devices
    added = (
        "a device"
        if count == 1
        else f"{_NUMBERS.get(count, str(count))} devices (a {meta.profile.upper()} metadata chunk needs room on "
        f"{_NUMBERS.get(count, str(count))})"
    )
    devices = "DEVICE" if count == 1 else " ".join(f"DEVICE{n}" for n in range(1, count + 1))
    spare = "an empty spare" if count == 1 else "empty spares"
    left = human_bytes(max(meta.size - meta.used - allocation.global_reserve, 0))
    text = (
        f"⚠ {point} (btrfs): metadata is {allocation.metadata_percent:g} % full ({left} left) and cannot grow: "
        f"its devices have no room for another metadata chunk ({human_bytes(allocation.unallocated)} "
        f"unallocated of {human_bytes(allocation.device_size)}), so creating files fails with ENOSPC once "
        "that is used"
    )
    if data is None or not allocation.balance_helps:
        return text + (
            ", and the data chunks are full too: the filesystem is full. Next: delete files or snapshots, "
            f"or grow it by {added}: btrfs device add {devices} {word} ({spare}: btrfs device add overwrites "
            "what is on it)."
        )
    return text + (
        f", though df shows free space: {human_bytes(allocation.data_slack)} lies free inside data chunks "
        f"({human_bytes(data.used)} used of {human_bytes(data.size)}) that metadata cannot use. Next: "
        f"btrfs balance start -dusage=10 {word}, then 25, 50, compacts data chunks and gives their space "
        "back to unallocated; if it fails with ENOSPC (full metadata leaves it no room), run it with "
        f"{added} added for the while ({spare} that {'stays' if count == 1 else 'stay'} attached until the remove ends: btrfs device add "
        f"overwrites what is on it; btrfs device add {devices} {word}, the balance, then btrfs device "
        f"remove {devices} {word}), or delete files or snapshots first."
    )


@result
class ZfsPool:
    """The ZFS pool under a dataset, and the dataset's own limits."""

    pool: str = prop("The pool's name.")
    size_bytes: int | None = prop("Null: not known (a pool that cannot be opened).")
    allocated_bytes: int | None = prop("zpool list ALLOC.")
    free_bytes: int | None = prop("zpool list FREE.")
    fragmentation_percent: int | None = prop("zpool list FRAG (null: not known).")
    capacity_percent: int | None = prop("Allocated, of size.")
    health: str = prop("ONLINE, DEGRADED, FAULTED, OFFLINE, REMOVED, UNAVAIL or SUSPENDED.")
    pool_full: bool = prop(f"Capacity at {ZPOOL_FULL_PERCENT} % or more: ZFS slows down there.")
    quota_bytes: int | None = prop("The dataset's quota (null: none); the three below likewise.")
    refquota_bytes: int | None = prop("Its refquota.")
    reservation_bytes: int | None = prop("Its reservation.")
    refreservation_bytes: int | None = prop("Its refreservation.")
    held_by: Literal["quota", "refquota"] | None = prop(
        "The dataset's own limit that leaves it the room it has (null: its pool's room, or a parent's quota)."
    )


ZFS_TIMEOUT = 5.0  # seconds zpool and zfs are given


def read_zfs(datasets: Sequence[str]) -> ZfsPools | None:
    """The pools and the datasets' limits (in a worker); None: no ZFS commands here."""
    return zfs_pools(datasets, ZFS_TIMEOUT)


def zfs_of(dataset: str, found: ZfsPools) -> ZfsPool | None:
    pool = found.pool_of(dataset)
    if pool is None:
        return None
    limits = found.limits.get(dataset)
    quota, refquota, reservation, refreservation = (
        (None, None, None, None)
        if limits is None
        else (limits.quota, limits.refquota, limits.reservation, limits.refreservation)
    )
    held_by = cast("Literal['quota', 'refquota'] | None", None if limits is None else limits.held_by)
    return ZfsPool(
        pool.name,
        pool.size,
        pool.allocated,
        pool.free,
        pool.fragmentation,
        pool.capacity,
        pool.health,
        pool.full,
        quota,
        refquota,
        reservation,
        refreservation,
        held_by,
    )


def _pool_warning(part: ZfsPool) -> str | None:
    """'⚠ ZFS pool backup is DEGRADED …; 87 % full …', or None for a whole pool under the threshold."""
    name, word = escaped(part.pool), shell_word(part.pool)
    said = []
    if part.health == "DEGRADED":
        said.append(
            f"is DEGRADED: it runs without some of its redundancy (zpool status -x {word} names the device "
            "at fault; zpool replace it)"
        )
    elif part.health != "ONLINE":
        said.append(
            f"is {escaped(part.health)}: it cannot serve its datasets' reads and writes (zpool status -x "
            f"{word} says why; zpool clear {word} once the cause is fixed)"
        )
    if part.pool_full:
        frag = "" if part.fragmentation_percent is None else f", {part.fragmentation_percent} % fragmented"
        free = "" if part.free_bytes is None else f", {human_bytes(part.free_bytes)} free"
        said.append(
            f"is {part.capacity_percent} % full{free}{frag}: at {ZPOOL_FULL_PERCENT} % or more ZFS writes "
            f"slow down and fragment; free space (zfs list -t snapshot -o name,used -s used -r {word} names the "
            "snapshots that hold most) or add a vdev of the same redundancy as its others (a lone disk added "
            "to a mirror or raidz pool loses the whole pool when it dies: zpool add refuses it, never -f)"
        )
    return f"⚠ ZFS pool {name} " + "; it ".join(said) + "." if said else None


def zfs_lines(rows: Sequence[tuple[str, str, ZfsPool, bool]]) -> list[str]:
    """The warnings that lead the answer: each pool at or over the threshold or not ONLINE once (those
    not ONLINE first), then each dataset full at its own quota (``held_by``) while its pool has room. ``rows``: (mount point, dataset, its
    pool, whether the filesystem is over the space alert)."""
    lines: dict[str, str] = {}
    for _, _, part, _ in sorted(rows, key=lambda row: row[2].health == "ONLINE"):  # the sick pools first
        warning = _pool_warning(part)
        if warning is not None:
            lines.setdefault(f"pool {part.pool}", warning)
    for point, dataset, part, alerted in rows:
        which = part.held_by
        limit = part.quota_bytes if which == "quota" else part.refquota_bytes
        if alerted and which is not None and limit is not None and (part.free_bytes or 0) > 0:
            lines.setdefault(
                f"quota {dataset}",
                f"⚠ {escaped(point)} (ZFS {escaped(dataset)}) is full at its {which} of {human_bytes(limit)} "
                f"while its pool {escaped(part.pool)} has {human_bytes(part.free_bytes or 0)} free: raise it "
                f"(zfs set {which}=SIZE {shell_word(dataset)}) or free space inside it.",
            )
    return list(lines.values())


_NUMBERS = {2: "two", 3: "three", 4: "four"}


class FilesystemPool(NamedTuple):
    """The pool under one filesystem of the answer, its line for the text, and the pool's time to
    full when that comes sooner than the filesystem's own (None: the filesystem's own stands)."""

    pool: Pool
    line: str
    sooner: float | None


class PoolSampler:
    """The pools under the answer's filesystems, read once or at every sampling round; ``fault``: the
    words for an lvs that failed (the answer goes on without pools)."""

    def __init__(self, reader: PoolReader, clock: SampleClock) -> None:
        self.reader, self.clock = reader, clock
        self.rounds: list[tuple[float, dict[str, ThinPool]]] = []
        self.fault = ""

    async def take(self, entries: Sequence[FilesystemUsage]) -> None:
        devices = sorted(
            {e.mount.device for e in entries if e.figures is not None and could_be_thin(e.mount.device)}
        )
        if not devices or self.fault:
            return
        try:
            max_age = 0.0 if self.rounds else POOL_MAX_AGE  # a rate needs every round read afresh
            found = await anyio.to_thread.run_sync(self.reader, devices, max_age, abandon_on_cancel=True)
        except EngineError as exc:
            self.fault = words(exc)
            return
        self.rounds.append((self.clock.now(), found))

    def pooled(self, entry: FilesystemUsage) -> FilesystemPool | None:
        """The pool under ``entry``'s filesystem in the last round (None: no thin pool under it)."""
        device = entry.mount.device
        pool = self.rounds[-1][1].get(device) if self.rounds else None
        if pool is None or entry.figures is None:
            return None
        fuller = pool.fuller_than(entry.figures.percent)
        rate = _pool_rate([(t, found[device]) for t, found in self.rounds if device in found])
        pool_full = None if rate is None else rate.seconds_to_full
        part = Pool(
            "lvm-thin",
            pool.name,
            pool.volume,
            pool.size,
            pool.free,
            pool.data_percent,
            pool.metadata_percent,
            pool.provisioned,
            pool.overcommitted,
            fuller,
            None if rate is None else round(rate.bytes_per_s, 1),
            None if pool_full is None else round(pool_full, 1),
        )
        own = entry.rate
        sooner = (
            own is not None and pool_full is not None and pool_full < (own.seconds_to_full or float("inf"))
        )
        return FilesystemPool(part, _pool_line(entry, pool, fuller, rate), pool_full if sooner else None)

    def fault_lines(self) -> list[str]:
        return [f"Thin pools not read: {self.fault}."] if self.fault and not self.rounds else []


def _pool_rate(samples: list[tuple[float, ThinPool]]) -> Rate | None:
    """The pool's fill rate over the rounds, as a filesystem's (least squares), from its data bytes."""
    figures = [
        (t, Figures(p.size, p.used, p.free, 0, round(p.data_percent), 0, 0, 0, None)) for t, p in samples
    ]
    return Rate.of(figures)


def _pool_line(entry: FilesystemUsage, pool: ThinPool, fuller: bool, rate: Rate | None) -> str:
    """'/srv on thin pool vg0/pool: data 97.0 %, metadata 12.0 %, 300.0 MiB free of 10.0 GiB; …'."""
    meta = "" if pool.metadata_percent is None else f", metadata {pool.metadata_percent:g} %"
    text = (
        f"{escaped(entry.mount.mount_point)} is on thin pool {escaped(pool.name)}: data {pool.data_percent:g} %{meta}, "
        f"{human_bytes(pool.free)} free of {human_bytes(pool.size)}"
    )
    if pool.overcommitted:
        text += (
            f"; overcommitted: its thin volumes promise {human_bytes(pool.overcommitted)} more than it has"
        )
    if rate is not None and rate.bytes_per_s > 0 and rate.seconds_to_full is not None:
        text += (
            f"; the pool is full in about {age(rate.seconds_to_full)} at {human_bytes(rate.bytes_per_s)}/s"
        )
        own = entry.rate.seconds_to_full if entry.rate is not None else None
        if own is None or rate.seconds_to_full < own:
            text += " (sooner than the filesystem: this is its time to full)"
    if fuller:
        assert entry.figures is not None
        name = shell_word(pool.name)
        grow = (
            f"grow its metadata: lvextend --poolmetadatasize +SIZE {name}"
            if (pool.metadata_percent or 0.0) > pool.data_percent
            else f"grow it: lvextend -L +SIZE {name}"
        )
        text += (
            f"  ⚠ the pool is fuller than the filesystem ({entry.figures.percent} % used): when its data or "
            f"metadata reaches 100 %, every filesystem on it stops taking writes ({grow})"
        )
    return text + "."


# -- explain: copy-on-write snapshots ----------------------------------------------------------


#: What stands for the name of a btrfs subvolume outside the roots (its name is its path on the filesystem).
_SUBVOLUME_OUTSIDE = "(a subvolume outside the allowed roots)"


def _named(cow: Cow, item: CowItem, roots: Sequence[Path] | None) -> str:
    """``item``'s name in the answer: a btrfs subvolume's only where it is reached inside ``roots``."""
    if roots is None or cow.kind != "btrfs subvolumes":
        return item.name
    inside = bool(item.path) and any(is_within(Path(item.path), root) for root in roots)
    return item.name if inside else _SUBVOLUME_OUTSIDE


def as_snapshots(cow: Cow, roots: Sequence[Path] | None = None) -> Snapshots:
    """The explain's part 5 from the engine's reading: on ZFS, df's used is the dataset's own bytes,
    so snapshots add nothing to it (they are named, with zfs's split, beside it)."""
    from sysmcp.engine.space import Snapshot, Snapshots  # explain's types: its room walks and forks

    items = [Snapshot(_named(cow, item, roots), item.exclusive, item.is_snapshot) for item in cow.items]
    faults = "; ".join(words(fault) for fault in cow.faults)
    if cow.kind == "zfs snapshots":
        note = "outside df's used on ZFS: see the zfs split" + (f"; {faults}" if faults else "")
        return Snapshots(cow.kind if cow.items or faults else "", items, 0, not cow.faults, note)
    unknown = [item for item in cow.items if item.exclusive is None]
    note = cow.source
    if unknown:
        note += f"; exclusive bytes of {len(unknown):,} unknown"
    if faults:
        note += f"; {faults}"
    return Snapshots(cow.kind if cow.items or faults else "", items, cow.bytes, cow.exact, note.strip("; "))


def cow_lines(cow: Cow, roots: Sequence[Path] | None = None) -> list[str]:
    """The lines after the explain's part 5 that only the engine's reading has: shared bytes, how to
    learn unknown exclusive bytes (a snapshot's path named only inside ``roots``), and ZFS's split."""
    extra: list[str] = []
    sized = [item for item in cow.items if item.shared is not None]
    if sized:
        shared = "; ".join(
            f"{escaped(_named(cow, item, roots))} {human_bytes(item.shared or 0)}" for item in sized[:5]
        )
        extra.append(
            "   Shared with the live files or other snapshots (freed only when every holder is deleted; "
            "counted once in used: in part 1 where the walked files hold them, else in the remainder): "
            + shared
            + "."
        )
    unknown = [item for item in cow.items if item.exclusive is None]
    if unknown and cow.kind == "btrfs subvolumes":
        where = next((i.path for i in unknown if i.path and within_roots(i.path, roots)), "")
        how = (
            f"btrfs filesystem du -s {shell_word(where)}"  # a user may name a subvolume
            if where
            else "btrfs filesystem du -s on the snapshot where it is mounted"
        )
        extra.append(
            f"   Exclusive bytes unknown for {len(unknown):,} (btrfs quotas are off, and sysmcp never turns them "
            f"on; the extent read stopped at its time budget or could not reach it): {how} tells, "
            "reading every file's extents."
        )
    if cow.zfs is not None:
        z = cow.zfs
        extra.append(
            f"   ZFS: {escaped(z.name)} uses {human_bytes(z.used)} of its pool = {human_bytes(z.dataset)} its own files "
            f"(df's used) + {human_bytes(z.snapshots)} held by its snapshots + {human_bytes(z.children)} "
            f"by child datasets + {human_bytes(z.refreservation)} reserved (refreservation). Destroying "
            "a snapshot frees its own used; the snapshots' shared rest only when all that hold it are gone."
        )
    return extra
