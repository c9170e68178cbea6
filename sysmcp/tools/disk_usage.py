"""disk_usage: which filesystem is full — ``df -T`` and ``df -i`` in one answer, and it never hangs.

Without a path it lists every mounted real filesystem; with one, the filesystem that holds it. Figures
come from statvfs and are computed exactly as df computes them. The probing, df's arithmetic and the
sampling are the engine's (``sysmcp.engine.mounts._disks``); this module is the schema, the words and the fleet merge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sysmcp.engine.mounts import (
    ALERT_PERCENT,
    MAX_STUCK_PROBES,
    MEMORY_TYPES,
    STATVFS_TIMEOUT,
    Disks,
    Entry,
    Figures,
    FsStats,
    Mount,
    MountTable,
    PartitionsProvider,
    Rate,
    SampleClock,
    UsageProvider,
    apfs_container,
    container_siblings,
    default_partitions,
    percent_used,
    statvfs_usage,
)
from sysmcp.engine.paths import display, printable
from sysmcp.history import state
from sysmcp.history.recording import ReadingGate
from sysmcp.platform import PROC
from sysmcp.protocol.errors import ArgumentError
from sysmcp.render import human_bytes, noun, table
from sysmcp.tools import disk_explain
from sysmcp.tools import schemas as js
from sysmcp.tools.descriptions import describe_paths
from sysmcp.tools.disk_pools import POOL_SCHEMA, PoolReader, PoolSampler, read_pools, thin_candidates
from sysmcp.tools.merging import HostOutcome, fleet_output
from sysmcp.tools.recording import READINGS, readings_quiet, record_disk
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput
from sysmcp.views import DISKS

__all__ = [
    "INPUT_SCHEMA",
    "MEMORY_TYPES",
    "OUTPUT_SCHEMA",
    "TOOL",
    "DiskUsage",
    "Figures",
    "FsStats",
    "percent_used",
]

MAX_SAMPLE_S = 60  # sample_s at most
ORDER = (
    "fullest first (the higher of space and inode percent), then mount point; unanswered or unreadable last"
)


def rate_json(rate: Rate) -> dict[str, Any]:
    return {
        "seconds": round(rate.seconds, 3),
        "samples": rate.samples,
        "fill_rate_bytes_per_s": round(rate.bytes_per_s, 1),
        "seconds_to_full": _rounded(rate.seconds_to_full),
        "inode_fill_rate_per_s": None if rate.inodes_per_s is None else round(rate.inodes_per_s, 3),
        "seconds_to_inodes_full": _rounded(rate.seconds_to_inodes_full),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def entry_json(entry: Entry) -> dict[str, Any]:
    """One filesystem of the structured answer."""
    data = {**mount_json(entry.mount), "status": entry.status}
    fig = entry.figures
    if fig is None:
        data["reason"] = entry.reason or "unknown"
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
        alerts=entry.alerts(),
    )
    if entry.rate is not None:
        data["rate"] = rate_json(entry.rate)
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


# -- text -------------------------------------------------------------------------------------


def _pct(value: int | None) -> str:
    return "–" if value is None else f"{value}%"


def _amount(size: int, unit: str) -> str:
    """A size in the unit the text was asked in: '1,024 MiB', '1073741824' (bytes), '1.0 GiB'."""
    if unit == "mb":
        return f"{size >> 20:,} MiB"
    return str(size) if unit == "bytes" else human_bytes(size)


def usage_phrase(fig: Figures, unit: str) -> str:
    """Used, free and (where any) reserved bytes, always: a percent alone can read as wrong when
    root's reserve makes used + free fall short of the total."""
    if fig.total == 0:
        return "size 0"
    used, free, total = (_amount(size, unit) for size in (fig.used, fig.free, fig.total))
    percent = _pct(fig.percent)
    if unit == "mb":
        text = f"{used} used, {free} free of {total} ({percent} used)"
    elif unit == "human":
        text = f"{used} used, {free} free of {total} ({percent})"
    elif unit == "bytes":
        text = f"{used} bytes used, {free} free of {total} ({percent})"
    else:
        text = f"{percent} used ({used}), {free} free of {total}"
    return text + (f", {_amount(fig.reserved, unit)} reserved for root" if fig.reserved else "")


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
    parts = [f"{printable(mount.fs_type)} {printable(mount.device)}"]
    if mount.root != "/":
        parts.append(f"bind mount of {printable(mount.root)}")
    if mount.read_only:
        parts.append("read-only")
    return ", ".join(parts)


