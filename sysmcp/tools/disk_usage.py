"""disk_usage: which filesystem is full — ``df -T`` and ``df -i`` in one answer, and it never hangs.

Without a path it lists every mounted real filesystem; with one, the filesystem that holds it. Figures
come from statvfs and are computed exactly as df computes them. The probing, df's arithmetic and the
sampling are the engine's (``sysmcp.engine.mounts._disks``); this module is the schema, the words and the fleet merge.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import anyio.to_thread

from sysmcp.engine.faults import EngineError
from sysmcp.engine.mounts import (
    ALERT_PERCENT,
    MAX_STUCK_PROBES,
    STATVFS_TIMEOUT,
    Disks,
    FilesystemUsage,
    Mount,
    MountTable,
    PartitionsProvider,
    Rate,
    SampleClock,
    Status,
    UsageProvider,
    apfs_container,
    container_siblings,
    default_partitions,
    layer_directories,
    statvfs_usage,
)
from sysmcp.engine.paths import escaped, is_within, mount_source, within_roots
from sysmcp.engine.pools import Allocation, ZfsPools, could_be_thin
from sysmcp.history import state
from sysmcp.history.recording import ReadingGate
from sysmcp.history.snapshots import DiskReading, reading_identity
from sysmcp.platform import PROC
from sysmcp.protocol.failures import ArgumentError
from sysmcp.protocol.threads import run_in_thread
from sysmcp.render import human_bytes, noun, plural, table
from sysmcp.tools import schemas as js
from sysmcp.tools.disk_pools import (
    BtrfsChunks,
    FilesystemPool,
    Pool,
    PoolReader,
    PoolSampler,
    ZfsPool,
    btrfs_chunks,
    chunk_line,
    chunks_of,
    read_pools,
    read_zfs,
    zfs_lines,
    zfs_of,
)
from sysmcp.tools.explain_budget import EXPLAIN_TIMEOUT
from sysmcp.tools.merging import HostOutcome, fleet_output, host_list
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput
from sysmcp.tools.typed import ABSENT, Opt, from_json, imported_later, prop, result, to_json
from sysmcp.views import DISKS

# Explain's module is imported for an explain, or where the schema or from_json first needs Explain. Why: a
# fleet host's remote start answers one disk_usage without explain, and making explain's nine result classes
# cost it about 3 % of its CPU.
if TYPE_CHECKING:
    from sysmcp.tools.disk_explain import Explain
else:
    Explain = imported_later("sysmcp.tools.disk_explain", "Explain")

MAX_SAMPLE_S = 60  # sample_s at most
ORDER = (
    "fullest first (the higher of space and inode percent), then mount point; unanswered or unreadable last"
)


@result
class Inodes:
    """A filesystem's inode counts, as df -i gives them."""

    total: int = prop()
    used: int = prop()
    free: int = prop()
    percent_used: int | None = prop("ceil(used / total × 100).")


@result
class FillRate:
    """How fast a filesystem filled over the sampling window, and when it is full at that rate."""

    seconds: float = prop("From the first sample to the last.")
    samples: int = prop()
    fill_rate_bytes_per_s: float = prop(
        "Used bytes per second: positive while filling, negative while freeing."
    )
    seconds_to_full: float | None = prop("At that rate, until free_bytes is 0; null unless filling.")
    inode_fill_rate_per_s: float | None = prop("Used inodes per second; null without inode counts.")
    seconds_to_inodes_full: float | None = prop("null unless filling.")
    limited_by: Opt[str] = prop(
        "'pool': the thin pool under it fills sooner; its time is shown.", default=ABSENT
    )


