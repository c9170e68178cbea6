"""disk_usage with ``explain``: df's used bytes of one filesystem, part by part, in words and figures.

The MCP side of ``sysmcp.engine.space``: the ``explain`` part of the typed result, the request built
from the call (with a fresh complete scan of the filesystem's root from the history, when there is
one, for part 1), and the answer's text (totals first, then each part with its next step). This module
is imported only for an explain, or where the typed layer first needs ``Explain`` (the schema,
``from_json``); the engine (which also runs ``engine.procs``' process scan for part 2) and the history,
only when an explain runs."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sysmcp.engine.paths import call_argument, escaped, mount_source, on_the_way, shell_word
from sysmcp.engine.walk import more_time_helps
from sysmcp.render import age, human_bytes, noun, plural, took
from sysmcp.tools.explain_budget import EXPLAIN_TIMEOUT
from sysmcp.tools.typed import ABSENT, Open, Opt, iso_utc, prop, result

if TYPE_CHECKING:
    from sysmcp.engine.mounts import FilesystemUsage, MountTable
    from sysmcp.engine.space import Accounting, HeldOpen, KeptScan, Snapshots
    from sysmcp.protocol.context import Meter
    from sysmcp.tools.registry import ToolContext

NAMED = 5  # files, places and snapshots named per part; the rest are counted
FRESH_SCAN_S = 300.0  # a stored scan of the root younger than this stands in for the walk


class _Part:
    """A part of the answer: its figures without a list of required ones, and room for more."""

    SCHEMA_OPTIONS: ClassVar = {"closed": False, "required": False}


_NEXT = "What to run next for this part."


@result
class Files(_Part):
    bytes: int = prop("Disk bytes of the files a walk of the filesystem reaches (as du -x).")
    files: int = prop()
    stopped: str | None = prop("Why the walk stopped early.")
    scanned_at: str | None = prop(
        "When the stored dir_usage scan these figures come from was taken (a complete scan of the root "
        "younger than 5 minutes stands in for the walk); null: walked now."
    )
    next_step: str = prop(_NEXT)
    roots_walked: Opt[list[str]] = prop(
        "Under roots the filesystem's mount point lies outside of: the roots walked instead (the rest "
        "of the filesystem is neither walked nor counted: it is in the remainder).",
        default=ABSENT,
    )


@result
class DeletedOpen(_Part):
    bytes: int = prop("Disk bytes of deleted files still held open on this filesystem.")
    files: list[dict[str, Any]] = prop(
        "path, bytes, holders, descriptor (/proc/PID/fd/N to truncate it through)."
    )
    not_named: int = prop("Files outside the allowed roots: counted only.")
    processes_unreadable: int = prop(
        "Processes whose open files could not be read (another user, without root)."
    )
    processes_vanished: int = prop("Ended between listing and reading.")
    available: bool = prop("Whether open files could be listed on this system (/proc).")
    next_step: str = prop(_NEXT)


@result
class HiddenUnderMounts(_Part):
    bytes: int = prop("Disk bytes of files in directories another filesystem is mounted over.")
    checked: bool = prop("Whether the directories under mount points were looked at (needs root).")
    reason: str = prop("Why not checked (e.g. 'needs root').")
    mount_points: int = prop("How many mount points sit on this filesystem.")
    places: list[dict[str, Any]] = prop("mount_point, bytes, files.")
    unlisted_mount_points: int = prop("Not in places: empty, outside the roots, or past the first 5.")
    unlisted_bytes: int = prop("Their bytes: places' bytes plus these make bytes.")
    next_step: str = prop(_NEXT)


@result
class UnreadableDirectories(_Part):
    count: int = prop("Directories the walk could not read.")
    named: list[str] = prop("Some of those directories, inside the allowed roots.")
    upper_bound_bytes: int = prop("At most this many bytes can be in them (the remainder).")
    next_step: str = prop(_NEXT)


@result
class ZfsSplit:
    dataset: str = prop()
    used_bytes: int = prop()
    used_by_dataset_bytes: int = prop()
    used_by_snapshots_bytes: int = prop()
    used_by_children_bytes: int = prop()
    used_by_refreservation_bytes: int = prop()


@result
class SnapshotsPart(_Part):
    bytes: int = prop("Disk bytes held only by snapshots or other subvolumes.")
    kind: str = prop("The snapshot mechanism (btrfs, zfs, lvm-thin, apfs), or null.")
    exact: bool = prop("False: some are not sized (see note).")
    note: str = prop("How the figure was obtained, or why it could not be.")
    items: list[dict[str, Any]] = prop("name, bytes (null: unknown).")
    next_step: str = prop(_NEXT)
    zfs: Opt[ZfsSplit] = prop(listed=False, default=ABSENT)  # ZFS's split of used, beside the schema


@result
class OverheadPart(_Part):
    bytes: int | None = prop("The filesystem's own metadata, journal and reservations counted as used.")
    source: str = prop("Where the overhead figure comes from.")


@result
class Remainder(_Part):
    bytes: int = prop("Used bytes no part accounts for (negative when parts overlap).")
    percent: float = prop("The remainder as a percentage of used bytes.")
    not_walked: bool = prop("True when the walk stopped early: part of the remainder was not walked.")
    next_step: str = prop(_NEXT)


@result
class Explain(Open):
    """With explain: df's used bytes of the filesystem, part by part."""

    mount_point: str = prop()
    used_bytes: int = prop("statvfs used: (f_blocks - f_bfree) × f_frsize.")
    reserved_bytes: Opt[int] = prop("Free blocks only root may use: free, not used.")
    partial: Opt[bool] = prop("The walk stopped early.")
    files: Files = prop("Part 1: files and directories a walk from the root reaches, one filesystem (du -x).")
    deleted_open: DeletedOpen = prop(
        "Part 2: deleted files still held open by a process (freed when the holders close them)."
    )
    hidden_under_mounts: HiddenUnderMounts = prop(
        "Part 3: files in directories another filesystem is mounted over (seen through a private view)."
    )
    unreadable_directories: Opt[UnreadableDirectories] = prop(
        "Part 4: directories the walk could not read; they hold at most upper_bound_bytes."
    )
    snapshots: Opt[SnapshotsPart] = prop(
        "Part 5: snapshots and subvolumes: bytes only they hold (exclusive)."
    )
    overhead: Opt[OverheadPart] = prop(
        "Part 6: the filesystem's own metadata and reservations counted as used, where it reports "
        "them (else null: in the remainder)."
    )
    remainder: Remainder = prop(
        "Part 7: used bytes no part accounts for ('not walked' when the walk stopped)."
    )
    seconds: Opt[float] = prop()


