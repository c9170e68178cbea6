"""Copy-on-write filesystems: what their snapshots and subvolumes hold beyond the live tree.

btrfs: ``btrfs subvolume list`` names them; exclusive bytes (what deleting one frees) come from
``btrfs qgroup show --raw`` when quotas are already on (sysmcp never turns them on), else from
``btrfs filesystem du -s --raw`` on each reachable snapshot within a time budget. ZFS: ``zfs list -Hp``
with the columns ``-o space`` stands for, plus each snapshot's own ``used``. Parsers apart from runs.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sysmcp.engine.commands import BadOutput, CommandFailed, CommandMissing, CommandTimedOut, run_command
from sysmcp.engine.faults import EngineError
from sysmcp.platform import btrfs_subvolume_id

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

_SUBVOL = re.compile(r"ID (\d+) gen \d+ (?:cgen \d+ )?top level \d+ (?:otime \S+ \S+ )?path (.*)")
_PATH_MAX = 4096  # no path btrfs lists is longer: where joining lines back into one path stops


@dataclass(frozen=True, slots=True)
class ListedLine:
    """One line of ``btrfs subvolume list``: a subvolume's id and path when it reads as one."""

    text: str
    ident: int | None = None
    path: str = ""


def parse_subvolume_lines(listing: str) -> list[ListedLine]:
    """``btrfs subvolume list [-s]``, line by line: a subvolume's name may hold a newline, so a line
    that reads as a subvolume may be the rest of another's name, and a line that does not is one."""
    lines: list[ListedLine] = []
    for line in listing.split("\n"):
        match = _SUBVOL.fullmatch(line)
        if match is not None:
            path = match.group(2).removeprefix("<FS_TREE>/")
            lines.append(ListedLine(line, int(match.group(1)), path))
        elif line:
            lines.append(ListedLine(line))
    if lines and lines[0].ident is None:
        raise BadOutput(f"btrfs subvolume list gave {lines[0].text[:60]!r}", reason="btrfs")
    return lines


def subvolume_id_at(where: str) -> int | None:
    """The id of the subvolume whose top directory is ``where``, reached through no symbolic link;
    None when ``where`` is anything else. A subvolume's top directory is inode 256 of its own tree."""
    if os.path.realpath(where) != os.path.normpath(where):
        return None
    try:
        fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return btrfs_subvolume_id(fd) if os.fstat(fd).st_ino == 256 else None
    finally:
        os.close(fd)


def verified_subvolumes(
    lines: list[ListedLine], reach: Callable[[str], str], subvolume_at: Callable[[str], int | None]
) -> tuple[dict[int, str], list[str]]:
    """Subvolume id → path from ``parse_subvolume_lines``, every path ``reach`` finds on this mount
    checked on disk: the subvolume with that id has its top directory there. One not found where it
    is listed is tried with the following lines joined to its name (a name holding a newline, which
    may read as more subvolumes), and is left out when no joining finds it: a name can forge lines
    but not a subvolume on disk. A path ``reach`` does not find (a subvolume outside the one mounted)
    is taken as listed, the lines after it that read as no subvolume joined to its name. Also returns
    what was left out, each as a reason."""
    found: dict[int, str] = {}
    dropped: list[str] = []
    at = 0
    while at < len(lines):
        line = lines[at]
        at += 1
        if line.ident is None:
            dropped.append(f"btrfs subvolume list gave {line.text[:60]!r}, no subvolume")
            continue
        ident, path = line.ident, line.path
        if not reach(path):
            while at < len(lines) and lines[at].ident is None:
                path += "\n" + lines[at].text
                at += 1
            if ident in found:
                dropped.append(f"btrfs subvolume list named subvolume {ident} twice")
            else:
                found[ident] = path
            continue
        joined, end = path, at
        while True:
            where = reach(joined)
            if where and subvolume_at(where) == ident:
                found[ident], at = joined, end
                break
            if end >= len(lines) or len(joined) > _PATH_MAX:
                dropped.append(f"btrfs subvolume list named {path[:60]!r} (ID {ident}), no subvolume there")
                break
            joined += "\n" + lines[end].text
            end += 1
    return found, dropped


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
    subvolume_at: Callable[[str], int | None] = subvolume_id_at,
) -> Cow:
    """Every subvolume but the one mounted at ``point`` (``mounted``: its path from the top level, ''
    for the top level itself), with exclusive and shared bytes where they can be learned; ``cancel``
    raises when the call was given up (asked before each ``btrfs filesystem du``); ``subvolume_at``
    finds which subvolume has its top directory at a path, to check the listing against the disk."""
    cow = Cow("btrfs subvolumes")
    try:
        every_lines = parse_subvolume_lines(run(["btrfs", "subvolume", "list", point], timeout))
        snap_lines = parse_subvolume_lines(run(["btrfs", "subvolume", "list", "-s", point], timeout))
    except EngineError as fault:
        cow.exact = False
        cow.faults.append(fault)
        return cow
    reach = functools.partial(_reachable, point=point, mounted=mounted)
    every, dropped = verified_subvolumes(every_lines, reach, subvolume_at)
    snapshots, _ = verified_subvolumes(snap_lines, reach, subvolume_at)
    snaps = {ident for ident, path in snapshots.items() if every.get(ident) == path}
    cow.faults.extend(BadOutput(reason, reason="btrfs") for reason in dropped)
    others = {ident: path for ident, path in every.items() if path != mounted}
    if not others:
        if dropped:
            cow.exact = False
            return cow
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
        where = reach(path)
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
    cow.exact = not dropped and all(item.exclusive is not None for item in cow.items)
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