@result
class Filesystem:
    """One mounted filesystem: df -T and df -i in one row, with what is over the threshold."""

    mount_point: str = prop()
    device: str = prop("The mount source: a device path, 'server:/export', 'tmpfs', …")
    fs_type: str = prop()
    fs_root: str | None = prop(
        "Directory of the filesystem shown at this mount point: '/' unless a bind mount or a btrfs "
        "subvolume (options has subvol=); null: one outside the allowed roots."
    )
    read_only: bool = prop()
    options: list[str] = prop("Mount and filesystem options.")
    status: Status = prop(
        "'no_answer': statvfs did not return within the timeout; 'error': it failed (see reason)."
    )
    reason: Opt[str] = prop("Why there are no figures (status is not 'ok').", default=ABSENT)
    total_bytes: Opt[int] = prop(default=ABSENT)
    used_bytes: Opt[int] = prop(default=ABSENT)
    free_bytes: Opt[int] = prop("Available to unprivileged users (df's Avail).", default=ABSENT)
    reserved_bytes: Opt[int] = prop("Free but reserved for root.", default=ABSENT)
    percent_used: Opt[int | None] = prop(
        "ceil(used / (used + free) × 100), as df; null for a zero-size filesystem.", default=ABSENT
    )
    inodes: Opt[Inodes | None] = prop(
        "Inode counts; null where the filesystem reports none (not applicable).", default=ABSENT
    )
    alerts: Opt[list[Literal["space", "inodes"]]] = prop(
        f"What is over {ALERT_PERCENT} % used (never set for read-only filesystems).", default=ABSENT
    )
    rate: Opt[FillRate] = prop(
        "With sample_s: how fast it filled over the window (least-squares slope of the samples).",
        default=ABSENT,
    )
    pool: Opt[Pool] = prop(
        "The LVM thin pool under the filesystem: it can fill before the filesystem does.", default=ABSENT
    )
    chunks: Opt[BtrfsChunks] = prop("btrfs: its devices' allocation to chunks.", default=ABSENT)
    zfs: Opt[ZfsPool] = prop("ZFS: the pool under the dataset, and its limits.", default=ABSENT)


@result
class DiskUsageResult:
    """The filesystems (every mounted one, fullest first, or the one holding path) and how they were read."""

    path: Opt[str] = prop("The resolved path asked about (absent when listing).")
    filesystems: list[Filesystem] = prop()
    alert_threshold_percent: int = prop()
    timeout_seconds: float = prop("How long each mount was given to answer.")
    order: Opt[str] = prop("How the list is sorted (absent with path).", default=ABSENT)
    sample_s: Opt[float] = prop("The sampling window asked for (absent when 0).", default=ABSENT)
    explain: Opt[Explain] = prop(
        "With explain: the filesystem's used bytes (statvfs, as df) split into parts.", default=ABSENT
    )
    notes: Opt[list[str]] = prop(
        "What to know to read the figures right (e.g. APFS volumes sharing one container).", default=ABSENT
    )


def filesystem(
    entry: FilesystemUsage,
    pooled: FilesystemPool | None = None,
    allocation: Allocation | None = None,
    zfs: ZfsPool | None = None,
) -> Filesystem:
    """One filesystem of the answer, with the pool under it (whose time to full may be the sooner) and,
    on btrfs, its chunk allocation; on ZFS, its pool and limits."""
    shown = _shown(entry.mount)
    fig = entry.figures
    if fig is None:
        return Filesystem(*shown, entry.status, entry.reason or "unknown")
    inodes = (
        None
        if fig.inodes_percent is None
        else Inodes(fig.inodes_total, fig.inodes_used, fig.inodes_free, fig.inodes_percent)
    )
    rate: Opt[FillRate] = ABSENT
    if entry.rate is not None:
        sooner = None if pooled is None else pooled.sooner
        rate = FillRate(
            round(entry.rate.seconds, 3),
            entry.rate.samples,
            round(entry.rate.bytes_per_s, 1),
            _rounded(entry.rate.seconds_to_full if sooner is None else sooner),
            None if entry.rate.inodes_per_s is None else round(entry.rate.inodes_per_s, 3),
            _rounded(entry.rate.seconds_to_inodes_full),
            ABSENT if sooner is None else "pool",
        )
    alerts = cast("list[Literal['space', 'inodes']]", entry.alerts())
    pool = ABSENT if pooled is None else pooled.pool
    sizes = (fig.total, fig.used, fig.free, fig.reserved, fig.percent)
    chunks = ABSENT if allocation is None else chunks_of(allocation)
    return Filesystem(
        *shown,
        entry.status,
        ABSENT,
        *sizes,
        inodes,
        alerts,
        rate,
        pool,
        chunks,
        ABSENT if zfs is None else zfs,
    )


def _confined(fs: Filesystem, mount: Mount, table: MountTable, roots: Sequence[Path] | None) -> Filesystem:
    """``fs`` with its bind mount's directory named only where a whole mount of its filesystem (root
    '/') shows that directory inside the roots: a bind of ``/secret`` into a root must not name it.
    An overlay's layer directories (``lowerdir=``, ``upperdir=``, ``workdir=``) are paths too: an
    option naming one outside the roots is left bare (``lowerdir``), and a source that is a path
    outside them (a bindfs or tmpfs source) is not named (``mount_source``)."""
    if roots is None:
        return fs
    layers = [
        o if all(within_roots(d, roots) for d in layer_directories(o)) else o.partition("=")[0]
        for o in fs.options
    ]
    fs = fs if layers == fs.options else replace(fs, options=layers)
    source = mount_source(fs.device, roots)
    fs = fs if source == fs.device else replace(fs, device=source)
    if mount.root == "/":
        return fs
    whole = [m.mount_point for m in table.mounts if m.dev == mount.dev and m.root == "/"]
    shown = (Path(point, mount.root.lstrip("/")) for point in whole)
    if any(is_within(at, root) for at in shown for root in roots):
        return fs
    own = f"subvol={fs.fs_root}"  # btrfs' subvol= names a path too: bare for a subvolume's own mount
    options = ["subvol" if o == own else o for o in fs.options if o == own or not o.startswith("subvol=")]
    return replace(fs, fs_root=None, options=options)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


