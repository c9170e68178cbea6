"""disk_usage's view of the pools under filesystems: the LVM thin pool each filesystem draws on (its
data and metadata percent, overcommitment, a flag when it is fuller than the filesystem, and its own
time to full when sampled), and for ``explain`` what btrfs and ZFS snapshots hold, in words and
figures. The engine is ``sysmcp.engine.pools``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

import anyio.to_thread

from sysmcp.engine.faults import EngineError
from sysmcp.engine.mounts import Figures, FilesystemUsage, Rate, SampleClock
from sysmcp.engine.paths import escaped, is_within, shell_word, within_roots
from sysmcp.engine.pools import Cow, CowItem, ThinPool, could_be_thin, thin_pools
from sysmcp.render import age, human_bytes
from sysmcp.tools.errors import words
from sysmcp.tools.typed import prop, result

if TYPE_CHECKING:
    from sysmcp.engine.space import Snapshots

__all__ = ["FilesystemPool", "Pool", "PoolReader", "PoolSampler", "as_snapshots", "cow_lines", "read_pools"]

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
