"""what_changed's words: the engine's ``Outcome`` as the answer's text and structured content.

Why apart from ``sysmcp.tools.what_changed``: that module reads the arguments and holds the schemas;
this one says what was found, in the order an admin acts on it (the change and where it is, growth
and shrinkage apart, the files, the filesystem, the integrity baseline against the tree now).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from sysmcp.engine.paths import display, printable
from sysmcp.history import state
from sysmcp.history.compare import MIN_FIT_S, Outcome
from sysmcp.history.snapshots import BaselineFile, ScanSnapshot
from sysmcp.protocol.errors import ArgumentError
from sysmcp.render import age, human_bytes, more_not_shown, plural
from sysmcp.tools.dir_usage import iso_utc, parse_duration


def signed(size: int) -> str:
    return ("+" if size >= 0 else "−") + human_bytes(abs(size))


def _rate(per_day: float | None) -> str:
    return "" if per_day is None else f", {signed(int(per_day))}/day"


def _snap_json(snap: ScanSnapshot | None, fresh: bool = False) -> dict[str, Any] | None:
    if snap is None or snap.id is None:
        return None
    return {"id": snap.id, "taken": iso_utc(snap.taken), "partial": snap.partial, "fresh": fresh}


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


def notes_of(outcome: Outcome) -> list[str]:
    """The engine's facts as the answer's notes, in the order the engine met them."""
    if not outcome.history:
        return [history_off()]
    notes = []
    if outcome.unsaved is not None:
        notes.append(f"{outcome.unsaved}.")
    if outcome.not_kept and outcome.lower_bound is None:
        notes.append("the fresh scan could not be kept, so nothing was compared")
    if outcome.oldest_instead is not None:
        notes.append(
            f"no snapshot as old as asked: compared with the oldest, {_when(outcome.oldest_instead)}"
        )
    if outcome.readings_span_s is not None:
        notes.append(
            f"the disk readings of {outcome.mount_point} span only {age(outcome.readings_span_s)}: too short "
            "for a fill rate (disk_usage with sample_s gives the short-term rate)"
        )
    return notes + outcome.notes


def render(
    shown: str, outcome: Outcome, args: dict[str, Any], now: float
) -> tuple[str, dict[str, Any], str | None]:
    """Text, structured content, and the full list of changes when the text shows only some."""
    top_n: int = args["top_n"]
    base = shown.rstrip("/")

    def named(rel: bytes) -> str:
        return f"{base}/{display(rel)}" if rel else shown

    lines: list[str] = []
    diff = outcome.diff
    structured: dict[str, Any] = {
        "path": shown,
        "history": outcome.history,
        "baseline": _snap_json(outcome.old),
        "current": _snap_json(outcome.new, outcome.fresh),
        "comparable": bool(diff and diff.comparable),
        "reason": diff.reason if diff else None,
        "complete": not ((outcome.old and outcome.old.partial) or (outcome.new and outcome.new.partial)),
        "seconds": diff.seconds if diff else None,
        "total_delta_bytes": diff.total_delta if diff and diff.comparable else 0,
        "attribution": None,
        "shrinkage": None,
        "changes": [],
        "changes_not_shown": 0,
        "threshold_bytes": max(outcome.old.threshold, outcome.new.threshold)
        if outcome.old and outcome.new
        else None,
        "new_files": [],
        "removed_files": [],
        "shrunk_files": [],
        "filesystem_growth": None,
        "filesystem": None,
        "integrity": None,
        "lower_bound": None,
        "notes": notes_of(outcome),
    }
    full: str | None = None
    if not structured["complete"]:
        lines.append(
            "PARTIAL RESULT: a scan compared here stopped early; directories it did not reach look unchanged or gone."
        )
    if diff is not None and outcome.old is not None and outcome.new is not None:
        precise = abs(outcome.new.taken - outcome.old.taken) < 3600
        span = _span(outcome.old.taken, outcome.new.taken) + (" (scanned now)" if outcome.fresh else "")
        if not diff.comparable:
            lines.append(f"{shown}: not compared ({span}): {diff.reason}.")
        else:
            days = f" over {age(diff.seconds)}" if diff.seconds > 0 else ""
            lines.append(
                f"{shown}: {signed(diff.total_delta)} on disk since {_when(outcome.old.taken, precise)}{days} "
                f"[{span}; directories under {human_bytes(structured['threshold_bytes'] or 0)} are not tracked]"
            )
            rated = diff.seconds >= MIN_FIT_S  # a rate per day from minutes apart says nothing
            if 0 < diff.seconds < MIN_FIT_S:
                structured["notes"].append(
                    f"the snapshots are {age(diff.seconds)} apart: too close for rates per day"
                )
            for key, way, attribution in (
                ("attribution", "grew", diff.attribution),
                ("shrinkage", "shrank", diff.shrinkage),
            ):
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
                    + ", ".join(printable(named(p)) for p in attribution.paths[:top_n])
                    + (f" … and {count - top_n} more" if count > top_n else "")
                )
                structured[key] = {
                    "total_bytes": attribution.total,
                    "covered_bytes": attribution.covered,
                    "percent": None if percent is None else round(percent, 1),
                    "paths": [named(p) for p in attribution.paths],
                }
            below = human_bytes(outcome.old.threshold)
            rows: list[dict[str, Any]] = []
            for c in diff.changes:
                was_below = c.was_below and outcome.old.partial is False and c.kind == "appeared"
                rows.append(
                    {
                        "path": named(c.path),
                        "kind": c.kind,
                        "delta_bytes": c.delta,
                        "delta_apparent_bytes": c.delta_apparent,
                        "old_bytes": c.old.disk if c.old else None,
                        "new_bytes": c.new.disk if c.new else None,
                        "per_day_bytes": None if c.per_day is None or not rated else round(c.per_day, 1),
                        "was_below_threshold": was_below,
                        "delta_is_upper_bound": was_below,
                        "newest_modified": iso_utc(c.newest) if c.newest is not None else None,
                        "files_changed": c.files_changed,
                        "parents": [named(p) for p in c.parents],
                    }
                )
            structured["changes"] = rows[:top_n]
            structured["changes_not_shown"] = len(rows) - len(rows[:top_n])
            lines.append(
                "Directories that changed most:"
                if rows
                else "No directory changed by more than the threshold."
            )
            for row, change in zip(rows[:top_n], diff.changes, strict=False):
                note = "" if row["kind"] in ("grew", "shrank") else f" ({row['kind']})"
                if row["delta_is_upper_bound"]:
                    note = f" (appeared, or under the {below} threshold then: the delta is at most this)"
                elif row["kind"] == "modified":
                    note = " (same size, files rewritten)"
                if change.files_changed and change.newest is not None:
                    newest = f"newest change {_when(change.newest, precise)}"
                    note = f"{note[:-1]}; {newest})" if note else f" ({newest})"
                if change.parents:
                    carried = f"the same change as its {plural(len(change.parents), 'parent')} " + ", ".join(
                        printable(named(p)) + "/" for p in change.parents
                    )
                    note = f"{note[:-1]}; {carried})" if note else f" ({carried})"
                lines.append(
                    f"  {signed(row['delta_bytes']):>11}  {printable(row['path'])}/{note}{_rate(row['per_day_bytes'])}"
                )
            if structured["changes_not_shown"]:
                lines.append(f"  {more_not_shown(structured['changes_not_shown'], 'directory')}")
                out = ["delta_bytes\tkind\told_bytes\tnew_bytes\tper_day_bytes\tnewest_modified\tpath"]
                out += [
                    f"{r['delta_bytes']}\t{r['kind']}\t{r['old_bytes'] if r['old_bytes'] is not None else ''}\t"
                    f"{r['new_bytes'] if r['new_bytes'] is not None else ''}\t{r['per_day_bytes'] or ''}\t"
                    f"{r['newest_modified'] or ''}\t{printable(r['path'])}"
                    for r in rows
                ]
                full = "\n".join(out) + "\n"
            new_files: list[dict[str, Any]] = [
                {
                    "path": named(f.path),
                    "disk_bytes": f.disk,
                    "modified": iso_utc(f.mtime) if f.mtime is not None else None,
                }
                for f in diff.new_files[:top_n]
            ]
            structured["new_files"] = new_files
            if new_files:
                lines.append("Largest new files:")
                lines += [f"  {human_bytes(f['disk_bytes']):>10}  {printable(f['path'])}" for f in new_files]
            structured["removed_files"] = [
                {"path": named(f.path), "disk_bytes": f.disk} for f in diff.removed_files[:top_n]
            ]
            if diff.removed_files:
                lines.append("Largest files removed:")
                lines += [
                    f"  {signed(-f.disk):>11}  {printable(named(f.path))}" for f in diff.removed_files[:top_n]
                ]
            structured["shrunk_files"] = [
                {"path": named(then.path), "old_disk_bytes": then.disk, "disk_bytes": now.disk}
                for then, now in diff.shrunk_files[:top_n]
            ]
            if diff.shrunk_files:
                lines.append("Largest files that shrank:")
                lines += [
                    f"  {signed(now.disk - then.disk):>11}  {printable(named(then.path))} "
                    f"({human_bytes(then.disk)} → {human_bytes(now.disk)})"
                    for then, now in diff.shrunk_files[:top_n]
                ]
    elif not outcome.history:
        lines.append(f"{shown}: nothing to compare with: {history_off()}, so no snapshot is kept.")
    elif outcome.history and outcome.lower_bound is not None:
        lines.append(
            f"{shown}: no earlier snapshot to compare with (no baseline yet); one was recorded now, so the "
            "next what_changed can compare against it."
        )
    elif outcome.history:
        lines.append(f"{shown}: no snapshot to compare with.")
    if outcome.lower_bound is not None:
        count, disk, files = outcome.lower_bound
        since_raw = args["since"]
        lines.append(
            f"LOWER BOUND: files modified {window(since_raw)}: {count:,}, {human_bytes(disk)} on disk (growth from files "
            "that were only deleted or changed in place is not seen this way)."
        )
        for rel, size, _ in files[:top_n]:
            lines.append(f"  {human_bytes(size):>10}  {printable(named(os.fsencode(rel)))}")
        structured["lower_bound"] = {"files": count, "disk_bytes": disk, "since": since_raw}
    if outcome.growth is not None:
        grown = outcome.growth
        point = printable(outcome.mount_point)
        explained = diff.total_delta if diff is not None and diff.comparable else None
        rest = None if explained is None else grown.used - explained
        line = (
            f"Filesystem {point}: used {signed(grown.used)} from {plural(grown.readings, 'disk reading')} "
            f"[{_span(grown.first, grown.last)}]"
        )
        if rest is not None and abs(rest) >= (structured["threshold_bytes"] or 0):
            line += (
                f"; the directories under {printable(shown)} account for {signed(explained or 0)}, so "
                f"{signed(rest)} is elsewhere (other directories, deleted files still open): "
                f"disk_usage path={point} explain=true accounts for it"
            )
        lines.append(line + ".")
        structured["filesystem_growth"] = {
            "mount_point": outcome.mount_point,
            "readings": grown.readings,
            "span_s": round(grown.span_s, 3),
            "growth_bytes": grown.used,
            "unexplained_bytes": rest,
        }
    if outcome.fill is not None:
        fill = outcome.fill
        to_full = (
            f"full in about {age(fill.seconds_to_full)} at this rate"
            if fill.seconds_to_full is not None
            else "not filling"
        )
        lines.append(
            f"Filesystem {printable(outcome.mount_point)}: {signed(int(fill.bytes_per_day))}/day (least-squares fit of "
            f"{fill.readings} readings over {age(fill.span_s)}), {to_full}."
        )
        structured["filesystem"] = {
            "mount_point": outcome.mount_point,
            "readings": fill.readings,
            "span_s": round(fill.span_s, 3),
            "bytes_per_day": round(fill.bytes_per_day, 1),
            "seconds_to_full": None if fill.seconds_to_full is None else round(fill.seconds_to_full, 1),
            "growth_bytes": fill.growth,
        }
    _integrity_lines(outcome, structured, lines, named, top_n)
    for note in structured["notes"][1 if not outcome.history else 0 :]:  # history off: the first line says it
        lines.append(f"Note: {note}.")
    return "\n".join(lines), structured, full


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
        before, after = iso_utc(then.mtime), iso_utc(now.mtime)
        parts.append(f"mtime {before} → {after}" if before != after else f"mtime changed within {after}")
    return ", ".join(parts)


def _integrity_lines(
    outcome: Outcome,
    structured: dict[str, Any],
    lines: list[str],
    named: Callable[[bytes], str],
    top_n: int,
) -> None:
    """The integrity baseline against the tree hashed now, as ``aide --check`` reports it."""
    integrity = outcome.integrity
    if integrity is None:
        return
    if not integrity.comparable:
        lines.append(f"Integrity: not compared: {integrity.reason}.")
        structured["integrity"] = {"comparable": False}
        return
    kinds = {
        "added": integrity.added,
        "removed": integrity.removed,
        "content_changed": integrity.content,
        "metadata_changed": [p for p, _ in integrity.metadata],
    }
    counts = ", ".join(f"{len(v):,} {k.replace('_', ' ')}" for k, v in kinds.items())
    checked = (
        f" (hashed now; {plural(integrity.not_checked, 'file')} not reached in time)"
        if integrity.not_checked
        else " (hashed now)"
    )
    lines.append(f"Integrity against the baseline of {_when(outcome.integrity_taken)}{checked}: {counts}")
    for k, v in kinds.items():
        for p in v[:top_n]:
            pair = integrity.files.get(p)
            detail = f" ({_what_changed(*pair)})" if pair is not None and _what_changed(*pair) else ""
            lines.append(f"  {k.replace('_', ' ')}: {printable(named(p))}{detail}")
        if len(v) > top_n:
            lines.append(f"  {more_not_shown(len(v) - top_n, 'file')}")
    structured["integrity"] = {
        "comparable": True,
        **{k: len(v) for k, v in kinds.items()},
        "not_checked": integrity.not_checked,
        "baseline_taken": iso_utc(outcome.integrity_taken) if outcome.integrity_taken is not None else None,
        "examples": {k: [named(p) for p in v[:top_n]] for k, v in kinds.items()},
    }
