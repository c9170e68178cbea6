"""Which filesystem holds what, and how full it is: statvfs probed so that a hung mount cannot hang
the caller, df's arithmetic, and fill rates from samples over a window.

The engine of ``disk_usage``. A statvfs that could block (network, FUSE, automount) runs in a daemon
thread with a per-mount timeout (``Prober``). Sampling waits on an injected clock and sleep, so a test
can run a 60 s window in no time at all.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeAlias, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel

from sysmcp import platform
from sysmcp.engine.faults import NotFound, Unavailable
from sysmcp.engine.mounts._mounts import Mount, MountTable, container_siblings, is_system_volume
from sysmcp.engine.opens import closing_fd, open_parent, refused_symlink, through_symlink
from sysmcp.engine.paths import display, echo, expands_locally, is_within

T = TypeVar("T")

STATVFS_TIMEOUT = 5.0  # seconds per mount; a dead network mount must not hang the call
ALERT_PERCENT = 90  # space or inode use strictly over this is called out
MAX_WALKED_COMPONENTS = 64  # path components walked on the event loop at most (see _short_enough_to_walk)
MAX_WALKED_LENGTH = 1024  # characters, likewise
MAX_STUCK_PROBES = 32  # threads left blocked in hung mounts, at most; beyond it mounts are not probed
# Memory filesystems that df lists: a full /dev/shm or /run is a real outage. Listed by default like
# real ones (when they have a size); the other pseudo filesystems only with ``all``.
MEMORY_TYPES = frozenset({"tmpfs", "devtmpfs", "ramfs"})


class FsStats(NamedTuple):
    """What statvfs says, in the filesystem's own units, plus the st_dev of the probed path and
    statvfs' filesystem id (``f_fsid``: None where the platform gives none)."""

    block_size: int
    blocks: int
    blocks_free: int
    blocks_available: int
    files: int
    files_free: int
    st_dev: int | None = None
    fsid: int | None = None


UsageProvider = Callable[[str], FsStats]
Status: TypeAlias = Literal["ok", "no_answer", "error"]  # "no_answer": it did not answer in time
PartitionsProvider = Callable[[], MountTable]


def statvfs_usage(path: str) -> FsStats:
    """The real provider: ``statvfs`` and the device number of ``path`` (absolute, resolved: a path the
    policy checked, or a mount point), reached as ``open_path`` reaches it, so a directory on the way
    swapped for a symlink since the check is refused (ELOOP), not followed to another filesystem."""
    vfs, st_dev = _statvfs_unfollowed(path)
    return FsStats(
        vfs.f_frsize or vfs.f_bsize,
        vfs.f_blocks,
        vfs.f_bfree,
        vfs.f_bavail,
        vfs.f_files,
        vfs.f_ffree,
        st_dev,
        getattr(vfs, "f_fsid", None),
    )


#: Looks at the final name without opening it (Linux): a device, a FIFO or a socket as well as a directory.
_LOOK = getattr(os, "O_PATH", 0) | os.O_NOFOLLOW | os.O_CLOEXEC
#: Where there is no O_PATH, a directory is opened for reading (O_NONBLOCK: a FIFO swapped in cannot hang it).
_READ_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _statvfs_unfollowed(path: str) -> tuple[os.statvfs_result, int | None]:
    """``os.statvfs(path)`` and ``st_dev`` of what ``path`` names, with no symlink followed anywhere.

    With O_PATH the final name is looked at through a descriptor of its own (O_DIRECTORY first, so an
    automount point mounts, as statvfs mounts it). Without it only a directory is opened; anything else
    is measured through its directory, whose filesystem holds it, and its ``lstat``."""
    if not os.fsencode(path).strip(b"/"):
        with closing_fd(os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)) as fd:
            return os.fstatvfs(fd), os.fstat(fd).st_dev
    if not platform.has_o_path():
        try:
            return _statvfs_read_through(path)
        except PermissionError:
            # A directory on the way may be searched, not read (0711), which only O_PATH goes through:
            # measured by name, as statvfs does, rather than refused where df answers.
            return os.statvfs(path), os.stat(path).st_dev
    parent, name = open_parent(path)
    with closing_fd(parent):
        try:
            fd = os.open(name, _LOOK | os.O_DIRECTORY, dir_fd=parent)
        except NotADirectoryError:  # a file, or a symlink (not followed): its own descriptor
            fd = os.open(name, _LOOK, dir_fd=parent)
        with closing_fd(fd):
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                raise OSError(errno.ELOOP, "refusing to follow a symbolic link", path)
            return os.fstatvfs(fd), st.st_dev


