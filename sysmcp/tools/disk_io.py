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
from sysmcp.engine.paths import escaped, within_roots
from sysmcp.engine.procs import (
    PROC,
    ProcessIo,
    device_deltas,
    device_mount_points,
    files_written,
    process_deltas,
    take_reading,
)
from sysmcp.protocol.failures import ToolError
from sysmcp.render import human_bytes, more_not_shown, plural
from sysmcp.tools import schemas as js
from sysmcp.tools.errors import unreadable_reason
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput
from sysmcp.tools.typed import Open, prop, result

DEFAULT_SAMPLE_S = 2.0
MAX_SAMPLE_S = 60.0
MAX_IDLE_NAMED = 10  # idle devices named in the text at most
FILES_PER_WRITER = 5  # files a top writer has open for writing, named at most (the rest counted)
MOUNT_POINTS_NAMED = 3  # a device's mount points named in the text at most
_PARTITIONS = default_partitions()


INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "sample_s": js.number(minimum=0.1, maximum=int(MAX_SAMPLE_S), default=DEFAULT_SAMPLE_S),
        "top_n": js.top_n_argument("Processes per list.", maximum=50, default=5),
    },
    required=None,
)


@result
class Device:
    device: str = prop()
    read_bytes: int = prop()
    write_bytes: int = prop()
    read_bytes_per_s: float = prop()
    write_bytes_per_s: float = prop()
    read_iops: float = prop()
    write_iops: float = prop()
    busy_percent: float | None = prop("Share of the window the device was busy (null where not reported).")
    mount_points: list[str] = prop("Where its filesystem is mounted (none: not mounted here).")


@result
class Process:
    pid: int = prop()
    command: str = prop()
    user: str | None = prop()
    bytes: int = prop("Bytes written (or read) in the window, storage layer.")
    bytes_per_s: float = prop()


@result
class OpenForWriting(Open):
    path: str = prop("The file's path (its former path when deleted).")
    fd: int = prop("The descriptor: /proc/PID/fd/N.")
    device: str = prop()
    deleted: bool = prop("Deleted, still held open.")


@result
class Writer(Process):
    files: list[OpenForWriting] = prop(
        "Regular files on block devices it has open for writing, inside the roots (the first few)."
    )
    files_not_shown: int = prop()
    files_outside_roots: int = prop("Files it writes outside the allowed roots: counted, never named.")


@result
class DiskIO:
    seconds: float = prop("The window actually measured.")
    devices: list[Device] = prop("Block devices with any I/O in the window, busiest first.")
    idle_devices: list[str] = prop("No I/O in the window.")
    top_writers: list[Writer] = prop()
    writers_not_shown: int = prop()
    top_readers: list[Process] = prop()
    readers_not_shown: int = prop()
    processes_read: int = prop()
    processes_unreadable: int = prop(
        "Processes whose I/O counters could not be read (another user's, without root)."
    )
    process_io_available: bool = prop("False where this system has no per-process I/O counters (e.g. macOS).")


def _rows(moved: list[ProcessIo], written: bool, top_n: int, seconds: float) -> tuple[list[Process], int]:
    def amount(item: ProcessIo) -> int:
        return item.write_bytes if written else item.read_bytes

    ranked = sorted((m for m in moved if amount(m) > 0), key=lambda m: (-amount(m), m.pid))
    rows = [
        Process(m.pid, m.command, m.user, amount(m), round(amount(m) / seconds, 1)) for m in ranked[:top_n]
    ]
    return rows, len(ranked) - len(rows)


def render(answer: DiskIO) -> str:
    lines = [f"Disk I/O over {answer.seconds:.1f} s, per block device (busiest first):"]
    for device in answer.devices:
        busy = f", busy {device.busy_percent:g}%" if device.busy_percent is not None else ""
        points = device.mount_points
        mounted = ", ".join(map(escaped, points[:MOUNT_POINTS_NAMED])) + (
            ", …" if len(points) > MOUNT_POINTS_NAMED else ""
        )
        lines.append(
            f"  {device.device}{f' ({mounted})' if points else ''}  read {human_bytes(device.read_bytes_per_s)}/s ({device.read_iops:g} IOPS), "
            f"write {human_bytes(device.write_bytes_per_s)}/s ({device.write_iops:g} IOPS){busy}"
        )
    if not answer.devices:
        lines.append("  (no block device did any I/O)")
    idle = answer.idle_devices
    if idle:
        named = ", ".join(idle[:MAX_IDLE_NAMED]) + (", …" if len(idle) > MAX_IDLE_NAMED else "")
        lines.append(f"  {len(idle)} idle: {named}")
    if not answer.process_io_available:
        lines.append("Per-process I/O counters are not available on this system: no process list.")
        return "\n".join(lines)
    for title, rows, more in (
        ("Top writers", answer.top_writers, answer.writers_not_shown),
        ("Top readers", answer.top_readers, answer.readers_not_shown),
    ):
        lines.append(f"{title} (bytes that reached storage, as iotop):")
        for row in rows:
            user = f" ({row.user})" if row.user else ""
            lines.append(
                f"  {human_bytes(row.bytes_per_s):>10}/s  ({human_bytes(row.bytes)})  pid {row.pid} "
                f"{escaped(row.command)}{user}"
            )
            if isinstance(row, Writer):
                lines.extend(_writing(row))
        if not rows:
            lines.append("  (none)")
        if more:
            wider = " (a larger top_n, up to 50, lists them)" if len(rows) < 50 else ""
            lines.append(f"  {more_not_shown(more, 'process')}{wider}")
    unreadable = answer.processes_unreadable
    if unreadable:
        total = unreadable + answer.processes_read
        lines.append(
            f"Could not read the I/O counters of {unreadable:,} of {plural(total, 'process')} "
            f"({unreadable_reason()}): what they did is not listed."
        )
    lines.append(
        "Writes buffered in memory reach storage later, often from a kernel flusher thread; processes "
        "that ended during the window are not counted."
    )
    return "\n".join(lines)