_SHOWN: dict[int, tuple[Mount, tuple[str, str, str, str, bool, list[str]]]] = {}


def _shown(mount: Mount) -> tuple[str, str, str, str, bool, list[str]]:
    """The part of an entry that depends only on the mount, computed once per mount object.

    Keyed by identity (the cache holds the mount, so its id cannot be reused): the table is re-read
    only when mounts change, and hashing a whole mount on every call would cost more than the lookup.
    """
    cached = _SHOWN.get(id(mount))
    if cached is not None and cached[0] is mount:
        return cached[1]
    if len(_SHOWN) > 4096:  # mount churn (automounts, containers): start afresh
        _SHOWN.clear()
    shown = (
        os.fsdecode(mount.mount_point),  # names as they are: the text escapes them, the JSON displays them
        os.fsdecode(mount.device),
        os.fsdecode(mount.fs_type),
        os.fsdecode(mount.root),
        mount.read_only,
        [os.fsdecode(option) for option in mount.options],
    )
    _SHOWN[id(mount)] = (mount, shown)
    return shown


# -- text -------------------------------------------------------------------------------------


def _pct(value: Opt[int | None]) -> str:
    return "–" if value is None or value is ABSENT else f"{value}%"


def _amount(size: int, unit: str) -> str:
    """A size in the unit the text was asked in: '1,024 MiB', '1073741824' (bytes), '1.0 GiB'."""
    if unit == "mb":  # rounded up, as df -m: 4 KiB used on an 8 MiB tmpfs is 1 used, 8 free, not 0 and 7
        return f"{-(-size >> 20):,} MiB"
    return str(size) if unit == "bytes" else human_bytes(size)


_USAGE = {  # usage_phrase's sentence in each unit
    "percent": "{percent} used ({used}), {free} free of {total}",
    "mb": "{used} used, {free} free of {total} ({percent} used)",
    "human": "{used} used, {free} free of {total} ({percent})",
    "bytes": "{used} bytes used, {free} free of {total} ({percent})",
}


def usage_phrase(fs: Filesystem, unit: str) -> str:
    """Used, free and (where any) reserved bytes, always: a percent alone can read as wrong when
    root's reserve makes used + free fall short of the total."""
    if not fs.total_bytes:
        return "size 0"
    used, free, total = (_amount(size or 0, unit) for size in (fs.used_bytes, fs.free_bytes, fs.total_bytes))
    text = _USAGE.get(unit, _USAGE["percent"]).format(
        used=used, free=free, total=total, percent=_pct(fs.percent_used)
    )
    reserved = fs.reserved_bytes or 0
    # btrfs has no root reserve: what it keeps back no one can use
    whose = "kept back by btrfs" if fs.fs_type == "btrfs" else "reserved for root"
    return text + (f", {_amount(reserved, unit)} {whose}" if reserved else "")


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


def rate_phrase(rate: Rate, free: int) -> str:
    """'filling at 15.0 MiB/s: full in about 3 h 10 min', 'steady', 'freeing 2.0 MiB/s' (the
    engine's exact rate: the answer's figures are rounded)."""
    if rate.bytes_per_s > 0:
        speed = f"{human_bytes(rate.bytes_per_s)}/s"
        ttf = rate.seconds_to_full
        if free == 0:
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


def inode_phrase(fs: Filesystem, detailed: bool = False) -> str:
    inodes = fs.inodes
    if not inodes or inodes.percent_used is None:
        return "inodes not applicable (none reported)" if detailed else "inodes n/a"
    if detailed:
        return f"inodes {inodes.percent_used}% used ({inodes.used:,} of {inodes.total:,})"
    return f"inodes {inodes.percent_used}%"


def alert_phrase(fs: Filesystem) -> str:
    return f"  ⚠ over {ALERT_PERCENT} %: {' and '.join(fs.alerts)}" if fs.alerts else ""