def _statvfs_read_through(path: str) -> tuple[os.statvfs_result, int | None]:
    """``_statvfs_unfollowed`` without O_PATH: every directory on the way opened for reading."""
    parent, name = open_parent(path)
    with closing_fd(parent):
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, "refusing to follow a symbolic link", path)
        if not stat.S_ISDIR(st.st_mode):
            return os.fstatvfs(parent), st.st_dev
        with closing_fd(os.open(name, _READ_DIRECTORY, dir_fd=parent)) as fd:
            return os.fstatvfs(fd), os.fstat(fd).st_dev


def filesystem_identity(st_dev: int, fsid: int) -> str:
    """A filesystem's identity: its device number and statvfs' filesystem id, which ext4 and btrfs derive
    from their UUID and tmpfs makes anew at each mount (XFS derives it from the device number)."""
    return f"{os.major(st_dev)}:{os.minor(st_dev)}/{fsid:x}"


def percent_used(used: int, available: int) -> int | None:
    """df's percent: used / (used + available) × 100 rounded up; None when both are 0. Available,
    not total: blocks reserved for root do not hide a full disk."""
    base = used + available
    return -(-used * 100 // base) if base > 0 else None


def over(used: int, available: int, threshold: int = ALERT_PERCENT) -> bool:
    """Strictly more than ``threshold`` percent used, decided exactly (no rounding)."""
    return used * 100 > threshold * (used + available) and used + available > 0


class Figures(NamedTuple):
    """Integer bytes and counts as df reports them (a tuple: cheap to build on every call)."""

    total: int
    used: int
    free: int  # available to unprivileged users
    reserved: int  # free, but only for root
    percent: int | None
    inodes_total: int
    inodes_used: int
    inodes_free: int
    inodes_percent: int | None  # None: the filesystem keeps no inode counts

    @classmethod
    def from_stats(cls, stats: FsStats) -> Figures:
        size = stats.block_size
        used = max(stats.blocks - stats.blocks_free, 0)
        available = max(stats.blocks_available, 0)
        inodes_used = max(stats.files - stats.files_free, 0)
        return cls(
            stats.blocks * size,
            used * size,
            available * size,
            max(stats.blocks_free - available, 0) * size,
            percent_used(used, available),
            stats.files,
            inodes_used,
            stats.files_free,
            percent_used(inodes_used, stats.files_free) if stats.files > 0 else None,
        )

    def fullness(self) -> float:
        """The higher of space and inode use, exact, for sorting."""
        space = self.used / (self.used + self.free) if self.used + self.free else 0.0
        inodes = self.inodes_used / self.inodes_total if self.inodes_total else 0.0
        return max(space, inodes)


class NoAnswer(Unavailable):
    """A probe that did not answer in time, or was not started for a mount still stuck (``detail``: which)."""


@dataclass
class _Probe:
    mount_point: str
    path: str
    started: float
    ended: tuple[Any, BaseException | None] | None = None  # (value, error) once the work returned
    waiters: list[tuple[anyio.lowlevel.EventLoopToken, anyio.Event]] = field(default_factory=list)


class Prober:
    """Runs blocking probes in daemon threads, waiting for each at most ``timeout`` seconds.

    Daemon threads, because a thread blocked in a dead NFS mount can never be joined and must not keep
    the process alive at exit. Bounded, because such a thread never comes back: a mount whose probe is
    stuck past the timeout is reported as hung without another thread, and at most ``max_stuck``
    probes may be outstanding at once.
    """

    def __init__(self, timeout: float = STATVFS_TIMEOUT, max_stuck: int = MAX_STUCK_PROBES) -> None:
        self.timeout = timeout
        self.max_stuck = max_stuck
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], _Probe] = {}

    @property
    def outstanding(self) -> int:
        """Probes started and not finished (threads possibly blocked in a mount)."""
        with self._lock:
            return len(self._running)

    async def run(self, mount_point: str, path: str, work: Callable[[], T]) -> T:
        """``work()`` in a thread; its value, or ``NoAnswer`` after the timeout. Its exceptions propagate."""
        event = anyio.Event()
        token = anyio.lowlevel.current_token()
        now = time.monotonic()
        start = False
        with self._lock:
            probe = self._running.get((mount_point, path))
            if probe is None:
                oldest = min(
                    (p.started for p in self._running.values() if p.mount_point == mount_point), default=now
                )
                if now - oldest >= self.timeout:
                    raise NoAnswer(self._hung_reason(now - oldest))
                if len(self._running) >= self.max_stuck:
                    raise NoAnswer(f"not probed: {len(self._running)} earlier probes are still stuck")
                probe = _Probe(mount_point, path, now)
                self._running[(mount_point, path)] = probe
                start = True
            elif now - probe.started >= self.timeout:
                raise NoAnswer(self._hung_reason(now - probe.started))
            waiter = (token, event)
            probe.waiters.append(waiter)
        if start:
            thread = threading.Thread(
                target=self._work, args=(probe, work), name=f"sysmcp statvfs {path}", daemon=True
            )
            thread.start()
        try:
            with anyio.move_on_after(probe.started + self.timeout - time.monotonic()):
                await event.wait()
        finally:  # timed out or cancelled: stop waiting for it
            with self._lock:
                if waiter in probe.waiters:
                    probe.waiters.remove(waiter)
        if probe.ended is None:
            raise NoAnswer(f"did not answer within {self.timeout:g} s (a hung mount?)")
        value, error = probe.ended
        if error is not None:
            raise error
        return cast(T, value)

    def _hung_reason(self, age: float) -> str:
        return (
            f"did not answer within {self.timeout:g} s: a probe started {age:.0f} s ago is still stuck, "
            "so it was not probed again"
        )

    def _work(self, probe: _Probe, work: Callable[[], Any]) -> None:
        try:
            value, error = work(), None
        except BaseException as exc:  # handed to the waiters, who re-raise it in their task
            value, error = None, exc
        with self._lock:
            probe.ended = (value, error)
            self._running.pop((probe.mount_point, probe.path), None)
            waiters, probe.waiters = probe.waiters, []
        for token, event in waiters:
            # A waiter whose event loop has finished is waiting no more.
            with contextlib.suppress(Exception):
                anyio.from_thread.run_sync(event.set, token=token)