def _writing(row: Writer) -> list[str]:
    """The lines naming the files a top writer has open for writing."""
    lines = [
        f"      writing {escaped(item.path)}{' (deleted)' if item.deleted else ''} "
        f"on {item.device} (/proc/{row.pid}/fd/{item.fd})"
        for item in row.files
    ]
    if row.files_not_shown:
        lines.append(f"      … and {plural(row.files_not_shown, 'more file')} open for writing")
    if row.files_outside_roots:
        lines.append(
            f"      and {plural(row.files_outside_roots, 'file')} outside the allowed roots (not named)"
        )
    return lines


def _with_files(writers: list[Process], roots: Sequence[Path] | None) -> list[Writer]:
    """The top writers with the files each has open for writing (inside ``roots``: a file whose path
    does not name it in this server's view, written from another mount namespace, is outside them)."""
    found = (
        files_written(
            [row.pid for row in writers],
            lambda item: within_roots(item.path, roots) and (roots is None or item.confined),
        )
        if writers and platform.has_proc_fd(PROC)
        else {}
    )
    return [
        Writer(
            **asdict(row),
            files=[OpenForWriting(f.path, f.fd, f.device, f.deleted) for f in files[:FILES_PER_WRITER]],
            files_not_shown=max(len(files) - FILES_PER_WRITER, 0),
            files_outside_roots=outside,
        )
        for row in writers
        for files, outside in [found.get(row.pid, ([], 0))]
    ]


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    sample_s = float(args["sample_s"])
    top_n: int = args["top_n"]
    with_processes = platform.has_process_io_counters()
    first = await ctx.run_engine(take_reading, with_processes)
    start = first.taken
    end = start + sample_s
    done = 0.0
    while done < sample_s:  # progress at least once, even when the first reading outlasted the window
        if (now := time.monotonic()) < end:
            await anyio.sleep(min(0.5, end - now))
        done = min(time.monotonic() - start, sample_s)
        await ctx.request.progress(done, sample_s, f"measuring disk I/O: {done:.1f} of {sample_s:g} s")
    second = await ctx.run_engine(take_reading, with_processes)
    seconds = max(second.taken - start, 1e-6)
    if not second.devices and not with_processes:
        raise ToolError("This system reports neither block device nor process I/O counters to read.")
    devices = device_deltas(first.devices, second.devices, seconds)
    mounted = device_mount_points(_PARTITIONS()) if devices else {}
    roots = ctx.paths.allowed
    busy = [
        Device(
            **asdict(row),
            # under --root only the mount points inside the roots: a device is no path
            mount_points=[point for point in mounted.get(row.device, []) if within_roots(point, roots)],
        )
        for row in devices
        if row.busy
    ]
    moved = (
        process_deltas(first.processes, second.processes)
        if first.processes is not None and second.processes is not None
        else []
    )
    top, writers_left = _rows(moved, True, top_n, seconds)
    readers, readers_left = _rows(moved, False, top_n, seconds)
    writers = await ctx.run_in_worker(lambda _: _with_files(top, roots))
    answer = DiskIO(
        seconds=round(seconds, 3),
        devices=busy,
        idle_devices=sorted(row.device for row in devices if not row.busy),
        top_writers=writers,
        writers_not_shown=writers_left,
        top_readers=readers,
        readers_not_shown=readers_left,
        processes_read=len(second.processes.processes) if second.processes else 0,
        processes_unreadable=second.processes.unreadable if second.processes else 0,
        process_io_available=with_processes,
    )
    return ToolOutput.of(answer, render)


TOOL = Tool(
    name="disk_io",
    title="Disk I/O now",
    description=(
        "Who is writing or reading the disks right now, and to which files: iostat and iotop over sample_s "
        "seconds. Per device (with its mount points) throughput, IOPS and busy percent; the top writers "
        "with the files each has open for writing, and the top readers."
    ),
    input_schema=INPUT_SCHEMA,
    output=DiskIO,
    handler=handle,
)