def describe_mount(fs: Filesystem) -> str:
    parts = [f"{escaped(fs.fs_type)} {escaped(fs.device)}"]
    if fs.fs_type == "btrfs" and {"subvol", f"subvol={fs.fs_root}"} & set(fs.options):
        if fs.fs_root != "/":  # a subvolume's own mount (Fedora's /home: subvol=home), no bind mount
            parts.append(f"subvolume {escaped(fs.fs_root or '(name withheld: outside the allowed roots)')}")
    elif fs.fs_root is None:
        parts.append("bind mount of a directory outside the allowed roots")
    elif fs.fs_root != "/":
        parts.append(f"bind mount of {escaped(fs.fs_root)}")
    if fs.read_only:
        parts.append("read-only")
    return ", ".join(parts)


def render(
    answer: DiskUsageResult,
    unit: str,
    rates: Sequence[Rate | None],
    everything: bool = False,
    lines: Sequence[str] = (),
) -> str:
    """The answer's text: the one filesystem of a path, or the list; ``lines`` (the pools'); then the
    notes. ``rates``: the engine's exact rate of each filesystem (None: not sampled)."""
    if answer.path is ABSENT:
        body = render_all(answer, rates, unit, everything)
    else:
        body = render_one(answer.path, answer.filesystems[0], rates[0], unit)
    return "\n".join([body, *lines, *(answer.notes or ())])


def render_one(shown: str, fs: Filesystem, rate: Rate | None, unit: str) -> str:
    where = f"{escaped(shown)} is on {escaped(fs.mount_point)} ({describe_mount(fs)})"
    if fs.status != "ok":
        return f"{where}: {fs.reason}."
    phrase = "" if rate is None else f" Over {rate.seconds:.1f} s: {rate_phrase(rate, fs.free_bytes or 0)}."
    return f"{where}: {usage_phrase(fs, unit)}; {inode_phrase(fs, detailed=True)}.{alert_phrase(fs)}{phrase}"


def render_all(answer: DiskUsageResult, rates: Sequence[Rate | None], unit: str, everything: bool) -> str:
    """The list: what it covers, what fills and what is over the threshold, then a line per filesystem."""
    filesystems, sample_s = answer.filesystems, answer.sample_s
    scope = (
        " (all, as df -a)" if everything else " (as df: memory filesystems included, pseudo ones with all)"
    )
    lines = [f"{len(filesystems)} {noun(len(filesystems), 'filesystem')}{scope}, fullest first."]
    rated = list(zip(filesystems, rates, strict=True))
    if sample_s:
        filling = [
            f"{escaped(fs.mount_point)} ({rate_phrase(rate, fs.free_bytes or 0)})"
            for fs, rate in rated
            if rate is not None and rate.bytes_per_s > 0
        ]
        lines.append(f"Sampled for {sample_s:g} s. Filling now: {'; '.join(filling) if filling else 'none'}.")
    flagged = [f"{escaped(fs.mount_point)} ({' and '.join(fs.alerts)})" for fs in filesystems if fs.alerts]
    if flagged:
        lines.append(f"Over {ALERT_PERCENT} %: {', '.join(flagged)}.")
    silent = [escaped(fs.mount_point) for fs in filesystems if fs.status == "no_answer"]
    if silent:
        lines.append(f"Did not answer: {', '.join(silent)}.")
    return "\n".join(lines + [_line(fs, rate, unit) for fs, rate in rated])


def _line(fs: Filesystem, rate: Rate | None, unit: str) -> str:
    """'/var  ext4 /dev/sda2 ro  <usage>; <inodes>[; <rate>][  ⚠ …]', or the reason there are no figures."""
    head = f"{escaped(fs.mount_point)}  {escaped(fs.fs_type)} {escaped(fs.device)}" + (
        " ro" if fs.read_only else ""
    )
    if fs.status != "ok":
        return f"{head}  {fs.reason}"
    phrase = "" if rate is None else f"; {rate_phrase(rate, fs.free_bytes or 0)}"
    return f"{head}  {usage_phrase(fs, unit)}; {inode_phrase(fs)}{phrase}{alert_phrase(fs)}"


# -- the tool ---------------------------------------------------------------------------------

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "path": js.string(
            "Only the filesystem holding this path. Omit: every mounted filesystem.", minLength=1
        ),
        "unit": js.string(
            "How the text states usage ('mb': sizes in whole MiB).",
            enum=["percent", "mb", "human", "bytes"],
            default="percent",
        ),
        "all": js.boolean("Also pseudo, empty and duplicate mounts (df -a).", default=False),
        "sample_s": js.number(
            "Watch this long for fill rates and time to full.", minimum=0, maximum=MAX_SAMPLE_S, default=0
        ),
        "explain": js.boolean("With path: account for every used byte; walks the filesystem.", default=False),
        "timeout_s": EXPLAIN_TIMEOUT.property("With explain: the walk's budget."),
    },
    required=None,
)


