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
from collections.abc import Sequence
from typing import Any, Literal

from sysmcp.engine.calls import Cancel, Progress
from sysmcp.engine.mounts import inodes_in_use
from sysmcp.engine.paths import escaped
from sysmcp.engine.usage import Usage, UsageRequest, scan_usage
from sysmcp.engine.walk import WalkOptions
from sysmcp.protocol.context import Meter
from sysmcp.protocol.failures import ArgumentError
from sysmcp.render import age, human_bytes, plural, table, titled
from sysmcp.tools import schemas as js
from sysmcp.tools.arguments import size_argument
from sysmcp.tools.history_hooks import recorded_scan
from sysmcp.tools.merging import HostOutcome, fleet_output, typed_results
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput, listing_name, with_link
from sysmcp.tools.typed import ABSENT, Open, Opt, iso_utc, prop, result, to_json
from sysmcp.tools.walking import (
    directory_argument,
    joined,
    scan_failure,
    skipped_phrase,
    walk_options,
    walk_properties,
)
from sysmcp.views import DIR_USAGE

TIMEOUT = js.TimeBudget(default=30.0, maximum=300.0)
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
        "timeout_s": TIMEOUT.property(),
        **walk_properties("path"),
    }
)


@result
class WindowTotals(Open):
    files: int = prop()
    apparent_bytes: int = prop()
    disk_bytes: int = prop()


@result
class Totals(Open):
    files: int = prop("Regular files (hard-linked names counted once).")
    directories: int = prop("Directories, including path itself.")
    apparent_bytes: int = prop("Like du -sxb.")
    disk_bytes: int = prop("Like du -sxB1: allocated blocks x 512.")
    entries: int = prop("Directory entries examined.")
    hard_linked_files: int = prop("Files counted that have other names too (counted once, as du).")
    sparse_bytes: int = prop("Apparent bytes of sparse files' holes (no blocks on disk).")
    hidden_files: int = prop("Files counted whose name starts with a dot.")
    hidden_bytes: int = prop("Their apparent bytes.")
    preallocated_bytes: Opt[int] = prop(  # absent from the answers of hosts older than it
        "At least the bytes allocated past files' ends (fallocate --keep-size, XFS preallocation): on disk, "
        "not apparent. A floor: a file's own mapping blocks (ext2/ext3 indirect blocks, an extent tree) are "
        "left out, and a file's holes are netted against it.",
        default=ABSENT,
    )
    matching: Opt[WindowTotals] = prop(
        "With modified_within or modified_before: the files that match.", default=ABSENT
    )


@result
class LargeFile(Open):
    path: str = prop()
    disk_bytes: int = prop(minimum=0)
    apparent_bytes: int = prop(minimum=0)
    modified: str | None = prop("Last modification time, ISO 8601 UTC (null if out of range).")


@result
class LargeDirectory(Open):
    path: str = prop()
    disk_bytes: int = prop(minimum=0)
    apparent_bytes: int = prop(minimum=0)
    files: int = prop("Regular files below it.")
    depth: int = prop("1 for an immediate subdirectory of path.")


@result
class Extension(Open):
    extension: str = prop("'.log', … or '(none)', '(other)'.")
    files: int = prop()
    disk_bytes: int = prop(minimum=0)
    apparent_bytes: int = prop(minimum=0)


@result
class DirUsage:
    path: str = prop()
    complete: bool = prop("False when the scan stopped early.")
    stopped_reason: str | None = prop("Why the scan stopped early, if it did.")
    elapsed_s: float = prop()
    sort_by: Literal["disk", "apparent"] = prop()
    totals: Totals = prop()
    skipped: dict[str, int] = prop(
        "Entries left out, by reason: unreadable, other_filesystem, btrfs_subvolume, pseudo_filesystem, "
        "excluded, special_file, vanished, directory_loop (a bind mount of a directory above it), "
        "filesystem_error (a directory the filesystem would not open or list: I/O error, a FUSE daemon's own)."
    )
    largest_files: list[LargeFile] = prop()
    files_not_shown: int = prop("Files (at least min_size) not listed.")
    largest_directories: list[LargeDirectory] = prop()
    directories_not_shown: int = prop("Directories within max_depth (at least min_size) not listed.")
    extensions: Opt[list[Extension]] = prop(
        "With show 'extensions' or 'all': the top extensions by the sort_by size.", default=ABSENT
    )
    extensions_not_shown: Opt[int] = prop(default=ABSENT)
    modified_after: Opt[str] = prop(
        "With modified_within: files modified at or after this time (ISO 8601 UTC).", default=ABSENT
    )
    modified_until: Opt[str] = prop(
        "With modified_before: files modified before this time (ISO 8601 UTC).", default=ABSENT
    )


