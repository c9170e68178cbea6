"""dir_usage: what fills a directory — du's totals plus the largest directories and files, bounded.

The answer a sysadmin gets from ``du -sx``, ``du -d1 | sort -h`` and ``find -size`` together, in a
few hundred tokens whatever the tree size: totals that equal ``du`` (apparent and on-disk bytes,
hard links once), the top directories (cumulative) and the top files, kept in fixed-size heaps.
A time budget bounds the call; when it runs out the result says so and reports what was seen.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from sysmcp.engine.mounts import inodes_in_use
from sysmcp.engine.paths import display, printable
from sysmcp.engine.usage import Request, Usage, scan_usage
from sysmcp.engine.walk import SkipCounter
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ArgumentError, ToolError
from sysmcp.render import age, human_bytes, more_not_shown, plural, table
from sysmcp.tools import schemas as js
from sysmcp.tools.arguments import size_argument
from sysmcp.tools.merging import HostOutcome, fleet_output
from sysmcp.tools.recording import recorded_scan
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput, listing_name, with_link
from sysmcp.tools.walking import (
    directory_argument,
    skipped_phrase,
    timeout_property,
    unreadable_directory,
    walk_options,
    walk_properties,
)
from sysmcp.views import DIR_USAGE

DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 300.0
FULL_FILES = 1000  # rows kept for the full listing resource (the inline list is top_n of these)
FULL_DIRECTORIES = 10_000
MAX_AGE_S = 200 * 365 * 86400  # a duration longer than this is a typo, not a filter
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)\s*")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_NOTE = "a duration such as '90s', '45m', '6h', '7d', '2w', or a number of seconds"


def _since(description: str) -> dict[str, Any]:
    """A ``modified_within``/``modified_before`` duration: text such as '7d', or seconds."""
    return {"type": ["string", "number"], "minLength": 1, "maxLength": 32, "description": description}


INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "path": js.path_argument(),
        "top_n": js.top_n_argument(maximum=50, default=5),
        "show": js.string(enum=["both", "files", "directories", "extensions", "all"], default="both"),
        "modified_within": _since("Only files modified within this ('1h', '7d', seconds)."),
        "modified_before": _since("Only files older than this."),
        "max_depth": js.integer("Depth of the directory list.", minimum=1, maximum=1000, default=1),
        "sort_by": js.string(enum=["disk", "apparent"], default="disk"),
        "min_size": size_argument("List only entries this big."),
        "timeout_s": timeout_property(DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S),
        **walk_properties("path"),
    }
)

_SIZE = js.integer(minimum=0)
_ENTRY = js.record(
    {
        "path": js.string(),
        "disk_bytes": _SIZE,
        "apparent_bytes": _SIZE,
        "modified": js.string("Last modification time, ISO 8601 UTC (null if out of range).", null=True),
    },
    closed=False,
)

OUTPUT_SCHEMA: dict[str, Any] = js.result(
    {
        "path": js.string(),
        "complete": js.boolean("False when the scan stopped early (time budget)."),
        "stopped_reason": js.string("Why the scan stopped early, if it did.", null=True),
        "elapsed_s": js.number(),
        "sort_by": js.string(enum=["disk", "apparent"]),
        "totals": js.record(
            {
                "files": js.integer("Regular files (hard-linked names counted once)."),
                "directories": js.integer("Directories, including path itself."),
                "apparent_bytes": js.integer("Like du -sxb."),
                "disk_bytes": js.integer("Like du -sxB1: allocated blocks x 512."),
                "entries": js.integer("Directory entries examined."),
                "hard_linked_files": js.integer(
                    "Files counted that have other names too (counted once, as du)."
                ),
                "sparse_bytes": js.integer("Apparent bytes of sparse files' holes (no blocks on disk)."),
                "hidden_files": js.integer("Files counted whose name starts with a dot."),
                "hidden_bytes": js.integer("Their apparent bytes."),
                "matching": js.record(
                    {"files": js.integer(), "apparent_bytes": js.integer(), "disk_bytes": js.integer()},
                    "With modified_within or modified_before: the files that match.",
                    closed=False,
                ),
            },
            optional=("matching",),
            closed=False,
        ),
        "modified_after": js.string(
            "With modified_within: files modified at or after this time (ISO 8601 UTC)."
        ),
        "modified_until": js.string("With modified_before: files modified before this time (ISO 8601 UTC)."),
        "extensions": {
            "type": "array",
            "description": "With show 'extensions' or 'all': the top extensions by the sort_by size.",
            "items": js.record(
                {
                    "extension": js.string("'.log', … or '(none)', '(other)'."),
                    "files": js.integer(),
                    "disk_bytes": _SIZE,
                    "apparent_bytes": _SIZE,
                },
                closed=False,
            ),
        },
        "extensions_not_shown": js.integer(),
        "skipped": js.counts(
            "Entries left out, by reason: unreadable, other_filesystem, pseudo_filesystem, "
            "excluded, special_file, vanished."
        ),
        "largest_files": js.typed("array", items=_ENTRY),
        "files_not_shown": js.integer("Files (at least min_size) not listed."),
        "largest_directories": js.typed(
            "array",
            items=js.record(
                {
                    "path": js.string(),
                    "disk_bytes": _SIZE,
                    "apparent_bytes": _SIZE,
                    "files": js.integer("Regular files below it."),
                    "depth": js.integer("1 for an immediate subdirectory of path."),
                },
                closed=False,
            ),
        ),
        "directories_not_shown": js.integer("Directories within max_depth (at least min_size) not listed."),
    },
    optional=("modified_after", "modified_until", "extensions", "extensions_not_shown"),
)


def _size_text(apparent: int, disk: int, by_disk: bool) -> str:
    """The ranked size, plus the other one when they tell different stories (sparse or tiny files)."""
    main, other, other_name = (disk, apparent, "apparent") if by_disk else (apparent, disk, "on disk")
    text = f"{human_bytes(main):>10}"
    if other > 2 * main + 65536 or main > 2 * other + 65536:
        text += f" ({other_name} {human_bytes(other)})"
    return text


def _joined(shown: str, relative: str) -> str:
    # display() takes the str as it is when it encodes (almost always): no round trip through bytes
    return shown.rstrip("/") + "/" + display(relative)


def parse_duration(value: Any, name: str) -> float:
    """Seconds in '90s', '45m', '6h', '7d', '2w', '3600' or 3600; ``ArgumentError`` naming ``name``."""
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (found := _DURATION.fullmatch(value.lower())):
        seconds = float(found.group(1)) * _DURATION_UNITS[found.group(2)]
    if seconds is None or not math.isfinite(seconds):
        raise ArgumentError(f"Invalid arguments: {name!r} must be {_DURATION_NOTE}, got {value!r}")
    if not 0 < seconds <= MAX_AGE_S:
        raise ArgumentError(
            f"Invalid arguments: {name!r} must be more than 0 and at most 200 years, got {value!r}"
        )
    return seconds


def time_window(args: dict[str, Any], now: float) -> tuple[float | None, float | None]:
    """(newer_than, older_than) in epoch seconds from modified_within and modified_before."""
    within = parse_duration(args["modified_within"], "modified_within") if "modified_within" in args else None
    before = parse_duration(args["modified_before"], "modified_before") if "modified_before" in args else None
    if within is not None and before is not None and before >= within:
        raise ArgumentError(
            "Invalid arguments: 'modified_before' must be shorter than 'modified_within' (files modified "
            f"between {age(within)} and {age(before)} ago); as given no file can match"
        )
    return (None if within is None else now - within), (None if before is None else now - before)


# The seconds ``datetime`` can show (years 1 to 9999): outside them a time is not shown (None).
_FIRST_SECOND, _LAST_SECOND = -62_135_596_800, 253_402_300_799


def iso_utc(mtime: float) -> str | None:
    """``mtime`` as ``datetime.fromtimestamp(mtime, UTC)`` would print it, without an aware ``datetime``.

    Why by hand: the full listing dates up to a thousand files on every call, and an aware
    ``datetime``'s ``strftime`` made the render 4.6 ms of a 0.6 s call (2.6 ms this way). Rounding as
    ``datetime`` does it: to the microsecond, half to even, then the whole second below.
    """
    try:
        fraction, whole = math.modf(mtime)
        micro = round(fraction * 1e6)
        seconds = int(whole) + (1 if micro >= 1_000_000 else -1 if micro < 0 else 0)
    except (OverflowError, ValueError):  # inf, nan
        return None
    if not _FIRST_SECOND <= seconds <= _LAST_SECOND:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _age(mtime: float | None, now: float) -> str:
    if mtime is None:
        return ""
    if mtime > now + 1:
        return "  (modified in the future)"
    return f"  ({age(max(0.0, now - mtime), ' old')})"


_LISTS_DIRECTORIES = ("both", "directories", "all")
_LISTS_FILES = ("both", "files", "all")
_LISTS_EXTENSIONS = ("extensions", "all")


def render(
    shown: str,
    usage: Usage,
    skipped: dict[str, int],
    args: dict[str, Any],
    now: float | None = None,
    named: Sequence[str] = (),
) -> tuple[str, dict[str, Any], str | None]:
    """Text for the model, structured content, and the full listing (None when nothing was cut)."""
    now = time.time() if now is None else now
    show, top_n = args["show"], args["top_n"]
    files, directories = _file_rows(shown, usage), _directory_rows(shown, usage)
    shown_dirs = directories[:top_n] if show in _LISTS_DIRECTORIES else []
    shown_files = files[:top_n] if show in _LISTS_FILES else []
    extensions = _extension_rows(usage, top_n) if show in _LISTS_EXTENSIONS else None
    lines = _head(shown, usage, args) + _lists(usage, args, shown_dirs, shown_files, extensions, now)
    if skipped:
        lines.append("Skipped: " + skipped_phrase(skipped, named, shown))
    structured = _structured(shown, usage, skipped, args, now, shown_dirs, shown_files, extensions)
    cut = len(files) > len(shown_files) or len(directories) > len(shown_dirs)
    return (
        "\n".join(lines),
        structured,
        _full_listing(shown, usage, args, files, directories) if cut else None,
    )


def _lists(
    usage: Usage,
    args: dict[str, Any],
    directories: list[dict[str, Any]],
    files: list[dict[str, Any]],
    extensions: list[dict[str, Any]] | None,
    now: float,
) -> list[str]:
    """The lists the ``show`` argument asks for, as the text shows them."""
    by_disk, lines = args["sort_by"] == "disk", []
    measure = "disk usage" if by_disk else "apparent size"
    limit = f", at least {human_bytes(args['min_size'])}" if args["min_size"] else ""
    modified = f", modified {window}" if (window := _window_phrase(args)) else ""
    if args["show"] in _LISTS_DIRECTORIES:
        depth = "immediate subdirectories" if args["max_depth"] == 1 else f"depth ≤ {args['max_depth']}"
        rows = [
            (row, printable(row["path"]) + "/", f"  ({plural(row['files'], 'file')})") for row in directories
        ]
        title = f"Largest directories ({depth}, by {measure}{limit}):"
        lines += _list(title, rows, usage.eligible_directories, "directory", by_disk)
    if args["show"] in _LISTS_FILES:
        ages = [_age(usage.modified.get(file.relative), now) for file in usage.files[: len(files)]]
        rows = [(row, printable(row["path"]), tail) for row, tail in zip(files, ages, strict=True)]
        lines += _list(
            f"Largest files (by {measure}{limit}{modified}):", rows, usage.eligible_files, "file", by_disk
        )
    if extensions is not None:
        rows = [
            (row, printable(row["extension"]), f"  ({plural(row['files'], 'file')})") for row in extensions
        ]
        title = f"Top extensions (by {measure}{modified}):"
        lines += _list(title, rows, len(usage.extensions), "extension", by_disk)
    return lines


def _file_rows(shown: str, usage: Usage) -> list[dict[str, Any]]:
    """Every file the scan kept, as structured content lists it (the text shows the first top_n)."""
    return [
        {
            "path": _joined(shown, rel),
            "disk_bytes": disk,
            "apparent_bytes": apparent,
            "modified": iso_utc(usage.modified[rel]) if rel in usage.modified else None,
        }
        for apparent, disk, rel in usage.files
    ]


def _directory_rows(shown: str, usage: Usage) -> list[dict[str, Any]]:
    return [
        {"path": _joined(shown, rel), "disk_bytes": disk, "apparent_bytes": apparent, "files": n, "depth": d}
        for apparent, disk, rel, n, d in usage.directories
    ]


def _extension_rows(usage: Usage, top_n: int) -> list[dict[str, Any]]:
    return [
        {"extension": display(os.fsencode(ext)), "files": n, "disk_bytes": disk, "apparent_bytes": apparent}
        for ext, n, apparent, disk in usage.extensions[:top_n]
    ]


def _head(shown: str, usage: Usage, args: dict[str, Any]) -> list[str]:
    """The partial warning, the totals, and with a time filter the matching files' totals."""
    totals = usage.totals
    assert totals is not None
    so_far = " so far" if usage.stopped else ""
    lines = []
    if usage.stopped:
        lines.append(
            f"PARTIAL RESULT: the scan stopped early ({usage.stopped}) after {plural(usage.entries, 'entry')}; "
            "totals and lists cover only what was scanned."
        )
    lines.append(
        f"{shown}: {human_bytes(totals.disk)} on disk ({human_bytes(totals.apparent)} apparent) in "
        f"{plural(totals.files, 'file')} and {plural(totals.dirs, 'directory')}{so_far} [{usage.elapsed:.2f} s]"
    )
    if usage.matching is not None:
        count, apparent, disk = usage.matching
        lines.append(
            f"Files modified {_window_phrase(args)}: {count:,}, {human_bytes(disk)} on disk "
            f"({human_bytes(apparent)} apparent){so_far}"
        )
    notes = _inside_the_totals(usage)
    if notes:
        lines.append(f"Within these totals: {notes}.")
    return lines


