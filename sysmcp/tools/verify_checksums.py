"""verify_checksums: check a checksum manifest against the files (sha256sum -c, b3sum -c, and more).

What it adds to ``sha256sum -c``: any of six algorithms in one manifest, GNU and BSD lines mixed,
MISSING told apart from unreadable, files that appeared since the manifest was made
(``report_new``), progress, cancellation, and a bounded answer however long the manifest is.
The MCP face of ``sysmcp.engine.hashing._verify``, which does the work.
"""

from __future__ import annotations

import io
import math
import os
import time
from collections.abc import Callable
from typing import Any, Literal

from sysmcp.engine.faults import EngineError
from sysmcp.engine.hashing import (
    ALGORITHM_NAMES,
    ALGORITHMS,
    HASH_THREADS,
    Confine,
    Source,
    Verification,
    VerifyRequest,
    is_cut,
    listed,
)
from sysmcp.engine.hashing import verify as check_manifest
from sysmcp.engine.paths import PATH_MAX, PathPolicy, call_argument, escaped
from sysmcp.engine.walk import WalkOptions, more_time_helps
from sysmcp.protocol.context import Meter
from sysmcp.protocol.failures import ToolError
from sysmcp.render import and_more, human_bytes, plural, rate, titled
from sysmcp.results import MAX_ITEM, TooLarge
from sysmcp.tools import schemas as js
from sysmcp.tools import walking
from sysmcp.tools.errors import file_error
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput
from sysmcp.tools.typed import prop, result

__all__ = ["INPUT_SCHEMA", "TOOL", "answer", "handle", "render", "verify_request"]

TIMEOUT = js.TimeBudget(default=30.0, maximum=600.0)

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
        "timeout_s": TIMEOUT.property(),
        **walking.walk_properties("base_dir", note="With report_new: "),
    },
    required=("manifest",),
)


#: Every property is always there (null where it does not apply).
@result
class VerifyChecksums:
    manifest: str = prop("The manifest's path, URI, or '(text)'.")
    base_dir: str = prop()
    complete: bool = prop("False when checking stopped early.")
    stopped_reason: str | None = prop()
    not_checked: int = prop("Entries not checked: checking stopped early (0 when complete).")
    all_ok: bool = prop(
        "True exactly when 'sha256sum -c --strict' would succeed: at least one entry, "
        "every file present, readable and matching, no improperly formatted line. New files do not count."
    )
    entries: int = prop("Properly formatted checksum lines.")
    ok: int = prop()
    failed: int = prop("Files whose digest differs.")
    missing: int = prop("Listed files that do not exist.")
    unreadable: int = prop("Listed files that exist but could not be hashed.")
    improperly_formatted: int = prop("Lines that are not checksum lines.")
    new: int | None = prop("Regular files under base_dir not in the manifest (null unless report_new).")
    algorithms: dict[str, int] = prop("Entries checked per algorithm.")
    bytes_hashed: int = prop()
    seconds: float = prop()
    failed_files: list[str] = prop()
    missing_files: list[str] = prop()
    unreadable_files: list[walking.PathError] = prop()
    improperly_formatted_lines: list[int] = prop()
    new_files: list[str] = prop()
    truncated: bool = prop("True when a list above was cut at max_listed, or entries were not checked.")
    report_uri: str | None = prop("sysmcp:// resource with every entry's status, when truncated.")
    walk_skipped: dict[str, int] = prop("With report_new: entries the walk left out, by reason.")


def confine_to(policy: PathPolicy) -> Confine | None:
    """Where a name resolves inside the allowed roots (None: outside them), or None when there are none.
    Resolved as ``realpath`` resolves, past where the kernel would stop (``f/``, ``gone/../f``): the
    check finds that stop itself and gives the name the verdict ``sha256sum -c`` gives it."""
    if policy.allowed is None:
        return None

    def confine(path: bytes) -> bytes | None:
        try:
            return os.fsencode(policy.resolve(os.fsdecode(path), strict=False))
        except (ToolError, EngineError):
            return None

    return confine


#: Characters shown of a name too long for any file: its start tells the entry; the whole of it (a
#: manifest line may be a GiB) would be the whole answer.
SHOWN_OF_TOO_LONG = 200


def shown_name(name: bytes) -> str:
    """A manifest's name as a result holds it (``os.fsdecode``: the text escapes it, ``escaped``; the
    JSON displays it), only its start when no file can have it."""
    if len(name) < PATH_MAX:
        return os.fsdecode(name)
    return os.fsdecode(name[:SHOWN_OF_TOO_LONG]) + "…"