def _size_text(apparent: int, disk: int, by_disk: bool) -> str:
    """The ranked size, plus the other one when they tell different stories (sparse or tiny files)."""
    main, other, other_name = (disk, apparent, "apparent") if by_disk else (apparent, disk, "on disk")
    text = f"{human_bytes(main):>10}"
    if other > 2 * main + 65536 or main > 2 * other + 65536:
        text += f" ({other_name} {human_bytes(other)})"
    return text


def parse_duration(value: Any, name: str) -> float:
    """Seconds in '90s', '45m', '6h', '7d', '2w', '3600' or 3600; ``ArgumentError`` naming ``name``."""
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # An integer such as 10**400 has no float: held at 1e300, out of range all the same.
        seconds = float(value) if abs(value) < 1e300 else 1e300 if value > 0 else -1e300
    elif isinstance(value, str) and (found := _DURATION.fullmatch(value.lower())):
        seconds = float(found.group(1)) * _DURATION_UNITS[found.group(2)]
    if seconds is None or not math.isfinite(seconds):
        raise ArgumentError(f"Invalid arguments: {name!r} must be {_DURATION_NOTE}, got {value!r}")
    if not 0 < seconds <= MAX_AGE_S:
        raise ArgumentError(
            f"Invalid arguments: {name!r} must be more than 0 and at most 200 years, got {value!r}"
        )
    return seconds


def durations(args: dict[str, Any]) -> tuple[float | None, float | None]:
    """modified_within and modified_before in seconds (None: not given); bad ones raise ``ArgumentError``."""
    within = parse_duration(args["modified_within"], "modified_within") if "modified_within" in args else None
    before = parse_duration(args["modified_before"], "modified_before") if "modified_before" in args else None
    if within is not None and before is not None and before >= within:
        raise ArgumentError(
            "Invalid arguments: 'modified_before' must be shorter than 'modified_within' (files modified "
            f"between {age(within)} and {age(before)} ago); as given no file can match"
        )
    return within, before


def time_window(args: dict[str, Any], now: float) -> tuple[float | None, float | None]:
    """(newer_than, older_than) in epoch seconds from modified_within and modified_before."""
    within, before = durations(args)
    return (None if within is None else now - within), (None if before is None else now - before)


def _age(mtime: float | None, now: float) -> str:
    if mtime is None:
        return ""
    if mtime > now + 1:
        return "  (modified in the future)"
    return f"  ({age(max(0.0, now - mtime), ' old')})"


_LISTS_DIRECTORIES = ("both", "directories", "all")
_LISTS_FILES = ("both", "files", "all")
_LISTS_EXTENSIONS = ("extensions", "all")


def answer(
    shown: str, usage: Usage, args: dict[str, Any], now: float | None = None
) -> tuple[DirUsage, str, str | None]:
    """The result, its text, and the full listing (None when nothing was cut)."""
    now = time.time() if now is None else now
    show, top_n = args["show"], args["top_n"]
    within, before = durations(args)
    modified = usage.modified
    files = [
        LargeFile(joined(shown, rel), disk, apparent, iso_utc(modified[rel]) if rel in modified else None)
        for apparent, disk, rel in usage.files
    ]
    directories = [
        LargeDirectory(joined(shown, rel), disk, apparent, n, d)
        for apparent, disk, rel, n, d in usage.directories
    ]
    lists_files, lists_directories = show in _LISTS_FILES, show in _LISTS_DIRECTORIES
    shown_files = files[:top_n] if lists_files else []
    shown_dirs = directories[:top_n] if lists_directories else []
    extensions: Opt[list[Extension]] = ABSENT
    every_extension: list[Extension] = []  # for the full listing, when the text lists extensions
    if show in _LISTS_EXTENSIONS:
        every_extension = [
            Extension(os.fsdecode(ext), n, disk, apparent) for ext, n, apparent, disk in usage.extensions
        ]
        extensions = every_extension[:top_n]
    totals = usage.totals
    assert totals is not None
    found = DirUsage(
        path=shown,
        complete=usage.stopped is None,
        stopped_reason=usage.stopped,
        elapsed_s=round(usage.elapsed, 3),
        sort_by=args["sort_by"],
        totals=Totals(
            totals.files,
            totals.dirs,
            totals.apparent,
            totals.disk,
            usage.entries,
            *usage.notes,
            matching=ABSENT if usage.matching is None else WindowTotals(*usage.matching),
        ),
        skipped=usage.skipped.as_dict(),
        largest_files=shown_files,
        files_not_shown=usage.eligible_files - len(shown_files) if lists_files else 0,
        largest_directories=shown_dirs,
        directories_not_shown=usage.eligible_directories - len(shown_dirs) if lists_directories else 0,
        extensions=extensions,
        extensions_not_shown=len(usage.extensions) - len(extensions)
        if isinstance(extensions, list)
        else ABSENT,
        modified_after=_cutoff(now, within),
        modified_until=_cutoff(now, before),
    )
    cut = len(files) > len(shown_files) or len(directories) > len(shown_dirs)
    cut = cut or (isinstance(extensions, list) and len(every_extension) > len(extensions))
    full = _full_listing(found, args, files, directories, every_extension) if cut else None
    return found, render(found, usage, args, now), full


