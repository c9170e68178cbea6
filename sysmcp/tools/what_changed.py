"""what_changed: what grew, what shrank, since when, where the bytes went and when the disk fills.

The flow (docs/history.md): the store finds the snapshots of this path's series (host, filesystem
identity, root, scan options); when the newest is older than ``FRESH_S`` a fresh scan is made (and
leaves a snapshot); ``history.diff`` compares the two; the disk readings give the fill rate. Every
path shown passes the roots in force on read, whoever recorded the snapshot. Without a baseline the
answer says so, records one, and lists files modified since then: a lower bound.

The answer (``render``) is worded from the engine's ``Findings``, not from the typed result
(``WhatChanged``) it also builds: the words need facts the JSON does not carry (local times, each
changed file's records then and now, the lower bound's files, every change for the full list), in
the order an admin acts on them (the change and where it is, growth and shrinkage apart, the files,
the filesystem, the integrity baseline against the tree now).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from sysmcp.engine.paths import call_argument, escaped
from sysmcp.engine.walk import more_time_helps
from sysmcp.history import state
from sysmcp.history.compare import MIN_FIT_S, Comparison, Findings, compare
from sysmcp.history.diff import CTIME_ALONE, BaselineDiff, Entry, ctime_only, not_compared
from sysmcp.history.snapshots import FILES_KEPT, BaselineFile, BaselineNode, ScanSnapshot, within
from sysmcp.protocol.failures import ArgumentError
from sysmcp.render import age, human_bytes, more_not_shown, plural, table
from sysmcp.tools import schemas as js
from sysmcp.tools.dir_usage import FULL_FILES, parse_duration
from sysmcp.tools.merging import HostOutcome, fleet_output, typed_results
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput, listing_name
from sysmcp.tools.typed import ABSENT, Open, Opt, iso_utc, prop, result
from sysmcp.tools.walking import (
    directory_argument,
    joined,
    scan_failure,
    walk_options,
    walk_properties,
)

TIMEOUT = js.TimeBudget(default=60.0, maximum=300.0)
#: Changes the kept full list names at most, the largest first: a million would be past what a result may
#: keep (``results.MAX_ITEM``), and building each row costs time and memory the answer does not need.
FULL_LIST_MAX = 100_000

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "path": js.path_argument(),
        "since": js.string(
            "'24h', '7d', an ISO 8601 time, or 'last' (the snapshot before the newest).",
            minLength=1,
            maxLength=40,
            default="24h",
        ),
        "until": js.string("As since, not 'last'. Default: now.", minLength=1, maxLength=40),
        "top_n": js.top_n_argument(maximum=50, default=10),
        "timeout_s": TIMEOUT.property(),
        **walk_properties("path"),
    }
)


def parse_when(value: str, name: str, now: float) -> float:
    """Epoch seconds of '24h' (back from now) or an ISO 8601 time; ``ArgumentError`` naming ``name``.
    A ``since`` in the future is refused (nothing can have changed since)."""
    try:
        return now - parse_duration(value, name)
    except ArgumentError:
        pass
    try:
        when = datetime.fromisoformat(value.strip()).timestamp()
    except ValueError:
        raise ArgumentError(
            f"Invalid arguments: {name!r} must be a duration ('24h', '7d'), an ISO 8601 time "
            f"('2026-11-30T09:00'){' or last' if name == 'since' else ''}, got {value!r}"
        ) from None
    if name == "since" and when > now:
        raise ArgumentError(
            f"Invalid arguments: 'since' is in the future ({value!r}): give a duration back from now "
            "('24h') or a past time"
        )
    return when


def comparison(
    path: Path,
    args: dict[str, Any],
    now: float,
    visible: Callable[[bytes | str], bool],
    clock: Callable[[], float] = state.now,
) -> Comparison:
    """The engine's request from validated arguments (``since`` 'last': None; an ``until`` not before
    now: None, now, which scans afresh when the newest snapshot is stale)."""
    since_raw: str = args["since"]
    since = None if since_raw.strip().lower() == "last" else parse_when(since_raw, "since", now)
    until = parse_when(args["until"], "until", now) if "until" in args else None
    if until is not None and since is not None and until <= since:
        # Else the snapshots before since were compared, as if the two were given the other way round.
        raise ArgumentError(
            f"Invalid arguments: 'until' ({args['until']!r}) is not after 'since' ({since_raw!r}): give an "
            "until later than since, or leave it out for now"
        )
    return Comparison(
        path=os.fsencode(path),
        since=since,
        until=until if until is not None and until < now else None,
        now=now,
        timeout_s=TIMEOUT.of(args),
        options=walk_options(args),
        files_kept=FULL_FILES,
        visible=visible,
        clock=clock,
    )


@result
class StoredScan(Open):
    id: int = prop("Its id in the history store.")
    taken: str | None = prop("When it was taken (ISO 8601, UTC).")
    partial: bool = prop("True when that scan stopped early.")
    fresh: Opt[bool] = prop("Scanned for this call.")


@result
class Share(Open):
    """Growth or shrinkage: the deepest directories that hold it."""

    total_bytes: int = prop("The whole growth, or shrinkage (negative), in disk bytes.")
    covered_bytes: int = prop("The part of it inside the listed directories.")
    percent: float | None = prop("That part's share of the whole.")
    paths: list[str] = prop("The deepest directories that hold it.")


@result
class Change(Open):
    path: str = prop()
    kind: Literal["grew", "shrank", "appeared", "disappeared", "modified"] = prop(
        "grew, shrank, appeared, disappeared, or modified (the same size, a file in it rewritten)."
    )
    delta_bytes: int = prop("Change in disk bytes.")
    delta_apparent_bytes: Opt[int] = prop("Change in apparent bytes.")
    old_bytes: int | None = prop("Disk bytes then (null when it appeared).")
    new_bytes: int | None = prop("Disk bytes now (null when it disappeared).")
    per_day_bytes: float | None = prop(
        "The change as a rate per day (null for snapshots under 10 minutes apart)."
    )
    was_below_threshold: Opt[bool] = prop("It was too small to be recorded then (or did not exist).")
    delta_is_upper_bound: Opt[bool] = prop(
        "True when the delta counts its whole size: it had up to threshold_bytes then, not recorded, so "
        "the true change is between delta - threshold_bytes and delta."
    )
    newest_modified: Opt[str | None] = prop(
        "The newest file modification in it now (ISO 8601, UTC; null if unknown)."
    )
    files_changed: Opt[bool | None] = prop(
        "Whether a file in it is newer than any it held then (null if unknown)."
    )
    parents: Opt[list[str]] = prop("Parent directories carrying this same change, not listed themselves.")


@result
class NewFile(Open):
    path: str = prop()
    disk_bytes: int = prop()
    modified: str | None = prop("Modification time (ISO 8601, UTC).")


@result
class RemovedFile(Open):
    path: str = prop()
    disk_bytes: int = prop()


@result
class ShrunkFile(Open):
    path: str = prop()
    old_disk_bytes: int = prop("Disk bytes then.")
    disk_bytes: int = prop()


@result
class FilesystemGrowth(Open):
    mount_point: str = prop()
    readings: int = prop("Disk readings in the span.")
    span_s: float = prop("Seconds between the first and the last of them.")
    growth_bytes: int = prop("Used bytes gained (negative: freed).")
    unexplained_bytes: Opt[int | None] = prop("The part the directories under path do not account for.")


@result
class Fill(Open):
    mount_point: str = prop()
    readings: int = prop("disk_usage readings the fit used.")
    span_s: float = prop("Seconds between the first and the last reading.")
    bytes_per_day: float = prop("Least-squares fill rate.")
    seconds_to_full: float | None = prop("Seconds until full at that rate (null when not filling).")
    growth_bytes: Opt[int] = prop("Used bytes gained over the span.")


@result
class Integrity(Open):
    comparable: bool = prop("Whether the newest baseline could be compared with the tree hashed now.")
    added: Opt[int] = prop(
        "Files, symbolic links, directories and special files added (those not readable now too: their content "
        "not hashed; with unrecorded_at_baseline, any may have been there, one the baseline could not read and "
        "did not name).",
        default=ABSENT,
    )
    removed: Opt[int] = prop("Files, symbolic links, directories and special files removed.", default=ABSENT)
    content_changed: Opt[int] = prop(
        "Files whose content digest changed, and files unreadable at the baseline whose size, mtime or ctime "
        "changed since (content not compared: may have changed); symbolic links re-pointed (another target), "
        "device nodes given another device number, and names whose type changed (a file now a link).",
        default=ABSENT,
    )
    metadata_changed: Opt[int] = prop(
        "Files of the same content whose mode, owner or mtime changed, or only their ctime (a mode undone, a "
        "hard link, ACLs or xattrs); unreadable at the baseline: mode or owner only. Directories, symbolic "
        "links and special files whose mode or owner changed.",
        default=ABSENT,
    )
    not_checked: Opt[int] = prop("Baseline files not hashed now: hashing stopped early.", default=ABSENT)
    unreadable: Opt[int] = prop(
        "Files of the baseline, read then or not, still there and not readable now (not called removed); "
        "directories that cannot be listed now, ending in a slash: what they hold cannot be seen.",
        default=ABSENT,
    )
    links_and_directories_compared: Opt[bool] = prop(
        "Whether symbolic links (target, owner), directories (mode, owner) and special files (type, device "
        "number, mode, owner) are compared. False for a baseline an older sysmcp recorded: it holds regular "
        "files only, so none of those is called added, removed or changed.",
        default=ABSENT,
    )
    links_and_directories_not_compared: Opt[int] = prop(
        "Symbolic links, directories and special files not compared, at least: the baseline or the tree now "
        "had more than a baseline records (250,000). Left out when none.",
        default=ABSENT,
    )
    symlinks_not_compared: Opt[int] = prop(
        "Symbolic links under path now, for a baseline an older sysmcp recorded (regular files only): a link "
        "planted or re-pointed is no finding. Left out when none.",
        default=ABSENT,
    )
    special_files_not_compared: Opt[int] = prop(
        "FIFOs, sockets and devices under path now, not compared for the same reason. Left out when none.",
        default=ABSENT,
    )
    unreadable_at_baseline: Opt[int] = prop(
        "Files unreadable when the baseline was taken and read now, lstat showing no change since: "
        "whether they changed cannot be said (not called added). Left out when none.",
        default=ABSENT,
    )
    not_comparable: Opt[int] = prop(
        "Files read now below a directory the baseline could not read: nothing to compare them with "
        "(not called added). Left out when none.",
        default=ABSENT,
    )
    mounted_over: Opt[int] = prop(
        "Files, directories, symbolic links and special files of the baseline at or below a directory "
        "another filesystem is mounted on now, which the walk does not cross (one_file_system): not "
        "looked at, so not called removed or unreadable. Left out when none.",
        default=ABSENT,
    )
    unrecorded_at_baseline: Opt[int] = prop(
        "Files and directories the baseline could not read past the number it records: any of them read "
        "now is called added. Left out when none.",
        default=ABSENT,
    )
    unreadable_now_unnamed: Opt[int] = prop(
        "Files and directories that could not be read now past the number named: any of them may be new "
        "(none is in the other counts). Left out when none.",
        default=ABSENT,
    )
    baseline_taken: Opt[str | None] = prop("When the baseline was taken (ISO 8601, UTC).", default=ABSENT)
    examples: Opt[dict[str, list[str]]] = prop(
        "Some of the files of each kind, by its key (added, removed, content_changed, metadata_changed, "
        "unreadable, unreadable_at_baseline, not_comparable, mounted_over).",
        default=ABSENT,
    )


@result
class LowerBoundFiles(Open):
    files: int = prop()
    disk_bytes: int = prop()
    since: Opt[str | None] = prop("Files modified since this time were counted (ISO 8601, UTC).")


@result
class WhatChanged:
    path: str = prop()
    history: bool = prop("False when history is off on this host.")
    baseline: Opt[StoredScan | None] = prop("The older snapshot compared.")
    current: Opt[StoredScan | None] = prop("The newer snapshot compared.")
    comparable: bool = prop("True when two snapshots were compared.")
    reason: Opt[str | None] = prop("Why nothing was compared, if so.")
    complete: bool = prop(
        "False when a scan (lower_bound's too) was partial, comparing stopped early, or the integrity "
        "check stopped before hashing all."
    )
    stopped_reason: Opt[Literal["time_budget", "scan_stopped", "snapshot_pruned"] | None] = prop(
        "Why comparing stopped early: its time budget ran out, the scan made now stopped early, or a prune "
        "deleted a snapshot as it was compared (nothing compared); null when it did not."
    )
    seconds: Opt[float | None] = prop("Time between the two snapshots.")
    total_delta_bytes: int = prop("Disk bytes under path, newer minus older.")
    attribution: Opt[Share | None] = prop("How much of the growth the listed directories explain.")
    shrinkage: Opt[Share | None] = prop("How much of the shrinkage the listed directories explain.")
    changes: list[Change] = prop(
        "Directories that grew, shrank, appeared or disappeared, largest change first."
    )
    changes_not_shown: Opt[int] = prop("Further changes left out of this list.")
    threshold_bytes: Opt[int | None] = prop("Directories smaller than this are not tracked in snapshots.")
    new_files: Opt[list[NewFile]] = prop("Large files of the newer snapshot the older did not list.")
    removed_files: Opt[list[RemovedFile]] = prop("Large files of the older snapshot that are gone.")
    shrunk_files: Opt[list[ShrunkFile]] = prop("Large files of the older snapshot that are smaller now.")
    filesystem_growth: Opt[FilesystemGrowth | None] = prop(
        "Used bytes of the filesystem between the disk readings over the compared span."
    )
    filesystem: Opt[Fill | None] = prop(
        "The fill rate: a least-squares fit of used bytes over the disk readings."
    )
    integrity: Opt[Integrity | None] = prop("Against the integrity baseline (hash_tree baseline: true).")
    lower_bound: Opt[LowerBoundFiles | None] = prop(
        "No snapshot to compare: files modified since 'since' (a lower bound of the growth)."
    )
    notes: list[str] = prop("Facts about this answer (history off, a snapshot not saved, ...).")
    grown_files: Opt[list[ShrunkFile]] = prop(
        "Large files of the older snapshot that are larger now (left out when none).", default=ABSENT
    )


def signed(size: int) -> str:
    return ("+" if size >= 0 else "−") + human_bytes(abs(size))


def _snapshot(snap: ScanSnapshot | None, fresh: bool = False) -> StoredScan | None:
    if snap is None or snap.id is None:
        return None
    return StoredScan(snap.id, iso_utc(snap.taken), snap.partial, fresh)


def history_off() -> str:
    """ "history is off on this host (…)" with the store's own reason when it was found unusable."""
    return f"history is off on this host ({state.off_because()})"


