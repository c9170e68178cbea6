"""disk_usage: which filesystem is full — ``df -T`` and ``df -i`` in one answer, and it never hangs.

Without a path it lists every mounted real filesystem; with one, the filesystem that holds it. Figures
come from statvfs and are computed exactly as df computes them. A statvfs that could block (network,
FUSE, automount) runs in a daemon thread with a per-mount timeout, and a mount that stays hung is not
probed again while its earlier probe is still stuck, so threads cannot pile up.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

from sysmcp.fs.mounts import (
    Mount,
    MountTable,
    apfs_container,
    container_siblings,
    dedupe,
    default_partitions,
    is_system_volume,
)
from sysmcp.fs.paths import display, expands_locally, is_within
from sysmcp.fs.units import human_bytes
from sysmcp.protocol.errors import ToolError
from sysmcp.tools.merging import HostOutcome, fleet_output, table
from sysmcp.tools.recording import record_disk
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput
from sysmcp.views import DISKS

T = TypeVar("T")

STATVFS_TIMEOUT = 5.0  # seconds per mount; a dead network mount must not hang the call
ALERT_PERCENT = 90  # space or inode use strictly over this is called out
MAX_WALKED_COMPONENTS = 64  # path components walked on the event loop at most (see _short_enough_to_walk)
MAX_WALKED_LENGTH = 1024  # characters, likewise
MAX_STUCK_PROBES = 32  # threads left blocked in hung mounts, at most; beyond it mounts are not probed
MAX_SAMPLE_S = 60  # sample_s at most
# Memory filesystems that df lists: a full /dev/shm or /run is a real outage. Listed by default like
# real ones (when they have a size); the other pseudo filesystems only with ``all``.
MEMORY_TYPES = frozenset({"tmpfs", "devtmpfs", "ramfs"})
ORDER = (
    "fullest first (the higher of space and inode percent), then mount point; unanswered or unreadable last"
)


class FsStats(NamedTuple):
    """What statvfs says, in the filesystem's own units, plus the st_dev of the probed path."""

    block_size: int
    blocks: int
    blocks_free: int
    blocks_available: int
    files: int
    files_free: int
    st_dev: int | None = None


UsageProvider = Callable[[str], FsStats]
PartitionsProvider = Callable[[], MountTable]


def statvfs_usage(path: str) -> FsStats:
    """The real provider: ``statvfs`` (and ``stat`` for the device number) of ``path``."""
    vfs = os.statvfs(path)
    try:
        st_dev: int | None = os.stat(path).st_dev
    except OSError:
        st_dev = None
    return FsStats(
        vfs.f_frsize or vfs.f_bsize, vfs.f_blocks, vfs.f_bfree, vfs.f_bavail, vfs.f_files, vfs.f_ffree, st_dev
    )


def percent_used(used: int, available: int) -> int | None:
    """df's percent: used / (used + available) × 100 rounded up; None when both are 0.

    Available, not total: blocks reserved for root do not hide a full disk.
    """
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


@dataclass
class Outcome(Generic[T]):
    """A probe's end: a value, or the reason there is none (it did not answer in time)."""

    value: T | None = None
    no_answer: str | None = None


@dataclass
class _Probe:
    mount_point: str
    path: str
    started: float
    done: bool = False
    value: Any = None
    error: BaseException | None = None
    waiters: list[tuple[anyio.lowlevel.EventLoopToken, anyio.Event]] = field(default_factory=list)


