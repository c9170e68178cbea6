"""verify_checksums: check a checksum manifest against the files (sha256sum -c, b3sum -c, and more).

What it adds to ``sha256sum -c``: any of six algorithms in one manifest, GNU and BSD lines mixed,
MISSING told apart from unreadable, files that appeared since the manifest was made
(``report_new``), progress, cancellation, and a bounded answer however long the manifest is.

This module speaks MCP (schema, arguments into a ``VerifyRequest``, the engine's failures and
results into words); the work is ``sysmcp.engine.hashing._verify``'s.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from sysmcp.engine.errors import EngineError
from sysmcp.engine.hashing import (
    ALGORITHM_NAMES,
    ALGORITHMS,
    HASH_THREADS,
    Confine,
    ManifestChanged,
    ManifestTooLarge,
    NoEntries,
    NotAManifest,
    Source,
    Status,
    Verification,
    VerifyProgress,
    VerifyRequest,
    is_cut,
    listed,
)
from sysmcp.engine.hashing import verify as check_manifest
from sysmcp.engine.paths import PathPolicy, display, printable
from sysmcp.engine.walk import Budget, WalkOptions
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ToolError
from sysmcp.render import and_more, human_bytes, plural, rate
from sysmcp.results import MAX_ITEM, TooLarge
from sysmcp.tools import schemas as js
from sysmcp.tools.errors import as_tool_error
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput, with_link
from sysmcp.tools.walking import (
    require_directory,
    skipped_phrase,
    timeout_property,
    walk_options,
    walk_properties,
)

__all__ = ["INPUT_SCHEMA", "OUTPUT_SCHEMA", "TOOL", "Source", "handle", "render", "verify"]

DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 600.0

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "manifest": js.string(
            "A checksum file's path, a sysmcp:// URI or the manifest text.",
            minLength=1,
        ),
        "base_dir": js.string(
            "Names are relative to it. Default: the manifest's directory (required for text or a URI).",
            minLength=1,
        ),
        "algorithm": js.string(enum=["auto", *ALGORITHM_NAMES], default="auto"),
        "report_new": js.boolean("Also list files under base_dir the manifest does not name.", default=False),
        "max_listed": js.top_n_argument(
            "Names per list inline; the full report by link.", maximum=1000, default=50
        ),
        "timeout_s": timeout_property(DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S),
        **walk_properties("base_dir", note="With report_new: "),
    },
    required=("manifest",),
)

_NAMES = js.names()

#: Every property is always there (null where it does not apply).
OUTPUT_SCHEMA: dict[str, Any] = js.result(
    {
        "manifest": js.string("The manifest's path, URI, or '(text)'."),
        "base_dir": js.string(),
        "complete": js.boolean("False when the time budget ran out."),
        "stopped_reason": js.string(null=True),
        "not_checked": js.integer("Entries not checked because the time budget ran out (0 when complete)."),
        "all_ok": js.boolean(
            "True exactly when 'sha256sum -c --strict' would succeed: at least one entry, "
            "every file present, readable and matching, no improperly formatted line. New files do not count."
        ),
        "entries": js.integer("Properly formatted checksum lines."),
        "ok": js.integer(),
        "failed": js.integer("Files whose digest differs."),
        "missing": js.integer("Listed files that do not exist."),
        "unreadable": js.integer("Listed files that exist but could not be hashed."),
        "improperly_formatted": js.integer("Lines that are not checksum lines."),
        "new": js.integer(
            "Regular files under base_dir not in the manifest (null unless report_new).", null=True
        ),
        "algorithms": js.counts("Entries checked per algorithm."),
        "bytes_hashed": js.integer(),
        "seconds": js.number(),
        "failed_files": _NAMES,
        "missing_files": _NAMES,
        "unreadable_files": js.path_errors(),
        "improperly_formatted_lines": js.typed("array", items=js.integer()),
        "new_files": _NAMES,
        "truncated": js.boolean("True when a list above was cut at max_listed."),
        "report_uri": js.string(
            "sysmcp:// resource with every entry's status, when a list was cut.", null=True
        ),
        "walk_skipped": js.counts("With report_new: entries the walk left out, by reason."),
    }
)


_EXPECTED = "Expected lines like '<hex digest>  <name>' or 'SHA256 (<name>) = <hex digest>'."


def words(exc: EngineError) -> ToolError:
    """The engine's failure in the words a model can act on: the one place verify's advice lives."""
    if isinstance(exc, NotAManifest):
        return ToolError(f"{exc.detail}, so this does not look like a checksum manifest. {_EXPECTED}")
    if isinstance(exc, NoEntries):
        return ToolError(f"{exc.detail}. {_EXPECTED}")
    if isinstance(exc, ManifestTooLarge):
        return ToolError(f"The manifest {exc.shown} is larger than {human_bytes(exc.limit)}; split it")
    if isinstance(exc, ManifestChanged):
        return ToolError(f"{exc.detail}; check it again once nothing writes to it")
    return as_tool_error(exc)


def confine_to(policy: PathPolicy) -> Confine | None:
    """Where a name resolves inside the allowed roots (None: outside them), or None when there are none."""
    if policy.allowed is None:
        return None

    def confine(path: bytes) -> bytes | None:
        try:
            return os.fsencode(policy.resolve(os.fsdecode(path)))
        except (ToolError, EngineError):
            return None

    return confine


class Shown:
    """The check's latest progress: the numbers of the progress notifications, and their words."""

    def __init__(self) -> None:
        self.latest = VerifyProgress()

    def into(self, meter: Meter) -> Callable[[VerifyProgress], None]:
        """The engine's progress callback, keeping ``meter``'s numbers."""

        def update(progress: VerifyProgress) -> None:
            self.latest = progress
            if progress.manifest_size is not None:  # checked in ranges: the manifest read is the measure
                meter.total, meter.done = progress.manifest_size, progress.manifest_read
            else:
                meter.total = progress.bytes_total + progress.files_total + progress.rehash_total
                meter.done = progress.bytes + progress.files + progress.rehashed

        return update

    def describe(self, meter: Meter, elapsed: float) -> str:
        p = self.latest
        if p.manifest_size is not None:  # checked in ranges as it is parsed: no count of files first
            return (
                f"{plural(p.files, 'file')} checked, {human_bytes(p.manifest_read)} of the "
                f"{human_bytes(p.manifest_size)} manifest read"
            )
        return (
            f"{p.files:,} of {plural(p.files_total, 'file')}, "
            f"{human_bytes(p.bytes)} of {human_bytes(p.bytes_total)} at {rate(p.bytes, elapsed)}"
        )