def _when(epoch: float | None, seconds: bool = False) -> str:
    """A snapshot's time as an admin glances at it, in local time: 'Mon 30 Nov 09:00' (with the
    seconds, 'Mon 30 Nov 09:00:12', for times under an hour apart)."""
    if epoch is None:
        return "?"
    return time.strftime("%a %d %b %H:%M:%S" if seconds else "%a %d %b %H:%M", time.localtime(epoch))


def _span(start: float, end: float) -> str:
    """'Thu 03 Dec 07:51:02 → 07:51:40': the second end without the day it shares with the first."""
    precise = abs(end - start) < 3600
    first, last = _when(start, precise), _when(end, precise)
    day = first[: len("Thu 03 Dec ")]
    return f"{first} → {last[len(day) :] if last.startswith(day) else last}"


def window(since: str) -> str:
    """'in the last 2 h' for a duration ('2h'), 'since 2026-12-03T07:00' for a time: never 'since 2h'."""
    if since.strip().lower() == "last":
        return "in the last 24 h"
    try:
        return f"in the last {age(parse_duration(since, 'since'))}"
    except ArgumentError:
        return f"since {since}"


def notes_of(outcome: Findings) -> list[str]:
    """The engine's facts as the answer's notes, in the order the engine met them."""
    if not outcome.history:
        return [history_off()]
    notes = []
    if outcome.unread is not None:
        notes.append(f"the history store could not be read ({outcome.unread}), so nothing was compared")
    if outcome.unsaved is not None:
        notes.append(outcome.unsaved)
    if outcome.oldest_instead is not None and outcome.diff is not None and outcome.diff.comparable:
        notes.append(
            f"no snapshot as old as asked: compared with the oldest, {_when(outcome.oldest_instead)}"
        )
    if outcome.readings_span_s is not None:
        notes.append(
            f"the disk readings of {escaped(outcome.mount_point)} span only {age(outcome.readings_span_s)}: too short "
            "for a fill rate (disk_usage with sample_s gives the short-term rate)"
        )
    integrity = outcome.integrity
    if integrity is not None and integrity.comparable and integrity.reason:
        notes.append(integrity.reason)
    return notes + (outcome.diff.notes if outcome.diff is not None else []) + outcome.notes