class Prober:
    """Runs blocking probes in daemon threads, waiting for each at most ``timeout`` seconds.

    Daemon threads, because a thread blocked in a dead NFS mount can never be joined: it must not keep
    the process alive at exit. Bounded, because such a thread never comes back: while a probe of a
    mount is stuck past the timeout, that mount is reported as hung without starting another thread,
    and at most ``max_stuck`` probes may be outstanding at once.
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

    async def run(self, mount_point: str, path: str, work: Callable[[], T]) -> Outcome[T]:
        """``work()`` in a thread; its value, or a no-answer reason after the timeout. Exceptions propagate."""
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
                    return Outcome(no_answer=self._hung_reason(now - oldest))
                if len(self._running) >= self.max_stuck:
                    return Outcome(
                        no_answer=f"not probed: {len(self._running)} earlier probes are still stuck"
                    )
                probe = _Probe(mount_point, path, now)
                self._running[(mount_point, path)] = probe
                start = True
            elif now - probe.started >= self.timeout:
                return Outcome(no_answer=self._hung_reason(now - probe.started))
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
        if not probe.done:
            return Outcome(no_answer=f"did not answer within {self.timeout:g} s (a hung mount?)")
        if probe.error is not None:
            raise probe.error
        return Outcome(value=probe.value)

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
            probe.value, probe.error, probe.done = value, error, True
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

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "samples": self.samples,
            "fill_rate_bytes_per_s": round(self.bytes_per_s, 1),
            "seconds_to_full": _rounded(self.seconds_to_full),
            "inode_fill_rate_per_s": None if self.inodes_per_s is None else round(self.inodes_per_s, 3),
            "seconds_to_inodes_full": _rounded(self.seconds_to_inodes_full),
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


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
    if per_second <= 0:
        return None
    return free / per_second


class Entry:
    """One filesystem in the answer."""

    __slots__ = ("_alerts", "figures", "mount", "rate", "reason", "st_dev", "status")

    def __init__(
        self,
        mount: Mount,
        figures: Figures | None = None,
        status: str = "ok",  # "ok", "no_answer" or "error"
        reason: str | None = None,
        st_dev: int | None = None,
    ) -> None:
        self.mount, self.figures, self.status, self.reason, self.st_dev = (
            mount,
            figures,
            status,
            reason,
            st_dev,
        )
        self._alerts: list[str] | None = None
        self.rate: Rate | None = None

    def alerts(self) -> list[str]:
        """What is over the threshold; read-only filesystems cannot fill up further, so never."""
        if self._alerts is None:
            fig = self.figures
            found = []
            if fig is not None and not self.mount.read_only:
                if over(fig.used, fig.free):
                    found.append("space")
                if fig.inodes_total and over(fig.inodes_used, fig.inodes_free):
                    found.append("inodes")
            self._alerts = found
        return list(self._alerts)

    def sort_key(self) -> tuple[int, float, str]:
        if self.figures is None:
            return (1, 0.0, self.mount.mount_point)
        return (0, -self.figures.fullness(), self.mount.mount_point)

    def to_json(self) -> dict[str, Any]:
        data = {**mount_json(self.mount), "status": self.status}
        fig = self.figures
        if fig is None:
            data["reason"] = self.reason or "unknown"
            return data
        data.update(
            total_bytes=fig.total,
            used_bytes=fig.used,
            free_bytes=fig.free,
            reserved_bytes=fig.reserved,
            percent_used=fig.percent,
            inodes=None
            if fig.inodes_percent is None
            else {
                "total": fig.inodes_total,
                "used": fig.inodes_used,
                "free": fig.inodes_free,
                "percent_used": fig.inodes_percent,
            },
            alerts=self.alerts(),
        )
        if self.rate is not None:
            data["rate"] = self.rate.to_json()
        return data


_MOUNT_JSON: dict[int, tuple[Mount, dict[str, Any]]] = {}


def mount_json(mount: Mount) -> dict[str, Any]:
    """The part of an entry that depends only on the mount, computed once per mount object.

    Keyed by identity (the cache holds the mount, so its id cannot be reused): the table is re-read
    only when mounts change, and hashing a whole mount on every call would cost more than the lookup.
    """
    cached = _MOUNT_JSON.get(id(mount))
    if cached is not None and cached[0] is mount:
        return {**cached[1]}
    if len(_MOUNT_JSON) > 4096:  # mount churn (automounts, containers): start afresh
        _MOUNT_JSON.clear()
    data = {
        "mount_point": display(mount.mount_point),
        "device": display(mount.device),
        "fs_type": display(mount.fs_type),
        "fs_root": display(mount.root),
        "read_only": mount.read_only,
        "options": [display(option) for option in mount.options],
    }
    _MOUNT_JSON[id(mount)] = (mount, data)
    return {**data}


def entry_from(mount: Mount, result: FsStats | OSError) -> Entry:
    if isinstance(result, OSError):
        reason = result.strerror or str(result)
        return Entry(mount, status="error", reason=f"cannot read usage: {reason}")
    return Entry(mount, Figures.from_stats(result), st_dev=result.st_dev)


# -- text -------------------------------------------------------------------------------------


def _pct(value: int | None) -> str:
    return "–" if value is None else f"{value}%"


def usage_phrase(fig: Figures, unit: str) -> str:
    """Used, free and (where any) reserved bytes, always: a percent alone can read as wrong when
    root's reserve makes used + free fall short of the total."""
    if fig.total == 0:
        return "size 0"
    if unit == "mb":
        text = f"{fig.used >> 20:,} MiB used, {fig.free >> 20:,} MiB free of {fig.total >> 20:,} MiB ({_pct(fig.percent)} used)"
        reserved = f"{fig.reserved >> 20:,} MiB"
    elif unit == "human":
        text = (
            f"{human_bytes(fig.used)} used, {human_bytes(fig.free)} free of {human_bytes(fig.total)} "
            f"({_pct(fig.percent)})"
        )
        reserved = human_bytes(fig.reserved)
    elif unit == "bytes":
        text = f"{fig.used} bytes used, {fig.free} free of {fig.total} ({_pct(fig.percent)})"
        reserved = str(fig.reserved)
    else:
        text = (
            f"{_pct(fig.percent)} used ({human_bytes(fig.used)}), {human_bytes(fig.free)} free of "
            f"{human_bytes(fig.total)}"
        )
        reserved = human_bytes(fig.reserved)
    return text + (f", {reserved} reserved for root" if fig.reserved else "")