#: The process's gate for disk readings (``history.ReadingGate``); a test passes its own.
READINGS = ReadingGate()


def readings_quiet(key: str, gate: ReadingGate = READINGS) -> bool:
    """Whether disk_usage's call named ``key`` can be answered with no reading due (no store
    opened: for the event loop's at-once check)."""
    gate.follow(state.directory())
    return gate.quiet(key)


async def record_disk(
    filesystems: Sequence[Filesystem],
    key: str,
    gate: ReadingGate = READINGS,
    identities: Sequence[str | None] | None = None,
) -> str | None:
    """Keep disk_usage's figures (a few tiny rows) when ``gate`` finds them due, off the event loop;
    a sentence if not saved. ``key`` names the call (its path) for the gate's ``quiet``; ``identities``,
    each filesystem's ``filesystem_id`` where known (None: not), tells a filesystem mounted anew at a
    mount point from the one before (the same source and type: a tmpfs, a device made again by mkfs).

    The store is opened by the worker that writes (``state.active()`` in ``save``), not here: the
    event loop does no file I/O, and a fresh process opens one SQLite connection, not two."""
    if not state.configured():
        return None
    gate.follow(state.directory())
    taken = state.now()
    host = state.host_name()
    readings = [
        DiskReading(
            host,
            os.fsencode(fs.mount_point),
            reading_identity(fs.device, fs.fs_type, identity),
            taken,
            fs.total_bytes or 0,
            fs.used_bytes,
            fs.free_bytes or 0,
            fs.inodes.used if fs.inodes else None,
            fs.inodes.free if fs.inodes else None,
        )
        for fs, identity in zip(filesystems, identities or [None] * len(filesystems), strict=True)
        if fs.status == "ok" and fs.used_bytes is not ABSENT
    ]
    gate.answered(key, readings)
    due = gate.due(readings)
    if not due:
        return None  # each filesystem has a recent reading and has not moved since: nothing to add

    def save(_: None) -> str | None:
        store = state.active()
        if store is None:
            return None
        saved = store.save_readings(due)
        if not saved.ok:
            return f"History: {saved.reason}."
        gate.kept(due)
        return None

    return await run_in_thread(save, None, None)


