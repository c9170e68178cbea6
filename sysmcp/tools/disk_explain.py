"""disk_usage with ``explain``: df's used bytes of one filesystem, part by part, in words and figures.

The MCP side of ``sysmcp.engine.space._space``: the ``explain`` schema, the request built from the call (with a
fresh complete scan of the filesystem's root from the history, when there is one, for part 1), the
answer's text (totals first, then each part with its next step) and its structured content. The
engine (``fs.space``, which also runs ``fs.openfiles``' process scan for part 2) and the history are
imported when an explain is asked for: disk_usage imports this module for its schema on every start.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from sysmcp.engine.paths import display, printable
from sysmcp.platform import PROC
from sysmcp.render import age, human_bytes, noun, plural
from sysmcp.tools import schemas as js

if TYPE_CHECKING:
    from sysmcp.engine.mounts import Entry, MountTable
    from sysmcp.engine.pools import Cow
    from sysmcp.engine.space import Accounting, HeldOpen, Scanned, Snapshots
    from sysmcp.protocol.context import Meter
    from sysmcp.tools.registry import ToolContext

DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 600.0
NAMED = 5  # files, places and snapshots named per part; the rest are counted
FRESH_SCAN_S = 300.0  # a stored scan of the root younger than this stands in for the walk

INPUT_PROPERTIES: dict[str, Any] = {
    "explain": js.boolean("With path: account for every used byte; walks the filesystem.", default=False),
    "timeout_s": js.number(
        "With explain: the walk's budget.",
        minimum=0.001,
        maximum=int(MAX_TIMEOUT_S),
        default=int(DEFAULT_TIMEOUT_S),
    ),
}


def _part(description: str, **properties: Any) -> dict[str, Any]:
    """One part of the answer: an object with its figures and, for most, its next step."""
    return {"type": "object", "description": description, "properties": properties}


def _sized(description: str, **more: Any) -> dict[str, Any]:
    return _part(description, bytes=js.integer(), **more, next_step=js.string())


def _rows(description: str) -> dict[str, Any]:
    return js.typed("array", description, items=js.typed("object"))


EXPLAIN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "With explain: the filesystem's used bytes (statvfs, as df) split into parts.",
    "properties": {
        "mount_point": js.string(),
        "used_bytes": js.integer("statvfs used: (f_blocks - f_bfree) × f_frsize."),
        "reserved_bytes": js.integer("Free blocks only root may use: free, not used."),
        "partial": js.boolean("The walk stopped at the time budget."),
        "files": _sized(
            "Part 1: files and directories a walk from the root reaches, one filesystem (du -x).",
            files=js.integer(),
            stopped=js.string(null=True, description="Why the walk stopped early."),
            scanned_at=js.string(
                null=True,
                description="When the stored dir_usage scan these figures come from was taken (a complete scan of "
                "the root younger than 5 minutes stands in for the walk); null: walked now.",
            ),
        ),
        "deleted_open": _sized(
            "Part 2: deleted files still held open by a process (freed when the holders close them).",
            files=_rows("path, bytes, holders, descriptor (/proc/PID/fd/N to truncate it through)."),
            not_named=js.integer("Files outside the allowed roots: counted only."),
            processes_unreadable=js.integer(),
            processes_vanished=js.integer("Ended between listing and reading."),
            available=js.boolean(),
        ),
        "hidden_under_mounts": _sized(
            "Part 3: files in directories another filesystem is mounted over (seen through a private view).",
            checked=js.boolean(),
            reason=js.string("Why not checked (e.g. 'needs root')."),
            mount_points=js.integer(),
            places=_rows("mount_point, bytes, files."),
            unlisted_mount_points=js.integer("Not in places: empty, outside the roots, or past the first 5."),
            unlisted_bytes=js.integer("Their bytes: places' bytes plus these make bytes."),
        ),
        "unreadable_directories": _part(
            "Part 4: directories the walk could not read; they hold at most upper_bound_bytes.",
            count=js.integer(),
            named=js.names(),
            upper_bound_bytes=js.integer(),
            next_step=js.string(),
        ),
        "snapshots": _sized(
            "Part 5: snapshots and subvolumes: bytes only they hold (exclusive).",
            kind=js.string(),
            exact=js.boolean("False: some are not sized (see note)."),
            note=js.string(),
            items=_rows("name, bytes (null: unknown)."),
        ),
        "overhead": _part(
            "Part 6: the filesystem's own metadata and reservations counted as used, where it reports "
            "them (else null: in the remainder).",
            bytes=js.integer(null=True),
            source=js.string(),
        ),
        "remainder": _part(
            "Part 7: used bytes no part accounts for ('not walked' when the walk stopped).",
            bytes=js.integer(),
            percent=js.number(),
            not_walked=js.boolean(),
            next_step=js.string(),
        ),
        "seconds": js.number(),
    },
    "required": ["mount_point", "used_bytes", "files", "deleted_open", "hidden_under_mounts", "remainder"],
}


def fresh_scan(point: str, max_age: float = FRESH_SCAN_S) -> Scanned | None:
    """The newest complete dir_usage scan of ``point`` (one filesystem, nothing excluded, the same
    filesystem identity) in the history, if it is younger than ``max_age`` seconds. In a worker."""
    from sysmcp.engine.space import Scanned
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
        if info.series == series and not info.partial:
            age = now - info.taken
            return Scanned(info.disk, info.files, info.taken, age) if 0 <= age <= max_age else None
    return None


async def run(
    entry: Entry, table: MountTable, args: dict[str, Any], ctx: ToolContext, proc: str = PROC
) -> tuple[str, dict[str, Any]]:
    """Account for the filesystem of ``entry``: the text and the ``explain`` object."""
    from sysmcp.engine.space import explain, explain_request, own_mount
    from sysmcp.tools.dir_usage import usage_report
    from sysmcp.tools.disk_pools import as_snapshots, read_cow, with_cow

    assert entry.figures is not None
    mount = own_mount(entry, table)
    fig = entry.figures
    timeout = min(float(args.get("timeout_s", DEFAULT_TIMEOUT_S)), MAX_TIMEOUT_S)

    def work(meter: Meter) -> tuple[Accounting, Cow | None]:
        scanned = fresh_scan(mount.mount_point)
        request = explain_request(mount, fig, table, timeout, ctx.paths.allowed, scanned, proc)
        acc = explain(request, usage_report(meter), meter.checkpoint)
        cow = read_cow(mount, timeout, meter.checkpoint)  # btrfs and ZFS snapshots: engine/pools
        if cow is not None:
            acc.snapshots = as_snapshots(cow)
        return acc, cow

    def describe(meter: Meter, elapsed: float) -> str:
        return f"{plural(int(meter.done), 'entry')} walked, {human_bytes(meter.extra.get('bytes', 0))} seen"

    accounting, cow = await ctx.run_in_worker(work, describe=describe)
    return with_cow(*render(accounting), cow, ctx.paths.allowed)


def _holders(held: HeldOpen) -> str:
    names = list(dict.fromkeys(f"{printable(cmd)} (pid {pid})" for pid, cmd in held.holders))
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


#: Filesystems the system itself runs on: never advise unmounting them (or the root).
SYSTEM_MOUNTS = ("/dev", "/proc", "/sys", "/run")
UNDER = "/mnt/under"  # where the advice bind-mounts the filesystem to look beneath its mounts


def _system(point: str) -> bool:
    return point == "/" or any(point == top or point.startswith(top + "/") for top in SYSTEM_MOUNTS)


def _hidden_words(acc: Accounting) -> tuple[str, str, int, int]:
    """Part 3's list (every byte of it: the named places, then the rest by kind), its next step, and
    the mount points and bytes not in the named places."""
    hidden, root = acc.hidden, acc.mount.mount_point
    shown = hidden.places[:NAMED]
    points = [os.path.join(root, p.relative) for p in shown]
    listed = [
        f"{display(at)} {human_bytes(p.disk)} ({plural(p.files, 'file')})"
        for at, p in zip(points, shown, strict=True)
    ]
    past = hidden.places[NAMED:]
    if past:
        listed.append(f"{plural(len(past), 'more mount point')} {human_bytes(sum(p.disk for p in past))}")
    if hidden.not_named:
        where = plural(hidden.not_named, "mount point")
        listed.append(f"{where} outside your roots {human_bytes(hidden.not_named_disk)}")
    if hidden.empty:
        many = plural(hidden.empty, "empty mount point directory", "empty mount point directories")
        listed.append(f"{many} {human_bytes(hidden.empty_disk)} (the directories' own blocks)")
    unlisted = len(past) + hidden.not_named + hidden.empty
    unlisted_disk = hidden.disk - sum(p.disk for p in shown)
    if not shown:
        return "; ".join(listed), "", unlisted, unlisted_disk
    first = shown[0].relative
    look = (
        f"look beneath without unmounting: mkdir -p {UNDER} && mount --bind {display(root)} {UNDER} "
        f"(a second view of {display(root)} without the filesystems mounted on it), then "
        f"ls -la {display(os.path.join(UNDER, first))}, move the files out, umount {UNDER}"
    )
    system = [display(at) for at in points if _system(at)]
    if system:
        step = f"never unmount {', '.join(system)} (the system runs on {'it' if len(system) == 1 else 'them'}); {look}"
    else:
        step = f"unmount {display(points[0])} and move the files out, or {look}"
    return "; ".join(listed), step, unlisted, unlisted_disk


def _snap_noun(snaps: Snapshots) -> str:
    """'1 snapshot', '3 subvolumes', '2 snapshots and subvolumes' (btrfs lists both)."""
    kinds = {item.is_snapshot for item in snaps.items}
    if kinds == {True}:
        return plural(len(snaps.items), "snapshot")
    if kinds == {False}:
        return plural(len(snaps.items), "subvolume")
    return f"{len(snaps.items):,} {noun(len(snaps.items), 'snapshot')} and subvolumes"


def _percent(part: int, whole: int) -> float:
    return round(100 * part / whole, 2) if whole else 0.0


def render(acc: Accounting) -> tuple[str, dict[str, Any]]:
    """The answer: one sentence of totals, then a line per part with its next step."""
    from sysmcp.tools.dir_usage import iso_utc

    point, used = display(acc.mount.mount_point), acc.figures.used
    walked, deleted, hidden, snaps, overhead = (
        acc.walked,
        acc.deleted,
        acc.hidden,
        acc.snapshots,
        acc.overhead,
    )
    rest = acc.remainder
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
    label = "not walked" if walked.stopped else "unexplained"
    summary.append(f"{human_bytes(max(rest, 0))} ({_percent(max(rest, 0), used)} %) {label}")
    lines = []
    if walked.stopped:
        lines.append(
            f"PARTIAL RESULT: the walk stopped ({walked.stopped}); what it did not reach is in 'not walked'."
        )
    lines.append(
        f"Of {human_bytes(used)} used on {point} ({display(acc.mount.fs_type)} {display(acc.mount.device)}), "
        + ", ".join(summary)
        + "."
    )
    files_step = f"dir_usage path={point} shows which directories hold them"
    lines.append(
        f"1. Files reached by a walk (du -x): {source + ': ' if source else ''}{human_bytes(walked.disk)} "
        f"in {plural(walked.files, 'file')}. Next: {files_step}."
    )
    if not deleted.available:
        del_step = "this system has no /proc/PID/fd; `sudo lsof +L1` lists them"
        lines.append(f"2. Deleted but open: not checked ({del_step}).")
    else:
        links = [f.descriptor for f in deleted.files[:NAMED] if f.descriptor is not None]
        truncate = (
            f"run {' and '.join(': > ' + link for link in links)} to free {'it' if len(links) == 1 else 'them'} now"
            if links
            else "truncate through /proc/PID/fd/N"
        )
        del_step = f"{truncate}, or restart the holder; deleted_open_files path={point} lists every one"
        named = "; ".join(
            f"{printable(f.path)} {human_bytes(f.disk)} held by {_holders(f)}" for f in deleted.files[:NAMED]
        )
        more = deleted.not_named + max(len(deleted.files) - NAMED, 0)
        text = f"{human_bytes(deleted.disk)} in {plural(len(deleted.files) + deleted.not_named, 'file')}" + (
            f": {named}" if named else ""
        )
        text += f" and {more} more" if more else ""
        if deleted.unreadable:
            text += f" ({plural(deleted.unreadable, 'process', 'processes')} could not be read: not root)"
        if deleted.vanished:
            text += f" ({plural(deleted.vanished, 'process', 'processes')} ended while being read)"
        lines.append(f"2. Deleted but still open: {text}. Next: {del_step}.")
    named, hid_step, unlisted, unlisted_disk = _hidden_words(acc)
    if hidden.checked:
        lines.append(
            f"3. Hidden under mount points: {human_bytes(hidden.disk)} under {plural(hidden.mount_points, 'mount point')}"
            + (f": {named}" if named else "")
            + (f". Next: {hid_step}." if hid_step else ".")
        )
    else:
        hid_step = "run sysmcp as root to look under them"
        lines.append(
            f"3. Hidden under mount points: not checked ({hidden.reason}) at {plural(hidden.mount_points, 'mount point')}. Next: {hid_step}."
        )
    bound = max(rest, 0)
    unread_step = "run as root or as the directories' owner to see inside"
    if scanned is not None:
        lines.append(
            f"4. Unreadable directories: not counted (part 1 is {source}). Next: dir_usage path={point} "
            "one_file_system=true counts them (and leaves the scan a later explain reuses)."
        )
    elif walked.unreadable:
        where = ", ".join(printable(p) for p in walked.unreadable_named[:NAMED])
        lines.append(
            f"4. Unreadable directories: {walked.unreadable:,}"
            + (f" ({where})" if where else "")
            + f", holding at most {human_bytes(bound)} (the remainder). Next: {unread_step}."
        )
    else:
        lines.append("4. Unreadable directories: none.")
    snap_step = {
        "btrfs subvolumes": "btrfs subvolume list / btrfs qgroup show; deleting a snapshot frees its exclusive bytes",
        "zfs snapshots": "zfs list -t snapshot -o name,used; zfs destroy frees a snapshot's used bytes",
        "lvm thin snapshots": "lvs; lvremove a thin snapshot frees pool space",
        "apfs local snapshots": "tmutil listlocalsnapshots /; tmutil thinlocalsnapshots / frees them",
    }.get(snaps.kind, "")
    if snaps.kind and snaps.items:
        shown = "; ".join(
            f"{printable(s.name)} {'?' if s.exclusive is None else human_bytes(s.exclusive)}"
            for s in snaps.items[:NAMED]
        )
        note = f" ({snaps.note})" if snaps.note else ""
        lines.append(
            f"5. Snapshots and subvolumes: {human_bytes(snaps.bytes)} exclusive in {_snap_noun(snaps)}{note}: {shown}. Next: {snap_step}."
        )
    else:
        lines.append("5. Snapshots and subvolumes: none" + (f" ({snaps.note})" if snaps.note else "") + ".")
    reserved = (
        f"; {human_bytes(acc.figures.reserved)} reserved for root beside it (free space, not used)"
        if acc.figures.reserved
        else ""
    )
    if overhead.bytes is None:
        lines.append(
            f"6. Filesystem overhead (journal, metadata, inode tables): not reported, so it is in the remainder{reserved}."
        )
    else:
        lines.append(
            f"6. Filesystem overhead (journal, metadata, inode tables): {human_bytes(overhead.bytes)} ({overhead.source}){reserved}."
        )
    rest_step = (
        f"call again with a larger timeout_s (the walk stopped after {walked.elapsed:.0f} s)"
        if walked.stopped
        else "deleted_open_files and dir_usage; an unexplained remainder this small is metadata"
        if _percent(bound, used) <= 2
        else "look at the parts not checked above (root, quotas), then du -x against dir_usage"
    )
    lines.append(
        f"7. {label.capitalize()}: {human_bytes(bound)} ({_percent(bound, used)} % of used). Next: {rest_step}."
    )
    data: dict[str, Any] = {
        "mount_point": point,
        "used_bytes": used,
        "reserved_bytes": acc.figures.reserved,
        "partial": walked.stopped is not None,
        "files": {
            "bytes": walked.disk,
            "files": walked.files,
            "stopped": walked.stopped,
            "scanned_at": iso_utc(scanned.taken) if scanned is not None else None,
            "next_step": files_step,
        },
        "deleted_open": {
            "bytes": deleted.disk,
            "files": [
                {
                    "path": printable(f.path),
                    "bytes": f.disk,
                    "holders": [{"pid": p, "command": printable(c)} for p, c in f.holders],
                    "descriptor": f.descriptor,
                }
                for f in deleted.files[:NAMED]
            ],
            "not_named": deleted.not_named,
            "processes_unreadable": deleted.unreadable,
            "processes_vanished": deleted.vanished,
            "available": deleted.available,
            "next_step": del_step,
        },
        "hidden_under_mounts": {
            "bytes": hidden.disk,
            "checked": hidden.checked,
            "reason": hidden.reason,
            "mount_points": hidden.mount_points,
            "places": [
                {
                    "mount_point": display(os.path.join(acc.mount.mount_point, p.relative)),
                    "bytes": p.disk,
                    "files": p.files,
                }
                for p in hidden.places[:NAMED]
            ],
            "unlisted_mount_points": unlisted,
            "unlisted_bytes": unlisted_disk,
            "next_step": hid_step,
        },
        "unreadable_directories": {
            "count": walked.unreadable,
            "named": [printable(p) for p in walked.unreadable_named[:NAMED]],
            "upper_bound_bytes": bound if walked.unreadable else 0,
            "next_step": unread_step,
        },
        "snapshots": {
            "bytes": snaps.bytes,
            "kind": snaps.kind,
            "exact": snaps.exact,
            "note": snaps.note,
            "items": [
                {"name": printable(s.name), "bytes": s.exclusive, "snapshot": s.is_snapshot}
                for s in snaps.items[:NAMED]
            ],
            "next_step": snap_step,
        },
        "overhead": {"bytes": overhead.bytes, "source": overhead.source},
        "remainder": {
            "bytes": rest,
            "percent": _percent(rest, used),
            "not_walked": walked.stopped is not None,
            "next_step": rest_step,
        },
        "seconds": round(acc.elapsed, 3),
    }
    return "\n".join(lines), data