def render(shown: str, found: Findings, args: dict[str, Any]) -> tuple[str, WhatChanged, str | None]:
    """Text, the typed result, and the full list of changes when the text shows only some."""
    top_n: int = args["top_n"]

    def named(rel: bytes) -> str:
        return joined(shown, rel) if rel else shown

    heading = escaped(shown)  # the directory resolved: a symlink's target, a name nobody here chose

    lines: list[str] = []
    diff = found.diff
    old, new = found.old, found.new
    cut = diff.stopped if diff is not None else None  # comparing the two stopped before the end
    complete = not ((old and old.partial) or (new and new.partial) or cut)
    threshold = max(old.threshold, new.threshold) if old and new else None
    notes = notes_of(found)
    shares: dict[str, Share | None] = {"grew": None, "shrank": None}
    rows: list[Change] = []
    new_files: list[NewFile] = []
    removed: list[RemovedFile] = []
    shrunk: list[ShrunkFile] = []
    larger: list[ShrunkFile] = []
    full: str | None = None
    if cut is not None:
        lines.append(
            f"PARTIAL RESULT: comparing the two snapshots stopped early ({cut}): no change is named, as "
            "those of only some directories would misstate the whole; a larger timeout_s gives it more time."
        )
    elif not complete:
        why = found.scan_stopped_reason
        why = "its time budget" if why is None or more_time_helps(why) else why  # else no descriptor left
        lines.append(
            f"PARTIAL RESULT: the scan made now stopped early ({why}): it is compared with no snapshot, "
            "as directories it did not reach would look gone."
        )
    if diff is not None and old is not None and new is not None:
        precise = abs(new.taken - old.taken) < 3600
        span = _span(old.taken, new.taken) + (" (scanned now)" if found.fresh else "")
        if not diff.comparable:
            lines.append(f"{heading}: not compared ({span}): {diff.reason}.")
        else:
            days = f" over {age(diff.seconds)}" if diff.seconds > 0 else ""
            lines.append(
                f"{heading}: {signed(diff.total_delta)} on disk since {_when(old.taken, precise)}{days} "
                f"[{span}; directories under {human_bytes(threshold or 0)} are not tracked]"
            )
            rated = diff.seconds >= MIN_FIT_S  # a rate per day from minutes apart says nothing
            if 0 < diff.seconds < MIN_FIT_S:
                notes.append(f"the snapshots are {age(diff.seconds)} apart: too close for rates per day")
            for way, attribution in (("grew", diff.attribution), ("shrank", diff.shrinkage)):
                if attribution is None or not attribution.paths:
                    continue
                percent = attribution.percent
                count = len(attribution.paths)
                where = f"these {count} directories" if count > 1 else "this directory"
                share = (
                    ""
                    if attribution.covered == attribution.total
                    else f" {signed(attribution.covered)}"
                    + (f" ({percent:.0f} %)" if percent is not None else "")
                    + " of it"
                )
                lines.append(
                    f"{signed(attribution.total)} {way},{share} in {where}: "
                    + ", ".join(escaped(named(p)) for p in attribution.paths[:top_n])
                    + (f" … and {count - top_n} more" if count > top_n else "")
                )
                shares[way] = Share(
                    attribution.total,
                    attribution.covered,
                    None if percent is None else round(percent, 1),
                    [named(p) for p in attribution.paths],
                )
            below = human_bytes(old.threshold)
            changed = "Directories that changed most:"
            lines.append(changed if diff.changes else "No directory changed by more than the threshold.")
            for c in diff.changes[:FULL_LIST_MAX]:
                was_below = c.was_below and old.partial is False and c.kind == "appeared"
                row = Change(
                    path=named(c.path),
                    kind=c.kind,  # type: ignore[arg-type]
                    delta_bytes=c.delta,
                    delta_apparent_bytes=c.delta_apparent,
                    old_bytes=c.old.disk if c.old else None,
                    new_bytes=c.new.disk if c.new else None,
                    per_day_bytes=None if c.per_day is None or not rated else round(c.per_day, 1),
                    was_below_threshold=was_below,
                    delta_is_upper_bound=was_below,
                    newest_modified=iso_utc(c.newest) if c.newest is not None else None,
                    files_changed=c.files_changed,
                    parents=[named(p) for p in c.parents],
                )
                rows.append(row)
                if len(rows) > top_n:
                    continue
                said: list[str] = [] if row.kind in ("grew", "shrank") else [row.kind]
                if was_below:
                    said = [f"appeared, or under the {below} threshold then: the delta is at most this"]
                elif row.kind == "modified":
                    said = ["same size, files rewritten"]
                if c.files_changed and c.newest is not None:
                    said.append(f"newest change {_when(c.newest, precise)}")
                if row.parents:
                    parents = ", ".join(escaped(p) + "/" for p in row.parents)
                    said.append(f"the same change as its {plural(len(row.parents), 'parent')} {parents}")
                note = f" ({'; '.join(said)})" if said else ""
                per_day = "" if row.per_day_bytes is None else f", {signed(int(row.per_day_bytes))}/day"
                lines.append(f"  {signed(row.delta_bytes):>11}  {escaped(row.path)}/{note}{per_day}")
            if len(diff.changes) > top_n:
                lines.append(f"  {more_not_shown(len(diff.changes) - top_n, 'directory')}")
                full = _full_list(rows)
            new_files = [
                NewFile(named(f.path), f.disk, iso_utc(f.mtime) if f.mtime is not None else None)
                for f in diff.new_files[:top_n]
            ]
            removed = [RemovedFile(named(f.path), f.disk) for f in diff.removed_files[:top_n]]
            shrunk = [ShrunkFile(named(b.path), a.disk, b.disk) for a, b in diff.shrunk_files[:top_n]]
            larger = [ShrunkFile(named(b.path), a.disk, b.disk) for a, b in diff.grown_files[:top_n]]
            lines += _titled(
                "Largest new files:",
                [f"{human_bytes(f.disk_bytes):>10}  {escaped(f.path)}" for f in new_files],
            )
            lines += _titled(
                "Largest files removed:",
                [f"{signed(-f.disk_bytes):>11}  {escaped(f.path)}" for f in removed],
            )
            lines += _titled("Largest files that shrank:", [_resized(f) for f in shrunk])
            lines += _titled("Largest files that grew:", [_resized(f) for f in larger])
            if diff.new_maybe_grown:
                notes.append(
                    f"the older snapshot kept only its {FILES_KEPT} largest files: a file named new may have "
                    "been there then, no larger than the smallest of those"
                )
            if diff.tied_files:
                tied = len(diff.tied_files)
                notes.append(
                    f"{tied:,} file{'s' if tied != 1 else ''} the older snapshot kept, of just the size of the "
                    f"smallest the newer kept ({human_bytes(diff.tied_files[0].disk)}), "
                    f"{'are' if tied != 1 else 'is'} not in the newer's list: cut from it among equals or "
                    "gone, not called removed"
                )
            if diff.unlisted:
                when = " and ".join(_when(snap.taken, precise) for snap in diff.unlisted)
                notes.append(
                    f"the {'snapshots' if len(diff.unlisted) > 1 else 'snapshot'} of {when} kept no list of "
                    "the tree's largest files (a scan filtered by time or size, or one that listed none), so "
                    "no file is named as new, removed or shrunk"
                )
    elif not found.history:
        lines.append(f"{heading}: nothing to compare with: {history_off()}, so no snapshot is kept.")
    elif found.unread is not None:
        lines.append(f"{heading}: no snapshot could be read to compare with.")
    elif found.not_kept:  # an older snapshot may be there: none of now
        lines.append(f"{heading}: nothing compared: the scan made now could not be kept as a snapshot.")
    elif found.other_filesystem:
        kept = plural(found.other_filesystem, "snapshot") + (" is" if found.other_filesystem == 1 else " are")
        recorded = (
            "; a snapshot of that one was recorded now, so the next what_changed can compare against it"
        )
        lines.append(
            f"{heading}: nothing to compare with: the {kept} of another filesystem once mounted there (its "
            f"identity changed), never compared with the one there now{recorded if found.new else ''}."
        )
    elif found.lower_bound is not None:
        recorded = "one was recorded now, so the next what_changed can compare against it"
        if found.partial_before:
            lines.append(
                f"{heading}: no complete earlier snapshot to compare with: {_partial(found)}; {recorded}."
            )
        elif found.baselines:  # "no baseline" would deny the integrity baseline compared below
            lines.append(
                f"{heading}: no earlier scan to compare sizes with (an integrity baseline keeps no directory "
                f"sizes); {recorded}."
            )
        else:
            lines.append(f"{heading}: no earlier snapshot to compare with (no baseline yet); {recorded}.")
    elif found.partial_before:
        lines.append(f"{heading}: no complete snapshot to compare with: {_partial(found)}.")
    else:
        lines.append(f"{heading}: no snapshot to compare with.")
    lower: LowerBoundFiles | None = None
    if found.lower_bound is not None:
        count, disk, files, stopped = found.lower_bound
        since_raw = args["since"]
        if stopped:  # a lower bound still, of only what the walk reached
            complete = False
            more = "; a larger timeout_s gives it more time" if more_time_helps(stopped) else ""
            lines.insert(
                0,
                f"PARTIAL RESULT: the walk for files modified since stopped early ({stopped}): the lower bound "
                f"below counts only the files it reached{more}.",
            )
        lines.append(
            f"LOWER BOUND: files modified {window(since_raw)}: {count:,}, {human_bytes(disk)} on disk (growth from files "
            "that were only deleted or changed in place is not seen this way)."
        )
        listed = files[:top_n]
        for rel, size in listed:
            lines.append(f"  {human_bytes(size):>10}  {escaped(named(os.fsencode(rel)))}")
        if count > len(listed):
            lines.append(f"  {more_not_shown(count - len(listed), 'file')}")
        lower = LowerBoundFiles(count, disk, since_raw)
    growth: FilesystemGrowth | None = None
    if found.growth is not None:
        grown = found.growth
        point = escaped(found.mount_point)
        explained = diff.total_delta if diff is not None and diff.comparable else None
        rest = None if explained is None else grown.used - explained
        line = (
            f"Filesystem {point}: used {signed(grown.used)} from {plural(grown.readings, 'disk reading')} "
            f"[{_span(grown.first, grown.last)}]"
        )
        if rest is not None and abs(rest) >= (threshold or 0):
            line += (
                f"; the directories under {escaped(shown)} account for {signed(explained or 0)}, so "
                f"{signed(rest)} is elsewhere (other directories, deleted files still open): "
                f"disk_usage path={call_argument(found.mount_point)} explain=true accounts for it"
            )
        lines.append(line + ".")
        growth = FilesystemGrowth(found.mount_point, grown.readings, round(grown.span_s, 3), grown.used, rest)
    fill: Fill | None = None
    if found.fill is not None:
        rate = found.fill
        to_full = (
            f"full in about {age(rate.seconds_to_full)} at this rate"
            if rate.seconds_to_full is not None
            else "not filling"
        )
        lines.append(
            f"Filesystem {escaped(found.mount_point)}: {signed(int(rate.bytes_per_day))}/day (least-squares fit of "
            f"{rate.readings} readings over {age(rate.span_s)}), {to_full}."
        )
        fill = Fill(
            found.mount_point,
            rate.readings,
            round(rate.span_s, 3),
            round(rate.bytes_per_day, 1),
            None if rate.seconds_to_full is None else round(rate.seconds_to_full, 1),
            rate.growth,
        )
    integrity = _integrity_lines(found, lines, named, top_n)
    checked = found.integrity
    if found.integrity_stopped is not None and checked is not None and checked.comparable:
        complete = False  # the files it did not reach: not checked, and new ones there not seen
        stopped = found.integrity_stopped
        timed = more_time_helps(stopped)  # else no descriptor was left: more time stops at the same place
        lines.insert(
            0,
            "PARTIAL RESULT: the integrity check stopped early ("
            + ("in what the scan left of the time budget: " if timed else "")
            + f"{stopped}): {plural(checked.not_checked, 'file')} of the baseline not hashed, and files added "
            + "where it did not reach are not named"
            + ("; a larger timeout_s gives it more time." if timed else "."),
        )
    for note in notes[1 if not found.history else 0 :]:  # history off: the first line says it
        lines.append(f"Note: {note}.")
    answer = WhatChanged(
        path=shown,
        history=found.history,
        baseline=_snapshot(old),
        current=_snapshot(new, found.fresh),
        comparable=bool(diff and diff.comparable),
        reason=diff.reason if diff else None,
        complete=bool(complete) and found.stopped is None,
        stopped_reason=found.stopped,
        seconds=diff.seconds if diff else None,
        total_delta_bytes=diff.total_delta if diff and diff.comparable else 0,
        attribution=shares["grew"],
        shrinkage=shares["shrank"],
        changes=rows[:top_n],
        changes_not_shown=(len(diff.changes) if diff is not None and diff.comparable else 0)
        - len(rows[:top_n]),
        threshold_bytes=threshold,
        new_files=new_files,
        removed_files=removed,
        shrunk_files=shrunk,
        grown_files=larger or ABSENT,
        filesystem_growth=growth,
        filesystem=fill,
        integrity=integrity,
        lower_bound=lower,
        notes=notes,
    )
    return "\n".join(lines), answer, full