class Rate(NamedTuple):
    """How fast a filesystem filled over a sampling window: least-squares slopes of the samples."""

    seconds: float  # from the first sample to the last
    samples: int
    bytes_per_s: float  # used bytes per second: positive while filling, negative while freeing
    seconds_to_full: float | None  # at that rate, until free (df's Avail) reaches 0; None unless filling
    inodes_per_s: float | None  # None where the filesystem keeps no inode counts
    seconds_to_inodes_full: float | None

    @classmethod
    def of(cls, samples: Sequence[tuple[float, Figures]]) -> Rate | None:
        """The rate from (time, figures) samples of one filesystem; None with fewer than two."""
        if len(samples) < 2:
            return None
        times = [t for t, _ in samples]
        last = samples[-1][1]
        speed = _slope(times, [fig.used for _, fig in samples])
        inode_speed = (
            _slope(times, [fig.inodes_used for _, fig in samples])
            if last.inodes_percent is not None
            else None
        )
        return cls(
            times[-1] - times[0],
            len(samples),
            speed,
            _time_to_full(last.free, speed),
            inode_speed,
            None if inode_speed is None else _time_to_full(last.inodes_free, inode_speed),
        )


def _slope(times: Sequence[float], values: Sequence[int]) -> float:
    """Least-squares slope of values over times: steadier than first-to-last against a single burst."""
    n = len(times)
    mean_t = sum(times) / n
    mean_v = sum(values) / n
    spread = sum((t - mean_t) ** 2 for t in times)
    if spread <= 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) / spread