def duration_phrase(seconds: float) -> str:
    """3 h 10 min, 2 d 4 h, 45 s: two units at most, as a person says it."""
    seconds = max(0, round(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours and days < 10 else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs and minutes < 10 else f"{minutes} min"
    return f"{secs} s"


def rate_phrase(entry: Entry) -> str:
    """'filling at 15.0 MiB/s: full in about 3 h 10 min', 'steady', 'freeing 2.0 MiB/s'."""
    rate, fig = entry.rate, entry.figures
    if rate is None or fig is None:
        return ""
    if rate.bytes_per_s > 0:
        speed = f"{human_bytes(rate.bytes_per_s)}/s"
        ttf = rate.seconds_to_full
        if fig.free == 0:
            text = f"full, still filling at {speed}"
        elif ttf is not None and ttf > 365 * 86400:
            text = f"filling at {speed}: not full within a year at this rate"
        else:
            text = f"full in about {duration_phrase(ttf or 0)} at {speed}"
    elif rate.bytes_per_s < 0:
        text = f"freeing {human_bytes(-rate.bytes_per_s)}/s"
    else:
        text = f"no change in {rate.seconds:.0f} s"
    inodes, inodes_full = rate.inodes_per_s, rate.seconds_to_inodes_full
    if inodes is not None and inodes > 0 and inodes_full is not None and inodes_full <= 365 * 86400:
        text += f"; inodes full in about {duration_phrase(inodes_full)} at {inodes:,.1f}/s"
    return text


def inode_phrase(fig: Figures, detailed: bool = False) -> str:
    if fig.inodes_percent is None:
        return "inodes not applicable (none reported)" if detailed else "inodes n/a"
    if detailed:
        return f"inodes {fig.inodes_percent}% used ({fig.inodes_used:,} of {fig.inodes_total:,})"
    return f"inodes {fig.inodes_percent}%"


def alert_phrase(entry: Entry) -> str:
    alerts = entry.alerts()
    return f"  ⚠ over {ALERT_PERCENT} %: {' and '.join(alerts)}" if alerts else ""


def describe_mount(mount: Mount) -> str:
    parts = [f"{display(mount.fs_type)} {display(mount.device)}"]
    if mount.root != "/":
        parts.append(f"bind mount of {display(mount.root)}")
    if mount.read_only:
        parts.append("read-only")
    return ", ".join(parts)


def render_one(shown: str, entry: Entry, unit: str) -> str:
    where = f"{shown} is on {display(entry.mount.mount_point)} ({describe_mount(entry.mount)})"
    fig = entry.figures
    if fig is None:
        return f"{where}: {entry.reason}."
    rate = rate_phrase(entry)
    rate = f" Over {entry.rate.seconds:.1f} s: {rate}." if entry.rate is not None and rate else ""
    return (
        f"{where}: {usage_phrase(fig, unit)}; {inode_phrase(fig, detailed=True)}.{alert_phrase(entry)}{rate}"
    )


def render_all(entries: Sequence[Entry], unit: str, everything: bool, sample_s: float = 0) -> str:
    plural = "" if len(entries) == 1 else "s"
    scope = (
        " (all, as df -a)" if everything else " (as df: memory filesystems included, pseudo ones with all)"
    )
    lines = [f"{len(entries)} filesystem{plural}{scope}, fullest first."]
    if sample_s:
        filling = [e for e in entries if e.rate is not None and e.rate.bytes_per_s > 0]
        lines.append(
            f"Sampled for {sample_s:g} s. Filling now: "
            + (
                "; ".join(f"{display(e.mount.mount_point)} ({rate_phrase(e)})" for e in filling)
                if filling
                else "none"
            )
            + "."
        )
    flagged = [e for e in entries if e.alerts()]
    if flagged:
        lines.append(
            f"Over {ALERT_PERCENT} %: "
            + ", ".join(f"{display(e.mount.mount_point)} ({' and '.join(e.alerts())})" for e in flagged)
            + "."
        )
    silent = [e for e in entries if e.status == "no_answer"]
    if silent:
        lines.append("Did not answer: " + ", ".join(display(e.mount.mount_point) for e in silent) + ".")
    for entry in entries:
        head = f"{display(entry.mount.mount_point)}  {display(entry.mount.fs_type)} {display(entry.mount.device)}"
        if entry.mount.read_only:
            head += " ro"
        if entry.figures is None:
            lines.append(f"{head}  {entry.reason}")
        else:
            fig = entry.figures
            rate = f"; {rate_phrase(entry)}" if entry.rate is not None else ""
            lines.append(f"{head}  {usage_phrase(fig, unit)}; {inode_phrase(fig)}{rate}{alert_phrase(entry)}")
    return "\n".join(lines)


# -- the tool ---------------------------------------------------------------------------------

ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "mount_point": {"type": "string"},
        "device": {
            "type": "string",
            "description": "The mount source: a device path, 'server:/export', 'tmpfs', …",
        },
        "fs_type": {"type": "string"},
        "fs_root": {
            "type": "string",
            "description": "Directory of the filesystem shown at this mount point: '/' unless a bind mount.",
        },
        "read_only": {"type": "boolean"},
        "options": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Mount and filesystem options.",
        },
        "status": {
            "type": "string",
            "enum": ["ok", "no_answer", "error"],
            "description": "'no_answer': statvfs did not return within the timeout; 'error': it failed (see reason).",
        },
        "reason": {"type": "string", "description": "Why there are no figures (status is not 'ok')."},
        "total_bytes": {"type": "integer"},
        "used_bytes": {"type": "integer"},
        "free_bytes": {"type": "integer", "description": "Available to unprivileged users (df's Avail)."},
        "reserved_bytes": {"type": "integer", "description": "Free but reserved for root."},
        "percent_used": {
            "type": ["integer", "null"],
            "description": "ceil(used / (used + free) × 100), as df; null for a zero-size filesystem.",
        },
        "inodes": {
            "type": ["object", "null"],
            "description": "Inode counts; null where the filesystem reports none (not applicable).",
            "properties": {
                "total": {"type": "integer"},
                "used": {"type": "integer"},
                "free": {"type": "integer"},
                "percent_used": {"type": ["integer", "null"], "description": "ceil(used / total × 100)."},
            },
            "required": ["total", "used", "free", "percent_used"],
            "additionalProperties": False,
        },
        "alerts": {
            "type": "array",
            "items": {"type": "string", "enum": ["space", "inodes"]},
            "description": f"What is over {ALERT_PERCENT} % used (never set for read-only filesystems).",
        },
        "rate": {
            "type": "object",
            "description": "With sample_s: how fast it filled over the window (least-squares slope of the samples).",
            "properties": {
                "seconds": {"type": "number", "description": "From the first sample to the last."},
                "samples": {"type": "integer"},
                "fill_rate_bytes_per_s": {
                    "type": "number",
                    "description": "Used bytes per second: positive while filling, negative while freeing.",
                },
                "seconds_to_full": {
                    "type": ["number", "null"],
                    "description": "At that rate, until free_bytes is 0; null unless filling.",
                },
                "inode_fill_rate_per_s": {
                    "type": ["number", "null"],
                    "description": "Used inodes per second; null without inode counts.",
                },
                "seconds_to_inodes_full": {"type": ["number", "null"], "description": "null unless filling."},
            },
            "required": [
                "seconds",
                "samples",
                "fill_rate_bytes_per_s",
                "seconds_to_full",
                "inode_fill_rate_per_s",
                "seconds_to_inodes_full",
            ],
            "additionalProperties": False,
        },
    },
    "required": ["mount_point", "device", "fs_type", "fs_root", "read_only", "options", "status"],
    "additionalProperties": False,
}

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "description": "Absolute path of any file or directory: report only the filesystem that holds it. "
            "Omit to list every mounted filesystem.",
            "minLength": 1,
        },
        "unit": {
            "type": "string",
            "enum": ["percent", "mb", "human", "bytes"],
            "default": "percent",
            "description": "How the text states usage: 'percent' used, 'mb' free in MiB, 'human' sizes in "
            "KiB/MiB/GiB/TiB, or exact 'bytes'. Structured content is always integer bytes.",
        },
        "all": {
            "type": "boolean",
            "default": False,
            "description": "Also list pseudo filesystems (proc, sysfs, cgroup, …), zero-size ones and every "
            "duplicate mount, like df -a. Memory filesystems with a size (tmpfs, devtmpfs) are listed "
            "anyway, as df does. Ignored with path.",
        },
        "sample_s": {
            "type": "number",
            "minimum": 0,
            "maximum": MAX_SAMPLE_S,
            "default": 0,
            "description": "Seconds to watch free space (0 to 60; 0: one snapshot). Over the window each "
            "filesystem is sampled several times and the answer gives its fill rate (bytes/s, negative "
            "when freeing), the time until it is full at that rate, and the same for inodes. Use it when "
            "a disk is filling now; progress is reported while it waits and the call can be cancelled.",
        },
    },
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "The resolved path asked about (absent when listing)."},
        "filesystems": {"type": "array", "items": ENTRY_SCHEMA},
        "order": {"type": "string", "description": "How the list is sorted (absent with path)."},
        "alert_threshold_percent": {"type": "integer"},
        "timeout_seconds": {"type": "number", "description": "How long each mount was given to answer."},
        "notes": {
            "type": "array",
            "items": {"type": "string"},
            "description": "What to know to read the figures right (e.g. APFS volumes sharing one container).",
        },
        "sample_s": {"type": "number", "description": "The sampling window asked for (absent when 0)."},
    },
    "required": ["filesystems", "alert_threshold_percent", "timeout_seconds"],
    "additionalProperties": False,
}


