"""Where the used bytes of one filesystem are: df's used split into what a walk reaches, deleted files
still held open, files hidden under mount points, unreadable directories, snapshots, the filesystem's
own overhead, and what is left unexplained.

The engine of ``disk_usage`` with ``explain``: an ``ExplainRequest`` in, an ``Accounting`` out (the
words are ``sysmcp.tools.disk_explain``'s). The deleted-files scan comes in as a provider (tests pass
fakes), the walk through ``walk_filesystem``, the one adapter to the tree-walk engine.

Why the call takes about one walk: everything else works beside it. The look under the mount points
is a child process, and the deleted-files scan and the snapshot and overhead queries two tasks for a
forked child (``parallel.SharedTasks``), all started before the walk; what that child has not begun
when the walk ends, or lost (it died), this process does itself. A recent complete scan of the root
kept in the history (``KeptScan``) stands in for the walk.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

from sysmcp import platform
from sysmcp.engine.calls import Cancel, Progress, never_cancelled
from sysmcp.engine.faults import WrongKind
from sysmcp.engine.mounts import Figures, FilesystemUsage, Mount, MountTable
from sysmcp.engine.parallel import SPLIT_AFTER_S, SharedCounters, SharedTasks, Sharing, available_processes
from sysmcp.engine.paths import is_within
from sysmcp.engine.pools import Cow, btrfs_cow, zfs_cow
from sysmcp.engine.procs import PROC, filesystem_of, scan_processes
from sysmcp.engine.space._held import Overhead, Snapshot, Snapshots, overhead_of, snapshots_of
from sysmcp.engine.space._hidden import Hidden, Look
from sysmcp.engine.walk import Budget


@dataclass(frozen=True, slots=True)
class HeldOpen:
    """A deleted file some process still holds: its former path, blocks, holders (pid, command) and
    the first holder's descriptor to truncate it through (``/proc/PID/fd/N``; None: some process has it
    mapped, and truncating it would kill that process with SIGBUS)."""

    path: str
    dev: int
    disk: int
    holders: tuple[tuple[int, str], ...]
    confined: bool = True  # its path names it in this server's view (``DeletedFile.confined``)
    descriptor: str | None = None  # /proc/PID/fd/N of one holder: what truncating it goes through
    filesystem: int | None = None  # its filesystem's number in the mount table, where not ``dev`` (btrfs)


@dataclass(frozen=True, slots=True)
class DeletedScan:
    files: Sequence[HeldOpen] = ()
    available: bool = True  # False: no /proc/PID/fd to look at
    unreadable: int = 0  # processes whose descriptors could not be read
    vanished: int = 0  # processes that ended between being listed and being read


def deleted_provider(proc: str = PROC) -> Callable[[Cancel], DeletedScan]:
    """The deleted-open-files scan (``procs.scan_processes``) in this engine's types, for ``ExplainRequest``.

    The calling process's own descriptors are left out wherever the scan runs (``explain`` may run it
    in a forked child, which sees its parent as any other process)."""
    server = os.getpid()

    def scan(cancel: Cancel) -> DeletedScan:
        if not platform.has_proc_fd(proc):
            return DeletedScan(available=False)
        found = scan_processes(proc, cancel=cancel)
        files = []
        for f in found.files.values():
            theirs = [h for h in f.holders if h.pid != server]
            held = None if f.mapped else next((h for h in theirs if h.fd is not None), None)
            link = None if held is None else os.path.join(proc, str(held.pid), "fd", str(held.fd))
            if theirs:
                holders = tuple((h.pid, h.command) for h in theirs)
                files.append(HeldOpen(f.path, f.dev, f.disk, holders, f.confined, link, f.fs))
        return DeletedScan(tuple(files), True, found.unreadable, found.vanished)

    return scan


def own_mount(entry: FilesystemUsage, table: MountTable) -> Mount:
    """The filesystem's whole mount (its root), not a bind mount of a subtree that holds the path."""
    if entry.mount.root == "/" or entry.st_dev is None:
        return entry.mount
    return filesystem_of(table, entry.st_dev) or entry.mount


