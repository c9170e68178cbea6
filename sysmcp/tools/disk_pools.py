"""disk_usage's view of the pools under filesystems: the LVM thin pool each filesystem draws on (its
data and metadata percent, overcommitment, a flag when it is fuller than the filesystem, and its own
time to full when sampled), in words and figures. The engine is ``sysmcp.engine.pools``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from sysmcp.engine.errors import EngineError
from sysmcp.engine.mounts import Entry, Figures, Mount, MountTable, Rate, SampleClock
from sysmcp.engine.paths import display, is_within
from sysmcp.engine.pools import Cow, ThinPool, btrfs_cow, could_be_thin, thin_pools, zfs_cow
from sysmcp.render import age, human_bytes
from sysmcp.tools import schemas as js
from sysmcp.tools.errors import words

if TYPE_CHECKING:
    from sysmcp.engine.space import Snapshots

__all__ = [
    "POOL_SCHEMA",
    "POOL_TIMEOUT",
    "PoolReader",
    "PoolSampler",
    "as_snapshots",
    "read_cow",
    "read_pools",
    "thin_candidates",
    "with_cow",
]

POOL_TIMEOUT = 5.0  # seconds lvs is given
PoolReader = Callable[[Sequence[str]], dict[str, ThinPool]]  # mount sources → the pool under each


def thin_candidates(table: MountTable) -> bool:
    """Whether any filesystem in the table could be on a thin volume (a device-mapper device)."""
    return any(could_be_thin(mount.device) for mount in table.mounts)


def read_pools(devices: Sequence[str]) -> dict[str, ThinPool]:
    return thin_pools(devices, POOL_TIMEOUT)


POOL_SCHEMA: dict[str, Any] = js.record(
    {
        "kind": js.string("What pools it: an LVM thin pool.", enum=["lvm-thin"]),
        "name": js.string("The pool, 'vg/pool'."),
        "volume": js.string("The thin volume the filesystem is on, 'vg/lv'."),
        "size_bytes": js.integer("The pool's data size."),
        "free_bytes": js.integer("The pool's data bytes not yet given to any thin volume."),
        "data_percent": js.number("How full the pool's data is."),
        "metadata_percent": js.number("How full the pool's metadata is (null: not reported).", null=True),
        "provisioned_bytes": js.integer("The sizes of all thin volumes in the pool, added up."),
        "overcommitted_bytes": js.integer("Provisioned beyond the pool's size (0: not overcommitted)."),
        "fuller_than_filesystem": js.boolean("Data or metadata percent above the filesystem's percent_used."),
        "fill_rate_bytes_per_s": js.number("With sample_s: the pool's data growth.", null=True),
        "seconds_to_full": js.number(
            "With sample_s: at that rate, until the pool's data is full.", null=True
        ),
    },
    "The LVM thin pool under the filesystem: it can fill before the filesystem does.",
)


class PoolSampler:
    """The pools under the answer's filesystems, read once or at every sampling round; ``fault``: the
    words for an lvs that failed (the answer goes on without pools)."""

    def __init__(self, reader: PoolReader, clock: SampleClock) -> None:
        self.reader, self.clock = reader, clock
        self.rounds: list[tuple[float, dict[str, ThinPool]]] = []
        self.fault = ""

    async def take(self, entries: Sequence[Entry]) -> None:
        devices = sorted(
            {e.mount.device for e in entries if e.figures is not None and could_be_thin(e.mount.device)}
        )
        if not devices or self.fault:
            return
        try:
            found = await anyio.to_thread.run_sync(self.reader, devices, abandon_on_cancel=True)
        except EngineError as exc:
            self.fault = words(exc)
            return
        self.rounds.append((self.clock.now(), found))

    def apply(self, entries: Sequence[Entry], structured: dict[str, Any]) -> list[str]:
        """Each filesystem's pool into its structured entry; a pool that fills sooner than its
        filesystem sets the entry's time to full (``rate.limited_by``). The lines the text gains."""
        if not self.rounds:
            return [f"Thin pools not read: {self.fault}."] if self.fault else []
        last = self.rounds[-1][1]
        lines = []
        for entry, row in zip(entries, structured["filesystems"], strict=True):
            pool = last.get(entry.mount.device)
            if pool is None or entry.figures is None:
                continue
            fuller = pool.fuller_than(entry.figures.percent)
            rate = _pool_rate(
                [(t, found[entry.mount.device]) for t, found in self.rounds if entry.mount.device in found]
            )
            row["pool"] = {
                "kind": "lvm-thin",
                "name": pool.name,
                "volume": pool.volume,
                "size_bytes": pool.size,
                "free_bytes": pool.free,
                "data_percent": pool.data_percent,
                "metadata_percent": pool.metadata_percent,
                "provisioned_bytes": pool.provisioned,
                "overcommitted_bytes": pool.overcommitted,
                "fuller_than_filesystem": fuller,
                "fill_rate_bytes_per_s": None if rate is None else round(rate.bytes_per_s, 1),
                "seconds_to_full": None
                if rate is None or rate.seconds_to_full is None
                else round(rate.seconds_to_full, 1),
            }
            lines.append(_pool_line(entry, pool, fuller, rate))
            own, pool_full = entry.rate, None if rate is None else rate.seconds_to_full
            if (
                own is not None
                and pool_full is not None
                and pool_full < (own.seconds_to_full or float("inf"))
            ):
                row["rate"]["seconds_to_full"] = round(pool_full, 1)
                row["rate"]["limited_by"] = "pool"
        return lines