def render_one(shown: str, entry: Entry, unit: str) -> str:
    where = f"{printable(shown)} is on {printable(entry.mount.mount_point)} ({describe_mount(entry.mount)})"
    fig = entry.figures
    if fig is None:
        return f"{where}: {entry.reason}."
    rate = rate_phrase(entry)
    rate = f" Over {entry.rate.seconds:.1f} s: {rate}." if entry.rate is not None and rate else ""
    return (
        f"{where}: {usage_phrase(fig, unit)}; {inode_phrase(fig, detailed=True)}.{alert_phrase(entry)}{rate}"
    )


def render_all(entries: Sequence[Entry], unit: str, everything: bool, sample_s: float = 0) -> str:
    """The list: what it covers, what fills and what is over the threshold, then a line per filesystem."""
    scope = (
        " (all, as df -a)" if everything else " (as df: memory filesystems included, pseudo ones with all)"
    )
    lines = [f"{len(entries)} {noun(len(entries), 'filesystem')}{scope}, fullest first."]
    if sample_s:
        lines.append(f"Sampled for {sample_s:g} s. Filling now: {_filling(entries)}.")
    flagged = [f"{_point(e)} ({' and '.join(e.alerts())})" for e in entries if e.alerts()]
    if flagged:
        lines.append(f"Over {ALERT_PERCENT} %: {', '.join(flagged)}.")
    silent = [_point(e) for e in entries if e.status == "no_answer"]
    if silent:
        lines.append(f"Did not answer: {', '.join(silent)}.")
    return "\n".join(lines + [_entry_line(entry, unit) for entry in entries])


def _point(entry: Entry) -> str:
    return printable(entry.mount.mount_point)  # a user's FUSE mount names itself (ESC included)


def _filling(entries: Sequence[Entry]) -> str:
    """'/var (full in about 3 h 10 min at 15.0 MiB/s); /home (…)', or 'none'."""
    filling = [
        f"{_point(e)} ({rate_phrase(e)})" for e in entries if e.rate is not None and e.rate.bytes_per_s > 0
    ]
    return "; ".join(filling) if filling else "none"


def _entry_line(entry: Entry, unit: str) -> str:
    """'/var  ext4 /dev/sda2 ro  <usage>; <inodes>[; <rate>][  ⚠ …]', or the reason there are no figures."""
    mount = entry.mount
    head = f"{_point(entry)}  {printable(mount.fs_type)} {printable(mount.device)}" + (
        " ro" if mount.read_only else ""
    )
    if entry.figures is None:
        return f"{head}  {entry.reason}"
    rate = f"; {rate_phrase(entry)}" if entry.rate is not None else ""
    return f"{head}  {usage_phrase(entry.figures, unit)}; {inode_phrase(entry.figures)}{rate}{alert_phrase(entry)}"


# -- the tool ---------------------------------------------------------------------------------

