"""what_changed: what grew, what shrank, since when, where the bytes went and when the disk fills.

The flow (docs/history.md): the store finds the snapshots of this path's series (host, filesystem
identity, root, scan options); when the newest is older than ``FRESH_S`` a fresh scan is made (and
leaves a snapshot); ``history.diff`` compares the two; the disk readings give the fill rate. Every
path shown passes the roots in force on read, whoever recorded the snapshot. Without a baseline the
answer says so, records one, and lists files modified since then: a lower bound.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sysmcp.fs.paths import display, is_within, printable
from sysmcp.history import compare as engine
from sysmcp.history import state
from sysmcp.history.compare import MIN_FIT_S, Comparison, Outcome
from sysmcp.history.snapshots import ScanSnapshot
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ArgumentError, ToolError
from sysmcp.render import age, human_bytes, more_not_shown, plural, table
from sysmcp.tools.descriptions import describe_paths
from sysmcp.tools.dir_usage import FULL_FILES, iso_utc, parse_duration, usage_report
from sysmcp.tools.merging import HostOutcome, fleet_output
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput, listing_name
from sysmcp.tools.walking import (
    directory_argument,
    timeout_property,
    unreadable_directory,
    walk_options,
    walk_properties,
)

DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 300.0

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "minLength": 1,
            "description": "Absolute path of the directory, e.g. '/'.",
        },
        "since": {
            "type": "string",
            "minLength": 1,
            "maxLength": 40,
            "default": "24h",
            "description": "Compare against the newest snapshot at or before this: a duration back from now "
            "('24h', '7d', '2w'), an ISO 8601 time ('2026-11-30T09:00', local time unless it says Z or "
            "an offset), or 'last' (the snapshot before the newest).",
        },
        "until": {
            "type": "string",
            "minLength": 1,
            "maxLength": 40,
            "description": "Compare up to the newest snapshot at or before this (same forms as since, but not "
            "'last'). Default: now, with a fresh scan when the newest snapshot is over 5 minutes old.",
        },
        "top_n": {
            "type": "integer",
            "minimum": 1,
            "maximum": 50,
            "default": 10,
            "description": "Directories and files to list in each list, 1 to 50.",
        },
        "timeout_s": timeout_property(
            DEFAULT_TIMEOUT_S,
            MAX_TIMEOUT_S,
            stops="the fresh scan stops and the comparison, marked partial, covers what was scanned.",
        ),
        **walk_properties("path"),
    },
    "required": ["path"],
    "additionalProperties": False,
}

_SNAP = {
    "type": ["object", "null"],
    "properties": {
        "id": {"type": "integer"},
        "taken": {"type": ["string", "null"]},
        "partial": {"type": "boolean"},
        "fresh": {"type": "boolean", "description": "Scanned for this call."},
    },
    "required": ["id", "taken", "partial"],
}
_INT_OR_NULL = {"type": ["integer", "null"]}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "history": {"type": "boolean", "description": "False when history is off on this host."},
        "baseline": _SNAP,
        "current": _SNAP,
        "comparable": {"type": "boolean", "description": "True when two snapshots were compared."},
        "reason": {"type": ["string", "null"], "description": "Why nothing was compared, if so."},
        "complete": {"type": "boolean", "description": "False when either scan was partial."},
        "seconds": {"type": ["number", "null"], "description": "Time between the two snapshots."},
        "total_delta_bytes": {"type": "integer", "description": "Disk bytes under path, newer minus older."},
        "attribution": {
            "type": ["object", "null"],
            "properties": {
                "total_bytes": {"type": "integer"},
                "covered_bytes": {"type": "integer"},
                "percent": {"type": ["number", "null"]},
                "paths": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["total_bytes", "covered_bytes", "percent", "paths"],
        },
        "changes": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "kind": {
                        "type": "string",
                        "enum": ["grew", "shrank", "appeared", "disappeared", "modified"],
                    },
                    "delta_bytes": {"type": "integer"},
                    "delta_apparent_bytes": {"type": "integer"},
                    "old_bytes": _INT_OR_NULL,
                    "new_bytes": _INT_OR_NULL,
                    "per_day_bytes": {"type": ["number", "null"]},
                    "was_below_threshold": {"type": "boolean"},
                    "delta_is_upper_bound": {"type": "boolean"},
                    "newest_modified": {"type": ["string", "null"]},
                    "files_changed": {"type": ["boolean", "null"]},
                },
                "required": ["path", "kind", "delta_bytes", "old_bytes", "new_bytes", "per_day_bytes"],
            },
        },
        "changes_not_shown": {"type": "integer"},
        "threshold_bytes": _INT_OR_NULL,
        "new_files": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "disk_bytes": {"type": "integer"},
                    "modified": {"type": ["string", "null"]},
                },
                "required": ["path", "disk_bytes", "modified"],
            },
        },
        "filesystem": {
            "type": ["object", "null"],
            "description": "The fill rate: a least-squares fit of used bytes over the disk readings.",
            "properties": {
                "mount_point": {"type": "string"},
                "readings": {"type": "integer"},
                "span_s": {"type": "number"},
                "bytes_per_day": {"type": "number"},
                "seconds_to_full": {"type": ["number", "null"]},
                "growth_bytes": {"type": "integer"},
            },
            "required": ["mount_point", "readings", "span_s", "bytes_per_day", "seconds_to_full"],
        },
        "integrity": {
            "type": ["object", "null"],
            "properties": {
                "comparable": {"type": "boolean"},
                "added": {"type": "integer"},
                "removed": {"type": "integer"},
                "content_changed": {"type": "integer"},
                "metadata_changed": {"type": "integer"},
                "examples": {
                    "type": "object",
                    "additionalProperties": {"type": "array", "items": {"type": "string"}},
                },
            },
            "required": ["comparable"],
        },
        "lower_bound": {
            "type": ["object", "null"],
            "description": "No snapshot to compare: files modified since 'since' (a lower bound of the growth).",
            "properties": {
                "files": {"type": "integer"},
                "disk_bytes": {"type": "integer"},
                "since": {"type": ["string", "null"]},
            },
            "required": ["files", "disk_bytes"],
        },
        "notes": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["path", "history", "comparable", "complete", "total_delta_bytes", "changes", "notes"],
    "additionalProperties": False,
}


def _signed(size: int) -> str:
    return ("+" if size >= 0 else "−") + human_bytes(abs(size))


def _rate(per_day: float | None) -> str:
    return "" if per_day is None else f", {_signed(int(per_day))}/day"


def _snap_json(snap: ScanSnapshot | None, fresh: bool = False) -> dict[str, Any] | None:
    if snap is None or snap.id is None:
        return None
    return {"id": snap.id, "taken": iso_utc(snap.taken), "partial": snap.partial, "fresh": fresh}


HISTORY_OFF = f"history is off on this host ({state.OFF_BECAUSE})"


def _window(since: str) -> str:
    """'in the last 2 h' for a duration ('2h'), 'since 2026-12-03T07:00' for a time: never 'since 2h'."""
    try:
        return f"in the last {age(parse_duration(since, 'since'))}"
    except ArgumentError:
        return f"since {since}"


def parse_when(value: str, name: str, now: float) -> float:
    """Epoch seconds of '24h' (back from now) or an ISO 8601 time; ``ArgumentError`` naming ``name``."""
    try:
        return now - parse_duration(value, name)
    except ArgumentError:
        pass
    try:
        return datetime.fromisoformat(value.strip()).timestamp()
    except ValueError:
        raise ArgumentError(
            f"Invalid arguments: {name!r} must be a duration ('24h', '7d'), an ISO 8601 time "
            f"('2026-11-30T09:00'){' or last' if name == 'since' else ''}, got {value!r}"
        ) from None


def comparison(
    path: Path, args: dict[str, Any], now: float, visible: Callable[[bytes | str], bool]
) -> Comparison:
    """The engine's request from validated arguments (``since`` 'last': None)."""
    since_raw: str = args["since"]
    return Comparison(
        path=os.fsencode(path),
        since=None if since_raw.strip().lower() == "last" else parse_when(since_raw, "since", now),
        until=parse_when(args["until"], "until", now) if "until" in args else None,
        now=now,
        timeout_s=min(float(args["timeout_s"]), MAX_TIMEOUT_S),
        options=walk_options(args),
        files_kept=FULL_FILES,
        visible=visible,
    )