def render(found: DirUsage, usage: Usage, args: dict[str, Any], now: float) -> str:
    """The text of ``found``; from the scan, what the result leaves out: its exact time, each listed
    file's mtime and the unreadable directories by name."""
    lines = _head(found, usage.elapsed, args) + _lists(found, usage, args, now)
    if found.skipped:
        lines.append("Skipped: " + skipped_phrase(found.skipped, usage.skipped.named, found.path))
    return "\n".join(lines)


def _lists(found: DirUsage, usage: Usage, args: dict[str, Any], now: float) -> list[str]:
    """The lists the ``show`` argument asks for, as the text shows them."""
    by_disk, lines = found.sort_by == "disk", []
    measure = "disk usage" if by_disk else "apparent size"
    limit = f", at least {human_bytes(args['min_size'])}" if args["min_size"] else ""
    modified = f", modified {window}" if (window := _window_phrase(args)) else ""
    if args["show"] in _LISTS_DIRECTORIES:
        depth = "immediate subdirectories" if args["max_depth"] == 1 else f"depth ≤ {args['max_depth']}"
        directories = found.largest_directories
        rows: list[tuple[Listed, str, str]] = [
            (row, escaped(row.path) + "/", f"  ({plural(row.files, 'file')})") for row in directories
        ]
        title = f"Largest directories ({depth}, by {measure}{limit}):"
        lines += _list(title, rows, found.directories_not_shown, "directory", by_disk)
    if args["show"] in _LISTS_FILES:
        files = found.largest_files
        ages = [_age(usage.modified.get(file.relative), now) for file in usage.files[: len(files)]]
        rows = [(row, escaped(row.path), tail) for row, tail in zip(files, ages, strict=True)]
        title = f"Largest files (by {measure}{limit}{modified}):"
        lines += _list(title, rows, found.files_not_shown, "file", by_disk)
    if isinstance(found.extensions, list):
        extensions = found.extensions
        rows = [(row, escaped(row.extension), f"  ({plural(row.files, 'file')})") for row in extensions]
        title = f"Top extensions (by {measure}{modified}):"
        lines += _list(title, rows, len(usage.extensions) - len(rows), "extension", by_disk)
    return lines


def _head(found: DirUsage, elapsed: float, args: dict[str, Any]) -> list[str]:
    """The partial warning, the totals, and with a time filter the matching files' totals."""
    totals = found.totals
    so_far = " so far" if found.stopped_reason else ""
    lines = []
    if found.stopped_reason:
        lines.append(
            f"PARTIAL RESULT: the scan stopped early ({found.stopped_reason}) after "
            f"{plural(totals.entries, 'entry')}; totals and lists cover only what was scanned."
        )
    lines.append(
        f"{escaped(found.path)}: {human_bytes(totals.disk_bytes)} on disk ({human_bytes(totals.apparent_bytes)} "
        f"apparent) in {plural(totals.files, 'file')} and {plural(totals.directories, 'directory')}{so_far} "
        f"[{elapsed:.2f} s]"
    )
    if isinstance(matching := totals.matching, WindowTotals):
        lines.append(
            f"Files modified {_window_phrase(args)}: {matching.files:,}, {human_bytes(matching.disk_bytes)} "
            f"on disk ({human_bytes(matching.apparent_bytes)} apparent){so_far}"
        )
    notes = _inside_the_totals(totals)
    if notes:
        lines.append(f"Within these totals: {notes}.")
    return lines