class DiskUsage:
    """The handler: arguments in, words out; ``Disks`` (the engine) probes, with its mount-table and
    statvfs providers and its sampling clock injected (tests pass fakes)."""

    def __init__(
        self,
        partitions: PartitionsProvider | None = None,
        usage: UsageProvider = statvfs_usage,
        timeout: float = STATVFS_TIMEOUT,
        max_stuck: int = MAX_STUCK_PROBES,
        clock: SampleClock | None = None,
        proc: str = PROC,
        readings: ReadingGate = READINGS,
        pools: PoolReader = read_pools,
        chunks: Callable[[Sequence[tuple[str, str]]], dict[str, Allocation]] = btrfs_chunks,
        zfs: Callable[[Sequence[str]], ZfsPools | None] = read_zfs,
    ) -> None:
        self.disks = Disks(partitions or default_partitions(), usage, timeout, max_stuck, clock)
        self.proc = proc  # where explain reads processes' open files (tests point it at a fake /proc)
        self.readings = readings  # which readings history keeps (at most one per filesystem a minute)
        self.pools = pools  # the thin pools under filesystems (tests pass recorded lvs output)
        self.chunks = chunks  # btrfs chunk allocation by mount source (sysfs)
        self.zfs = zfs  # the ZFS pools and dataset limits (tests pass recorded zpool and zfs output)

    def answers_at_once(self, args: Any) -> bool:
        """A path whose resolution and filesystem are all local: statvfs answers from memory."""
        if isinstance(args, dict) and (args.get("sample_s") or args.get("explain")):
            return False  # it waits out the window or walks: a task of its own, never answered inline
        if state.configured() and not readings_quiet(_reading_key(args), self.readings):
            return False  # a reading is due: its write (a worker's, with its lock) is no inline work
        raw = args.get("path") if isinstance(args, dict) else None
        if not isinstance(raw, str):
            return not isinstance(args, dict) or "path" in args  # bad arguments are refused at once
        if any(
            could_be_thin(mount.device) or mount.fs_type == "zfs" for mount in self.disks.partitions().mounts
        ):
            return False  # a thin volume's pool is read with lvs, a ZFS pool with zpool: commands, no inline work
        return self.disks.walk(raw, self.disks.partitions())[1]

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        table = self.disks.partitions()  # the same object as the at-once check's unless the mounts changed
        unit = args.get("unit", "percent")
        sample_s = float(args.get("sample_s", 0))
        everything = bool(args.get("all", False))
        disks = self.disks
        pools = PoolSampler(self.pools, disks.clock)

        async def progress(done: float, total: float) -> None:
            await ctx.request.progress(done, total, f"sampling free space: {done:.1f} of {total:g} s")

        async def probe() -> list[FilesystemUsage]:
            if "path" in args:
                found = [(await disks.one(args["path"], table, ctx.paths.resolve_str))[0]]
            else:
                found = await disks.probe_all(table, mounts)
            await pools.take(found)
            return found

        if args.get("explain") and "path" not in args:
            raise ArgumentError("explain needs a path: the filesystem whose used bytes to account for")
        shown: Opt[str] = ABSENT
        if "path" in args:
            entry, real = await disks.one(args["path"], table, ctx.paths.resolve_str)
            entries, shown = [entry], os.fsdecode(real)
            if args.get("explain") and entry.figures is not None:
                timeout = EXPLAIN_TIMEOUT.of(args)
                from sysmcp.tools.disk_explain import run as explain

                text, part = await explain(entry, table, timeout, ctx, self.proc)
                chunks, (zfs, fault) = await self._chunks(entries), await self._zfs(entries)
                answer = self._answer(
                    entries, table, shown, ctx.paths.allowed, chunks=chunks, zfs=zfs, explain=part
                )
                warnings = _chunk_lines(entries, chunks) + _zfs_lines(answer.filesystems)
                body = render(answer, unit, [entry.rate], lines=fault)
                return ToolOutput.typed("\n".join([*warnings, text, body]), answer)
            await pools.take(entries)
        else:
            mounts = disks.selected(table, everything, ctx.paths.allowed)
            entries = await probe()
        if sample_s:
            entries = await disks.sampled(entries, probe, sample_s, progress)
        if shown is ABSENT:
            entries = disks.shown(entries, everything)
        pooled = [pools.pooled(entry) for entry in entries]
        chunks, (zfs, fault) = await self._chunks(entries), await self._zfs(entries)
        answer = self._answer(
            entries,
            table,
            shown,
            ctx.paths.allowed,
            pooled,
            chunks,
            zfs,
            order=ORDER if shown is ABSENT else ABSENT,
            sample_s=sample_s or ABSENT,
        )
        lines = [item.line for item in pooled if item is not None] + pools.fault_lines() + fault
        rates = [entry.rate for entry in entries]
        body = render(answer, unit, rates, everything, lines)
        warnings = _chunk_lines(entries, chunks) + _zfs_lines(answer.filesystems)
        output = ToolOutput.typed("\n".join([*warnings, body]), answer)
        identities = [entry.identity for entry in entries]
        note = await record_disk(answer.filesystems, _reading_key(args), self.readings, identities)
        return output if note is None else replace(output, text=f"{output.text}\n{note}")

    async def _chunks(self, entries: Sequence[FilesystemUsage]) -> dict[str, Allocation]:
        """The chunk allocation under each btrfs of the answer, read from sysfs in a worker."""
        mounts = [
            (e.mount.device, e.mount.mount_point)
            for e in entries
            if e.mount.fs_type == "btrfs" and e.figures is not None
        ]
        if not mounts:
            return {}
        return await anyio.to_thread.run_sync(self.chunks, mounts, abandon_on_cancel=True)

    async def _zfs(self, entries: Sequence[FilesystemUsage]) -> tuple[ZfsPools | None, list[str]]:
        """The pools under the answer's ZFS datasets and their limits (None: no ZFS commands here, and
        nothing said), and the line naming a zpool or zfs that failed (the rest of the answer stands)."""
        datasets = [os.fsdecode(e.mount.device) for e in entries if _is_zfs(e) and e.figures is not None]
        if not datasets:
            return None, []
        from sysmcp.tools.errors import words

        try:
            found = await anyio.to_thread.run_sync(self.zfs, datasets, abandon_on_cancel=True)
        except EngineError as exc:
            return None, [f"ZFS pools not read: {words(exc)}."]
        fault = None if found is None else found.limits_fault
        return found, [] if fault is None else [f"ZFS dataset limits not read: {words(fault)}."]

    def _answer(
        self,
        entries: Sequence[FilesystemUsage],
        table: MountTable,
        path: Opt[str],
        roots: Sequence[Path] | None,
        pooled: Sequence[FilesystemPool | None] | None = None,
        chunks: Mapping[str, Allocation] | None = None,
        zfs: ZfsPools | None = None,
        **more: Any,
    ) -> DiskUsageResult:
        notes = apfs_notes(entries, table)
        allocations = [
            (chunks or {}).get(e.mount.device) if e.mount.fs_type == "btrfs" else None for e in entries
        ]
        pools = [
            zfs_of(os.fsdecode(e.mount.device), zfs) if zfs is not None and _is_zfs(e) else None
            for e in entries
        ]
        return DiskUsageResult(
            path,
            [
                _confined(filesystem(entry, pool, allocation, zpool), entry.mount, table, roots)
                for entry, pool, allocation, zpool in zip(
                    entries, pooled or [None] * len(entries), allocations, pools, strict=True
                )
            ],
            ALERT_PERCENT,
            self.disks.prober.timeout,
            notes=notes or ABSENT,
            **more,
        )