def _time_to_full(free: int, per_second: float) -> float | None:
    return free / per_second if per_second > 0 else None


@dataclass(slots=True, eq=False)
class FilesystemUsage:
    """One filesystem in the answer."""

    mount: Mount
    figures: Figures | None = None
    status: Status = "ok"
    reason: str | None = None
    st_dev: int | None = None
    rate: Rate | None = None
    #: The filesystem's identity (``history.snapshots.filesystem_id``) as probed at its mount point; None
    #: when not known, or probed at a path below it (a btrfs subvolume there has an identity of its own).
    identity: str | None = None

    def alerts(self) -> list[str]:
        """What is over the threshold; read-only filesystems cannot fill up further, so never."""
        fig = self.figures
        found = []
        if fig is not None and not self.mount.read_only:
            if over(fig.used, fig.free):
                found.append("space")
            if fig.inodes_total and over(fig.inodes_used, fig.inodes_free):
                found.append("inodes")
        return found

    def sort_key(self) -> tuple[int, float, str]:
        if self.figures is None:
            return (1, 0.0, self.mount.mount_point)
        return (0, -self.figures.fullness(), self.mount.mount_point)


def entry_from(mount: Mount, result: FsStats | OSError, probed: str | None = None) -> FilesystemUsage:
    """The entry of ``mount`` from its statvfs (``probed``: the path it was of, None for the mount point)."""
    if isinstance(result, OSError):
        reason = result.strerror or str(result)
        return FilesystemUsage(mount, status="error", reason=f"cannot read usage: {reason}")
    at_mount_point = probed is None or os.path.normpath(probed) == os.path.normpath(mount.mount_point)
    identity = (
        filesystem_identity(result.st_dev, result.fsid)
        if at_mount_point and result.st_dev is not None and result.fsid is not None
        else None
    )
    return FilesystemUsage(mount, Figures.from_stats(result), st_dev=result.st_dev, identity=identity)


class SampleClock:
    """What sampling waits on: the event loop's clock and sleep (a test passes a fake that jumps)."""

    def now(self) -> float:
        return anyio.current_time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


SampleProgress = Callable[[float, float], Awaitable[None]]  # (seconds done, seconds asked)