@dataclass(frozen=True, slots=True)
class KeptScan:
    """Part 1 from a complete one-filesystem scan of the root kept in the history (no walk then)."""

    disk: int
    files: int
    taken: float  # when it was scanned (epoch seconds)
    age: float  # seconds before this call


@dataclass(frozen=True)
class ExplainRequest:
    mount: Mount  # the filesystem's own mount (its root, not a bind mount of a subtree)
    figures: Figures
    dev: int  # st_dev of the filesystem's root
    table: MountTable
    deleted: Callable[[Cancel], DeletedScan]  # the scan, given the call's cancel
    timeout_s: float = 60.0
    roots: Sequence[Path] | None = None  # only what is inside these is named
    clock: Callable[[], float] = time.monotonic
    scanned: KeptScan | None = None  # a fresh scan of the root: part 1 without walking
    processes: int | None = None  # the walk's processes (None: the usable CPUs); tests turn it
    split_after_s: float = SPLIT_AFTER_S

    @property
    def bfree(self) -> int:
        """statvfs f_bfree × f_frsize: free, the root reserve included."""
        return self.figures.free + self.figures.reserved


def explain_request(
    mount: Mount,
    figures: Figures,
    table: MountTable,
    timeout_s: float,
    roots: Sequence[Path] | None,
    scanned: KeptScan | None = None,
    proc: str = PROC,
) -> ExplainRequest:
    """The request to account for ``mount`` (its own mount: ``own_mount``), with the real scan of
    deleted files held open; its root's device is looked up now, so call it in the worker."""
    dev = os.stat(mount.mount_point).st_dev
    return ExplainRequest(
        mount, figures, dev, table, deleted_provider(proc), timeout_s, roots, scanned=scanned
    )


@dataclass(slots=True)
class WalkPart:
    """Part 1: what a walk from the root reached (du -x)."""

    disk: int = 0
    files: int = 0
    stopped: str | None = None  # why the walk stopped early (the rest is "not walked")
    elapsed: float = 0.0
    processes: int = 1
    unreadable: int = 0
    unreadable_named: list[str] = field(default_factory=list)  # absolute, inside the roots
    roots_walked: list[str] | None = None  # under roots outside which the mount point lies: what was walked
    scanned: KeptScan | None = None  # taken from a stored scan instead (unreadable then not counted)


@dataclass(slots=True)
class DeletedPart:
    disk: int = 0
    files: list[HeldOpen] = field(default_factory=list)  # named (inside the roots), largest first
    not_named: int = 0
    available: bool = True
    unreadable: int = 0
    vanished: int = 0


@dataclass(slots=True)
class HiddenPart:
    checked: bool = False
    reason: str = ""  # why not checked: "needs root", "not Linux", a failure
    disk: int = 0
    places: list[Hidden] = field(default_factory=list)  # named (inside the roots), largest first
    outside: int = 0  # mount points outside the roots: not looked under, their bytes in the remainder
    empty: int = 0  # mount points with nothing under them but the directory's own blocks
    empty_disk: int = 0
    mount_points: int = 0  # directories of this filesystem that something is mounted over


@dataclass(slots=True)
class Accounting:
    mount: Mount
    figures: Figures
    walked: WalkPart
    deleted: DeletedPart
    hidden: HiddenPart
    snapshots: Snapshots
    overhead: Overhead
    elapsed: float = 0.0
    cow: Cow | None = None  # btrfs and ZFS: what their snapshots hold, read by engine.pools

    @property
    def explained(self) -> int:
        return (
            self.walked.disk
            + self.deleted.disk
            + self.hidden.disk
            + self.snapshots.bytes
            + (self.overhead.bytes or 0)
        )

    @property
    def remainder(self) -> int:
        """Used bytes no part accounts for (negative: the parts overlap, e.g. shared extents)."""
        return self.figures.used - self.explained