def compare(
    path: Path,
    args: dict[str, Any],
    now: float,
    meter: Meter | None,
    visible: Callable[[bytes | str], bool],
    clock: Callable[[], float] = time.time,
    *,
    monotonic: Callable[[], float] = time.monotonic,
) -> Outcome:
    """The engine on these arguments, its progress into ``meter`` and its checkpoint the meter's.
    ``monotonic``: the clock of the scan's time budget (a test's own)."""
    return engine.compare(
        comparison(path, args, now, visible),
        state.active(),
        usage_report(meter),
        meter.checkpoint if meter is not None else None,
        clock=clock,
        monotonic=monotonic,
    )


def _when(epoch: float | None) -> str:
    """A snapshot's time as an admin glances at it, in local time: 'Mon 30 Nov 09:00'."""
    if epoch is None:
        return "?"
    return time.strftime("%a %d %b %H:%M", time.localtime(epoch))


def notes_of(outcome: Outcome) -> list[str]:
    """The engine's facts as the answer's notes, in the order the engine met them."""
    if not outcome.history:
        return [HISTORY_OFF]
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
        "changes": [],
        "changes_not_shown": 0,
        "threshold_bytes": max(outcome.old.threshold, outcome.new.threshold)
        if outcome.old and outcome.new
        else None,
        "new_files": [],
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
        span = f"{_when(outcome.old.taken)} → {_when(outcome.new.taken)}" + (
            " (scanned now)" if outcome.fresh else ""
        )
        if not diff.comparable:
            lines.append(f"{shown}: not compared ({span}): {diff.reason}.")
        else:
            days = f" over {age(diff.seconds)}" if diff.seconds > 0 else ""
            lines.append(
                f"{shown}: {_signed(diff.total_delta)} on disk since {_when(outcome.old.taken)}{days} "
                f"[{span}; directories under {human_bytes(structured['threshold_bytes'] or 0)} are not tracked]"
            )
            rated = diff.seconds >= MIN_FIT_S  # a rate per day from minutes apart says nothing
            if 0 < diff.seconds < MIN_FIT_S:
                structured["notes"].append(
                    f"the snapshots are {age(diff.seconds)} apart: too close for rates per day"
                )
            attribution = diff.attribution
            if attribution is not None and attribution.paths:
                percent = attribution.percent
                lines.append(
                    f"Of the {_signed(attribution.total)} since {_when(outcome.old.taken)}, "
                    f"{_signed(attribution.covered)}"
                    + (f" ({percent:.0f} %)" if percent is not None else "")
                    + f" is in {f'these {len(attribution.paths)} directories' if len(attribution.paths) > 1 else 'this directory'}: "
                    + ", ".join(printable(named(p)) for p in attribution.paths[:top_n])
                    + (
                        f" … and {len(attribution.paths) - top_n} more"
                        if len(attribution.paths) > top_n
                        else ""
                    )
                )
                structured["attribution"] = {
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
                    newest = f"newest change {_when(change.newest)}"
                    note = f"{note[:-1]}; {newest})" if note else f" ({newest})"
                lines.append(
                    f"  {_signed(row['delta_bytes']):>11}  {printable(row['path'])}/{note}{_rate(row['per_day_bytes'])}"
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
        window = "in the last 24 h" if since_raw.strip().lower() == "last" else _window(since_raw)
        lines.append(
            f"LOWER BOUND: files modified {window}: {count:,}, {human_bytes(disk)} on disk (growth from files "
            "that were only deleted or changed in place is not seen this way)."
        )
        for rel, size, _ in files[:top_n]:
            lines.append(f"  {human_bytes(size):>10}  {printable(named(os.fsencode(rel)))}")
        structured["lower_bound"] = {"files": count, "disk_bytes": disk, "since": since_raw}
    if outcome.fill is not None:
        fill = outcome.fill
        to_full = (
            f"full in about {age(fill.seconds_to_full)} at this rate"
            if fill.seconds_to_full is not None
            else "not filling"
        )
        lines.append(
            f"Filesystem {printable(outcome.mount_point)}: {_signed(int(fill.bytes_per_day))}/day (least-squares fit of "
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
    integrity = outcome.integrity
    if integrity is not None:
        if not integrity.comparable:
            lines.append(f"Integrity: not compared: {integrity.reason}.")
            structured["integrity"] = {"comparable": False}
        else:
            kinds = {
                "added": integrity.added,
                "removed": integrity.removed,
                "content_changed": integrity.content,
                "metadata_changed": [p for p, _ in integrity.metadata],
            }
            lines.append(
                "Integrity (against the baseline): "
                + ", ".join(f"{len(v):,} {k.replace('_', ' ')}" for k, v in kinds.items())
            )
            for k, v in kinds.items():
                for p in v[:top_n]:
                    lines.append(f"  {k.replace('_', ' ')}: {printable(named(p))}")
            structured["integrity"] = {
                "comparable": True,
                **{k: len(v) for k, v in kinds.items()},
                "examples": {k: [named(p) for p in v[:top_n]] for k, v in kinds.items()},
            }
    elif outcome.baselines == 1:
        lines.append(
            "Integrity: one baseline so far; hash_tree with baseline: true again makes a second to compare."
        )
    for note in structured["notes"]:
        lines.append(f"Note: {note}.")
    return "\n".join(lines), structured, full


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    now = time.time()
    since_raw: str = args["since"]
    if since_raw.strip().lower() != "last":
        parse_when(since_raw, "since", now)  # bad arguments are refused before any work
    if "until" in args:
        parse_when(args["until"], "until", now)
    path, shown = await directory_argument(ctx, args["path"])
    policy = ctx.paths

    def visible(name: bytes | str) -> bool:
        allowed = policy.allowed
        if allowed is None:
            return True
        real = Path(os.path.normpath(os.fsdecode(name)))  # a stored '../x' is judged where it leads
        return any(is_within(real, root) for root in allowed)

    def describe(meter: Meter, elapsed: float) -> str:
        return f"{plural(int(meter.done), 'entry')} scanned"

    try:
        outcome = await ctx.run_in_worker(
            lambda meter: compare(path, args, now, meter, visible, state.now), describe=describe
        )
    except PermissionError:
        raise unreadable_directory(shown, path) from None
    except OSError as exc:
        raise ToolError(f"Cannot scan {shown}: {exc.strerror or exc}") from None
    text, structured, full = render(shown, outcome, args, now)
    links: tuple[ResourceLink, ...] = ()
    if full is not None:
        line, links = ctx.keep_linked(
            listing_name("what_changed", shown, ".tsv"),
            full,
            description=f"Every directory that changed under {shown}",
            label="Full list of changes",
            mime_type="text/tab-separated-values",
        )
        text += line
    return ToolOutput(text, structured, links=links)


def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
    """One table: which hosts grew most, where (each host's top directory), and their fill rates."""
    answered = [o for o in outcomes if o.ok and o.result is not None]
    answered.sort(key=lambda o: -int((o.result or {}).get("total_delta_bytes", 0)))
    rows = [["HOST", "GROWTH", "WHERE", "FILL/DAY", "FULL IN"]]
    view: list[dict[str, Any]] = []
    for outcome in answered:
        result = outcome.result or {}
        attribution = result.get("attribution") or {}
        top = (attribution.get("paths") or [""])[0]
        if not top and result.get("changes"):
            top = result["changes"][0]["path"]
        fs = result.get("filesystem") or {}
        to_full = fs.get("seconds_to_full")
        compared = result.get("comparable")
        rows.append(
            [
                outcome.host,
                _signed(int(result.get("total_delta_bytes", 0))) if compared else "no baseline",
                top or "-",
                _signed(int(fs["bytes_per_day"])) if fs else "-",
                age(to_full) if to_full is not None else "-",
            ]
        )
        view.append(
            {
                "host": outcome.host,
                "total_delta_bytes": result.get("total_delta_bytes", 0),
                "comparable": bool(compared),
                "where": top or None,
                "bytes_per_day": fs.get("bytes_per_day"),
                "seconds_to_full": to_full,
            }
        )
    body = table(rows, right=(1, 3)) if answered else []
    return fleet_output(outcomes, body, {"hosts": view})


#: Descriptions of the output fields the schema above writes compactly (dotted paths; ``[]``: an array's items).
FIELD_WORDS: dict[str, str] = {
    "baseline": "The older snapshot compared.",
    "baseline.id": "Its id in the history store.",
    "baseline.taken": "When it was taken (ISO 8601, UTC).",
    "baseline.partial": "True when that scan stopped at its budget.",
    "current": "The newer snapshot compared.",
    "current.id": "Its id in the history store.",
    "current.taken": "When it was taken (ISO 8601, UTC).",
    "current.partial": "True when that scan stopped at its budget.",
    "attribution": "How much of the growth the listed directories explain.",
    "attribution.covered_bytes": "Growth inside the listed directories.",
    "attribution.percent": "That share of the whole growth.",
    "changes": "Directories that grew, shrank, appeared or disappeared, largest change first.",
    "changes[].kind": "grew, shrank, appeared, disappeared, or modified (the same size, a file in it rewritten).",
    "changes[].delta_bytes": "Change in disk bytes.",
    "changes[].delta_apparent_bytes": "Change in apparent bytes.",
    "changes[].old_bytes": "Disk bytes then (null when it appeared).",
    "changes[].new_bytes": "Disk bytes now (null when it disappeared).",
    "changes[].per_day_bytes": "The change as a rate per day (null for snapshots under 10 minutes apart).",
    "changes[].was_below_threshold": "It was too small to be recorded then (or did not exist).",
    "changes[].delta_is_upper_bound": "True when the delta counts its whole size: it had up to threshold_bytes "
    "then, not recorded, so the true change is between delta - threshold_bytes and delta.",
    "changes[].newest_modified": "The newest file modification in it now (ISO 8601, UTC; null if unknown).",
    "changes[].files_changed": "Whether a file in it is newer than any it held then (null if unknown).",
    "changes_not_shown": "Further changes left out of this list.",
    "threshold_bytes": "Directories smaller than this are not tracked in snapshots.",
    "new_files[].modified": "Modification time (ISO 8601, UTC).",
    "filesystem.readings": "disk_usage readings the fit used.",
    "filesystem.span_s": "Seconds between the first and the last reading.",
    "filesystem.bytes_per_day": "Least-squares fill rate.",
    "filesystem.seconds_to_full": "Seconds until full at that rate (null when not filling).",
    "filesystem.growth_bytes": "Used bytes gained over the span.",
    "integrity": "Against the integrity baseline (hash_tree baseline: true).",
    "integrity.comparable": "Whether two baselines of this tree exist.",
    "integrity.added": "Files added.",
    "integrity.removed": "Files removed.",
    "integrity.content_changed": "Files whose content digest changed.",
    "integrity.metadata_changed": "Files whose mode, owner or mtime changed.",
    "integrity.examples": "Some of the changed files.",
    "lower_bound.since": "Files modified since this time were counted (ISO 8601, UTC).",
    "notes": "Facts about this answer (history off, a snapshot not saved, ...).",
}


TOOL = Tool(
    name="what_changed",
    title="What changed",
    description=(
        "What grew, shrank, appeared and disappeared under a directory since a time ('24h', '7d', an ISO "
        "8601 time or 'last'), from the history sysmcp keeps of its own dir_usage scans and disk_usage "
        "readings: each directory's delta and rate per day, which few directories hold most of the growth "
        "(attribution), the largest new files, the filesystem's fill rate (least-squares, like "
        "predict_linear) and time to full, and for trees with an integrity baseline (hash_tree with "
        "baseline: true) the files added, removed and changed. Scans afresh when the newest snapshot is "
        "over 5 minutes old; with no history yet it says so, records a snapshot and lists the files "
        "modified since then as a lower bound. Start here when a disk fills or something grew. Read-only."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=describe_paths(OUTPUT_SCHEMA, FIELD_WORDS),
    handler=handle,
    merge=merge,
)