def _titled(title: str, lines: list[str]) -> list[str]:
    """``title`` and the ``lines`` indented under it; nothing for no line."""
    return [title, *(f"  {line}" for line in lines)] if lines else []


def _resized(f: ShrunkFile) -> str:
    """'−6.0 MiB  /srv/a/log (8.0 MiB → 2.0 MiB)'."""
    sizes = f"{human_bytes(f.old_disk_bytes)} → {human_bytes(f.disk_bytes)}"
    return f"{signed(f.disk_bytes - f.old_disk_bytes):>11}  {escaped(f.path)} ({sizes})"


def _full_list(rows: list[Change]) -> str:
    """Every change, one tab-separated line each, for the resource kept when the text shows only some."""
    out = ["delta_bytes\tkind\told_bytes\tnew_bytes\tper_day_bytes\tnewest_modified\tpath"]
    out += [
        f"{r.delta_bytes}\t{r.kind}\t{r.old_bytes if r.old_bytes is not None else ''}\t"
        f"{r.new_bytes if r.new_bytes is not None else ''}\t{r.per_day_bytes or ''}\t"
        f"{r.newest_modified or ''}\t{escaped(r.path)}"
        for r in rows
    ]
    return "\n".join(out) + "\n"


def _what_changed(then: BaselineFile, now: BaselineFile) -> str:
    """'mode 0640 → 0600, owner 0:0 → 1000:1000': what differs between a file's two records."""
    parts = []
    if then.size != now.size:
        parts.append(f"size {human_bytes(then.size)} → {human_bytes(now.size)}")
    if then.mode != now.mode:
        parts.append(f"mode {then.mode:04o} → {now.mode:04o}")
    if (then.uid, then.gid) != (now.uid, now.gid):
        parts.append(f"owner {then.uid}:{then.gid} → {now.uid}:{now.gid}")
    if then.mtime != now.mtime:
        parts.append(_times("mtime", then.mtime, now.mtime))
    if ctime_only(then, now) and then.ctime is not None and now.ctime is not None:
        parts.append(_times("ctime", then.ctime, now.ctime))  # every other change sets it too: named alone
    return ", ".join(parts)


