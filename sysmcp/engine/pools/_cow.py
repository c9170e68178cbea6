"""Copy-on-write filesystems: what their snapshots and subvolumes hold beyond the live tree.

btrfs: ``btrfs subvolume list`` names them; exclusive bytes (what deleting one frees) come from
``btrfs qgroup show --raw`` when quotas are already on (sysmcp never turns them on), else from
``btrfs filesystem du -s --raw`` on each reachable snapshot within a time budget. ZFS: ``zfs list -Hp``
with the columns ``-o space`` stands for, plus each snapshot's own ``used``. Parsers apart from runs.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sysmcp.engine.commands import BadOutput, CommandFailed, CommandMissing, CommandTimedOut, run_command
from sysmcp.engine.faults import EngineError

Runner = Callable[[list[str], float], str]
ZFS_COLUMNS = "name,type,used,avail,usedbysnapshots,usedbydataset,usedbychildren,usedbyrefreservation,refer"


@dataclass(frozen=True, slots=True)
class CowItem:
    name: str
    is_snapshot: bool
    exclusive: int | None  # what deleting it frees; None: not known
    shared: int | None = None  # bytes it shares with the live tree or other snapshots; None: not known
    path: str = ""  # where it can be reached under the mount point ('' when not reachable there)


@dataclass(frozen=True, slots=True)
class ZfsSpace:
    """One ZFS dataset's ``used`` split as ``zfs list -o space`` splits it."""

    name: str
    used: int
    available: int
    snapshots: int
    dataset: int
    children: int
    refreservation: int


@dataclass(slots=True)
class Cow:
    kind: str = ""  # "btrfs subvolumes", "zfs snapshots", or "" when none
    items: list[CowItem] = field(default_factory=list)
    exact: bool = True  # False: some exclusive bytes are unknown
    source: str = ""  # how the exclusive bytes were read
    zfs: ZfsSpace | None = None
    qgroups: bool = False  # btrfs quotas sized them: deleted files still held open included
    faults: list[EngineError] = field(default_factory=list)  # the commands that failed, as facts

    @property
    def bytes(self) -> int:
        """The exclusive bytes known, added up."""
        return sum(item.exclusive or 0 for item in self.items)


# -- btrfs --------------------------------------------------------------------------------------

_SUBVOL = re.compile(r"^ID (\d+) gen \d+ (?:cgen \d+ )?top level \d+ (?:otime \S+ \S+ )?path (.+)$")


def parse_subvolumes(listing: str) -> dict[int, str]:
    """``btrfs subvolume list [-s]``: subvolume id → path (from the top level)."""
    found: dict[int, str] = {}
    for line in listing.splitlines():
        if not line.strip():
            continue
        match = _SUBVOL.match(line.strip())
        if match is None:
            raise BadOutput(f"btrfs subvolume list gave {line.strip()[:60]!r}", reason="btrfs")
        found[int(match.group(1))] = match.group(2).removeprefix("<FS_TREE>/")
    return found


def parse_qgroups(text: str) -> dict[int, tuple[int, int]]:
    """``btrfs qgroup show --raw``: subvolume id → (referenced, exclusive) bytes of its 0/ID group."""
    groups = {}
    for match in re.finditer(r"^0/(\d+)\s+(\d+)\s+(\d+)", text, re.M):
        groups[int(match.group(1))] = (int(match.group(2)), int(match.group(3)))
    return groups


def parse_btrfs_du(text: str) -> tuple[int, int, int]:
    """``btrfs filesystem du -s --raw PATH``: (total, exclusive, set shared) bytes."""
    for line in text.splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4 and all(p.isdigit() for p in parts[:3]):
            return int(parts[0]), int(parts[1]), int(parts[2])
    raise BadOutput("btrfs filesystem du gave no summary line", reason="btrfs")


def _reachable(path: str, point: str, mounted: str) -> str:
    """Where a subvolume at ``path`` (from the top level) is under ``point``, which shows ``mounted``."""
    if not mounted:
        return os.path.join(point, path)
    return os.path.join(point, path[len(mounted) + 1 :]) if path.startswith(mounted + "/") else ""