def walk_starts(request: ExplainRequest) -> list[str]:
    """Where part 1's walk starts: the mount point, unless roots are in force and it lies outside
    them; then each outermost root on this filesystem (its ``st_dev``), so the walk never leaves the
    roots and the rest of the filesystem is left to the remainder, neither walked nor counted.

    Outermost in the filesystem's own tree (``_place``), not by path: a root that is a bind mount of a
    directory inside another root (or lies below one) shows what that root's walk counts already, and
    is not walked again, as ``du -x a b`` would not count it twice."""
    point, roots = request.mount.mount_point, request.roots
    if roots is None or _named(point, roots):
        return [point]
    found: list[tuple[Path, str]] = []
    for root in roots:
        try:
            st = os.stat(root)
        except OSError:
            continue
        if st.st_dev == request.dev and stat.S_ISDIR(st.st_mode):
            found.append((_place(request.table, str(root), st.st_dev), str(root)))
    starts: list[str] = []
    places: list[Path] = []
    for place, start in sorted(found, key=lambda item: len(item[0].parts)):
        if not any(is_within(place, walked) for walked in places):
            places.append(place)
            starts.append(start)
    return starts


def _place(table: MountTable, path: str, st_dev: int) -> Path:
    """Where ``path`` lies in its filesystem's own tree: below the directory of the filesystem its mount
    shows (``Mount.root``: not "/" for a bind mount of a subtree); the path itself if no mount holds it."""
    mount = table.holding(path, st_dev)
    if mount is None:
        return Path(path)
    return Path(mount.root) / os.path.relpath(path, mount.mount_point)


def walk_filesystem(
    request: ExplainRequest,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
    starts: list[str] | None = None,
) -> WalkPart:
    """Part 1 through the one call into the tree-walk engine (``engine.usage``: dir_usage's parallel
    du -x walk, totals only), from each of ``starts`` (``walk_starts``) within the one time budget.

    The walks share one set of the multiply-linked inodes counted, as ``du -x a b`` does: a file
    hard-linked under two roots is counted once, under the first walked, so the remainder is not
    understated by the second name's bytes."""
    from sysmcp.engine.usage import UsageRequest, scan_usage

    starts = walk_starts(request) if starts is None else starts
    walked = WalkPart(roots_walked=None if starts == [request.mount.mount_point] else starts)
    started, before = request.clock(), 0
    counted: set[tuple[int, int]] = set()  # (dev, ino) of files with several links, over every start

    def walking(entries: int, seen: int) -> None:
        if progress is not None:
            progress(before + entries, None)

    for at, start in enumerate(starts):  # the first has the whole budget; any other, what is left of it
        left = request.timeout_s - (request.clock() - started) if at else request.timeout_s
        usage = scan_usage(
            UsageRequest(
                top_files=0,
                top_directories=0,
                max_depth=1,
                by_disk=True,
                min_size=0,
                timeout_s=max(left, 0.001),
                root=os.fsencode(start),  # one filesystem: WalkOptions' default
            ),
            walking,
            cancel,
            clock=request.clock,
            sharing=Sharing(request.processes, request.split_after_s),
            seen=counted,
        )
        totals = usage.totals
        walked.disk += totals.disk if totals is not None else 0
        walked.files += totals.files if totals is not None else 0
        walked.stopped = walked.stopped or usage.stopped
        walked.elapsed += usage.elapsed
        walked.processes = max(walked.processes, usage.processes)
        said = usage.skipped.as_dict()
        walked.unreadable += said.get("unreadable", 0) + said.get("filesystem_error", 0)
        walked.unreadable_named += [
            path
            for name in usage.skipped.named
            if _named(path := os.path.join(start, name) if name else start, request.roots)
        ]
        before += usage.entries
        if walked.stopped:
            break
    return walked


def _named(path: str, roots: Sequence[Path] | None) -> bool:
    return roots is None or any(is_within(Path(path), root) for root in roots)