def _partial(found: Findings) -> str:
    """Why the snapshots before were not compared: they stopped early, their totals of part of the tree."""
    one = found.partial_before == 1
    kept = "the one snapshot before" if one else f"the {found.partial_before:,} snapshots before"
    return (
        f"{kept} stopped early (partial: {'its' if one else 'their'} totals cover part of the tree) and "
        f"{'is' if one else 'are'} not compared"
    )


def _times(name: str, then: float, now: float) -> str:
    """'mtime 2026-12-01T09:00:00Z → 2026-12-04T18:00:00Z', or 'changed within' one second."""
    before, after = iso_utc(then), iso_utc(now)
    return f"{name} {before} → {after}" if before != after else f"{name} changed within {after}"


def _integrity_detail(kind: str, then: BaselineFile, now: BaselineFile) -> str:
    """What the text says of a file whose records then and now differ, listed under ``kind``. Where
    the content was not compared (unreadable then or now) a changed size, mtime or ctime says it may
    have changed, and the words say so."""
    detail = _what_changed(then, now)
    inode = ctime_only(then, now)
    if kind == "unreadable":  # not read now: lstat's word only
        when = "now" if then.digest else "then and now"
        tail = " (metadata or content changed; content not compared)" if inode else ""
        return f"unreadable {when}, but since the baseline: {detail}{tail}"
    if then.digest:  # read then and now: the digests were compared
        same = inode and kind == "metadata_changed"
        return f"{detail}: the inode changed, its content did not" if same else detail
    if kind == "metadata_changed":  # unreadable at the baseline: a mode or owner changed, not size or times
        return f"unreadable at the baseline, its content not compared; {detail}"
    if then.size != now.size:  # another size is another content
        return f"unreadable at the baseline; {detail}"
    what = f"{detail}: metadata or content changed" if inode else detail
    return f"unreadable at the baseline; changed ({what}): content not compared, may have changed"