def btrfs_cow(
    point: str,
    mounted: str,
    timeout: float,
    du_budget_s: float,
    run: Runner = run_command,
    clock: Callable[[], float] = time.monotonic,
    cancel: Callable[[], None] | None = None,
) -> Cow:
    """Every subvolume but the one mounted at ``point`` (``mounted``: its path from the top level, ''
    for the top level itself), with exclusive and shared bytes where they can be learned; ``cancel``
    raises when the call was given up (asked before each ``btrfs filesystem du``)."""
    cow = Cow("btrfs subvolumes")
    try:
        every = parse_subvolumes(run(["btrfs", "subvolume", "list", point], timeout))
        snaps = set(parse_subvolumes(run(["btrfs", "subvolume", "list", "-s", point], timeout)))
    except EngineError as fault:
        cow.exact = False
        cow.faults.append(fault)
        return cow
    others = {ident: path for ident, path in every.items() if path != mounted}
    if not others:
        return Cow()
    groups: dict[int, tuple[int, int]] = {}
    try:
        groups = parse_qgroups(run(["btrfs", "qgroup", "show", "--raw", point], timeout))
    except (CommandFailed, BadOutput):
        pass  # quotas off: the usual case, not a fault
    except (CommandMissing, CommandTimedOut) as fault:
        cow.faults.append(fault)
    cow.qgroups = bool(groups)
    cow.source = (
        "btrfs qgroup show (quotas are on)"
        if groups
        else "btrfs filesystem du -s (quotas are off), within a time budget"
    )
    deadline = clock() + du_budget_s
    for ident, path in sorted(others.items()):
        where = _reachable(path, point, mounted)
        referenced, exclusive = groups.get(ident, (None, None))
        shared = None if referenced is None or exclusive is None else referenced - exclusive
        if not groups:
            if cancel is not None:
                cancel()  # the caller's cancellation: between one snapshot's extent read and the next
            left = deadline - clock()
            if where and left > 0:
                try:
                    _, exclusive, shared = parse_btrfs_du(
                        run(["btrfs", "filesystem", "du", "-s", "--raw", where], min(left, timeout))
                    )
                except EngineError as fault:
                    cow.faults.append(fault)
        cow.items.append(CowItem(path, ident in snaps, exclusive, shared, where))
    cow.exact = all(item.exclusive is not None for item in cow.items)
    return cow


# -- ZFS ----------------------------------------------------------------------------------------


def _number(value: str) -> int | None:
    if value == "-":
        return None
    if not value.isdigit():
        raise BadOutput(f"zfs list gave {value[:40]!r} where -p gives a number", reason="zfs")
    return int(value)


def parse_zfs_list(text: str) -> tuple[list[ZfsSpace], list[CowItem]]:
    """``zfs list -Hp -o ZFS_COLUMNS``: the datasets' space and the snapshots' own used bytes."""
    datasets: list[ZfsSpace] = []
    snapshots: list[CowItem] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != 9:
            raise BadOutput(f"zfs list gave {len(cells)} columns where 9 were asked", reason="zfs")
        name, kind, *figures = cells
        used, avail, snap, dataset, children, refres, _refer = (_number(v) for v in figures)
        if used is None:
            raise BadOutput(f"zfs list gave no used bytes for {name[:60]}", reason="zfs")
        if kind == "snapshot":
            snapshots.append(CowItem(name, True, used))
        elif kind in ("filesystem", "volume"):
            datasets.append(
                ZfsSpace(name, used, avail or 0, snap or 0, dataset or 0, children or 0, refres or 0)
            )
        else:
            raise BadOutput(f"zfs list gave the type {kind[:20]!r}", reason="zfs")
    return datasets, snapshots


def zfs_cow(dataset: str, timeout: float, run: Runner = run_command) -> Cow:
    """The dataset mounted (its space split) and its own snapshots, each with the bytes only it holds."""
    cow = Cow(
        "zfs snapshots", source="zfs list -Hp -o space columns; a snapshot's used is what destroying it frees"
    )
    argv = ["zfs", "list", "-Hp", "-d", "1", "-t", "filesystem,volume,snapshot", "-o", ZFS_COLUMNS, dataset]
    try:
        datasets, snapshots = parse_zfs_list(run(argv, timeout))
    except EngineError as fault:
        cow.exact = False
        cow.faults.append(fault)
        return cow
    cow.zfs = next((d for d in datasets if d.name == dataset), None)
    cow.items = [s for s in snapshots if s.name.startswith(dataset + "@")]
    return cow