@dataclass(frozen=True)
class Report:
    """The full report, written in the worker when the answer cuts a list: its text (None when too
    big to keep) and its UTF-8 size."""

    text: str | None
    size: int


def verify(
    source: Source,
    base: bytes,
    args: dict[str, Any],
    policy: PathPolicy,
    meter: Meter,
    threads: int,
    timeout_s: float = math.inf,
    clock: Callable[[], float] = time.monotonic,
    *,
    shown: Shown | None = None,
    before_close: Callable[[Verification], None] | None = None,
) -> Verification:
    """The engine run for the tool's validated arguments: a ``VerifyRequest`` built from them, its
    progress kept in ``meter`` (and ``shown``), its failures worded (``words``)."""
    request = VerifyRequest(
        source,
        base,
        Budget(timeout_s, meter.checkpoint, clock=clock),
        algorithm=None if args["algorithm"] == "auto" else ALGORITHMS[args["algorithm"]],
        report_new=bool(args["report_new"]),
        walk=walk_options(args) if args["report_new"] else WalkOptions(),
        max_listed=int(args.get("max_listed", 50)),
        threads=threads,
        confine=confine_to(policy),
    )
    try:
        return check_manifest(request, (shown or Shown()).into(meter), before_close)
    except EngineError as exc:
        raise words(exc) from None


def classify(manifest: str) -> Literal["uri", "path", "text"]:
    """A single line starting with '/' (or '~') is a path; a sysmcp:// URI is a stored result; else text.
    One word with no space is a path too, a relative one (refused as such): no manifest line lacks a space."""
    stripped = manifest.strip()
    if "\n" in stripped:
        return "text"
    if stripped.startswith("sysmcp://"):
        return "uri"
    if stripped.startswith(("/", "~")) or not any(ch.isspace() for ch in stripped):
        return "path"
    return "text"