class DiskUsage:
    """The handler, with its mount-table and statvfs providers injected (tests pass fakes)."""

    def __init__(
        self,
        partitions: PartitionsProvider | None = None,
        usage: UsageProvider = statvfs_usage,
        timeout: float = STATVFS_TIMEOUT,
        max_stuck: int = MAX_STUCK_PROBES,
    ) -> None:
        self.partitions = partitions or default_partitions()
        self.usage = usage
        self.prober = Prober(timeout, max_stuck)
        self._last_walk: tuple[str, MountTable, tuple[bool, str | None]] | None = None

    def answers_at_once(self, args: Any) -> bool:
        """A path whose resolution and filesystem are all local: statvfs answers from memory."""
        if isinstance(args, dict) and args.get("sample_s"):
            return False  # it waits out the window: a task of its own, never answered inline
        raw = args.get("path") if isinstance(args, dict) else None
        if not isinstance(raw, str):
            return not isinstance(args, dict) or "path" in args  # bad arguments are refused at once
        return self._walk(raw, self.partitions())[1]

    def _walk(self, raw: str, table: MountTable) -> tuple[str, bool, str | None]:
        """``raw`` expanded, whether resolving it stays on mounts that cannot hang, and if not the first
        mount point that could (None: unknown, resolve it in a thread).

        Walked on the event loop only when that is cheap and safe; the last walk is kept, so the call
        that follows its at-once check does not walk again.
        """
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

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        table = self.partitions()  # the same object as the at-once check's unless the mounts changed
        unit = args.get("unit", "percent")
        sample_s = float(args.get("sample_s", 0))
        extra: dict[str, Any] = {"sample_s": sample_s} if sample_s else {}
        if "path" in args:
            raw = args["path"]
            entry, shown = await self._one(raw, table, ctx)
            if sample_s:

                async def again() -> list[Entry]:
                    return [(await self._one(raw, table, ctx))[0]]

                entry = (await self._sampled([entry], again, sample_s, ctx))[0]
            structured = {"path": shown, **self._structured([entry]), **extra}
            return await _recorded(_with_notes(render_one(shown, entry, unit), structured, [entry], table))
        everything = bool(args.get("all", False))
        mounts = self._selected(table, everything, ctx)
        entries = await self._probe_all(table, mounts)
        if sample_s:
            entries = await self._sampled(entries, lambda: self._probe_all(table, mounts), sample_s, ctx)
        entries = self._shown(entries, everything)
        structured = {**self._structured(entries), "order": ORDER, **extra}
        return await _recorded(
            _with_notes(render_all(entries, unit, everything, sample_s), structured, entries, table)
        )

    async def _sampled(
        self,
        first: list[Entry],
        again: Callable[[], Awaitable[list[Entry]]],
        sample_s: float,
        ctx: ToolContext,
    ) -> list[Entry]:
        """Probe the same filesystems again and again for ``sample_s`` seconds; the last round's
        entries, each with its rate over the window. Waits on the event loop: cancellable at once."""
        start = anyio.current_time()
        rounds: list[tuple[float, list[Entry]]] = [(start, first)]
        interval = max(0.1, min(1.0, sample_s / 10))
        end = start + sample_s
        while (now := anyio.current_time()) < end:
            await anyio.sleep(min(interval, end - now))
            taken = anyio.current_time()
            rounds.append((taken, await again()))
            done = min(taken - start, sample_s)
            await ctx.progress(done, sample_s, f"sampling free space: {done:.1f} of {sample_s:g} s")
        last = rounds[-1][1]
        for index, entry in enumerate(last):
            samples = [
                (taken, fig)
                for taken, entries in rounds
                if index < len(entries) and (fig := entries[index].figures) is not None
            ]
            entry.rate = Rate.of(samples)
        return last

    def _structured(self, entries: Sequence[Entry]) -> dict[str, Any]:
        return {
            "filesystems": [entry.to_json() for entry in entries],
            "alert_threshold_percent": ALERT_PERCENT,
            "timeout_seconds": self.prober.timeout,
        }

    async def _one(self, raw: str, table: MountTable, ctx: ToolContext) -> tuple[Entry, str]:
        """The filesystem holding ``raw``; path resolution itself goes to a thread if it could hang."""
        expanded, safe, risky_point = self._walk(raw, table)
        result: FsStats | OSError
        if safe:
            real = ctx.paths.resolve_str(raw)  # raises ToolError for relative paths, roots, NUL
            if table.inline_safe(real):
                result = _guarded(self.usage, real)
                return self._path_entry(real, result, table), display(real)
            risky_point = table.mount_point_of(real)

        policy, usage = ctx.paths, self.usage

        def work() -> tuple[str, FsStats | OSError]:
            resolved = policy.resolve_str(raw)
            return resolved, _guarded(usage, resolved)

        outcome = await self.prober.run(risky_point or "/", expanded, work)
        if outcome.value is None:
            # The mount that did not answer is the first risky one the path leads into.
            point = risky_point or "/"
            mount = table.holding(point) or Mount(point, "unknown", "unknown")
            return Entry(mount, status="no_answer", reason=outcome.no_answer), display(
                os.path.normpath(expanded)
            )
        real, result = outcome.value
        return self._path_entry(real, result, table), display(real)

    def _path_entry(self, real: str, result: FsStats | OSError, table: MountTable) -> Entry:
        if isinstance(result, (FileNotFoundError, NotADirectoryError)):
            raise ToolError(f"No such file or directory: {display(real)}")
        st_dev = None if isinstance(result, OSError) else result.st_dev
        mount = table.holding(real, st_dev) or Mount("/", "unknown", "unknown")
        if st_dev is not None and not mount.dev:
            mount = self._volume_with_device(mount, st_dev, table)
        return entry_from(mount, result)

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

    def _selected(self, table: MountTable, everything: bool, ctx: ToolContext) -> list[Mount]:
        """The mounts to probe: all, or df's default (real and memory filesystems), within the roots."""
        mounts = [m for m in table.mounts if everything or not m.pseudo or m.fs_type in MEMORY_TYPES]
        if not everything:  # macOS's own APFS volumes (VM, Preboot …): df -a lists them, Finder does not
            mounts = [m for m in mounts if not is_system_volume(m, table)]
        roots = ctx.paths.allowed
        if roots is not None:
            holders = {id(table.holding(str(root))) for root in roots}
            mounts = [
                m for m in mounts if id(m) in holders or any(is_within(Path(m.mount_point), r) for r in roots)
            ]
        return mounts

    async def _probe_all(self, table: MountTable, mounts: Sequence[Mount]) -> list[Entry]:
        """One entry per mount, in the same order (hung ones as no-answer entries)."""
        entries: list[Entry | None] = [None] * len(mounts)

        async def probe(index: int, mount: Mount) -> None:
            point = mount.mount_point
            outcome = await self.prober.run(point, point, lambda: _guarded(self.usage, point))
            if outcome.value is None:
                entries[index] = Entry(mount, status="no_answer", reason=outcome.no_answer)
            else:
                entries[index] = entry_from(mount, outcome.value)

        async with anyio.create_task_group() as group:
            for index, mount in enumerate(mounts):
                if table.inline_safe(mount.mount_point):
                    entries[index] = entry_from(mount, _guarded(self.usage, mount.mount_point))
                else:
                    group.start_soon(probe, index, mount)
        return [entry for entry in entries if entry is not None]

    def _shown(self, found: list[Entry], everything: bool) -> list[Entry]:
        if not everything:
            # As df: no zero-size filesystems, and one entry per device.
            found = [e for e in found if e.figures is None or e.figures.total > 0]
            found = dedupe(found, lambda e: e.mount, _device_key)
        return sorted(found, key=Entry.sort_key)