class Disks:
    """Probes filesystems through injected mount-table and statvfs providers (tests pass fakes)."""

    def __init__(
        self,
        partitions: PartitionsProvider,
        usage: UsageProvider = statvfs_usage,
        timeout: float = STATVFS_TIMEOUT,
        max_stuck: int = MAX_STUCK_PROBES,
        clock: SampleClock | None = None,
    ) -> None:
        self.partitions = partitions
        self.usage = usage
        self.prober = Prober(timeout, max_stuck)
        self.clock = clock or SampleClock()
        self._last_walk: tuple[str, MountTable, tuple[bool, str | None]] | None = None

    def walk(self, raw: str, table: MountTable) -> tuple[str, bool, str | None]:
        """``raw`` expanded, whether resolving it stays on mounts that cannot hang, and if not the first
        mount point that could (None: unknown, resolve it in a thread). Walked on the event loop only
        when cheap and safe; the last walk is kept for the call that follows its at-once check."""
        if "\x00" in raw:
            return raw, True, None  # refused at once by the path check
        if not expands_locally(raw):
            return raw, False, None  # '~user' asks the user database, which may be on the network
        expanded = os.path.expanduser(raw)
        if not os.path.isabs(expanded):
            return expanded, True, None  # refused at once by the path check
        if not _short_enough_to_walk(expanded):
            return expanded, False, None  # walked (or refused as too long) in a thread
        last = self._last_walk
        if last is not None and last[0] == expanded and last[1] is table:
            return expanded, *last[2]
        walk = table.walk(expanded)
        self._last_walk = (expanded, table, walk)
        return expanded, *walk

    async def one(
        self, raw: str, table: MountTable, resolve: Callable[[str], str]
    ) -> tuple[FilesystemUsage, str]:
        """The filesystem holding ``raw`` and its resolved path (normalised, when it did not answer);
        ``resolve`` (the path policy's) goes to a thread with the statvfs if resolving could hang."""
        expanded, safe, risky_point = self.walk(raw, table)
        if safe:
            real = resolve(raw)
            if table.inline_safe(real):
                return self._path_entry(real, _guarded(self.usage, real), table), real
            risky_point = table.mount_point_of(real)

        def work() -> tuple[str, FsStats | OSError]:
            resolved = resolve(raw)
            return resolved, _guarded(self.usage, resolved)

        point = risky_point or "/"
        try:
            real, result = await self.prober.run(point, expanded, work)
        except NoAnswer as silent:
            # The mount that did not answer is the first risky one the path leads into.
            mount = table.holding(point) or Mount(point, "unknown", "unknown")
            return FilesystemUsage(mount, status="no_answer", reason=silent.detail), os.path.normpath(
                expanded
            )
        return self._path_entry(real, result, table), real

    def _path_entry(self, real: str, result: FsStats | OSError, table: MountTable) -> FilesystemUsage:
        if isinstance(result, (FileNotFoundError, NotADirectoryError)):
            raise NotFound(f"No such file or directory: {display(real)}")
        if isinstance(result, OSError) and refused_symlink(result):  # swapped in since it was resolved
            raise through_symlink(echo(real))
        st_dev = None if isinstance(result, OSError) else result.st_dev
        mount = table.holding(real, st_dev) or Mount("/", "unknown", "unknown")
        if st_dev is not None and not mount.dev:
            mount = self._volume_with_device(mount, st_dev, table)
        return entry_from(mount, result, real)

    def _volume_with_device(self, mount: Mount, st_dev: int, table: MountTable) -> Mount:
        """Where the table has no device numbers (getfsstat), the APFS volume a path really is on.

        macOS's firmlinks (/Users, /Applications, /private …) lead from the sealed system snapshot
        at / into the Data volume without a mount point on the way, so the deepest mount point is
        the wrong answer there; the path's own device number names the right sibling volume. Only
        local volumes of the same container are looked at, so this cannot hang.
        """
        for sibling in container_siblings(mount, table):
            if not table.inline_safe(sibling.mount_point):
                continue
            found = _guarded(self.usage, sibling.mount_point)
            if not isinstance(found, OSError) and found.st_dev == st_dev:
                return sibling
        return mount

    def selected(self, table: MountTable, everything: bool, roots: Sequence[Path] | None) -> list[Mount]:
        """The mounts to probe: all, or df's default (real and memory filesystems), within the roots."""
        mounts = [m for m in table.mounts if everything or not m.pseudo or m.fs_type in MEMORY_TYPES]
        if not everything:  # macOS's own APFS volumes (VM, Preboot …): df -a lists them, Finder does not
            mounts = [m for m in mounts if not is_system_volume(m, table)]
        if roots is not None:
            holders = {id(table.holding(str(root))) for root in roots}
            mounts = [
                m for m in mounts if id(m) in holders or any(is_within(Path(m.mount_point), r) for r in roots)
            ]
        return mounts

    async def probe_all(self, table: MountTable, mounts: Sequence[Mount]) -> list[FilesystemUsage]:
        """One entry per mount, in the same order (hung ones as no-answer entries)."""
        entries: list[FilesystemUsage | None] = [None] * len(mounts)

        async def probe(index: int, mount: Mount) -> None:
            point = mount.mount_point
            try:
                entries[index] = entry_from(
                    mount, await self.prober.run(point, point, lambda: _guarded(self.usage, point))
                )
            except NoAnswer as silent:
                entries[index] = FilesystemUsage(mount, status="no_answer", reason=silent.detail)

        async with anyio.create_task_group() as group:
            for index, mount in enumerate(mounts):
                if table.inline_safe(mount.mount_point):
                    entries[index] = entry_from(mount, _guarded(self.usage, mount.mount_point))
                else:
                    group.start_soon(probe, index, mount)
        return [entry for entry in entries if entry is not None]

    def shown(self, found: list[FilesystemUsage], everything: bool) -> list[FilesystemUsage]:
        """As df: no zero-size filesystems and one entry per device (unless ``everything``), fullest first."""
        if not everything:
            found = [e for e in found if e.figures is None or e.figures.total > 0]
            found = dedupe(found)
        return sorted(found, key=FilesystemUsage.sort_key)

    async def sampled(
        self,
        first: list[FilesystemUsage],
        again: Callable[[], Awaitable[list[FilesystemUsage]]],
        sample_s: float,
        progress: SampleProgress,
    ) -> list[FilesystemUsage]:
        """Probe the same filesystems again and again for ``sample_s`` seconds; the last round's
        entries, each with its rate over the window. Waits on the clock: cancellable at once."""
        clock = self.clock
        start = clock.now()
        rounds: list[tuple[float, list[FilesystemUsage]]] = [(start, first)]
        interval = max(0.1, min(1.0, sample_s / 10))
        end = start + sample_s
        while (now := clock.now()) < end:
            await clock.sleep(min(interval, end - now))
            taken = clock.now()
            rounds.append((taken, await again()))
            await progress(min(taken - start, sample_s), sample_s)
        last = rounds[-1][1]
        for index, entry in enumerate(last):
            samples = [
                (taken, fig)
                for taken, entries in rounds
                if index < len(entries) and (fig := entries[index].figures) is not None
            ]
            entry.rate = Rate.of(samples)
        return last