def _integrity_kinds(integrity: BaselineDiff) -> dict[str, list[bytes]]:
    """The names of each kind of integrity finding, by the key the answer counts them under."""
    kinds = {
        "added": integrity.added,
        "removed": integrity.removed,
        "content_changed": integrity.content,
        "metadata_changed": [p for p, _ in integrity.metadata],
    }
    if integrity.unreadable:  # still there, not read now: root squashed on NFS, a mode changed since
        kinds["unreadable"] = integrity.unreadable
    if integrity.unread_then:  # the baseline recorded them as unreadable: not added
        kinds["unreadable_at_baseline"] = integrity.unread_then
    if integrity.not_comparable:
        kinds["not_comparable"] = integrity.not_comparable
    if integrity.mounted_over:  # another filesystem mounted there since, not crossed: not looked at
        kinds["mounted_over"] = integrity.mounted_over
    return kinds


def _finding_detail(integrity: BaselineDiff, kind: str, path: bytes) -> str:
    """What the answer says of one finding beside its name (empty when nothing more is known)."""
    if kind == "mounted_over":
        mounted = (
            "another filesystem is mounted on it now, not crossed"
            if path in integrity.mount_points
            else "another filesystem is mounted over its directory now"
        )
        then = integrity.nodes.get(path, (None, None))[0]
        return mounted if then is None else f"was {_entry_words(then)}; {mounted}"
    if path in integrity.nodes:  # a directory, symbolic link or special file, then or now
        return _node_detail(kind, *integrity.nodes[path])
    pair = integrity.files.get(path)
    detail = _KIND_DETAILS.get(kind, "") if pair is None else _integrity_detail(kind, *pair)
    if kind == "removed" and path in integrity.replaced:  # the file is gone, its name is not
        what = _FILE_TYPE_WORDS.get(integrity.replaced[path], "another kind of file")
        detail = f"now {what}, not a regular file"
    if path in integrity.unread_now:  # not read now, never recorded as unreadable: not left out
        detail = f"{detail}, {_UNREAD_NOW[kind]}" if detail else _UNREAD_NOW[kind]
    return detail


def _entry_words(entry: Entry) -> str:
    """'a symbolic link to '/tmp/x'', 'a directory', 'a character device 1,3': what a record is. A link's
    target as ``os.fsdecode`` makes it: the line that shows it escapes it (``escaped``)."""
    if isinstance(entry, BaselineFile):
        return "a regular file"
    what = _FILE_TYPE_WORDS.get(entry.kind, "another kind of file")
    if entry.target is not None:
        return f"{what} to '{os.fsdecode(entry.target)}'"
    if entry.rdev is not None:
        return f"{what} {os.major(entry.rdev)},{os.minor(entry.rdev)}"
    return what