def fresh_scan(point: str) -> KeptScan | None:
    """The newest complete dir_usage scan of ``point`` (one filesystem, nothing excluded, the same
    filesystem identity) in the history, if it is younger than ``FRESH_SCAN_S``. In a worker."""
    from sysmcp.engine.space import KeptScan
    from sysmcp.engine.walk import WalkOptions
    from sysmcp.history import state
    from sysmcp.history.recording import series_of

    store = state.active()
    if store is None:
        return None
    try:
        series = series_of(point, WalkOptions(one_file_system=True))
    except OSError:
        return None
    now = state.now()
    for info in store.snapshots("scan", series.root, limit=50, count_rows=False):
        if info.series.same_as(series) and not info.partial:
            age = now - info.taken
            return KeptScan(info.disk, info.files, info.taken, age) if 0 <= age <= FRESH_SCAN_S else None
    return None


async def run(
    entry: FilesystemUsage, table: MountTable, timeout: float, ctx: ToolContext, proc: str
) -> tuple[str, Explain]:
    """Account for the filesystem of ``entry`` within ``timeout`` seconds: the text and the ``explain`` part."""
    from sysmcp.engine.space import ExplainRequest, explain, explain_request, own_mount

    assert entry.figures is not None
    mount, fig = own_mount(entry, table), entry.figures

    def ask(_: Meter) -> ExplainRequest:  # the history's scan and the root's stat: in a worker
        scanned = fresh_scan(mount.mount_point)
        return explain_request(mount, fig, table, timeout, ctx.paths.allowed, scanned, proc)

    def describe(meter: Meter, elapsed: float) -> str:
        return f"{plural(int(meter.done), 'entry')} walked"

    request = await ctx.run_in_worker(ask)
    found, roots = await ctx.run_engine(explain, request, describe=describe), ctx.paths.allowed
    if not on_the_way(mount.mount_point, roots):  # its own mount lies outside: named by the one asked about
        found.mount = entry.mount
    return answer(found, roots)