def to_bytes(text: str) -> bytes:
    """Manifest text as bytes; names that arrived as surrogate escapes get their original bytes back."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    raw: str = args["manifest"]
    how = classify(raw)
    base_arg: str | None = args.get("base_dir")
    if how == "path":
        path = await ctx.resolve(raw.strip())
        source = Source(display(path), path=os.fsencode(path), name_hint=path.name)
        base_raw = base_arg or str(path.parent)
    else:
        if how == "uri":
            item = ctx.results.get(raw.strip())
            if item is None:
                raise ToolError(f"No stored result {raw.strip()} (results are kept for this session only)")
            source = Source(item.uri, data=to_bytes(item.text), name_hint=item.name)
        else:
            source = Source("(text)", data=to_bytes(raw))
        if not base_arg:
            raise ToolError(
                "base_dir is required when the manifest is given as text or a URI: the absolute directory its "
                "names are relative to"
            )
        base_raw = base_arg
    base_path = await ctx.resolve(
        base_raw, lambda found: require_directory(found, display(found), "base_dir")
    )
    base_shown = display(base_path)
    base = os.fsencode(base_path)
    timeout_s = min(float(args["timeout_s"]), MAX_TIMEOUT_S)

    shown = Shown()
    reports: list[Report] = []

    def write_if_cut(result: Verification) -> None:
        if result.cut:
            reports.append(Report(*write_report(result, MAX_ITEM)))

    result = await ctx.run_in_worker(
        lambda meter: verify(
            source,
            base,
            args,
            ctx.paths,
            meter,
            HASH_THREADS,
            timeout_s,
            shown=shown,
            before_close=write_if_cut,
        ),
        describe=shown.describe,
    )
    output = render(result, source.shown, base_shown, args, ctx, reports[0] if reports else None)
    manifest_dir = display(path.parent) if how == "path" else None
    return all_missing_hint(output, base_shown, manifest_dir)


def all_missing_hint(output: ToolOutput, base_shown: str, manifest_dir: str | None) -> ToolOutput:
    """Every entry MISSING is almost always a manifest checked from the wrong directory: say where its
    names were looked for, and where else to look."""
    data = output.structured
    if not data.get("entries") or data.get("missing") != data["entries"]:
        return output
    hint = f"Every entry is MISSING: a manifest's names are relative to base_dir, here {base_shown}."
    if manifest_dir is not None and manifest_dir != base_shown:
        hint += f" The manifest's own directory is {manifest_dir}: try base_dir={manifest_dir}."
    else:
        hint += " Give base_dir= the directory the manifest was made in (where sha256sum or hash_tree ran)."
    return replace(output, text=f"{output.text}\n{hint}")


_TITLES: dict[Status, str] = {
    "FAILED": "FAILED (digest differs)",
    "MISSING": "MISSING",
    "UNREADABLE": "UNREADABLE",
}


def render(
    result: Verification,
    manifest_shown: str,
    base_shown: str,
    args: dict[str, Any],
    ctx: ToolContext,
    report: Report | None = None,
) -> ToolOutput:
    """Counts first, then each non-OK list up to max_listed; the full report as a resource if cut
    (``report``, written in the worker; else written here, which only a manifest in hand allows)."""
    limit: int = args["max_listed"]
    counts, algorithms = result.checked.tally()
    if result.listed is None or result.listed_limit != limit:
        result.listed, result.listed_limit = listed(result, limit, counts), limit
    stopped = result.stopped
    if stopped is not None and result.new_cut:
        stopped += " while looking for new files (the list of new files may be short)"
    text = "\n".join(
        _head(result, counts, algorithms, stopped, manifest_shown, base_shown)
        + _lists(result, counts, limit, base_shown)
    )
    structured = _structured(result, counts, algorithms, stopped, limit, manifest_shown, base_shown)
    links: tuple[ResourceLink, ...] = ()
    if structured["truncated"]:
        link = _kept_report(result, ctx, report, f"checking {manifest_shown} against {base_shown}")
        cut = f"Lists were cut at {limit:,} names; the full report"
        text, links = with_link(text, link, cut + " is at {} (resources/read).", cut + " was not kept: {}.")
        structured["report_uri"] = links[0].uri if links else None
    return ToolOutput(text, structured, links=links)


def _all_ok(result: Verification, counts: Counter[Status], stopped: str | None) -> bool:
    return counts["OK"] == result.entries and not result.bad_count and stopped is None


def _head(
    result: Verification,
    counts: Counter[Status],
    algorithms: Counter[str],
    stopped: str | None,
    manifest_shown: str,
    base_shown: str,
) -> list[str]:
    """Whether it is partial, the counts, what was hashed, and the verdict."""
    lines = []
    if stopped is not None:
        lines.append(
            f"PARTIAL RESULT: checking stopped early ({stopped}); {counts['NOT_CHECKED']:,} of "
            f"{plural(result.entries, 'entry', 'entries')} were not checked. Give a larger timeout_s (at most {MAX_TIMEOUT_S:g}) "
            "or check a part of the manifest."
        )
    return [
        *lines,
        _summary(result, counts, manifest_shown, base_shown),
        _hashed(result, algorithms),
        _verdict(result, counts, stopped),
    ]


def _summary(result: Verification, counts: Counter[Status], manifest_shown: str, base_shown: str) -> str:
    summary = (
        f"Checked {plural(result.entries, 'entry')} of {manifest_shown} against {base_shown}: "
        f"{counts['OK']:,} OK, {counts['FAILED']:,} FAILED, {counts['MISSING']:,} MISSING, "
        f"{counts['UNREADABLE']:,} unreadable"
    )
    if result.bad_count:
        summary += f"; {plural(result.bad_count, 'improperly formatted line')}"
    if result.new is not None:
        summary += f"; {plural(len(result.new), 'new file')} not in the manifest"
    if counts["NOT_CHECKED"]:
        summary += f"; {counts['NOT_CHECKED']:,} not checked"
    return summary


def _hashed(result: Verification, algorithms: Counter[str]) -> str:
    """'(2 sha256, 1 blake3; 1.2 GiB hashed in 3.40 s)' or '(nothing hashed; 0.01 s)'."""
    if not algorithms:
        return f"(nothing hashed; {result.seconds:.2f} s)"
    each = ", ".join(f"{n:,} {a}" for a, n in sorted(algorithms.items()))
    return f"({each}; {human_bytes(result.bytes_hashed)} hashed in {result.seconds:.2f} s)"


def _verdict(result: Verification, counts: Counter[Status], stopped: str | None) -> str:
    if _all_ok(result, counts, stopped):
        return "Result: ALL OK"
    if (
        stopped is not None
        and counts["OK"] + counts["NOT_CHECKED"] == result.entries
        and not result.bad_count
    ):
        return "Result: NOT SETTLED (not every entry was checked)"
    return "Result: NOT OK (sha256sum -c --strict would fail)"


def _lists(result: Verification, counts: Counter[Status], limit: int, base_shown: str) -> list[str]:
    """Each non-OK list, the improperly formatted lines, the new files, what the walk skipped."""
    assert result.listed is not None
    lines = []
    for status, items in result.listed.items():
        if counts[status]:
            names = [
                printable(name) + (f": {checked.detail}" if checked.detail else "") for name, checked in items
            ]
            lines += _names(f"{_TITLES[status]} ({counts[status]:,}):", names, counts[status])
    if result.bad_lines:
        numbers = ", ".join(str(n) for n in result.bad_lines[:limit])
        more = f" {and_more(result.bad_count - limit)}" if result.bad_count > limit else ""
        lines.append(f"Improperly formatted lines (line numbers): {numbers}{more}")
    if result.new:
        title = f"New files under {base_shown} not in the manifest ({len(result.new):,}):"
        lines += _names(title, [printable(name) for name in result.new[:limit]], len(result.new))
    if result.walk_skipped:
        lines.append("walk skipped: " + skipped_phrase(result.walk_skipped))
    return lines


def _names(title: str, names: list[str], total: int) -> list[str]:
    """A titled list of names, indented, ending in how many more when it was cut."""
    return [
        title,
        *(f"  {name}" for name in names),
        *([f"  {and_more(total - len(names))}"] if total > len(names) else []),
    ]


def _kept_report(
    result: Verification, ctx: ToolContext, report: Report | None, what: str
) -> ResourceLink | str:
    """The full report kept as a resource (``report``'s text, else written now), or why it was not."""
    if report is not None and report.text is None:
        return TooLarge(report.size).reason
    text = report.text if report is not None and report.text is not None else full_report(result)
    return ctx.keep("verify-report.txt", text, description=f"Every entry's status from {what}")


def _structured(
    result: Verification,
    counts: Counter[Status],
    algorithms: Counter[str],
    stopped: str | None,
    limit: int,
    manifest_shown: str,
    base_shown: str,
) -> dict[str, Any]:
    assert result.listed is not None
    by_status, new = result.listed, result.new
    return {
        "manifest": manifest_shown,
        "base_dir": base_shown,
        "complete": stopped is None,
        "stopped_reason": stopped,
        "not_checked": counts["NOT_CHECKED"],
        "all_ok": _all_ok(result, counts, stopped),
        "entries": result.entries,
        "ok": counts["OK"],
        "failed": counts["FAILED"],
        "missing": counts["MISSING"],
        "unreadable": counts["UNREADABLE"],
        "improperly_formatted": result.bad_count,
        "new": None if new is None else len(new),
        "algorithms": dict(sorted(algorithms.items())),
        "bytes_hashed": result.bytes_hashed,
        "seconds": round(result.seconds, 6),
        "failed_files": [printable(name) for name, _ in by_status["FAILED"]],
        "missing_files": [printable(name) for name, _ in by_status["MISSING"]],
        "unreadable_files": [
            {"path": printable(name), "error": c.detail} for name, c in by_status["UNREADABLE"]
        ],
        "improperly_formatted_lines": result.bad_lines[:limit],
        "new_files": [printable(name) for name in (new or [])[:limit]],
        "truncated": is_cut(result, counts, limit),
        "report_uri": None,
        "walk_skipped": result.walk_skipped,
    }


def full_report(result: Verification) -> str:
    """One line per entry like 'sha256sum -c' prints them, then bad lines and new files."""
    text, _ = write_report(result)
    assert text is not None
    return text


def write_report(result: Verification, most: int | None = None) -> tuple[str | None, int]:
    """``full_report`` and its size in UTF-8 bytes; past ``most`` bytes only the size (the text is
    dropped as soon as it is too big to keep: a million entries' report is 60 MB nobody can read)."""
    chunks: list[str] = []  # joined every few thousand lines: a million small strings would be 70 MB
    lines: list[str] = []
    size = 0
    keeping = True

    def add(line: str) -> None:
        nonlocal size, keeping, chunks, lines
        size += len(line.encode("utf-8", "surrogateescape")) + 1
        if not keeping:
            return
        if most is not None and size > most:
            keeping, chunks, lines = False, [], []
            return
        lines.append(line)
        if len(lines) >= 4096:
            chunks.append("\n".join(lines))
            lines = []

    for name, checked in zip(result.names(), result.checked, strict=True):
        detail = f" ({checked.detail})" if checked.detail else ""
        add(f"{printable(name)}: {checked.status}{detail}")
    for n in result.bad_lines:
        add(f"line {n}: improperly formatted")
    unlisted = result.bad_count - len(result.bad_lines)
    if unlisted:
        add(f"{and_more(unlisted)} improperly formatted lines")
    for name in result.new or ():
        add(f"{printable(name)}: NEW (not in the manifest)")
    if not keeping:
        return None, size
    return "\n".join([*chunks, *lines]) + "\n", size


TOOL = Tool(
    name="verify_checksums",
    title="Verify a checksum manifest",
    description=(
        "Do files still match a checksum manifest (sha256sum -c, b3sum -c)? Each file OK, FAILED, MISSING or "
        "unreadable; with report_new, the files it does not name."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=handle,
)