def _is_zfs(entry: FilesystemUsage) -> bool:
    return os.fsdecode(entry.mount.fs_type) == "zfs"


def _zfs_lines(filesystems: Sequence[Filesystem]) -> list[str]:
    """The ZFS warnings that lead the answer (``disk_pools.zfs_lines``)."""
    return zfs_lines(
        [(fs.mount_point, fs.device, fs.zfs, "space" in (fs.alerts or [])) for fs in filesystems if fs.zfs]
    )


def _chunk_lines(entries: Sequence[FilesystemUsage], chunks: Mapping[str, Allocation]) -> list[str]:
    """The warnings that lead the answer: a btrfs whose metadata is full and cannot grow, each once."""
    lines: dict[str, str] = {}
    for entry in entries:
        allocation = chunks.get(entry.mount.device) if entry.mount.fs_type == "btrfs" else None
        if allocation is not None and allocation.fsid not in lines:
            line = chunk_line(os.fsdecode(entry.mount.mount_point), allocation)
            if line is not None:
                lines[allocation.fsid] = line
    return list(lines.values())


def apfs_notes(entries: Sequence[FilesystemUsage], table: MountTable) -> list[str]:
    """One sentence per APFS container in the answer: its volumes share one pool of free space."""
    notes: dict[str, str] = {}  # by container: the first of its volumes in the answer speaks for it
    for entry in entries:
        container = apfs_container(entry.mount)
        siblings = container_siblings(entry.mount, table)
        if container is None or not siblings or container in notes:
            continue
        names = [
            escaped(m.mount_point) for m in sorted([entry.mount, *siblings], key=attrgetter("mount_point"))
        ]
        free = f" ({human_bytes(entry.figures.free)} free)" if entry.figures is not None else ""
        notes[container] = (
            f"APFS: {', '.join(names)} are volumes of one container, {container}: they share its free "
            f"space{free}, so their free figures are one pool, never to be added up; used is each "
            "volume's own."
        )
    return list(notes.values())


def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
    """Every filesystem of every host in one table, fullest first across the fleet, with fleet alerts."""
    rows = [
        (outcome.host, fs)
        for outcome in outcomes
        if outcome.ok  # a host without filesystems in its result is unreadable here, never left out
        for fs in from_json(list[Filesystem], (outcome.result or {})["filesystems"])
    ]
    rows.sort(key=lambda row: (row[1].status != "ok", -_fullness(row[1]), row[0], row[1].mount_point))
    alerts = [(host, fs) for host, fs in rows if fs.alerts]
    body: list[str] = []
    if alerts:
        body.append(_fleet_alerts(alerts))
    elif rows:
        body.append(f"No filesystem on these hosts is over {ALERT_PERCENT} % used.")
    if rows:
        header = ["HOST", "MOUNT", "TYPE", "SIZE", "USED", "AVAIL", "USE%", "IUSE%"]
        body += table([header, *(_fleet_row(host, fs) for host, fs in rows)], right=(3, 4, 5, 6, 7))
    if arguments.get("explain"):
        body += _explain_lines([(o.host, o.result) for o in outcomes if o.ok and o.result is not None])
    view = {
        "filesystems": [{"host": host, **to_json(fs)} for host, fs in rows],
        "alerts": [{"host": host, "mount_point": fs.mount_point, "alerts": fs.alerts} for host, fs in alerts],
        "order": "fullest first across the hosts (the higher of space and inode percent), then host, mount",
        "alert_threshold_percent": ALERT_PERCENT,
    }
    return fleet_output(outcomes, body, view)


_EXPLAIN_HEADER = [
    "HOST", "MOUNT", "USED", "FILES", "DELETED", "HIDDEN", "SNAPSHOTS", "OVERHEAD", "REST", "UNREADABLE"
]  # fmt: skip


