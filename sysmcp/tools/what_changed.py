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

from sysmcp.engine.paths import is_within
from sysmcp.history import compare as engine
from sysmcp.history import state
from sysmcp.history.compare import Comparison, Outcome
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ArgumentError, ToolError
from sysmcp.render import age, plural, table
from sysmcp.tools.descriptions import describe_paths
from sysmcp.tools.dir_usage import FULL_FILES, parse_duration, usage_report
from sysmcp.tools.merging import HostOutcome, fleet_output
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput, listing_name
from sysmcp.tools.walking import (
    directory_argument,
    timeout_property,
    unreadable_directory,
    walk_options,
    walk_properties,
)
from sysmcp.tools.what_changed_text import render, signed

DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 300.0

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "since": {
            "type": "string",
            "minLength": 1,
            "maxLength": 40,
            "default": "24h",
            "description": "'24h', '7d', an ISO 8601 time, or 'last' (the snapshot before the newest).",
        },
        "until": {
            "type": "string",
            "minLength": 1,
            "maxLength": 40,
            "description": "As since, not 'last'. Default: now.",
        },
        "top_n": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
        "timeout_s": timeout_property(DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S),
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
_ATTRIBUTION = {  # growth or shrinkage: the deepest directories that hold it
    "type": ["object", "null"],
    "properties": {
        "total_bytes": {"type": "integer"},
        "covered_bytes": {"type": "integer"},
        "percent": {"type": ["number", "null"]},
        "paths": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["total_bytes", "covered_bytes", "percent", "paths"],
}
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
        "attribution": _ATTRIBUTION,
        "shrinkage": _ATTRIBUTION,
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
                    "parents": {"type": "array", "items": {"type": "string"}},
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
        "removed_files": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "disk_bytes": {"type": "integer"}},
                "required": ["path", "disk_bytes"],
            },
        },
        "shrunk_files": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old_disk_bytes": {"type": "integer"},
                    "disk_bytes": {"type": "integer"},
                },
                "required": ["path", "old_disk_bytes", "disk_bytes"],
            },
        },
        "filesystem_growth": {
            "type": ["object", "null"],
            "properties": {
                "mount_point": {"type": "string"},
                "readings": {"type": "integer"},
                "span_s": {"type": "number"},
                "growth_bytes": {"type": "integer"},
                "unexplained_bytes": {"type": ["integer", "null"]},
            },
            "required": ["mount_point", "readings", "span_s", "growth_bytes"],
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
                "not_checked": {"type": "integer"},
                "baseline_taken": {"type": ["string", "null"]},
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


def parse_since(value: str, now: float) -> float:
    """``since`` in epoch seconds; a time in the future is refused (nothing can have changed since)."""
    since = parse_when(value, "since", now)
    if since > now:
        raise ArgumentError(
            f"Invalid arguments: 'since' is in the future ({value!r}): give a duration back from now "
            "('24h') or a past time"
        )
    return since


def comparison(
    path: Path, args: dict[str, Any], now: float, visible: Callable[[bytes | str], bool]
) -> Comparison:
    """The engine's request from validated arguments (``since`` 'last': None)."""
    since_raw: str = args["since"]
    return Comparison(
        path=os.fsencode(path),
        since=None if since_raw.strip().lower() == "last" else parse_since(since_raw, now),
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


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    now = time.time()
    since_raw: str = args["since"]
    if since_raw.strip().lower() != "last":
        parse_since(since_raw, now)  # bad arguments are refused before any work
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
                signed(int(result.get("total_delta_bytes", 0))) if compared else "no baseline",
                top or "-",
                signed(int(fs["bytes_per_day"])) if fs else "-",
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
    "changes[].parents": "Parent directories carrying this same change, not listed themselves.",
    "shrinkage": "How much of the shrinkage the listed directories explain.",
    "shrinkage.covered_bytes": "Shrinkage inside the listed directories.",
    "shrinkage.percent": "That share of the whole shrinkage.",
    "removed_files": "Large files of the older snapshot that are gone.",
    "shrunk_files": "Large files of the older snapshot that are smaller now.",
    "shrunk_files[].old_disk_bytes": "Disk bytes then.",
    "filesystem_growth": "Used bytes of the filesystem between the disk readings over the compared span.",
    "filesystem_growth.readings": "Disk readings in the span.",
    "filesystem_growth.span_s": "Seconds between the first and the last of them.",
    "filesystem_growth.growth_bytes": "Used bytes gained (negative: freed).",
    "filesystem_growth.unexplained_bytes": "The part the directories under path do not account for.",
    "integrity.not_checked": "Baseline files not hashed now before the time budget ran out.",
    "integrity.baseline_taken": "When the baseline was taken (ISO 8601, UTC).",
    "changes_not_shown": "Further changes left out of this list.",
    "threshold_bytes": "Directories smaller than this are not tracked in snapshots.",
    "new_files[].modified": "Modification time (ISO 8601, UTC).",
    "filesystem.readings": "disk_usage readings the fit used.",
    "filesystem.span_s": "Seconds between the first and the last reading.",
    "filesystem.bytes_per_day": "Least-squares fill rate.",
    "filesystem.seconds_to_full": "Seconds until full at that rate (null when not filling).",
    "filesystem.growth_bytes": "Used bytes gained over the span.",
    "integrity": "Against the integrity baseline (hash_tree baseline: true).",
    "integrity.comparable": "Whether the newest baseline could be compared with the tree hashed now.",
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
        "What grew, shrank, appeared or disappeared under a directory since a time, from sysmcp's own earlier scans: "
        "per-directory deltas, where the growth is, the largest new files, the fill rate and time to full, "
        "and changes against a hash_tree baseline. Start here when a disk fills or something grew."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=describe_paths(OUTPUT_SCHEMA, FIELD_WORDS),
    handler=handle,
    merge=merge,
)