def covered_points(mount: Mount, table: MountTable) -> list[str]:
    """Directories of this filesystem that another mount sits on (relative to its root)."""
    base = mount.mount_point
    found = []
    for other in table.mounts:
        point = other.mount_point
        if other is mount or point == base or not is_within(Path(point), Path(base)):
            continue
        if table.holding(os.path.dirname(point)) is mount or (
            os.path.dirname(point) == base and table.holding(base) is mount
        ):
            found.append(os.path.relpath(point, base))
    return sorted(set(found))


class _Under:
    """Part 3 under way: the child that looks under the mount points runs while the walk does."""

    def __init__(self, request: ExplainRequest) -> None:
        self.request = request
        covered = covered_points(request.mount, request.table)
        point = request.mount.mount_point  # only under those inside the roots: the rest is not looked at
        relatives = [r for r in covered if _named(os.path.join(point, r), request.roots)]
        self.part = HiddenPart(
            mount_points=len(covered), checked=not relatives, outside=len(covered) - len(relatives)
        )
        self.look: Look | None = None
        self.target = ""
        if not relatives:
            return
        if not platform.can_make_mount_namespaces():
            self.part.reason = "needs root" if os.geteuid() != 0 else "needs Linux mount namespaces"
            return
        self.target = tempfile.mkdtemp(prefix="sysmcp-under-")
        try:
            self.look = Look(request.mount.mount_point, self.target, relatives)
        except OSError as exc:
            self.part.reason = f"the private view could not be made: {exc.strerror or exc}"

    def result(self, deadline: float) -> HiddenPart:
        part, request = self.part, self.request
        if self.look is None:
            return part
        try:
            places = self.look.result(max(deadline - request.clock(), 1.0))
        except (OSError, TimeoutError) as exc:
            part.reason = str(exc)
            return part
        part.checked = True
        for place in sorted(places, key=lambda p: -p.disk):
            part.disk += place.disk
            if place.files == 0 and place.disk <= 4096 * 4:  # an empty directory under a mount: no name
                part.empty += 1
                part.empty_disk += place.disk
            else:  # one looked under: inside the roots
                part.places.append(place)
        return part

    def close(self) -> None:
        if self.look is not None:
            self.look.close()
        if self.target:
            shutil.rmtree(self.target, ignore_errors=True)


DELETED, FILESYSTEM = 0, 1  # the side tasks: the deleted-files scan; the snapshot and overhead queries


def _side_task(request: ExplainRequest, task: int, cancel: Cancel) -> Any:
    """One side task's result as plain (marshal-able) data: a child sends it through a pipe."""
    if task == DELETED:
        return astuple(request.deleted(cancel))
    mount = request.mount
    snaps = snapshots_of(mount) if mount.fs_type != "tmpfs" else Snapshots()
    return [astuple(snaps), astuple(overhead_of(mount, request.bfree))]


class _Side:
    """Parts 2, 5 and 6 under way beside the walk: a forked child takes the side tasks as the walk starts."""

    def __init__(self, request: ExplainRequest, cancel: Cancel) -> None:
        self.request, self.cancel = request, cancel
        self.fan: SharedTasks | None = None
        if available_processes() > 1:  # where a walk may fork (platform.fork_is_safe), this may too
            self.fan = SharedTasks(2, 2, self._work)

    def _work(
        self, claim: Callable[[], int | None], progress: SharedCounters, in_child: bool
    ) -> dict[int, Any]:
        cancel = never_cancelled if in_child else self.cancel  # a child is killed, not asked
        done: dict[int, Any] = {}
        while (task := claim()) is not None:
            done[task] = _side_task(self.request, task, cancel)
        return done

    def results(self, budget: Budget) -> tuple[DeletedScan, Snapshots, Overhead]:
        """Every side task's result: the child's, and here whatever it did not start or did not finish."""
        fan = self.fan
        done: dict[int, Any] = {}
        if fan is not None:  # here, the tasks the child has not claimed yet; then the child's
            for part in fan.finish(budget, self.cancel):
                done.update(part or {})
        for task in (DELETED, FILESYSTEM):
            if task not in done:  # no child, or it died
                done[task] = _side_task(self.request, task, self.cancel)
        files, *counts = done[DELETED]
        (kind, items, *rest), overhead = done[FILESYSTEM]
        snaps = Snapshots(kind, [Snapshot(*item) for item in items], *rest)
        return DeletedScan(tuple(HeldOpen(*f) for f in files), *counts), snaps, Overhead(*overhead)

    def close(self) -> None:
        if self.fan is not None:
            self.fan.close()