#: The full report, written in the worker when the answer cuts a list: its text (None when too big
#: to keep) and its UTF-8 size.
Report = tuple[str | None, int]


def verify_request(
    source: Source,
    base: bytes,
    args: dict[str, Any],
    policy: PathPolicy,
    threads: int = HASH_THREADS,
    timeout_s: float = math.inf,
    clock: Callable[[], float] = time.monotonic,
    before_close: Callable[[Verification], None] | None = None,
) -> VerifyRequest:
    return VerifyRequest(
        source,
        base,
        algorithm=None if args["algorithm"] == "auto" else ALGORITHMS[args["algorithm"]],
        report_new=bool(args["report_new"]),
        walk=walking.walk_options(args) if args["report_new"] else WalkOptions(),
        max_listed=int(args.get("max_listed", 50)),
        threads=threads,
        confine=confine_to(policy),
        timeout_s=timeout_s,
        clock=clock,
        before_close=before_close,
    )


def classify(manifest: str) -> Literal["uri", "path", "text"]:
    """A single line starting with '/' (or '~') is a path; a sysmcp:// URI is a stored result; else text.
    One word with no space is a path too, a relative one (refused as such): no manifest line lacks a space.
    Blanks around the argument are ignored for telling which it is only: a path is then taken exactly, as
    every tool takes one (``SHA256SUMS `` is a name of its own)."""
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
    base_raw: str | None = args.get("base_dir")
    manifest_dir: str | None = None
    manifest_shown = raw.strip() if how == "uri" else "(text)"
    if how == "path":
        path = await ctx.resolve(raw)
        manifest_shown = str(path)
        # the engine's errors name it with this: a symlink's target, on one printable line
        source = Source(escaped(manifest_shown), path=os.fsencode(path), name_hint=path.name)
        base_raw, manifest_dir = base_raw or str(path.parent), str(path.parent)
    elif how == "uri":
        item = ctx.results.get(raw.strip())
        if item is None or not ctx.paths.covers(item.scope):  # made under roots wider than these
            dropped = ctx.results.dropped(raw.strip())
            raise ToolError(
                f"The stored result {dropped}"
                if dropped
                else f"No stored result {raw.strip()} (results are kept for this session only)"
            )
        source = Source(item.uri, data=to_bytes(item.text), name_hint=item.name)
    else:
        source = Source("(text)", data=to_bytes(raw))
    if not base_raw:
        raise ToolError(
            "base_dir is required when the manifest is given as text or a URI: the absolute directory its "
            "names are relative to"
        )
    base_path = await ctx.resolve(
        base_raw, lambda found: walking.require_directory(found, str(found), "base_dir")
    )
    base_shown = str(base_path)
    timeout_s = TIMEOUT.of(args)
    reports: list[Report] = []

    def write_if_cut(result: Verification) -> None:
        if result.cut:
            reports.append(write_report(result, MAX_ITEM))

    def describe(meter: Meter, elapsed: float) -> str:
        return f"{meter.done / (meter.total or 1):.0%} checked, at {rate(meter.done, elapsed)}"

    request = verify_request(
        source, os.fsencode(base_path), args, ctx.paths, HASH_THREADS, timeout_s, before_close=write_if_cut
    )
    result = await ctx.run_engine(check_manifest, request, describe=describe)
    return answer(
        result, manifest_shown, base_shown, args, ctx, reports[0] if reports else None, manifest_dir
    )


