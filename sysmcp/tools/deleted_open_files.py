"""deleted_open_files: the space df counts and du cannot find — ``lsof +L1`` in one answer.

A file deleted while a process still holds it open keeps its blocks until the last descriptor
closes: df sees them used, a walk finds no name for them. The usual culprit is a rotated log a
daemon never reopened. The scan of every process's descriptors and mappings is the engine's
(``sysmcp.engine.procs._openfiles``); this module is its MCP face: the schema, which filesystem a ``path``
asks about, and the words — who holds each file on which filesystem, and how to get the space back
without killing anything. Read-only: the truncation it suggests is advice for the user, never done
here. A file held only by a memory mapping (lsof's ``DEL``: a library replaced by an upgrade, a
database's mapped file) would crash its process if truncated (SIGBUS), so the advice for it is a
restart.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sysmcp import platform
from sysmcp.engine.mounts import Mount, MountTable, default_partitions
from sysmcp.engine.paths import escaped, mount_source, on_the_way, within_roots
from sysmcp.engine.procs import PROC, DeletedFile, Holder, Scan, filesystem_of, scan_processes
from sysmcp.protocol.failures import ToolError
from sysmcp.render import human_bytes, more_not_shown, noun, plural
from sysmcp.tools import schemas as js
from sysmcp.tools.errors import unreadable_reason
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput
from sysmcp.tools.typed import ABSENT, Opt, prop, result

MAX_HOLDERS = 5  # descriptors listed per file; more are counted


INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "path": js.path_argument("Only the filesystem holding this path. Omit: every filesystem."),
        "top_n": js.top_n_argument(maximum=100, default=20),
    },
    required=None,
)


@result
class HolderRow:
    pid: int = prop()
    command: str = prop()
    user: str | None = prop("Owner of the process (null: no user name).")
    fd: int | None = prop(
        "The open descriptor: /proc/PID/fd/FD reaches the file. null: the process holds it by a memory "
        "mapping, not a descriptor (lsof's DEL)."
    )
    mode: str = prop("'r', 'w' or 'rw' as opened ('rw' for a shared writable mapping); '' when unknown.")
    mapped: bool = prop(
        "The process has the file mapped into memory (with or without a descriptor): truncating the file would "
        "kill it (SIGBUS)."
    )


@result
class DeletedOpenFile:
    path: str = prop(
        "The name the file had before deletion; DIR/#INODE for a file made with O_TMPFILE, which never had one."
    )
    size_bytes: int = prop()
    disk_bytes: int = prop("Allocated blocks × 512: space held.")
    mount_point: str = prop("The filesystem it is on.")
    holders: list[HolderRow] = prop()
    holders_not_shown: int = prop()
    mapped_only: bool = prop(
        "Held only by memory mappings: freed when the holders exit or unmap it (restart them); truncating it "
        "would crash them."
    )
    namespace_pid: int | None = prop(
        "null: path is the file's former name as this server sees the filesystems. Else every holder is in "
        "another mount namespace (a container) and path is its name there, as process namespace_pid sees it: "
        "on this host that path is another file, or none."
    )


@result
class FilesystemTotals:
    mount_point: str = prop()
    fs_type: str = prop()
    device: str = prop()
    files: int = prop()
    size_bytes: int = prop()
    disk_bytes: int = prop()


@result
class Tally:
    """Deleted files counted but not listed: how many, and the disk bytes they hold."""

    files: int = prop()
    disk_bytes: int = prop()


@result
class DeletedOpenAnswer:
    available: bool = prop("False where this system has no /proc/PID/fd to look at (e.g. macOS).")
    files: list[DeletedOpenFile] = prop()
    files_not_shown: int = prop()
    filesystems: list[FilesystemTotals] = prop(
        "Totals per filesystem, most disk bytes first (each file counted once)."
    )
    total_disk_bytes: int = prop()
    processes_read: Opt[int] = prop(default=ABSENT)
    processes_unreadable: Opt[int] = prop(
        "Processes whose descriptors could not be read (another user's, without root).", default=ABSENT
    )
    not_on_a_mounted_filesystem: Opt[Tally] = prop(
        "Deleted files on no filesystem mounted here (memfd, shared memory, another mount namespace): left "
        "out of the list.",
        default=ABSENT,
    )
    empty_files_not_listed: Opt[int] = prop(
        "Deleted files held open that are empty (they hold no space): left out.", default=ABSENT
    )
    mappings_not_sized: Opt[int] = prop(
        "Deleted memory-mapped files that could not be sized (/proc/PID/map_files needs more privilege): left "
        "out.",
        default=ABSENT,
    )
    outside_allowed_roots: Opt[Tally] = prop(
        "Deleted files whose former path is outside the allowed roots (--root, the client's roots): counted, "
        "never named. Absent when no roots are in force.",
        default=ABSENT,
    )
    path: Opt[str] = prop("The path asked about (absent without path).", default=ABSENT)


def _holder_text(holder: Holder) -> str:
    user = f" ({holder.user})" if holder.user else ""
    held = f"fd {holder.fd}{holder.mode}" if holder.fd is not None else f"mapped {holder.mode}"
    held += " and mapped" if holder.fd is not None and holder.mapped else ""
    return f"pid {holder.pid} {escaped(holder.command)}{user} {held}"


def render(
    scan: Scan,
    table: MountTable,
    top_n: int,
    only_dev: int | None,
    shown: str | None,
    roots: Sequence[Path] | None = None,
) -> tuple[str, DeletedOpenAnswer]:
    """``roots`` (the allowed roots, None for all): a file's former path outside them is never named, nor
    its holders; such files are only counted."""
    rows: list[tuple[DeletedFile, Mount]] = []
    elsewhere = [0, 0]
    outside = [0, 0]
    empty = 0
    for item in scan.files.values():
        if only_dev is not None and item.filesystem != only_dev:
            continue
        if roots is not None and not (item.confined and within_roots(item.path, roots)):
            outside[0] += 1
            outside[1] += item.disk
            continue
        if item.size == 0 and item.disk == 0:
            empty += 1  # holds no space (anonymous temporary files, such as a test runner's): noise here
            continue
        mount = filesystem_of(table, item.filesystem)
        if mount is None:
            elsewhere[0] += 1
            elsewhere[1] += item.disk
            continue
        at = table.holding(item.path, item.filesystem)
        if not on_the_way(mount.mount_point, roots):  # its filesystem's own mount lies outside the roots:
            mount = at or mount  # the mount its path is on (the same dev)
        elif mount.root != "/" and at is not None and at.dev_matches(item.filesystem):
            mount = at  # no mount shows the whole filesystem (btrfs subvolumes each on its own): its path's
        rows.append((item, mount))
    rows.sort(key=lambda row: (-row[0].disk, -row[0].size, row[0].path))
    totals: dict[str, tuple[Mount, list[DeletedFile]]] = {}
    for item, mount in rows:
        totals.setdefault(mount.mount_point, (mount, []))[1].append(item)
    filesystems = sorted(
        (
            FilesystemTotals(
                os.fsdecode(mount.mount_point),  # names as they are: in_json displays them
                os.fsdecode(mount.fs_type),
                os.fsdecode(mount_source(mount.device, roots)),
                len(held),
                sum(item.size for item in held),
                sum(item.disk for item in held),
            )
            for mount, held in totals.values()
        ),
        key=lambda e: (-e.disk_bytes, e.mount_point),
    )
    listed = rows[:top_n]
    files = [
        DeletedOpenFile(
            os.fsdecode(item.path),
            item.size,
            item.disk,
            os.fsdecode(mount.mount_point),
            [HolderRow(h.pid, h.command, h.user, h.fd, h.mode, h.mapped) for h in item.holders[:MAX_HOLDERS]],
            max(0, len(item.holders) - MAX_HOLDERS),
            item.mapped_only,
            item.namespace_pid,
        )
        for item, mount in listed
    ]
    total_disk = sum(e.disk_bytes for e in filesystems)
    where = f" on the filesystem holding {escaped(shown)}" if shown is not None else ""
    where += " under the allowed roots" if roots is not None else ""
    lines: list[str] = []
    if not rows:
        lines.append(
            f"No deleted files are held open{where} by the {plural(scan.processes, 'process')} read."
        )
    else:
        lines.append(
            f"{plural(len(rows), 'deleted file')} still held open{where}, holding {human_bytes(total_disk)} "
            "on disk (df counts it as used, du finds no name for it):"
        )
        for entry in filesystems:
            lines.append(
                f"  {escaped(entry.mount_point)} ({escaped(entry.fs_type)} {escaped(entry.device)}): "
                f"{human_bytes(entry.disk_bytes)} in {plural(entry.files, 'file')}"
            )
        lines.append("Largest first:")
        for item, mount in listed:
            holders = ", ".join(_holder_text(h) for h in item.holders[:MAX_HOLDERS])
            if len(item.holders) > MAX_HOLDERS:
                holders += f" and {plural(len(item.holders) - MAX_HOLDERS, 'more descriptor')}"
            size = human_bytes(item.disk)
            if abs(item.size - item.disk) > 65536 and item.size > 2 * item.disk:
                size += f" (size {human_bytes(item.size)}, sparse)"
            seen = "; never named: an O_TMPFILE file made in that directory" if item.unnamed else ""
            if item.namespace_pid is not None:
                seen += f"; its name in pid {item.namespace_pid}'s mount namespace"
            lines.append(
                f"  {size:>10}  {escaped(item.path)} (deleted{seen}) on {escaped(mount.mount_point)} — {holders}"
            )
        if len(rows) > len(listed):
            lines.append("  " + more_not_shown(len(rows) - len(listed), "deleted file"))
        by_fd = [h for item, _ in listed if not item.mapped for h in item.holders if h.fd is not None]
        if by_fd:
            first = by_fd[0]
            lines.append(
                "To free the space without stopping a process: truncate the file through the descriptor that "
                f"holds it, e.g. `: > /proc/{first.pid}/fd/{first.fd}` (or `truncate -s 0 /proc/{first.pid}/fd/"
                f"{first.fd}`), as root or the process's user — the process keeps its descriptor and later "
                "writes land at its offset (a sparse file). For good, have the process reopen its files (reload "
                "or restart the service; for logs, fix the rotation: copytruncate or a postrotate reload). "
                "Truncating a file a process still reads (a database, a cache) can break it: check what it is "
                "first."
            )
        if any(item.mapped for item, _ in listed):
            lines.append(
                "Files a process has mapped into memory ('mapped'; held only so, lsof's DEL: often a library or "
                "a database file replaced while in use) are freed only when their processes exit or unmap them: "
                "restart those services. Do not truncate them, not even through a descriptor: a process touching "
                "a mapped page past the new end is killed (SIGBUS)."
            )
    if outside[0]:
        lines.append(
            f"{plural(outside[0], 'more deleted file')} ({human_bytes(outside[1])}) held open outside the allowed "
            "roots: not named (sysmcp runs with --root or the client's roots)."
        )
    if empty:
        lines.append(
            f"Not listed: {plural(empty, 'empty deleted file')} ({noun(empty, 'it holds', 'they hold')} no space)."
        )
    if elsewhere[0]:
        lines.append(
            f"Not counted: {plural(elsewhere[0], 'deleted file')} ({human_bytes(elsewhere[1])}) on no filesystem "
            "mounted here (memfd, shared memory, another mount namespace)."
        )
    if scan.mappings_not_sized:
        lines.append(
            f"Not listed: {plural(scan.mappings_not_sized, 'deleted memory-mapped file')} whose size could not be read "
            "(/proc/PID/map_files needs CAP_SYS_ADMIN here)."
        )
    if scan.unreadable:
        lines.append(
            f"Could not read the descriptors of {scan.unreadable:,} of {scan.processes + scan.unreadable:,} "
            f"processes ({unreadable_reason()}): files they hold are not listed."
        )
    answer = DeletedOpenAnswer(
        available=True,
        files=files,
        files_not_shown=len(rows) - len(listed),
        filesystems=filesystems,
        total_disk_bytes=total_disk,
        processes_read=scan.processes,
        processes_unreadable=scan.unreadable,
        not_on_a_mounted_filesystem=Tally(*elsewhere),
        empty_files_not_listed=empty,
        mappings_not_sized=scan.mappings_not_sized,
        outside_allowed_roots=ABSENT if roots is None else Tally(*outside),
        path=ABSENT if shown is None else shown,
    )
    return "\n".join(lines), answer


class DeletedOpenFiles:
    """The handler, with /proc's location injected (a test points it elsewhere)."""

    def __init__(self, proc: str = PROC) -> None:
        self.proc = proc
        self.partitions = default_partitions()

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        shown: str | None = None
        only_dev: int | None = None
        if "path" in args:
            devices: list[int] = []

            def device_of(found: Path) -> None:
                """In the resolve thread, within its timeout: a path on a hung mount must not stall us."""
                try:
                    st_dev = os.stat(found).st_dev
                except FileNotFoundError:
                    raise ToolError(f"No such file or directory: {escaped(str(found))}") from None
                except OSError as exc:
                    raise ToolError(f"Cannot look at {escaped(str(found))}: {exc.strerror or exc}") from None
                mount = self.partitions().holding(str(found), st_dev)  # its filesystem's number, not
                devices.append(st_dev if mount is None else mount.number(st_dev))  # its subvolume's (btrfs)

            shown = str(await ctx.resolve(args["path"], device_of))
            only_dev = devices[0]
        if not platform.has_proc_fd(self.proc):
            text = (
                "This system has no /proc/PID/fd, so sysmcp cannot list deleted files held open here. "
                "On macOS, `sudo lsof +L1` shows them."
            )
            return ToolOutput.typed(text, DeletedOpenAnswer(False, [], 0, [], 0))
        scan = await ctx.run_engine(
            scan_processes,
            self.proc,
            describe=lambda meter, _: f"{plural(int(meter.done), 'process')} looked at",
        )
        text, answer = render(scan, self.partitions(), args["top_n"], only_dev, shown, ctx.paths.allowed)
        return ToolOutput.typed(text, answer)


TOOL = Tool(
    name="deleted_open_files",
    title="Deleted files still held open",
    description=(
        "Deleted files still held open by a process (lsof +L1), which keep their space: when df counts more "
        "than dir_usage finds, or deleting freed nothing. Each file's size, filesystem and holders (pid, "
        "command, descriptor), and how to free it without a restart. Linux."
    ),
    input_schema=INPUT_SCHEMA,
    output=DeletedOpenAnswer,
    handler=DeletedOpenFiles(),
)