def _inside_the_totals(totals: Totals) -> str:
    """What the totals leave to be inferred, in one phrase ('' when there is nothing to say)."""
    parts = []
    if totals.hard_linked_files:
        parts.append(
            f"{plural(totals.hard_linked_files, 'file')} with other hard-linked names (each counted once)"
        )
    if totals.sparse_bytes:
        parts.append(f"{human_bytes(totals.sparse_bytes)} of holes in sparse files (apparent, not on disk)")
    if isinstance(totals.preallocated_bytes, int) and totals.preallocated_bytes:
        parts.append(
            f"{human_bytes(totals.preallocated_bytes)} allocated past files' ends (preallocated: on disk, not apparent)"
        )
    if totals.hidden_files:
        parts.append(
            f"{plural(totals.hidden_files, 'hidden (dot) file')} ({human_bytes(totals.hidden_bytes)} apparent)"
        )
    return "; ".join(parts)


#: A row of one of the answer's lists: each has both sizes.
Listed = LargeFile | LargeDirectory | Extension


def _list(
    title: str, rows: Sequence[tuple[Listed, str, str]], cut: int, noun: str, by_disk: bool
) -> list[str]:
    """One bounded list of the text: its title, a line per (row, name, tail), the ``cut`` rows left out."""
    items = [
        f"{_size_text(row.apparent_bytes, row.disk_bytes, by_disk)}  {name}{tail}" for row, name, tail in rows
    ]
    return titled(title, items or ["(none)"], cut, noun)


def _cutoff(now: float, seconds: float | None) -> Opt[str]:
    """A time filter's bound as a time (absent without the filter, or out of range)."""
    return (None if seconds is None else iso_utc(now - seconds)) or ABSENT


def _full_listing(
    found: DirUsage,
    args: dict[str, Any],
    files: list[LargeFile],
    directories: list[LargeDirectory],
    extensions: list[Extension],
) -> str:
    """The tab-separated listing kept as a resource when the text cut a list."""
    out = [f"# dir_usage {escaped(found.path)} (sort_by={found.sort_by}, max_depth={args['max_depth']})"]
    if found.stopped_reason:
        out.append(f"# PARTIAL: {found.stopped_reason}")
    if args["show"] in _LISTS_DIRECTORIES:
        eligible = len(found.largest_directories) + found.directories_not_shown
        out += _tsv(
            f"largest directories ({len(directories):,} of {eligible:,})",
            "files",
            [(r, r.files, escaped(r.path) + "/") for r in directories],
        )
    if args["show"] in _LISTS_FILES:
        eligible = len(found.largest_files) + found.files_not_shown
        out += _tsv(
            f"largest files ({len(files):,} of {eligible:,})",
            "modified",
            [(r, r.modified or "", escaped(r.path)) for r in files],
        )
    if extensions:
        out += _tsv(
            f"extensions ({len(extensions):,})",
            "files",
            [(r, r.files, escaped(r.extension)) for r in extensions],
            "extension",
        )
    return "\n".join(out) + "\n"


def _tsv(title: str, third: str, rows: Sequence[tuple[Listed, object, str]], last: str = "path") -> list[str]:
    """One table of the full listing: a '# title' line, the tab-separated header, then a line per row
    (its sizes, the ``third`` column's value, its path as shown, or what ``last`` names)."""
    return [
        f"# {title}",
        f"disk_bytes\tapparent_bytes\t{third}\t{last}",
        *(f"{r.disk_bytes}\t{r.apparent_bytes}\t{value}\t{path}" for r, value, path in rows),
    ]


def _window_phrase(args: dict[str, Any]) -> str:
    """'within 7 d', 'more than 30 d ago', 'between 30 d and 7 d ago', or '' without a filter."""
    within, before = durations(args)
    if within is not None and before is not None:
        return f"between {age(within)} and {age(before)} ago"
    if within is not None:
        return f"within {age(within)}"
    if before is not None:
        return f"more than {age(before)} ago"
    return ""