ENTRY_SCHEMA: dict[str, Any] = js.record(
    {
        "mount_point": js.string(),
        "device": js.string("The mount source: a device path, 'server:/export', 'tmpfs', …"),
        "fs_type": js.string(),
        "fs_root": js.string(
            "Directory of the filesystem shown at this mount point: '/' unless a bind mount."
        ),
        "read_only": js.boolean(),
        "options": js.names("Mount and filesystem options."),
        "status": js.string(
            "'no_answer': statvfs did not return within the timeout; 'error': it failed (see reason).",
            enum=["ok", "no_answer", "error"],
        ),
        "reason": js.string("Why there are no figures (status is not 'ok')."),
        "total_bytes": js.integer(),
        "used_bytes": js.integer(),
        "free_bytes": js.integer("Available to unprivileged users (df's Avail)."),
        "reserved_bytes": js.integer("Free but reserved for root."),
        "percent_used": js.integer(
            "ceil(used / (used + free) × 100), as df; null for a zero-size filesystem.", null=True
        ),
        "inodes": js.record(
            {
                "total": js.integer(),
                "used": js.integer(),
                "free": js.integer(),
                "percent_used": js.integer("ceil(used / total × 100).", null=True),
            },
            "Inode counts; null where the filesystem reports none (not applicable).",
            null=True,
        ),
        "alerts": js.typed(
            "array",
            f"What is over {ALERT_PERCENT} % used (never set for read-only filesystems).",
            items=js.string(enum=["space", "inodes"]),
        ),
        "rate": js.record(
            {
                "seconds": js.number("From the first sample to the last."),
                "samples": js.integer(),
                "fill_rate_bytes_per_s": js.number(
                    "Used bytes per second: positive while filling, negative while freeing."
                ),
                "seconds_to_full": js.number(
                    "At that rate, until free_bytes is 0; null unless filling.", null=True
                ),
                "inode_fill_rate_per_s": js.number(
                    "Used inodes per second; null without inode counts.", null=True
                ),
                "seconds_to_inodes_full": js.number("null unless filling.", null=True),
                "limited_by": js.string("'pool': the thin pool under it fills sooner; its time is shown."),
            },
            "With sample_s: how fast it filled over the window (least-squares slope of the samples).",
            optional=("limited_by",),
        ),
        "pool": POOL_SCHEMA,
    },
    required=("mount_point", "device", "fs_type", "fs_root", "read_only", "options", "status"),
)

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "path": {
            "type": "string",
            "description": "Only the filesystem holding this path. Omit: every mounted filesystem.",
            "minLength": 1,
        },
        "unit": js.string(
            "How the text states usage ('mb': free MiB).",
            enum=["percent", "mb", "human", "bytes"],
            default="percent",
        ),
        "all": js.boolean("Also pseudo, empty and duplicate mounts (df -a).", default=False),
        "sample_s": js.number(
            "Watch this long for fill rates and time to full.", minimum=0, maximum=MAX_SAMPLE_S, default=0
        ),
        **disk_explain.INPUT_PROPERTIES,
    },
    required=None,
)

#: Descriptions of the fields ``disk_explain.EXPLAIN_SCHEMA`` writes compactly (dotted paths below ``explain``).
EXPLAIN_WORDS: dict[str, str] = {
    "files.bytes": "Disk bytes of the files a walk of the filesystem reaches (as du -x).",
    "files.next_step": "What to run next for this part.",
    "deleted_open.bytes": "Disk bytes of deleted files still held open on this filesystem.",
    "deleted_open.processes_unreadable": "Processes whose open files could not be read (another user, without root).",
    "deleted_open.available": "Whether open files could be listed on this system (/proc).",
    "deleted_open.next_step": "What to run next for this part.",
    "hidden_under_mounts.bytes": "Disk bytes of files in directories another filesystem is mounted over.",
    "hidden_under_mounts.checked": "Whether the directories under mount points were looked at (needs root).",
    "hidden_under_mounts.mount_points": "How many mount points sit on this filesystem.",
    "hidden_under_mounts.next_step": "What to run next for this part.",
    "unreadable_directories.count": "Directories the walk could not read.",
    "unreadable_directories.named": "Some of those directories, inside the allowed roots.",
    "unreadable_directories.upper_bound_bytes": "At most this many bytes can be in them (the remainder).",
    "unreadable_directories.next_step": "What to run next for this part.",
    "snapshots.bytes": "Disk bytes held only by snapshots or other subvolumes.",
    "snapshots.kind": "The snapshot mechanism (btrfs, zfs, lvm-thin, apfs), or null.",
    "snapshots.note": "How the figure was obtained, or why it could not be.",
    "snapshots.next_step": "What to run next for this part.",
    "overhead.bytes": "The filesystem's own metadata, journal and reservations counted as used.",
    "overhead.source": "Where the overhead figure comes from.",
    "remainder.bytes": "Used bytes no part accounts for (negative when parts overlap).",
    "remainder.percent": "The remainder as a percentage of used bytes.",
    "remainder.not_walked": "True when the walk stopped at its time budget: part of the remainder was not walked.",
    "remainder.next_step": "What to run next for this part.",
}