def answer(
    result: Verification,
    manifest_shown: str,
    base_shown: str,
    args: dict[str, Any],
    ctx: ToolContext,
    report: Report | None = None,
    manifest_dir: str | None = None,
) -> ToolOutput:
    """The typed result: counts, each non-OK list up to max_listed, and the full report as a resource if
    cut (``report``, written in the worker; else written here, which only a manifest in hand allows)."""
    limit: int = args["max_listed"]
    counts, algorithms = result.checked.tally()
    if result.listed is None or result.listed_limit != limit:
        result.listed, result.listed_limit = listed(result, limit, counts), limit
    by_status, new = result.listed, result.new
    stopped = result.stopped
    if stopped is not None and result.new_cut:
        stopped += " while looking for new files (the list of new files may be short)"
    all_ok = counts["OK"] == result.entries and not result.bad_count and stopped is None
    truncated = is_cut(result, counts, limit)
    links: tuple[ResourceLink, ...] = ()
    not_kept: str | None = None
    if truncated:
        text, size = report if report is not None else write_report(result)
        link = (
            TooLarge(size).reason
            if text is None
            else ctx.keep(
                "verify-report.txt",
                text,
                description=f"Every entry's status from checking {escaped(manifest_shown)} against {escaped(base_shown)}",
            )
        )
        not_kept, links = (link, ()) if isinstance(link, str) else (None, (link,))
    typed = VerifyChecksums(
        manifest_shown,
        base_shown,
        stopped is None,
        stopped,
        counts["NOT_CHECKED"],
        all_ok,
        result.entries,
        counts["OK"],
        counts["FAILED"],
        counts["MISSING"],
        counts["UNREADABLE"],
        result.bad_count,
        None if new is None else len(new),
        dict(sorted(algorithms.items())),
        result.bytes_hashed,
        round(result.seconds, 6),
        [shown_name(name) for name, _ in by_status["FAILED"]],
        [shown_name(name) for name, _ in by_status["MISSING"]],
        [walking.PathError(shown_name(name), file_error(c.detail)) for name, c in by_status["UNREADABLE"]],
        result.bad_lines[:limit],
        [shown_name(name) for name in (new or [])[:limit]],
        truncated,
        links[0].uri if links else None,
        result.walk_skipped,
    )
    return ToolOutput.typed(render(typed, result.seconds, limit, not_kept, manifest_dir), typed, links)


def render(
    answer: VerifyChecksums, seconds: float, limit: int, not_kept: str | None, manifest_dir: str | None
) -> str:
    """Whether it is partial, the counts, what was hashed, the verdict, each non-OK list, the link to
    the full report, and where to look when every entry is MISSING."""
    lines = []
    if answer.stopped_reason is not None:
        more = (
            f" Give a larger timeout_s (at most {TIMEOUT.maximum:g}) or check a part of the manifest."
            if more_time_helps(answer.stopped_reason)
            else ""  # the reason says what to raise: more time would stop at the same place
        )
        lines.append(
            f"PARTIAL RESULT: checking stopped early ({answer.stopped_reason}); {answer.not_checked:,} of "
            f"{plural(answer.entries, 'entry', 'entries')} {'was' if answer.not_checked == 1 else 'were'} not "
            f"checked.{more}"
        )
    lines += [_summary(answer), _hashed(answer, seconds), _verdict(answer)]
    lists = (
        ("FAILED (digest differs)", list(map(escaped, answer.failed_files)), answer.failed),
        ("MISSING", list(map(escaped, answer.missing_files)), answer.missing),
        (
            "UNREADABLE",
            [
                f"{escaped(e.path)}: {e.error}" if e.error else escaped(e.path)
                for e in answer.unreadable_files
            ],
            answer.unreadable,
        ),
    )
    for title, names, count in lists:
        if count:
            lines += titled(f"{title} ({count:,}):", names, count - len(names))
    if answer.improperly_formatted_lines:
        numbers = ", ".join(str(n) for n in answer.improperly_formatted_lines)
        bad = answer.improperly_formatted
        more = f" {and_more(bad - limit)}" if bad > limit else ""
        lines.append(f"Improperly formatted lines (line numbers): {numbers}{more}")
    if answer.new:
        title = f"New files under {escaped(answer.base_dir)} not in the manifest ({answer.new:,}):"
        lines += titled(title, map(escaped, answer.new_files), answer.new - len(answer.new_files))
    if answer.walk_skipped:
        lines.append("walk skipped: " + walking.skipped_phrase(answer.walk_skipped))
    if answer.truncated:
        shown = (
            (answer.failed, answer.failed_files),
            (answer.missing, answer.missing_files),
            (answer.unreadable, answer.unreadable_files),
            (answer.improperly_formatted, answer.improperly_formatted_lines),
            (answer.new or 0, answer.new_files),
        )
        # The report is also kept for the entries not checked, which no list names.
        cut = (
            f"Lists were cut at {plural(limit, 'name')}; the full report"
            if any(count > len(names) for count, names in shown)
            else "Which entries were not checked: the full report"
        )
        lines.append(
            f"{cut} is at {answer.report_uri} (resources/read)."
            if not_kept is None
            else f"{cut} was not kept: {not_kept}."
        )
    if answer.entries and answer.missing == answer.entries:
        lines.append(_all_missing_hint(answer.base_dir, manifest_dir))
    return "\n".join(lines)