def _holders(held: HeldOpen) -> str:
    names = list(dict.fromkeys(f"{escaped(cmd)} (pid {pid})" for pid, cmd in held.holders))
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


#: Filesystems the system itself runs on: never advise unmounting them (or the root).
SYSTEM_MOUNTS = ("/dev", "/proc", "/sys", "/run")
UNDER = "/mnt/under"  # where the advice bind-mounts the filesystem to look beneath its mounts


def _argument(path: str) -> str:
    """A path as one word of a shell command the answer suggests: quoted, so a mount point named
    ``/mnt/x; curl … | sh`` (a user's FUSE mount may be named anything) stays one argument, and
    escaped, so a newline or ESC in it is seen, not run (``shell_word``)."""
    return shell_word(path)


def _system(point: str) -> bool:
    return point == "/" or any(point == top or point.startswith(top + "/") for top in SYSTEM_MOUNTS)


def _deleted(acc: Accounting, point: str) -> tuple[str, DeletedOpen]:
    """Part 2: its line, with its next step, and its figures."""
    from sysmcp.tools.errors import unreadable_reason

    deleted = acc.deleted
    held = deleted.files[:NAMED]
    if not deleted.available:
        step = "this system has no /proc/PID/fd; `sudo lsof +L1` lists them"
        line = f"2. Deleted but open: not checked ({step})."
    else:
        links = [f.descriptor for f in held if f.descriptor is not None]
        truncate = (
            f"run {' and '.join(': > ' + link for link in links)} to free {'it' if len(links) == 1 else 'them'} now"
            if links
            else "truncate through /proc/PID/fd/N"
        )
        step = f"{truncate}, or restart the holder; deleted_open_files path={point} lists every one"
        named = "; ".join(f"{escaped(f.path)} {human_bytes(f.disk)} held by {_holders(f)}" for f in held)
        more = deleted.not_named + max(len(deleted.files) - NAMED, 0)
        text = f"{human_bytes(deleted.disk)} in {plural(len(deleted.files) + deleted.not_named, 'file')}" + (
            f": {named}" if named else ""
        )
        text += f" and {more} more" if more else ""
        if deleted.unreadable:
            text += f" ({plural(deleted.unreadable, 'process', 'processes')} could not be read: {unreadable_reason()})"
        if deleted.vanished:
            text += f" ({plural(deleted.vanished, 'process', 'processes')} ended while being read)"
        line = f"2. Deleted but still open: {text}. Next: {step}."
    files = [
        {
            "path": f.path,  # the name itself, as JSON shows names (in_json); the text escapes it
            "bytes": f.disk,
            "holders": [{"pid": p, "command": c} for p, c in f.holders],
            "descriptor": f.descriptor,
        }
        for f in held
    ]
    figures = (deleted.not_named, deleted.unreadable, deleted.vanished, deleted.available)
    return line, DeletedOpen(deleted.disk, files, *figures, step)