def request_for(
    args: dict[str, Any], window: tuple[float | None, float | None], root: bytes, options: WalkOptions
) -> UsageRequest:
    """The scan of ``root`` the validated arguments ask for, ``window`` their ``time_window``."""
    show: str = args["show"]
    return UsageRequest(
        top_files=FULL_FILES if show in _LISTS_FILES else 0,
        top_directories=FULL_DIRECTORIES if show in _LISTS_DIRECTORIES else 0,
        max_depth=args["max_depth"],
        by_disk=args["sort_by"] == "disk",
        min_size=args["min_size"],
        timeout_s=TIMEOUT.of(args),
        newer_than=window[0],
        older_than=window[1],
        extensions=show in _LISTS_EXTENSIONS,
        root=root,
        options=options,
    )


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    now = time.time()
    window = time_window(args, now)  # bad durations are refused before any work
    path, shown = await directory_argument(ctx, args["path"])
    seen = [0]  # apparent bytes seen so far, for the progress message

    def describe(meter: Meter, elapsed: float) -> str:
        return f"{plural(int(meter.done), 'entry')} scanned, {human_bytes(seen[0])} seen"

    def scan(request: UsageRequest, progress: Progress, cancel: Cancel) -> tuple[Usage, Any, str | None]:
        if request.options.one_file_system:
            progress(0, inodes_in_use(path))

        def report(entries: int, bytes_seen: int) -> None:
            progress(entries, None)
            seen[0] = bytes_seen

        # The history hook: with history on, the scan also keeps every directory's totals for it.
        return recorded_scan(request, lambda r: scan_usage(r, report, cancel))

    request = request_for(args, window, os.fsencode(path), walk_options(args))
    try:
        usage, _, history_note = await ctx.run_engine(scan, request, describe=describe)
    except OSError as exc:
        raise scan_failure(shown, path, exc) from None
    found, text, full = answer(shown, usage, args, now)
    if history_note:
        text += "\n" + history_note
    links: tuple[ResourceLink, ...] = ()
    if full is not None:  # not kept: bounded by the list sizes, only absurdly long names could get there
        name, description = (
            listing_name("dir_usage", shown, ".tsv"),
            f"Full dir_usage listing of {escaped(shown)}",
        )
        link = ctx.keep(name, full, description=description, mime_type="text/tab-separated-values")
        every = ", every extension" if isinstance(found.extensions, list) else ""
        kept = f"Longer lists (up to {FULL_DIRECTORIES:,} directories, {FULL_FILES:,} files{every}): {{}}"
        text, links = with_link(text, link, kept, "Longer lists: not kept, {}")
    return ToolOutput.typed(text, found, links)


def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
    """Per-host totals side by side, then each host's largest entries (each host already cut to top_n)."""
    key = "apparent_bytes" if arguments.get("sort_by") == "apparent" else "disk_bytes"
    answered = typed_results(outcomes, DirUsage)
    answered.sort(key=lambda answer: -int(getattr(answer[1].totals, key)))
    rows = [["HOST", "DISK", "APPARENT", "FILES", "DIRS", "COMPLETE"]]
    for host, found in answered:
        total = found.totals
        sizes = [human_bytes(total.disk_bytes), human_bytes(total.apparent_bytes)]
        counts = [f"{total.files:,}", f"{total.directories:,}"]
        rows.append([host, *sizes, *counts, "yes" if found.complete else "partial"])
    body = table(rows, right=(1, 2, 3, 4)) if answered else []
    for host, found in answered:
        for kind, items in (("directories", found.largest_directories), ("files", found.largest_files)):
            if items:
                body.append(f"{host}: largest {kind}")
                body += [f"  {human_bytes(getattr(item, key)):>10}  {escaped(item.path)}" for item in items]
    view = {
        "totals": [
            {"host": host, "path": r.path, "complete": r.complete, **to_json(r.totals)}
            for host, r in answered
        ],
        "largest": [
            {
                "host": host,
                "largest_directories": to_json(r.largest_directories),
                "largest_files": to_json(r.largest_files),
            }
            for host, r in answered
        ],
        "sort_by": key,
    }
    return fleet_output(outcomes, body, view)


TOOL = Tool(
    name="dir_usage",
    title="Directory usage",
    description=(
        "What fills a directory now: du -sx totals, its largest subdirectories and files. Growth since "
        "a time: what_changed; space no walk finds: disk_usage explain."
    ),
    input_schema=INPUT_SCHEMA,
    output=DirUsage,
    handler=handle,
    view=DIR_USAGE.uri,
    merge=merge,
)