def apfs_notes(entries: Sequence[Entry], table: MountTable) -> list[str]:
    """One sentence per APFS container in the answer: its volumes share one pool of free space."""
    notes = []
    seen: set[str] = set()
    for entry in entries:
        container = apfs_container(entry.mount)
        siblings = container_siblings(entry.mount, table)
        if container is None or not siblings or container in seen:
            continue
        seen.add(container)
        names = [display(m.mount_point) for m in sorted([entry.mount, *siblings], key=_by_mount_point)]
        free = f" ({human_bytes(entry.figures.free)} free)" if entry.figures is not None else ""
        notes.append(
            f"APFS: {', '.join(names)} are volumes of one container, {container}: they share its free "
            f"space{free}, so their free figures are one pool, never to be added up; used is each "
            "volume's own."
        )
    return notes


def _by_mount_point(mount: Mount) -> str:
    return mount.mount_point


def _with_notes(
    text: str, structured: dict[str, Any], entries: Sequence[Entry], table: MountTable
) -> ToolOutput:
    notes = apfs_notes(entries, table)
    if notes:
        structured["notes"] = notes
        text += "\n" + "\n".join(notes)
    return ToolOutput(text, structured)


async def _recorded(output: ToolOutput) -> ToolOutput:
    """The history hook: each reading is kept (tiny rows); a reading not kept is said."""
    note = await record_disk(output.structured.get("filesystems", ()))
    return output if note is None else replace(output, text=f"{output.text}\n{note}")