def _hidden(acc: Accounting) -> tuple[str, HiddenUnderMounts]:
    """Part 3: its line (every byte of it: the named places, then the rest by kind, and its next step)
    and its figures."""
    hidden, root = acc.hidden, acc.mount.mount_point
    shown, past = hidden.places[:NAMED], hidden.places[NAMED:]
    points = [os.path.join(root, p.relative) for p in shown]
    listed = [
        f"{escaped(at)} {human_bytes(p.disk)} ({plural(p.files, 'file')})"
        for at, p in zip(points, shown, strict=True)
    ]
    if past:
        listed.append(f"{plural(len(past), 'more mount point')} {human_bytes(sum(p.disk for p in past))}")
    if hidden.outside:
        listed.append(f"{plural(hidden.outside, 'mount point')} outside your roots (not looked under)")
    if hidden.empty:
        many = plural(hidden.empty, "empty mount point directory", "empty mount point directories")
        listed.append(f"{many} {human_bytes(hidden.empty_disk)} (the directories' own blocks)")
    at = plural(hidden.mount_points, "mount point")
    step = ""
    if not hidden.checked:
        step = "run sysmcp as root to look under them" if hidden.reason == "needs root" else ""
        found = f"not checked ({hidden.reason}) at {at}"
    else:
        found = f"{human_bytes(hidden.disk)} under {at}" + (f": {'; '.join(listed)}" if listed else "")
        if shown:
            look = (
                f"look beneath without unmounting: mkdir -p {UNDER} && mount --bind {_argument(root)} {UNDER} "
                f"(a second view of {escaped(root)} without the filesystems mounted on it), then "
                f"ls -la {_argument(os.path.join(UNDER, shown[0].relative))}, move the files out, umount {UNDER}"
            )
            system = [escaped(at) for at in points if _system(at)]
            if system:
                step = f"never unmount {', '.join(system)} (the system runs on {'it' if len(system) == 1 else 'them'}); {look}"
            else:
                step = f"unmount {_argument(points[0])} and move the files out, or {look}"
    places = [
        {"mount_point": at, "bytes": p.disk, "files": p.files}  # the name itself: in_json shows it
        for at, p in zip(points, shown, strict=True)
    ]
    unlisted = len(past) + hidden.outside + hidden.empty
    unlisted_disk = hidden.disk - sum(p.disk for p in shown)
    part = HiddenUnderMounts(
        hidden.disk, hidden.checked, hidden.reason, hidden.mount_points, places, unlisted, unlisted_disk, step
    )
    return f"3. Hidden under mount points: {found}" + (f". Next: {step}." if step else "."), part


def _snap_noun(snaps: Snapshots) -> str:
    """'1 snapshot', '3 subvolumes', '2 snapshots and subvolumes' (btrfs lists both)."""
    kinds = {item.is_snapshot for item in snaps.items}
    if kinds == {True}:
        return plural(len(snaps.items), "snapshot")
    if kinds == {False}:
        return plural(len(snaps.items), "subvolume")
    return f"{len(snaps.items):,} {noun(len(snaps.items), 'snapshot')} and subvolumes"


def _shared_step(fs_type: str) -> str:
    """What shows which files share blocks, when the parts add up to more than used."""
    where = {
        "btrfs": "btrfs filesystem du -s DIR shows the shared and exclusive bytes below a directory",
        "xfs": "xfs_io -r -c 'fiemap -v' FILE marks a file's shared (reflinked) extents with flag 0x2000",
    }.get(fs_type, "dir_usage shows which files the walk counted")
    return f"nothing to free: blocks shared between files are used once; {where}"


def _seconds(elapsed: float) -> str:
    """How long the walk ran: '0.40 s' under 10 s (a walk stopped within a second is not '0 s'), '42 s' after."""
    return took(0, elapsed) if elapsed < 10 else f"{elapsed:.0f} s"


def _percent(part: int, whole: int) -> float:
    return round(100 * part / whole, 2) if whole else 0.0