OUTPUT_SCHEMA: dict[str, Any] = js.result(
    {
        "path": js.string("The resolved path asked about (absent when listing)."),
        "filesystems": js.typed("array", items=ENTRY_SCHEMA),
        "order": js.string("How the list is sorted (absent with path)."),
        "alert_threshold_percent": js.integer(),
        "timeout_seconds": js.number("How long each mount was given to answer."),
        "notes": js.names(
            "What to know to read the figures right (e.g. APFS volumes sharing one container)."
        ),
        "sample_s": js.number("The sampling window asked for (absent when 0)."),
        "explain": describe_paths(disk_explain.EXPLAIN_SCHEMA, EXPLAIN_WORDS),
    },
    optional=("path", "order", "notes", "sample_s", "explain"),
)


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
    ) -> None:
        self.disks = Disks(partitions or default_partitions(), usage, timeout, max_stuck, clock)
        self.proc = proc  # where explain reads processes' open files (tests point it at a fake /proc)
        self.readings = readings  # which readings history keeps (at most one per filesystem a minute)
        self.partitions = self.disks.partitions
        self.prober = self.disks.prober
        self.pools = pools  # the thin pools under filesystems (tests pass recorded lvs output)

    def answers_at_once(self, args: Any) -> bool:
        """A path whose resolution and filesystem are all local: statvfs answers from memory."""
        if isinstance(args, dict) and (args.get("sample_s") or args.get("explain")):
            return False  # it waits out the window or walks: a task of its own, never answered inline
        if state.configured() and not readings_quiet(_reading_key(args), self.readings):
            return False  # a reading is due: its write (a worker's, with its lock) is no inline work
        raw = args.get("path") if isinstance(args, dict) else None
        if not isinstance(raw, str):
            return not isinstance(args, dict) or "path" in args  # bad arguments are refused at once
        if thin_candidates(self.partitions()):
            return False  # a thin volume's pool is read with lvs: a command, no inline work
        return self.disks.walk(raw, self.partitions())[1]

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        table = self.partitions()  # the same object as the at-once check's unless the mounts changed
        unit = args.get("unit", "percent")
        sample_s = float(args.get("sample_s", 0))
        extra: dict[str, Any] = {"sample_s": sample_s} if sample_s else {}
        disks = self.disks
        pools = PoolSampler(self.pools, disks.clock)

        async def progress(done: float, total: float) -> None:
            await ctx.progress(done, total, f"sampling free space: {done:.1f} of {total:g} s")

        if args.get("explain") and "path" not in args:
            raise ArgumentError("explain needs a path: the filesystem whose used bytes to account for")
        if "path" in args:
            raw = args["path"]
            entry, real = await disks.one(raw, table, ctx.paths.resolve_str)
            if args.get("explain") and entry.figures is not None:
                text, data = await disk_explain.run(entry, table, args, ctx, self.proc)
                shown = display(real)
                structured = {"path": shown, **self._structured([entry]), "explain": data}
                return _with_notes(text + "\n" + render_one(shown, entry, unit), structured, [entry], table)
            await pools.take([entry])
            if sample_s:

                async def again() -> list[Entry]:
                    found = [(await disks.one(raw, table, ctx.paths.resolve_str))[0]]
                    await pools.take(found)
                    return found

                entry = (await disks.sampled([entry], again, sample_s, progress))[0]
            shown = display(real)
            structured = {"path": shown, **self._structured([entry]), **extra}
            text = "\n".join([render_one(shown, entry, unit), *pools.apply([entry], structured)])
            return await self._recorded(_with_notes(text, structured, [entry], table), args)
        everything = bool(args.get("all", False))
        mounts = disks.selected(table, everything, ctx.paths.allowed)
        entries = await disks.probe_all(table, mounts)
        await pools.take(entries)
        if sample_s:

            async def again_all() -> list[Entry]:
                found = await disks.probe_all(table, mounts)
                await pools.take(found)
                return found

            entries = await disks.sampled(entries, again_all, sample_s, progress)
        entries = disks.shown(entries, everything)
        structured = {**self._structured(entries), "order": ORDER, **extra}
        lines = pools.apply(entries, structured)
        text = "\n".join([render_all(entries, unit, everything, sample_s), *lines])
        return await self._recorded(_with_notes(text, structured, entries, table), args)

    async def _recorded(self, output: ToolOutput, args: dict[str, Any]) -> ToolOutput:
        """The history hook: the readings due are kept (tiny rows); a reading not kept is said."""
        filesystems = output.structured.get("filesystems", ())
        note = await record_disk(filesystems, _reading_key(args), gate=self.readings)
        return output if note is None else replace(output, text=f"{output.text}\n{note}")

    def _structured(self, entries: Sequence[Entry]) -> dict[str, Any]:
        return {
            "filesystems": [entry_json(entry) for entry in entries],
            "alert_threshold_percent": ALERT_PERCENT,
            "timeout_seconds": self.prober.timeout,
        }


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