def _pool_rate(samples: list[tuple[float, ThinPool]]) -> Rate | None:
    """The pool's fill rate over the rounds, as a filesystem's (least squares), from its data bytes."""
    figures = [
        (t, Figures(p.size, p.used, p.free, 0, round(p.data_percent), 0, 0, 0, None)) for t, p in samples
    ]
    return Rate.of(figures)


def _pool_line(entry: Entry, pool: ThinPool, fuller: bool, rate: Rate | None) -> str:
    """'/srv on thin pool vg0/pool: data 97.0 %, metadata 12.0 %, 300.0 MiB free of 10.0 GiB; …'."""
    meta = "" if pool.metadata_percent is None else f", metadata {pool.metadata_percent:g} %"
    text = (
        f"{display(entry.mount.mount_point)} is on thin pool {pool.name}: data {pool.data_percent:g} %{meta}, "
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
        text += (
            f"  ⚠ the pool is fuller than the filesystem ({entry.figures.percent} % used): when its data or "
            "metadata reaches 100 %, every filesystem on it stops taking writes (lvextend the pool)"
        )
    return text + "."


# -- explain: copy-on-write snapshots ----------------------------------------------------------

COW_TIMEOUT = 10.0  # seconds each btrfs or zfs query is given
MAX_DU_BUDGET_S = 10.0  # btrfs filesystem du on snapshots, at most this long in all


def read_cow(mount: Mount, walk_budget_s: float, check_cancelled: Callable[[], None]) -> Cow | None:
    """What a btrfs or ZFS filesystem's snapshots hold (None for other filesystems). Without btrfs
    quotas, ``btrfs filesystem du`` sizes the snapshots: it reads each file's extent map (a walk of
    the snapshot), so it gets a quarter of the explain's budget, at most ``MAX_DU_BUDGET_S``."""
    if mount.fs_type == "btrfs":
        budget = min(MAX_DU_BUDGET_S, max(1.0, walk_budget_s / 4))
        return btrfs_cow(mount.mount_point, mount.root.strip("/"), COW_TIMEOUT, budget, check=check_cancelled)
    if mount.fs_type == "zfs":
        return zfs_cow(mount.device, COW_TIMEOUT)
    return None


def as_snapshots(cow: Cow) -> Snapshots:
    """The explain's part 5 from the engine's reading: on ZFS, df's used is the dataset's own bytes,
    so snapshots add nothing to it (they are named, with zfs's split, beside it)."""
    from sysmcp.engine.space import Snapshot, Snapshots  # explain's types: its room walks and forks

    items = [Snapshot(item.name, item.exclusive, item.is_snapshot) for item in cow.items]
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


def _inside(path: str, roots: Sequence[Path]) -> bool:
    return any(is_within(Path(path), root) for root in roots)


def with_cow(
    text: str, data: dict[str, Any], cow: Cow | None, roots: Sequence[Path] | None = None
) -> tuple[str, dict[str, Any]]:
    """The explain's text and figures with what only the engine's reading has: shared bytes, how to
    learn unknown exclusive bytes (a snapshot's path named only inside ``roots``), and ZFS's split."""
    if cow is None:
        return text, data
    part = data["snapshots"]
    shared = {item.name: item for item in cow.items}
    for row in part["items"]:
        item = shared.get(row["name"])
        row["shared_bytes"] = None if item is None else item.shared
    extra: list[str] = []
    sized = [item for item in cow.items if item.shared is not None]
    if sized:
        named = "; ".join(f"{item.name} {human_bytes(item.shared or 0)}" for item in sized[:5])
        extra.append(
            "   Shared with the live files or other snapshots (freed only when every holder is deleted; "
            "counted once in used: in part 1 where the walked files hold them, else in the remainder): "
            + named
            + "."
        )
    unknown = [item for item in cow.items if item.exclusive is None]
    if unknown and cow.kind == "btrfs subvolumes":
        where = next((i.path for i in unknown if i.path and (roots is None or _inside(i.path, roots))), "")
        how = (
            f"btrfs filesystem du -s {display(where)}"
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
        part["zfs"] = {
            "dataset": z.name,
            "used_bytes": z.used,
            "used_by_dataset_bytes": z.dataset,
            "used_by_snapshots_bytes": z.snapshots,
            "used_by_children_bytes": z.children,
            "used_by_refreservation_bytes": z.refreservation,
        }
        extra.append(
            f"   ZFS: {z.name} uses {human_bytes(z.used)} of its pool = {human_bytes(z.dataset)} its own files "
            f"(df's used) + {human_bytes(z.snapshots)} held by its snapshots + {human_bytes(z.children)} "
            f"by child datasets + {human_bytes(z.refreservation)} reserved (refreservation). Destroying "
            "a snapshot frees its own used; the snapshots' shared rest only when all that hold it are gone."
        )
    if not extra:
        return text, data
    lines = text.split("\n")
    at = next((i for i, line in enumerate(lines) if line.startswith("5. ")), len(lines) - 1)
    return "\n".join(lines[: at + 1] + extra + lines[at + 1 :]), data