def answer(acc: Accounting, roots: Sequence[Path] | None = None) -> tuple[str, Explain]:
    """The answer: one sentence of totals, then a line per part with its next step (and, after part
    5, what only the engine's snapshot reading has: ``roots`` decides which snapshot it may name)."""
    from sysmcp.tools.disk_pools import as_snapshots, cow_lines

    if acc.cow is not None:  # part 5 from the snapshot reading: the remainder counts it
        acc = replace(acc, snapshots=as_snapshots(acc.cow, roots))
    point, used = os.fsdecode(acc.mount.mount_point), acc.figures.used
    walked, deleted, hidden = acc.walked, acc.deleted, acc.hidden
    snaps, overhead = acc.snapshots, acc.overhead
    rest = acc.remainder
    bound = max(rest, 0)
    scanned = walked.scanned
    source = (
        f"from the scan of {time.strftime('%H:%M', time.localtime(scanned.taken))}, {age(scanned.age)} ago"
        if scanned is not None
        else ""
    )
    seen = plural(walked.files, "file") + (f", {source}" if source else "")
    summary = [f"{human_bytes(walked.disk)} are files you can see ({seen})"]
    if deleted.disk:
        count = plural(len(deleted.files) + deleted.not_named, "deleted file")
        who = (
            f"held open by {_holders(deleted.files[0])}" if deleted.files else "outside your roots, held open"
        )
        summary.append(f"{human_bytes(deleted.disk)} are {count} {who}")
    if hidden.disk:
        summary.append(
            f"{human_bytes(hidden.disk)} are hidden under {plural(hidden.mount_points, 'mount point')}"
        )
    if snaps.bytes:
        summary.append(f"{human_bytes(snaps.bytes)} are held only by {_snap_noun(snaps)}")
    if overhead.bytes:
        summary.append(f"{human_bytes(overhead.bytes)} are the filesystem's own overhead")
    confined = walked.roots_walked is not None  # under roots: only they were walked
    label = ("outside your roots or " if confined else "") + (
        "not walked" if walked.stopped else "unexplained"
    )
    percent = _percent(bound, used)
    over = -rest if rest < 0 and not walked.stopped else 0  # the parts overlap: blocks counted twice
    if over:
        summary.append(
            f"and the parts add up to {human_bytes(over)} ({_percent(over, used)} %) more than used"
        )
    else:
        summary.append(f"{human_bytes(bound)} ({percent} %) {label}")
    lines = []
    if walked.stopped:
        lines.append(
            f"PARTIAL RESULT: the walk stopped ({walked.stopped}); what it did not reach is in 'not walked'."
        )
    lines.append(
        f"Of {human_bytes(used)} used on {escaped(point)} ({escaped(acc.mount.fs_type)} "
        f"{escaped(mount_source(acc.mount.device, roots))}), " + ", ".join(summary) + "."
    )
    first = call_argument(str(walked.roots_walked[0]) if walked.roots_walked else point)
    files_step = f"dir_usage path={first} shows which directories hold them"
    lines.append(
        f"1. Files reached by a walk{' of your roots' if confined else ''} (du -x): "
        f"{source + ': ' if source else ''}{human_bytes(walked.disk)} "
        f"in {plural(walked.files, 'file')}. Next: {files_step}."
    )
    deleted_line, deleted_part = _deleted(acc, first)  # a path on this filesystem a call may name
    lines.append(deleted_line)
    hidden_line, hidden_part = _hidden(acc)
    lines.append(hidden_line)
    unread = list(walked.unreadable_named[:NAMED])
    unread_step = "run as root or as the directories' owner to see inside"
    if scanned is not None:
        lines.append(
            f"4. Unreadable directories: not counted (part 1 is {source}). Next: dir_usage path={call_argument(point)} "
            "one_file_system=true counts them (and leaves the scan a later explain reuses)."
        )
    elif walked.unreadable:
        lines.append(
            f"4. Unreadable directories: {walked.unreadable:,}"
            + (f" ({', '.join(map(escaped, unread))})" if unread else "")
            + f", holding at most {human_bytes(bound)} (the remainder). Next: {unread_step}."
        )
    else:
        lines.append("4. Unreadable directories: none.")
    snap_step = {
        "btrfs subvolumes": "btrfs subvolume list / btrfs qgroup show; deleting a snapshot frees its exclusive bytes",
        "zfs snapshots": "zfs list -t snapshot -o name,used; zfs destroy frees a snapshot's used bytes",
        "lvm thin snapshots": "lvs; lvremove a thin snapshot frees pool space",
        "lvm snapshots": "lvs -o lv_name,origin,lv_size,data_percent; lvremove a snapshot frees its space in the volume group",
        "apfs local snapshots": "tmutil listlocalsnapshots /; tmutil thinlocalsnapshots / frees them",
    }.get(snaps.kind, "")
    note = f" ({snaps.note})" if snaps.note else ""
    if snaps.kind and snaps.items:
        shown = "; ".join(
            f"{escaped(s.name)} {'?' if s.exclusive is None else human_bytes(s.exclusive)}"
            for s in snaps.items[:NAMED]
        )
        lines.append(
            f"5. Snapshots and subvolumes: {human_bytes(snaps.bytes)} exclusive in {_snap_noun(snaps)}{note}: {shown}. Next: {snap_step}."
        )
    else:
        lines.append(f"5. Snapshots and subvolumes: none{note}.")
    if acc.cow is not None:
        lines += cow_lines(acc.cow, roots)
    # btrfs has no root reserve: what it keeps back no one can use
    whose = "kept back by btrfs" if acc.mount.fs_type == "btrfs" else "reserved for root"
    reserved = (
        f"; {human_bytes(acc.figures.reserved)} {whose} beside it (free space, not used)"
        if acc.figures.reserved
        else ""
    )
    own = (
        "not reported, so it is in the remainder"
        if overhead.bytes is None
        else f"{human_bytes(overhead.bytes)} ({overhead.source})"
    )
    lines.append(f"6. Filesystem overhead (journal, metadata, inode tables): {own}{reserved}.")
    rest_step = (
        _shared_step(acc.mount.fs_type)
        if over
        else (
            f"call again with a larger timeout_s (at most {EXPLAIN_TIMEOUT.maximum:g}; the walk stopped "
            f"after {_seconds(walked.elapsed)})"
        )
        if walked.stopped and more_time_helps(walked.stopped)
        else "call again once more descriptors are free (the walk ran out of them, as the first line says)"
        if walked.stopped
        else "none within your roots: the rest of the filesystem lies outside them, neither walked nor counted"
        if confined
        else "deleted_open_files and dir_usage; an unexplained remainder this small is metadata"
        if percent <= 2
        else "look at the parts not checked above (root, quotas), then du -x against dir_usage"
    )
    if over:
        lines.append(
            f"7. Counted more than once: {human_bytes(over)} ({_percent(over, used)} % of used): a walk counts "
            "every file's blocks in full, as du does, so files that share blocks (reflinked or deduplicated "
            "copies) or that the filesystem compresses count for more than they use, and so do files "
            f"written while the walk ran. Next: {rest_step}."
        )
    else:
        lines.append(
            f"7. {label.capitalize()}: {human_bytes(bound)} ({percent} % of used). Next: {rest_step}."
        )
    cow = acc.cow
    kept = [  # snaps.items are cow.items, in the same order, when there is a reading
        {"name": s.name, "bytes": s.exclusive, "snapshot": s.is_snapshot}
        | ({} if cow is None else {"shared_bytes": cow.items[at].shared})
        for at, s in enumerate(snaps.items[:NAMED])
    ]
    z = None if cow is None else cow.zfs
    split = (
        ABSENT
        if z is None
        else ZfsSplit(z.name, z.used, z.dataset, z.snapshots, z.children, z.refreservation)
    )
    stopped = walked.stopped is not None
    at = iso_utc(scanned.taken) if scanned is not None else None
    part = Explain(
        point,
        used,
        acc.figures.reserved,
        stopped,
        Files(
            walked.disk,
            walked.files,
            walked.stopped,
            at,
            files_step,
            ABSENT if walked.roots_walked is None else [str(r) for r in walked.roots_walked],
        ),
        deleted_part,
        hidden_part,
        UnreadableDirectories(walked.unreadable, unread, bound if walked.unreadable else 0, unread_step),
        SnapshotsPart(snaps.bytes, snaps.kind, snaps.exact, snaps.note, kept, snap_step, split),
        OverheadPart(overhead.bytes, overhead.source),
        Remainder(rest, _percent(rest, used), stopped, rest_step),
        round(acc.elapsed, 3),
    )
    return "\n".join(lines), part