def _inside_the_totals(usage: Usage) -> str:
    """What the totals leave to be inferred, in one phrase ('' when there is nothing to say)."""
    linked, sparse, hidden, hidden_bytes = usage.notes
    parts = []
    if linked:
        parts.append(f"{plural(linked, 'file')} with other hard-linked names (each counted once)")
    if sparse:
        parts.append(f"{human_bytes(sparse)} of holes in sparse files (apparent, not on disk)")
    if hidden:
        parts.append(f"{plural(hidden, 'hidden (dot) file')} ({human_bytes(hidden_bytes)} apparent)")
    return "; ".join(parts)


def _list(
    title: str, rows: Sequence[tuple[dict[str, Any], str, str]], eligible: int, noun: str, by_disk: bool
) -> list[str]:
    """One bounded list of the text: its title, a line per (row, name, tail), what it left out."""
    lines = [title]
    lines += [
        f"  {_size_text(row['apparent_bytes'], row['disk_bytes'], by_disk)}  {name}{tail}"
        for row, name, tail in rows
    ]
    if not rows:
        lines.append("  (none)")
    if eligible != len(rows):
        lines.append(f"  {more_not_shown(eligible - len(rows), noun)}")
    return lines


def _structured(
    shown: str,
    usage: Usage,
    skipped: dict[str, int],
    args: dict[str, Any],
    now: float,
    directories: list[dict[str, Any]],
    files: list[dict[str, Any]],
    extensions: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """The structured content, with the lists as the text shows them."""
    totals = usage.totals
    assert totals is not None
    counts: dict[str, Any] = {
        "files": totals.files,
        "directories": totals.dirs,
        "apparent_bytes": totals.apparent,
        "disk_bytes": totals.disk,
        "entries": usage.entries,
        **dict(
            zip(
                ("hard_linked_files", "sparse_bytes", "hidden_files", "hidden_bytes"),
                usage.notes,
                strict=True,
            )
        ),
    }
    if usage.matching is not None:
        matching, apparent, disk = usage.matching
        counts["matching"] = {"files": matching, "apparent_bytes": apparent, "disk_bytes": disk}
    show = args["show"]
    structured = {
        "path": shown,
        "complete": usage.stopped is None,
        "stopped_reason": usage.stopped,
        "elapsed_s": round(usage.elapsed, 3),
        "sort_by": args["sort_by"],
        "totals": counts,
        "skipped": skipped,
        "largest_files": files,
        "files_not_shown": usage.eligible_files - len(files) if show in _LISTS_FILES else 0,
        "largest_directories": directories,
        "directories_not_shown": usage.eligible_directories - len(directories)
        if show in _LISTS_DIRECTORIES
        else 0,
    }
    if extensions is not None:
        structured.update(extensions=extensions, extensions_not_shown=len(usage.extensions) - len(extensions))
    return structured | _cutoffs(args, now)


def _cutoffs(args: dict[str, Any], now: float) -> dict[str, str]:
    """``modified_after``/``modified_until``: the time filter's bounds as times (none out of range)."""
    cutoffs = {}
    for key, argument in (("modified_after", "modified_within"), ("modified_until", "modified_before")):
        if argument in args:
            cutoff = iso_utc(now - parse_duration(args[argument], argument))
            if cutoff is not None:
                cutoffs[key] = cutoff
    return cutoffs


def _full_listing(
    shown: str,
    usage: Usage,
    args: dict[str, Any],
    files: list[dict[str, Any]],
    directories: list[dict[str, Any]],
) -> str:
    """The tab-separated listing kept as a resource when the text cut a list."""
    out = [f"# dir_usage {shown} (sort_by={args['sort_by']}, max_depth={args['max_depth']})"]
    if usage.stopped:
        out.append(f"# PARTIAL: {usage.stopped}")
    if args["show"] in _LISTS_DIRECTORIES:
        out += _tsv(
            f"largest directories ({len(directories):,} of {usage.eligible_directories:,})",
            "files",
            [(r, r["files"], printable(r["path"]) + "/") for r in directories],
        )
    if args["show"] in _LISTS_FILES:
        out += _tsv(
            f"largest files ({len(files):,} of {usage.eligible_files:,})",
            "modified",
            [(r, r["modified"] or "", printable(r["path"])) for r in files],
        )
    return "\n".join(out) + "\n"


def _tsv(title: str, third: str, rows: Sequence[tuple[dict[str, Any], object, str]]) -> list[str]:
    """One table of the full listing: a '# title' line, the tab-separated header, then a line per row
    (its sizes, the ``third`` column's value, its path as shown)."""
    return [
        f"# {title}",
        f"disk_bytes\tapparent_bytes\t{third}\tpath",
        *(f"{r['disk_bytes']}\t{r['apparent_bytes']}\t{value}\t{path}" for r, value, path in rows),
    ]


def _window_phrase(args: dict[str, Any]) -> str:
    """'within 7 d', 'more than 30 d ago', 'between 30 d and 7 d ago', or '' without a filter."""
    within = args.get("modified_within")
    before = args.get("modified_before")
    if within is not None and before is not None:
        return (
            f"between {age(parse_duration(within, 'modified_within'))} and "
            f"{age(parse_duration(before, 'modified_before'))} ago"
        )
    if within is not None:
        return f"within {age(parse_duration(within, 'modified_within'))}"
    if before is not None:
        return f"more than {age(parse_duration(before, 'modified_before'))} ago"
    return ""


def request_for(args: dict[str, Any], now: float) -> Request:
    """The scan the validated arguments ask for; bad durations raise ``ArgumentError``."""
    newer_than, older_than = time_window(args, now)
    show: str = args["show"]
    return Request(
        top_files=FULL_FILES if show in _LISTS_FILES else 0,
        top_directories=FULL_DIRECTORIES if show in _LISTS_DIRECTORIES else 0,
        max_depth=args["max_depth"],
        by_disk=args["sort_by"] == "disk",
        min_size=args["min_size"],
        timeout_s=min(float(args["timeout_s"]), MAX_TIMEOUT_S),
        newer_than=newer_than,
        older_than=older_than,
        extensions=show in _LISTS_EXTENSIONS,
    )


def usage_report(meter: Meter | None) -> Callable[[int, int], None]:
    """The usage engine's progress (entries, bytes seen) into a request's meter (None: nowhere)."""

    def report(entries: int, seen: int) -> None:
        if meter is not None:
            meter.done = entries
            meter.extra["bytes"] = seen

    return report


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    now = time.time()
    request = request_for(args, now)  # bad durations are refused before any work
    path, shown = await directory_argument(ctx, args["path"])
    options = walk_options(args)
    skipped = SkipCounter()

    def describe(meter: Meter, elapsed: float) -> str:
        return f"{plural(int(meter.done), 'entry')} scanned, {human_bytes(meter.extra.get('bytes', 0))} seen"

    def scan(meter: Meter) -> tuple[Usage, Any, str | None]:
        meter.total = inodes_in_use(path) if options.one_file_system else None

        report = usage_report(meter)

        # The history hook: with history on, the scan also keeps every directory's totals for it.
        return recorded_scan(
            path,
            options,
            request,
            lambda r: scan_usage(os.fsencode(path), options, skipped, r, report, meter.checkpoint),
        )

    try:
        usage, _, history_note = await ctx.run_in_worker(scan, describe=describe)
    except PermissionError:
        raise unreadable_directory(shown, path) from None
    except OSError as exc:
        raise ToolError(f"Cannot scan {shown}: {exc.strerror or exc}") from None
    text, structured, full = render(shown, usage, skipped.as_dict(), args, now, skipped.named)
    if history_note:
        text += "\n" + history_note
    links: tuple[ResourceLink, ...] = ()
    if full is not None:  # not kept: bounded by the list sizes, only absurdly long names could get there
        name, description = listing_name("dir_usage", shown, ".tsv"), f"Full dir_usage listing of {shown}"
        link = ctx.keep(name, full, description=description, mime_type="text/tab-separated-values")
        kept = f"Longer lists (up to {FULL_DIRECTORIES:,} directories, {FULL_FILES:,} files): {{}}"
        text, links = with_link(text, link, kept, "Longer lists: not kept, {}")
    return ToolOutput(text, structured, links=links)


def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
    """Per-host totals side by side, then each host's largest entries (each host already cut to top_n)."""
    answered = [o for o in outcomes if o.ok and o.result is not None]
    key = "apparent_bytes" if arguments.get("sort_by") == "apparent" else "disk_bytes"
    rows = [["HOST", "DISK", "APPARENT", "FILES", "DIRS", "COMPLETE"]]
    totals: list[dict[str, Any]] = []
    largest: list[dict[str, Any]] = []
    for outcome in sorted(answered, key=lambda o: -int((o.result or {}).get("totals", {}).get(key, 0))):
        result = outcome.result or {}
        total = result.get("totals", {})
        rows.append(
            [
                outcome.host,
                human_bytes(total.get("disk_bytes", 0)),
                human_bytes(total.get("apparent_bytes", 0)),
                f"{total.get('files', 0):,}",
                f"{total.get('directories', 0):,}",
                "yes" if result.get("complete") else "partial",
            ]
        )
        totals.append(
            {"host": outcome.host, "path": result.get("path"), "complete": result.get("complete"), **total}
        )
        largest.append(
            {
                "host": outcome.host,
                "largest_directories": result.get("largest_directories", []),
                "largest_files": result.get("largest_files", []),
            }
        )
    body = table(rows, right=(1, 2, 3, 4)) if answered else []
    for entry in largest:
        for kind in ("largest_directories", "largest_files"):
            if entry[kind]:
                body.append(f"{entry['host']}: {kind.replace('_', ' ')}")
                body += [f"  {human_bytes(item.get(key, 0)):>10}  {item['path']}" for item in entry[kind]]
    return fleet_output(outcomes, body, {"totals": totals, "largest": largest, "sort_by": key})


TOOL = Tool(
    name="dir_usage",
    title="Directory usage",
    description=(
        "What fills a directory now: du -sx totals, its largest subdirectories and files. Growth since "
        "a time: what_changed; space no walk finds: disk_usage explain."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=handle,
    view=DIR_USAGE.uri,
    merge=merge,
)