def _short_enough_to_walk(path: str) -> bool:
    """Walking a path on the event loop costs an ``lstat`` per component and grows faster than the
    path: only short paths (nearly all real ones) are walked there; longer ones go to a thread."""
    return len(path) <= MAX_WALKED_LENGTH and path.count("/") <= MAX_WALKED_COMPONENTS


def _guarded(usage: UsageProvider, path: str) -> FsStats | OSError:
    try:
        return usage(path)
    except OSError as exc:
        return exc


def _device_key(entry: Entry) -> object:
    """Which filesystem an entry shows: the mount point's st_dev as df uses, else mountinfo's number."""
    if entry.st_dev is not None:
        return ("st_dev", entry.st_dev)
    if entry.mount.dev:
        return ("mountinfo", entry.mount.dev)
    return ("entry", id(entry))


_HANDLER = DiskUsage()


def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
    """Every filesystem of every host in one table, fullest first across the fleet, with fleet alerts."""
    rows: list[dict[str, Any]] = []
    for outcome in outcomes:
        if outcome.ok and outcome.result is not None:
            rows += [{"host": outcome.host, **fs} for fs in outcome.result.get("filesystems", [])]

    def fullness(row: dict[str, Any]) -> int:
        inodes = row.get("inodes") or {}
        return max(row.get("percent_used") or 0, inodes.get("percent_used") or 0)

    rows.sort(key=lambda row: (row.get("status") != "ok", -fullness(row), row["host"], row["mount_point"]))
    alerts = [row for row in rows if row.get("alerts")]
    alert_hosts = list(dict.fromkeys(row["host"] for row in alerts))
    body: list[str] = []
    if alerts:
        body.append(
            f"{len(alerts)} filesystem{'s' if len(alerts) != 1 else ''} on {len(alert_hosts)} "
            f"host{'s' if len(alert_hosts) != 1 else ''} {'are' if len(alerts) != 1 else 'is'} over "
            f"{ALERT_PERCENT} %: "
            + ", ".join(
                f"{row['host']}:{row['mount_point']} ({' and '.join(row['alerts'])})" for row in alerts
            )
        )
    elif rows:
        body.append(f"No filesystem on these hosts is over {ALERT_PERCENT} % used.")
    table_rows = [["HOST", "MOUNT", "TYPE", "SIZE", "USED", "AVAIL", "USE%", "IUSE%"]]
    for row in rows:
        if row.get("status") != "ok":
            table_rows.append(
                [row["host"], row["mount_point"], row["fs_type"], "—", "—", "—", row["status"], ""]
            )
            continue
        inodes = row.get("inodes") or {}
        table_rows.append(
            [
                row["host"],
                row["mount_point"],
                row["fs_type"],
                human_bytes(row.get("total_bytes", 0)),
                human_bytes(row.get("used_bytes", 0)),
                human_bytes(row.get("free_bytes", 0)),
                _pct(row.get("percent_used")),
                _pct(inodes.get("percent_used")) if inodes else "-",
            ]
        )
    if rows:
        body += table(table_rows, right=(3, 4, 5, 6, 7))
    view = {
        "filesystems": rows,
        "alerts": [
            {"host": row["host"], "mount_point": row["mount_point"], "alerts": row["alerts"]}
            for row in alerts
        ],
        "order": "fullest first across the hosts (the higher of space and inode percent), then host, mount",
        "alert_threshold_percent": ALERT_PERCENT,
    }
    return fleet_output(outcomes, body, view)