def _node_detail(kind: str, then: Entry | None, now: Entry | None) -> str:
    """What the answer says of a directory, symbolic link or special file (then, now, or both) listed
    under ``kind``: what it is, and for a change, what differs."""
    if then is None or now is None:
        entry = now if then is None else then
        assert entry is not None
        what = _entry_words(entry)
        if kind == "removed":
            return f"was {what}"
        if kind == "unreadable":
            return f"was {what}: its directory cannot be listed now"
        if kind == "not_comparable":
            return f"{what}, below a directory unreadable at the baseline"
        return f"{what}, mode {entry.mode:04o}, owner {entry.uid}:{entry.gid}"
    parts = []
    if kind == "content_changed":
        same_type = isinstance(then, BaselineNode) and isinstance(now, BaselineNode) and then.kind == now.kind
        if not same_type:
            parts.append(f"{_entry_words(then)} → {_entry_words(now)}")
        elif isinstance(then, BaselineNode) and isinstance(now, BaselineNode) and then.target != now.target:
            parts.append(f"target '{os.fsdecode(then.target or b'')}' → '{os.fsdecode(now.target or b'')}'")
        else:
            parts.append(f"{_entry_words(then)} → {_entry_words(now).rpartition(' ')[2]}")  # its number
    else:
        parts.append(_entry_words(now).removeprefix("a ").removeprefix("an "))
    if then.mode != now.mode and isinstance(then, BaselineNode) == isinstance(now, BaselineNode):
        parts.append(f"mode {then.mode:04o} → {now.mode:04o}")
    if (then.uid, then.gid) != (now.uid, now.gid):
        parts.append(f"owner {then.uid}:{then.gid} → {now.uid}:{now.gid}")
    return ", ".join(parts)


def integrity_listing(found: Findings, shown: str, top_n: int) -> str | None:
    """Every integrity finding as tab-separated kind, name and what changed, when the text names only
    ``top_n`` of a kind: an audit needs the whole list, not the first few and a count."""
    integrity = found.integrity
    if integrity is None or not integrity.comparable:
        return None
    kinds = _integrity_kinds(integrity)
    if all(len(names) <= top_n for names in kinds.values()):
        return None
    rows = ["KIND\tPATH\tWHAT CHANGED"]
    for kind, names in kinds.items():
        for name in names:
            where = joined(shown, name) if name else shown
            rows.append(f"{kind}\t{escaped(where)}\t{escaped(_finding_detail(integrity, kind, name))}")
    return "\n".join(rows) + "\n"


def _integrity_lines(
    found: Findings, lines: list[str], named: Callable[[bytes], str], top_n: int
) -> Integrity | None:
    """The integrity baseline against the tree hashed now, as ``aide --check`` reports it."""
    integrity = found.integrity
    if integrity is None:
        return None
    if not integrity.comparable:
        lines.append(f"Integrity: not compared: {integrity.reason}.")
        return Integrity(False)
    kinds = _integrity_kinds(integrity)
    # how many of the metadata changed moved in ctime alone (listed after the rest): a hard-linking
    # backup moves every file's, and the count tells such a sweep from a change of mode or owner
    ctime_alone = sum(what == CTIME_ALONE for _, what in integrity.metadata)
    told = {"metadata_changed": f" ({ctime_alone:,} in ctime alone)"} if ctime_alone else {}
    if integrity.unrecorded and integrity.added:  # past its bound the baseline counts, never names
        unnamed = plural(integrity.unrecorded, "file or directory", "files or directories")
        told["added"] = f" (any may have been there: the baseline could not read {unnamed} it does not name)"
    if maybe := sum(
        p in integrity.files and not_compared(integrity.files[p]) for p in integrity.content
    ):  # listed after the rest
        told["content_changed"] = f" ({maybe:,} not compared: may have)"
    counts = ", ".join(
        f"{len(v):,} {_KIND_WORDS.get(k, k.replace('_', ' '))}{told.get(k, '')}" for k, v in kinds.items()
    )
    stopped = found.integrity_stopped
    why = " in time" if stopped is None or more_time_helps(stopped) else ": out of file descriptors"
    checked = (
        f" (hashed now; {plural(integrity.not_checked, 'file')} not reached{why})"
        if integrity.not_checked
        else " (hashed now)"
    )
    lines.append(f"Integrity against the baseline of {_when(found.integrity_taken)}{checked}: {counts}")
    links, special = (
        found.integrity_not_files.get("symlink", 0),
        found.integrity_not_files.get("special_file", 0),
    )
    met = " and ".join(
        [plural(links, "symbolic link")] * bool(links) + [plural(special, "special file")] * bool(special)
    )
    if integrity.nodes_compared:
        lines.append(
            "  Compared: regular files (content, size, mode, owner, mtime, ctime), symbolic links (target, "
            "owner), directories (mode, owner) and special files (type, device number, mode, owner)."
        )
    else:
        lines.append(
            "  The baseline was recorded by an older sysmcp and holds regular files only: "
            f"{f'the {met} under it now, and ' if met else ''}the directories' own mode and owner, are not "
            "compared, nor called added (a symlink planted or re-pointed, or a directory made writable, is not "
            "seen here); hash_tree baseline: true records a baseline that holds them."
        )
    if integrity.nodes_uncompared:
        lines.append(
            f"  At least {plural(integrity.nodes_uncompared, 'symbolic link, directory or special file', 'symbolic links, directories or special files')}"
            f" not compared: the baseline or the tree now held more than a baseline records (250,000)."
        )
    for k, v in kinds.items():
        for p in v[:top_n]:
            detail = _finding_detail(integrity, k, p)
            word = _KIND_WORDS.get(k, k.replace("_", " "))
            lines.append(f"  {word}: {escaped(named(p))}{f' ({escaped(detail)})' if detail else ''}")
        if len(v) > top_n:
            rest = v[top_n:]  # files, or (a link, a directory among them) names
            lines.append(
                f"  {more_not_shown(len(rest), 'name' if any(p in integrity.nodes for p in rest) else 'file')}"
            )
    if integrity.unrecorded:
        lines.append(
            f"  {plural(integrity.unrecorded, 'more file or directory', 'more files or directories')} the "
            "baseline could not read past what it records: any of them read now is called added"
        )
    if integrity.unrecorded_now:
        lines.append(
            f"  {plural(integrity.unrecorded_now, 'more file or directory', 'more files or directories')} "
            "could not be read now past the number named: any of them may be new, and none is listed above"
        )
    return Integrity(
        comparable=True,
        added=len(integrity.added),
        removed=len(integrity.removed),
        content_changed=len(integrity.content),
        metadata_changed=len(integrity.metadata),
        not_checked=integrity.not_checked,
        unreadable=len(integrity.unreadable),
        unreadable_at_baseline=len(integrity.unread_then) or ABSENT,
        links_and_directories_compared=integrity.nodes_compared,
        links_and_directories_not_compared=integrity.nodes_uncompared or ABSENT,
        symlinks_not_compared=(not integrity.nodes_compared and found.integrity_not_files.get("symlink"))
        or ABSENT,
        special_files_not_compared=(
            not integrity.nodes_compared and found.integrity_not_files.get("special_file")
        )
        or ABSENT,
        not_comparable=len(integrity.not_comparable) or ABSENT,
        mounted_over=len(integrity.mounted_over) or ABSENT,
        unrecorded_at_baseline=integrity.unrecorded or ABSENT,
        unreadable_now_unnamed=integrity.unrecorded_now or ABSENT,
        baseline_taken=iso_utc(found.integrity_taken) if found.integrity_taken is not None else None,
        examples={k: [named(p) for p in v[:top_n]] for k, v in kinds.items()},
    )