def _explain_lines(answered: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    """The hosts' used bytes by explain's parts, one row a host; then the hosts that answered without
    them (their filesystem gave no figures to split: the df table says why)."""
    from sysmcp.tools.disk_explain import Explain

    rows = [
        _explain_row(host, from_json(Explain, got["explain"])) for host, got in answered if "explain" in got
    ]
    lines = []
    if rows:
        lines = [
            "Where the used bytes are, by explain's parts (each host's own result has its next steps):",
            *table([_EXPLAIN_HEADER, *rows], right=range(2, 10)),
        ]
    missing = [host for host, got in answered if "explain" not in got]
    if missing:
        whose = noun(len(missing), "its filesystem", "their filesystems")
        lines.append(
            f"No parts from {host_list(missing)}: {whose} gave no figures to split (see the table above)."
        )
    return lines


def _explain_row(host: str, part: Explain) -> list[str]:
    """One host's used bytes split as explain numbers its parts: USED is FILES + DELETED + HIDDEN +
    SNAPSHOTS + OVERHEAD + REST, what no part accounts for ('not walked' where the walk stopped at its
    budget). UNREADABLE counts the directories the walk could not read: what they hold is in REST.
    '—' where the host's filesystem has no such figure, '?' not looked at."""
    from sysmcp.tools.disk_explain import OverheadPart, SnapshotsPart, UnreadableDirectories

    unreadable, snapshots, overhead = part.unreadable_directories, part.snapshots, part.overhead
    return [
        host,
        escaped(part.mount_point),
        human_bytes(part.used_bytes),
        human_bytes(part.files.bytes),
        human_bytes(part.deleted_open.bytes) if part.deleted_open.available else "?",
        human_bytes(part.hidden_under_mounts.bytes) if part.hidden_under_mounts.checked else "?",
        human_bytes(snapshots.bytes) if isinstance(snapshots, SnapshotsPart) else "—",
        human_bytes(overhead.bytes)
        if isinstance(overhead, OverheadPart) and overhead.bytes is not None
        else "—",
        human_bytes(part.remainder.bytes) + (" not walked" if part.remainder.not_walked else ""),
        plural(unreadable.count if isinstance(unreadable, UnreadableDirectories) else 0, "dir"),
    ]


def _fullness(fs: Filesystem) -> int:
    inodes = fs.inodes.percent_used if fs.inodes else None
    return max(fs.percent_used or 0, inodes or 0)


def _fleet_alerts(alerts: Sequence[tuple[str, Filesystem]]) -> str:
    """'2 filesystems on 1 host are over 90 %: web01:/ (space), web01:/var (inodes)'."""
    hosts = len(dict.fromkeys(host for host, _ in alerts))
    named = ", ".join(
        f"{host}:{escaped(fs.mount_point)} ({' and '.join(fs.alerts or ())})" for host, fs in alerts
    )
    return (
        f"{len(alerts)} {noun(len(alerts), 'filesystem')} on {hosts} {noun(hosts, 'host')} "
        f"{noun(len(alerts), 'is', 'are')} over {ALERT_PERCENT} %: {named}"
    )


def _fleet_row(host: str, fs: Filesystem) -> list[str]:
    """One filesystem of one host in the fleet table; '—' for the sizes of one that did not answer."""
    if fs.status != "ok":
        return [host, escaped(fs.mount_point), escaped(fs.fs_type), "—", "—", "—", fs.status, ""]
    sizes = [human_bytes(size or 0) for size in (fs.total_bytes, fs.used_bytes, fs.free_bytes)]
    inode_percent = _pct(fs.inodes.percent_used) if fs.inodes else "-"
    return [
        host,
        escaped(fs.mount_point),
        escaped(fs.fs_type),
        *sizes,
        _pct(fs.percent_used),
        inode_percent,
    ]


_HANDLER = DiskUsage()

TOOL = Tool(
    name="disk_usage",
    title="Disk usage",
    description=(
        "Which filesystem is full or filling: df -T and df -i for every mount (or the one holding path), "
        "fullest first, with a thin pool fuller than its filesystem flagged. The first call when a disk "
        "is full. explain=true with path: when df says full and du finds less, where that filesystem's used bytes are (deleted-but-open, hidden under mounts, "
        "snapshots …), each with a next step."
    ),
    input_schema=INPUT_SCHEMA,
    output=DiskUsageResult,
    handler=_HANDLER,
    answers_at_once=_HANDLER.answers_at_once,
    view=DISKS.uri,
    merge=merge,
)


def _reading_key(args: Any) -> str:
    """The name of a call for the readings gate: the same path (or the same all-filesystems listing)
    reads the same filesystems again."""
    if not isinstance(args, dict):
        return ""
    raw = args.get("path")
    return f"path:{raw}" if isinstance(raw, str) else f"all:{bool(args.get('all', False))}"