def _all_missing_hint(base_dir: str, manifest_dir: str | None) -> str:
    """Every entry MISSING is almost always a manifest checked from the wrong directory: where its
    names were looked for, and where else to look."""
    hint = f"Every entry is MISSING: a manifest's names are relative to base_dir, here {escaped(base_dir)}."
    if manifest_dir is not None and manifest_dir != base_dir:
        return (
            f"{hint} The manifest's own directory is {escaped(manifest_dir)}: "
            f"try base_dir={call_argument(manifest_dir)}."
        )
    return f"{hint} Give base_dir= the directory the manifest was made in (where sha256sum or hash_tree ran)."


def _summary(answer: VerifyChecksums) -> str:
    checked = plural(answer.entries, "entry", "entries")
    if answer.not_checked:  # a check that stopped early: only those it reached were checked
        checked = f"{answer.entries - answer.not_checked:,} of {checked}"
    summary = (
        f"Checked {checked} of {escaped(answer.manifest)} against {escaped(answer.base_dir)}: "
        f"{answer.ok:,} OK, {answer.failed:,} FAILED, {answer.missing:,} MISSING, "
        f"{answer.unreadable:,} unreadable"
    )
    if answer.improperly_formatted:
        summary += f"; {plural(answer.improperly_formatted, 'improperly formatted line')}"
    if answer.new is not None:
        summary += f"; {plural(answer.new, 'new file')} not in the manifest"
    if answer.not_checked:
        summary += f"; {answer.not_checked:,} not checked"
    return summary


def _hashed(answer: VerifyChecksums, seconds: float) -> str:
    """'(2 sha256, 1 blake3; 1.2 GiB hashed in 3.40 s)' or '(nothing hashed; 0.01 s)'; bytes read of
    which no digest came (a file that changed while being read, one whose read failed or was stopped
    half-way) are said as read, never as nothing."""
    if not answer.algorithms:
        if not answer.bytes_hashed:
            return f"(nothing hashed; {seconds:.2f} s)"
        read = f"no digest settled: {human_bytes(answer.bytes_hashed)} read in {seconds:.2f} s"
        if answer.unreadable:
            return f"({read}, of files that changed or could not be read to the end: see UNREADABLE)"
        return f"({read} before checking stopped)"
    each = ", ".join(f"{n:,} {a}" for a, n in answer.algorithms.items())
    return f"({each}; {human_bytes(answer.bytes_hashed)} hashed in {seconds:.2f} s)"


def _verdict(answer: VerifyChecksums) -> str:
    if answer.all_ok:
        return "Result: ALL OK"
    if (
        answer.stopped_reason is not None
        and answer.ok + answer.not_checked == answer.entries
        and not answer.improperly_formatted
    ):
        return "Result: NOT SETTLED (not every entry was checked)"
    return "Result: NOT OK (sha256sum -c --strict would fail)"


def write_report(result: Verification, most: int | None = None) -> Report:
    """The full report, one line per entry as 'sha256sum -c' prints them, then bad lines and new
    files, and its size in UTF-8 bytes; past ``most`` bytes only the size (the text is
    dropped as soon as it is too big to keep: a million entries' report is 60 MB nobody can read)."""
    out: io.StringIO | None = io.StringIO()  # one growing buffer: a million small strings would be 70 MB
    size = 0

    def add(line: str) -> None:
        nonlocal size, out
        size += len(line.encode("utf-8", "surrogateescape")) + 1
        if out is not None and most is not None and size > most:
            out = None
        if out is not None:
            out.write(f"{line}\n")

    for name, checked in zip(result.names(), result.checked, strict=True):
        detail = f" ({file_error(checked.detail)})" if checked.detail else ""
        add(f"{escaped(shown_name(name))}: {checked.status}{detail}")
    for n in result.bad_lines:
        add(f"line {n}: improperly formatted")
    unlisted = result.bad_count - len(result.bad_lines)
    if unlisted:
        add(f"… and {plural(unlisted, 'more improperly formatted line')}")
    for name in result.new or ():
        add(f"{escaped(name)}: NEW (not in the manifest)")
    return (None if out is None else out.getvalue()), size


TOOL = Tool(
    name="verify_checksums",
    title="Verify a checksum manifest",
    description=(
        "Do files still match a checksum manifest (sha256sum -c, b3sum -c)? Each file OK, FAILED, MISSING or "
        "unreadable; with report_new, the files it does not name."
    ),
    input_schema=INPUT_SCHEMA,
    output=VerifyChecksums,
    handler=handle,
)