def _deleted(request: ExplainRequest, scan: DeletedScan, cow: Cow | None) -> DeletedPart:
    """The deleted files held open on the filesystem: with its root's st_dev, or (btrfs) another
    subvolume's, unless btrfs quotas size the other subvolumes (part 5), their deleted files included."""
    part = DeletedPart(available=scan.available, unreadable=scan.unreadable, vanished=scan.vanished)
    filesystem = request.mount.number(request.dev)
    sized = cow is not None and cow.qgroups
    for held in sorted(scan.files, key=lambda f: -f.disk):
        on = held.dev if held.filesystem is None else held.filesystem
        elsewhere = held.dev != request.dev  # another filesystem's, or another subvolume's (btrfs)
        if held.disk == 0 or (elsewhere and (on != filesystem or sized)):
            continue
        part.disk += held.disk
        if request.roots is None or (held.confined and _named(held.path, request.roots)):
            part.files.append(held)
        else:
            part.not_named += 1
    return part


def explain(request: ExplainRequest, progress: Progress, cancel: Cancel) -> Accounting:
    """Account for the filesystem's used bytes, part by part; blocking (run it in a worker thread).

    ``progress(entries walked)`` follows the walk; ``cancel()`` is asked every few milliseconds and
    raises to abandon the call (every child is then killed and reaped)."""
    mount = request.mount
    if mount.pseudo and mount.fs_type not in ("tmpfs", "ramfs"):
        raise WrongKind(f"{mount.mount_point} is {mount.fs_type}, a pseudo filesystem with no stored files")
    started = request.clock()
    budget = Budget(request.timeout_s, cancel, clock=request.clock)
    side = _Side(request, cancel)  # its child starts now and works while this process walks
    under: _Under | None = None
    try:
        under = _Under(request)  # so does the one that looks under the mount points
        starts = walk_starts(request)
        if request.scanned is not None and starts == [mount.mount_point]:
            walked = WalkPart(request.scanned.disk, request.scanned.files, scanned=request.scanned)
            cancel()
        else:
            walked = walk_filesystem(request, progress, cancel, starts)
        scan, snaps, overhead = side.results(budget)
        cancel()
        hidden = under.result(budget.deadline)
    finally:
        side.close()
        if under is not None:
            under.close()
    cow = read_cow(mount, request.timeout_s, cancel)
    deleted = _deleted(request, scan, cow)
    return Accounting(
        mount, request.figures, walked, deleted, hidden, snaps, overhead, request.clock() - started, cow
    )


COW_TIMEOUT = 10.0  # seconds each btrfs or zfs query is given
MAX_DU_BUDGET_S = 10.0  # btrfs filesystem du on snapshots, at most this long in all


def read_cow(mount: Mount, walk_budget_s: float, cancel: Cancel) -> Cow | None:
    """What a btrfs or ZFS filesystem's snapshots hold (None for other filesystems). Without btrfs
    quotas, ``btrfs filesystem du`` sizes the snapshots: it reads each file's extent map (a walk of
    the snapshot), so it gets a quarter of the explain's budget, at most ``MAX_DU_BUDGET_S``."""
    if mount.fs_type == "btrfs":
        budget = min(MAX_DU_BUDGET_S, max(1.0, walk_budget_s / 4))
        return btrfs_cow(mount.mount_point, mount.root.strip("/"), COW_TIMEOUT, budget, cancel=cancel)
    if mount.fs_type == "zfs":
        return zfs_cow(mount.device, COW_TIMEOUT)
    return None
