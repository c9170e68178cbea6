"""disk_io: what is writing right now — ``iostat`` and ``iotop`` in one answer.

Two readings of the kernel's counters, ``sample_s`` apart, per block device and per process; the
differences over the window are the answer. The readings and their differences are the engine's
(``sysmcp.engine.procs._diskio``); this module is their MCP face: the schema, the wait between the readings with
its progress (cancellable), the top writers and readers, and the words, which say how many processes
could not be read instead of pretending they wrote nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio

from sysmcp import platform
from sysmcp.engine.mounts import default_partitions
from sysmcp.engine.paths import is_within, printable
from sysmcp.engine.procs import (
    PROC,
    Moved,
    Reading,
    WrittenFile,
    device_deltas,
    device_mount_points,
    files_written,
    process_deltas,
    take_reading,
)
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ToolError
from sysmcp.render import human_bytes, plural
from sysmcp.tools import schemas as js
from sysmcp.tools.processes import unreadable_reason
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput

DEFAULT_SAMPLE_S = 2.0
MAX_SAMPLE_S = 60.0
MAX_IDLE_NAMED = 10  # idle devices named in the text at most
FILES_PER_WRITER = 5  # files a top writer has open for writing, named at most (the rest counted)
MOUNT_POINTS_NAMED = 3  # a device's mount points named in the text at most
_PARTITIONS = default_partitions()


# -- schema -----------------------------------------------------------------------------------

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "sample_s": js.number(minimum=0.1, maximum=int(MAX_SAMPLE_S), default=DEFAULT_SAMPLE_S),
        "top_n": js.top_n_argument("Processes per list.", maximum=50, default=5),
    },
    required=None,
)

_PROCESS = js.record(
    {
        "pid": js.integer(),
        "command": js.string(),
        "user": js.string(null=True),
        "bytes": js.integer("Bytes written (or read) in the window, storage layer."),
        "bytes_per_s": js.number(),
    }
)

_WRITER = js.record(
    {
        **_PROCESS["properties"],
        "files": js.objects(
            {
                "path": js.string("The file's path (its former path when deleted)."),
                "fd": js.integer("The descriptor: /proc/PID/fd/N."),
                "device": js.string(),
                "deleted": js.boolean("Deleted, still held open."),
            },
            description="Regular files on block devices it has open for writing, inside the roots (the first few).",
        ),
        "files_not_shown": js.integer(),
        "files_outside_roots": js.integer("Files it writes outside the allowed roots: counted, never named."),
    }
)

OUTPUT_SCHEMA: dict[str, Any] = js.result(
    {
        "seconds": js.number("The window actually measured."),
        "devices": {
            "type": "array",
            "description": "Block devices with any I/O in the window, busiest first.",
            "items": js.record(
                {
                    "device": js.string(),
                    "read_bytes": js.integer(),
                    "write_bytes": js.integer(),
                    "read_bytes_per_s": js.number(),
                    "write_bytes_per_s": js.number(),
                    "read_iops": js.number(),
                    "write_iops": js.number(),
                    "busy_percent": js.number(
                        "Share of the window the device was busy (null where not reported).", null=True
                    ),
                    "mount_points": js.names("Where its filesystem is mounted (none: not mounted here)."),
                }
            ),
        },
        "idle_devices": js.names("No I/O in the window."),
        "top_writers": js.typed("array", items=_WRITER),
        "writers_not_shown": js.integer(),
        "top_readers": js.typed("array", items=_PROCESS),
        "readers_not_shown": js.integer(),
        "processes_read": js.integer(),
        "processes_unreadable": js.integer(
            "Processes whose I/O counters could not be read (another user's, without root)."
        ),
        "process_io_available": js.boolean(
            "False where this system has no per-process I/O counters (e.g. macOS)."
        ),
    }
)


# -- the tool ---------------------------------------------------------------------------------


def _rows(moved: list[Moved], written: bool, top_n: int, seconds: float) -> tuple[list[dict[str, Any]], int]:
    def amount(item: Moved) -> int:
        return item.write_bytes if written else item.read_bytes

    ranked = sorted((m for m in moved if amount(m) > 0), key=lambda m: (-amount(m), m.pid))
    rows = [
        {
            "pid": m.pid,
            "command": m.command,
            "user": m.user,
            "bytes": amount(m),
            "bytes_per_s": round(amount(m) / seconds, 1),
        }
        for m in ranked[:top_n]
    ]
    return rows, len(ranked) - len(rows)


def render(structured: dict[str, Any]) -> str:
    seconds = structured["seconds"]
    lines = [f"Disk I/O over {seconds:.1f} s, per block device (busiest first):"]
    for row in structured["devices"]:
        busy = f", busy {row['busy_percent']:g}%" if row["busy_percent"] is not None else ""
        points = row["mount_points"]
        mounted = ", ".join(map(printable, points[:MOUNT_POINTS_NAMED])) + (
            ", …" if len(points) > MOUNT_POINTS_NAMED else ""
        )
        lines.append(
            f"  {row['device']}{f' ({mounted})' if points else ''}  read {human_bytes(row['read_bytes_per_s'])}/s ({row['read_iops']:g} IOPS), "
            f"write {human_bytes(row['write_bytes_per_s'])}/s ({row['write_iops']:g} IOPS){busy}"
        )
    if not structured["devices"]:
        lines.append("  (no block device did any I/O)")
    idle = structured["idle_devices"]
    if idle:
        named = ", ".join(idle[:MAX_IDLE_NAMED]) + (", …" if len(idle) > MAX_IDLE_NAMED else "")
        lines.append(f"  {len(idle)} idle: {named}")
    if not structured["process_io_available"]:
        lines.append("Per-process I/O counters are not available on this system: no process list.")
        return "\n".join(lines)
    for title, key, more in (
        ("Top writers", "top_writers", "writers_not_shown"),
        ("Top readers", "top_readers", "readers_not_shown"),
    ):
        lines.append(f"{title} (bytes that reached storage, as iotop):")
        for row in structured[key]:
            user = f" ({row['user']})" if row["user"] else ""
            lines.append(
                f"  {human_bytes(row['bytes_per_s']):>10}/s  ({human_bytes(row['bytes'])})  pid {row['pid']} "
                f"{printable(row['command'])}{user}"
            )
            lines.extend(_writing(row))
        if not structured[key]:
            lines.append("  (none)")
        if structured[more]:
            lines.append(f"  … and {structured[more]:,} more not shown")
    unreadable = structured["processes_unreadable"]
    if unreadable:
        total = unreadable + structured["processes_read"]
        lines.append(
            f"Could not read the I/O counters of {unreadable:,} of {plural(total, 'process')} "
            f"({unreadable_reason()}): what they did is not listed."
        )
    lines.append(
        "Writes buffered in memory reach storage later, often from a kernel flusher thread; processes "
        "that ended during the window are not counted."
    )
    return "\n".join(lines)


def _writing(row: dict[str, Any]) -> list[str]:
    """The lines naming the files a top writer has open for writing (nothing for a reader's row)."""
    if "files" not in row:
        return []
    lines = [
        f"      writing {printable(item['path'])}{' (deleted)' if item['deleted'] else ''} "
        f"on {item['device']} (/proc/{row['pid']}/fd/{item['fd']})"
        for item in row["files"]
    ]
    if row["files_not_shown"]:
        lines.append(f"      … and {plural(row['files_not_shown'], 'more file')} open for writing")
    if row["files_outside_roots"]:
        lines.append(
            f"      and {plural(row['files_outside_roots'], 'file')} outside the allowed roots (not named)"
        )
    return lines


def _with_files(writers: list[dict[str, Any]], roots: Sequence[Path] | None, proc: str = PROC) -> None:
    """Each top writer's row with the files it has open for writing (inside ``roots``), in place."""

    def inside(item: WrittenFile) -> bool:
        return roots is None or any(is_within(Path(item.path), root) for root in roots)

    found = files_written([row["pid"] for row in writers], inside, proc)
    for row in writers:
        files, outside = found.get(row["pid"], ([], 0))
        row["files"] = [item._asdict() for item in files[:FILES_PER_WRITER]]
        row["files_not_shown"] = max(len(files) - FILES_PER_WRITER, 0)
        row["files_outside_roots"] = outside


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    sample_s = float(args["sample_s"])
    top_n: int = args["top_n"]
    with_processes = platform.has_process_io_counters()

    def snapshot(meter: Meter) -> Reading:
        return take_reading(with_processes, meter.checkpoint)

    first = await ctx.run_in_worker(snapshot)
    start = first.taken
    end = start + sample_s
    done = 0.0
    while done < sample_s:  # progress at least once, even when the first reading outlasted the window
        if (now := time.monotonic()) < end:
            await anyio.sleep(min(0.5, end - now))
        done = min(time.monotonic() - start, sample_s)
        await ctx.progress(done, sample_s, f"measuring disk I/O: {done:.1f} of {sample_s:g} s")
    second = await ctx.run_in_worker(snapshot)
    processes_after = second.processes
    seconds = max(second.taken - start, 1e-6)
    if not second.devices and not with_processes:
        raise ToolError("This system reports neither block device nor process I/O counters to read.")
    devices = device_deltas(first.devices, second.devices, seconds)
    mounted = device_mount_points(_PARTITIONS()) if devices else {}
    roots = ctx.paths.allowed
    busy = [
        {
            **asdict(row),  # under --root only the mount points inside the roots: a device is no path
            "mount_points": [
                point
                for point in mounted.get(row.device, [])
                if roots is None or any(is_within(Path(point), root) for root in roots)
            ],
        }
        for row in devices
        if row.busy
    ]
    idle = sorted(row.device for row in devices if not row.busy)
    moved = (
        process_deltas(first.processes, processes_after)
        if first.processes is not None and processes_after is not None
        else []
    )
    writers, writers_left = _rows(moved, True, top_n, seconds)
    readers, readers_left = _rows(moved, False, top_n, seconds)
    if writers and platform.has_proc_fd(PROC):
        await ctx.run_in_worker(lambda _: _with_files(writers, ctx.paths.allowed))
    else:
        for row in writers:
            row.update(files=[], files_not_shown=0, files_outside_roots=0)
    structured: dict[str, Any] = {
        "seconds": round(seconds, 3),
        "devices": busy,
        "idle_devices": idle,
        "top_writers": writers,
        "writers_not_shown": writers_left,
        "top_readers": readers,
        "readers_not_shown": readers_left,
        "processes_read": len(processes_after.processes) if processes_after else 0,
        "processes_unreadable": processes_after.unreadable if processes_after else 0,
        "process_io_available": with_processes,
    }
    return ToolOutput(render(structured), structured)


TOOL = Tool(
    name="disk_io",
    title="Disk I/O now",
    description=(
        "Who is writing or reading the disks right now, and to which files: iostat and iotop over sample_s "
        "seconds. Per device (with its mount points) throughput, IOPS and busy percent; the top writers "
        "with the files each has open for writing, and the top readers."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=handle,
)