def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
    """Every filesystem of every host in one table, fullest first across the fleet, with fleet alerts."""
    rows: list[dict[str, Any]] = []
    for outcome in outcomes:
        if outcome.ok and outcome.result is not None:
            rows += [{"host": outcome.host, **fs} for fs in outcome.result.get("filesystems", [])]
    rows.sort(key=lambda row: (row.get("status") != "ok", -_fullness(row), row["host"], row["mount_point"]))
    alerts = [row for row in rows if row.get("alerts")]
    body: list[str] = []
    if alerts:
        body.append(_fleet_alerts(alerts))
    elif rows:
        body.append(f"No filesystem on these hosts is over {ALERT_PERCENT} % used.")
    if rows:
        header = ["HOST", "MOUNT", "TYPE", "SIZE", "USED", "AVAIL", "USE%", "IUSE%"]
        body += table([header, *map(_fleet_row, rows)], right=(3, 4, 5, 6, 7))
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


def _fullness(row: dict[str, Any]) -> int:
    inodes = row.get("inodes") or {}
    return max(row.get("percent_used") or 0, inodes.get("percent_used") or 0)


def _fleet_alerts(alerts: Sequence[dict[str, Any]]) -> str:
    """'2 filesystems on 1 host are over 90 %: web01:/ (space), web01:/var (inodes)'."""
    hosts = len(dict.fromkeys(row["host"] for row in alerts))
    named = ", ".join(f"{row['host']}:{row['mount_point']} ({' and '.join(row['alerts'])})" for row in alerts)
    return (
        f"{len(alerts)} {noun(len(alerts), 'filesystem')} on {hosts} {noun(hosts, 'host')} "
        f"{noun(len(alerts), 'is', 'are')} over {ALERT_PERCENT} %: {named}"
    )


def _fleet_row(row: dict[str, Any]) -> list[str]:
    """One filesystem of one host in the fleet table; '—' for the sizes of one that did not answer."""
    if row.get("status") != "ok":
        return [row["host"], row["mount_point"], row["fs_type"], "—", "—", "—", row["status"], ""]
    inodes = row.get("inodes") or {}
    sizes = [human_bytes(row.get(key, 0)) for key in ("total_bytes", "used_bytes", "free_bytes")]
    inode_percent = _pct(inodes.get("percent_used")) if inodes else "-"
    return [
        row["host"],
        row["mount_point"],
        row["fs_type"],
        *sizes,
        _pct(row.get("percent_used")),
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
    output_schema=OUTPUT_SCHEMA,
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