def _short_enough_to_walk(path: str) -> bool:
    """Walking a path on the event loop costs an ``lstat`` per component and grows faster than the
    path: only short paths (nearly all real ones) are walked there; longer ones go to a thread."""
    return len(path) <= MAX_WALKED_LENGTH and path.count("/") <= MAX_WALKED_COMPONENTS


def _guarded(usage: UsageProvider, path: str) -> FsStats | OSError:
    try:
        return usage(path)
    except OSError as exc:
        return exc


def _device_key(entry: FilesystemUsage) -> object:
    """Which filesystem an entry shows: the mount point's st_dev as df uses, else mountinfo's number."""
    if entry.st_dev is not None:
        return ("st_dev", entry.st_dev)
    if entry.mount.dev:
        return ("mountinfo", entry.mount.dev)
    return ("entry", id(entry))


def dedupe(entries: Sequence[FilesystemUsage]) -> list[FilesystemUsage]:
    """One entry per filesystem (``_device_key``), chosen as df chooses, in mount order: a real device
    path ('/dev/…') over a name like 'tmpfs', then the mount nearer the root unless it shows a deeper
    subtree (a bind mount), and a later mount on the same mount point over the one it hides."""
    chosen: dict[object, int] = {}  # each filesystem's entry so far, by its index
    for index, entry in enumerate(entries):
        mount, key = entry.mount, _device_key(entry)
        seen = entries[chosen[key]].mount if key in chosen else None
        if (
            seen is None
            or ("/" in mount.device and "/" not in seen.device)
            or (len(mount.mount_point) < len(seen.mount_point) and not len(seen.root) < len(mount.root))
            or mount.mount_point == seen.mount_point
        ):
            chosen[key] = index
    survivors = [entries[index] for index in sorted(chosen.values())]
    # Two entries left on one mount point (devices that could not be identified): the later one shows.
    last_at: dict[str, int] = {entry.mount.mount_point: i for i, entry in enumerate(survivors)}
    return [entry for i, entry in enumerate(survivors) if last_at[entry.mount.mount_point] == i]


def inodes_in_use(path: os.PathLike[str]) -> int | None:
    """The progress total of a scan of a whole filesystem: its used inodes (give or take hard links).
    None below a mount point, where the filesystem's count says nothing about this directory."""
    try:
        if not os.path.ismount(path):
            return None
        fs = _statvfs_unfollowed(os.fspath(path))[0]  # the directory checked, not one swapped in since
    except (OSError, ValueError):
        return None
    return fs.f_files - fs.f_ffree if fs.f_files > 0 else None