TOOL = Tool(
    name="disk_usage",
    title="Disk usage",
    description=(
        "Which filesystem is full, and how fast it is filling: df -T and df -i in one answer — the first "
        "call when a disk is full. Without `path`, every mounted filesystem df lists by default (real ones "
        "and memory ones with a size such as tmpfs and devtmpfs: a full /dev/shm or /run is an outage too; "
        "proc, sysfs, cgroup and other pseudo filesystems only with `all`; a filesystem mounted twice is "
        "listed once, as df does); with `path`, the filesystem holding it (the "
        "deepest mount point containing its real path; bind mounts included). Per filesystem: mount point, "
        "device, type, read-only flag, options; total, used, free (available to unprivileged users) and "
        "reserved bytes; inode total, used, free (null where the filesystem has no inode counts). Percent "
        "used is df's: used / (used + free) × 100, rounded up to a whole percent, so blocks reserved for "
        "root do not hide a full disk; inode percent is used / total, also rounded up. Listed fullest "
        "first (the higher of space and inode percent), unanswered or unreadable mounts last. Space or "
        f"inodes over {ALERT_PERCENT} % used are called out (not on read-only filesystems, which cannot "
        "fill further). A mount that does not answer within 5 s (a hung network mount) becomes an entry "
        "saying so and the rest still arrive; an unreadable one is an entry with the reason. With "
        "`sample_s` (up to 60 s) it watches free space over that window and gives each filesystem's fill "
        'rate and time to full ("full in about 3 h 10 min at 15 MiB/s"), inodes likewise; then '
        "disk_io names the process writing. Read-only."
        " On macOS its own APFS volumes (/System/Volumes/VM, Preboot …, the sealed / snapshot) are listed "
        "only with `all`, and `notes` names the APFS volumes that share one container's free space."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=_HANDLER,
    answers_at_once=_HANDLER.answers_at_once,
    view=DISKS.uri,
    merge=merge,
)