#: How the text names a kind of integrity finding where its JSON key does not read as words.
_KIND_WORDS = {"unreadable_at_baseline": "unreadable at the baseline", "mounted_over": "not looked at"}
#: What the text adds of a file or directory (its name ends in a slash) not read now that the baseline
#: never recorded as unreadable, by the kind it was put in.
_UNREAD_NOW = {
    "added": "could not be read now: its content not hashed",
    "unreadable": "could not be listed now, and was not recorded so at the baseline: what it holds cannot be seen",
    "not_comparable": "could not be read now either",
}
#: What the text calls a file of an ``S_IFMT`` type found at the name of a removed baseline file.
_FILE_TYPE_WORDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}
#: What the text says of each file of a kind that has no records then and now to compare.
_KIND_DETAILS = {
    "unreadable_at_baseline": "readable now: cannot say whether it changed",
    "not_comparable": "below a directory unreadable at the baseline",
}


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    # bad arguments: refused first; the path (one that cannot be encoded too) is checked next. Now is
    # history's clock: the one the snapshots' times were taken on (a test's own, or one set back since).
    request = comparison(Path(os.sep), args, state.now(), within(ctx.paths.allowed))
    path, shown = await directory_argument(ctx, args["path"])
    request = replace(request, path=os.fsencode(path))
    try:
        found = await ctx.run_engine(
            compare, request, describe=lambda meter, _: f"{plural(int(meter.done), 'entry')} scanned"
        )
    except OSError as exc:
        raise scan_failure(shown, path, exc) from None
    text, answer, full = render(shown, found, args)
    links: tuple[ResourceLink, ...] = ()
    if full is not None:
        changes = len(answer.changes) + (answer.changes_not_shown or 0)
        cut = changes > FULL_LIST_MAX  # the largest only: the rest would make it too big to keep at all
        line, links = ctx.keep_linked(
            listing_name("what_changed", shown, ".tsv"),
            full,
            description=f"{f'The {FULL_LIST_MAX:,} largest changes' if cut else 'Every directory that changed'} under {escaped(shown)}",
            label=f"The {FULL_LIST_MAX:,} largest of the {changes:,} changes"
            if cut
            else "Full list of changes",
            mime_type="text/tab-separated-values",
        )
        text += line
    listing = integrity_listing(found, shown, args["top_n"])
    if listing is not None:
        line, kept = ctx.keep_linked(
            listing_name("what_changed", shown, "-integrity.tsv"),
            listing,
            description=f"Every integrity finding under {shown}, against its baseline",
            label="Every integrity finding",
            mime_type="text/tab-separated-values",
        )
        text, links = text + line, (*links, *kept)
    return ToolOutput.typed(text, answer, links)


def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
    """One table: which hosts grew most, where (each host's top directory), and their fill rates."""
    answered = typed_results(outcomes, WhatChanged)
    answered.sort(key=lambda pair: -pair[1].total_delta_bytes)
    rows = [["HOST", "GROWTH", "WHERE", "FILL/DAY", "FULL IN"]]
    view: list[dict[str, Any]] = []
    for host, answer in answered:
        share = answer.attribution if isinstance(answer.attribution, Share) else None
        top = share.paths[0] if share and share.paths else ""
        if not top and answer.changes:
            top = answer.changes[0].path
        fs = answer.filesystem if isinstance(answer.filesystem, Fill) else None
        to_full = fs.seconds_to_full if fs else None
        rows.append(
            [
                host,
                signed(answer.total_delta_bytes) if answer.comparable else "no baseline",
                escaped(top) if top else "-",
                signed(int(fs.bytes_per_day)) if fs else "-",
                age(to_full) if to_full is not None else "-",
            ]
        )
        view.append(
            {
                "host": host,
                "total_delta_bytes": answer.total_delta_bytes,
                "comparable": answer.comparable,
                "where": top or None,
                "bytes_per_day": fs.bytes_per_day if fs else None,
                "seconds_to_full": to_full,
            }
        )
    body = table(rows, right=(1, 3)) if answered else []
    return fleet_output(outcomes, body, {"hosts": view})


TOOL = Tool(
    name="what_changed",
    title="What changed",
    description=(
        "What grew, shrank, appeared or disappeared under a directory since a time, from sysmcp's own earlier scans: "
        "per-directory deltas, where the growth is, the largest new files, the fill rate and time to full, "
        "and changes against a hash_tree baseline. Start here when a disk fills or something grew."
    ),
    input_schema=INPUT_SCHEMA,
    output=WhatChanged,
    handler=handle,
    merge=merge,
)
