"""find_duplicates, the MCP side: schema, arguments into a ``DuplicatesRequest``, the words, the fleet merge.

The engine (three sieves over one shared walk, in bounded memory) is ``sysmcp.engine.duplicates._duplicates``.
Read-only: nothing is ever deleted or changed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from sysmcp.engine.duplicates import Candidate, DuplicatesRequest, Report, Search, find_duplicates
from sysmcp.engine.errors import EngineError, PermissionRefused
from sysmcp.engine.paths import display, printable
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ToolError
from sysmcp.render import human_bytes, more_not_shown, plural
from sysmcp.tools import schemas as js
from sysmcp.tools import walking
from sysmcp.tools.arguments import size_argument
from sysmcp.tools.merging import summary_merge
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput, listing_name, with_link

PATHS_INLINE = 5  # paths shown per group in the text and structured content
FULL_TEXT_CAP = 8 << 20  # the full group list resource is cut (and says so) beyond this
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 600.0

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "path": js.path_argument(),
        "min_size": size_argument("Only files this big.", minimum=1, default=1),
        "top_n": js.top_n_argument(maximum=50, default=10),
        "timeout_s": walking.timeout_property(DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S),
        **walking.walk_properties("path"),
    }
)

OUTPUT_SCHEMA: dict[str, Any] = js.result(
    {
        "path": js.string(),
        "complete": js.boolean("False when the search stopped early."),
        "stopped_reason": js.string(null=True),
        "elapsed_s": js.number(),
        "files_scanned": js.integer("Regular files at least min_size."),
        "files_read": js.integer("Files opened for a head/tail or full hash."),
        "bytes_read": js.integer(),
        "groups_found": js.integer(),
        "duplicate_files": js.integer("Extra copies: files minus groups."),
        "reclaimable_bytes": js.integer("Disk space freed by keeping one copy of each group."),
        "hard_links_ignored": js.integer(
            "Further names of a file already counted (same inode), not duplicates."
        ),
        "groups": js.objects(
            {
                "size_bytes": js.integer(),
                "copies": js.integer(),
                "reclaimable_bytes": js.integer(),
                "blake3": js.string("BLAKE3 (256 bits) of the content."),
                "paths": js.names(),
                "paths_not_shown": js.integer(),
            }
        ),
        "groups_not_shown": js.integer(),
        "skipped": js.counts(),
    }
)


def meter_report(meter: Meter) -> Report:
    """The engine's progress into the server's meter: no total while listing, then steps of both stages."""

    def report(done: int, total: int | None) -> None:
        meter.done = done
        meter.total = total

    return report


def render(shown: str, search: Search, top_n: int) -> tuple[str, dict[str, Any], str | None]:
    """Text for the model, structured content, and the full group list when anything was cut."""
    base = shown.rstrip("/") + "/"

    def path(c: Candidate) -> str:
        return base + display(os.fsencode(c.relative))

    reclaimable = sum(g.reclaimable for g in search.groups)
    duplicates = sum(len(g.copies) - 1 for g in search.groups)
    skipped = search.skipped.as_dict()
    lines = []
    if search.stopped:
        lines.append(
            f"PARTIAL RESULT: the search stopped early ({search.stopped}); duplicates not yet confirmed are "
            "missing (the largest files are checked first)."
        )
    lines.append(
        f"{shown}: {plural(len(search.groups), 'group')} of identical files, {plural(duplicates, 'extra copy')}, "
        f"{human_bytes(reclaimable)} reclaimable; {plural(search.files_scanned, 'file')} considered, "
        f"opened {plural(search.files_read, 'time')} (a file once per sieve), {human_bytes(search.bytes_read)} read [{search.elapsed:.2f} s]"
    )
    groups = []
    for number, group in enumerate(search.groups[:top_n], 1):
        paths = [path(c) for c in group.copies]
        cut = max(0, len(paths) - PATHS_INLINE)
        groups.append(
            {
                "size_bytes": group.size,
                "copies": len(paths),
                "reclaimable_bytes": group.reclaimable,
                "blake3": group.digest,
                "paths": paths[:PATHS_INLINE],
                "paths_not_shown": cut,
            }
        )
        lines.append(
            f"{number}. {len(paths)} copies of {human_bytes(group.size)} — {human_bytes(group.reclaimable)} "
            "reclaimable:"
        )
        lines += [f"     {printable(p)}" for p in paths[:PATHS_INLINE]]
        lines += [f"     {more_not_shown(cut, 'copy')}"] if cut else []
    not_shown = len(search.groups) - len(groups)
    lines += [more_not_shown(not_shown, "group")] if not_shown else []
    if search.hard_links:
        were = "was not treated as a copy" if search.hard_links == 1 else "were not treated as copies"
        lines.append(f"{plural(search.hard_links, 'hard-linked name')} of files already counted {were}")
    if skipped:
        lines.append("Skipped: " + walking.skipped_phrase(skipped, search.skipped.named, shown))
    lines.append("Nothing was deleted: sysmcp is read-only.")
    structured = {
        "path": shown,
        "complete": search.stopped is None,
        "stopped_reason": search.stopped,
        "elapsed_s": round(search.elapsed, 3),
        "files_scanned": search.files_scanned,
        "files_read": search.files_read,
        "bytes_read": search.bytes_read,
        "groups_found": len(search.groups),
        "duplicate_files": duplicates,
        "reclaimable_bytes": reclaimable,
        "hard_links_ignored": search.hard_links,
        "groups": groups,
        "groups_not_shown": not_shown,
        "skipped": skipped,
    }
    cut_any = not_shown or any(g["paths_not_shown"] for g in groups)
    full = full_list(shown, search, reclaimable, path) if cut_any else None
    return "\n".join(lines), structured, full


def full_list(shown: str, search: Search, reclaimable: int, path: Callable[[Candidate], str]) -> str:
    """Every group and path, for the resource kept when the text had to cut (itself cut at FULL_TEXT_CAP)."""
    out = [
        f"# find_duplicates {shown}: {plural(len(search.groups), 'group')}, {human_bytes(reclaimable)} reclaimable"
    ]
    if search.stopped:
        out.append(f"# PARTIAL: {search.stopped}")
    size = 0
    for group in search.groups:
        block = [
            f"# {len(group.copies)} copies x {group.size} bytes, {group.reclaimable} reclaimable, "
            f"blake3 {group.digest}"
        ]
        block += [printable(path(c)) for c in group.copies]
        size += sum(len(line) + 1 for line in block)
        if size > FULL_TEXT_CAP:
            out.append("# … list cut here: the result store keeps at most 8 MiB per result")
            break
        out += block
    return "\n".join(out) + "\n"


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    path, shown = await walking.directory_argument(ctx, args["path"])
    request = DuplicatesRequest(
        os.fsencode(path),
        walking.walk_options(args),
        min_size=args["min_size"],
        timeout_s=min(float(args["timeout_s"]), MAX_TIMEOUT_S),
    )

    def describe(meter: Meter, elapsed: float) -> str:
        if meter.total is None:
            return f"listing: {plural(int(meter.done), 'file')}"
        return f"comparing: {int(meter.done):,} of {int(meter.total):,} steps"

    try:
        search = await ctx.run_in_worker(
            lambda meter: find_duplicates(
                request, report=meter_report(meter), check_cancelled=meter.checkpoint
            ),
            describe=describe,
        )
    except PermissionRefused:
        raise walking.unreadable_directory(shown, path) from None
    except EngineError as exc:
        raise ToolError(f"Cannot search {shown}: {exc.detail}") from None
    text, structured, full = render(shown, search, args["top_n"])
    links: tuple[ResourceLink, ...] = ()
    if full is not None:
        name = listing_name("duplicates", shown, ".txt")
        link = ctx.keep(name, full, description=f"All duplicate groups under {shown}")
        text, links = with_link(text, link, "All groups and paths: {}", "All groups and paths: not kept, {}")
    return ToolOutput(text, structured, links=links)


TOOL = Tool(
    name="find_duplicates",
    title="Find duplicate files",
    description=(
        "Which files under a directory have identical content: groups, largest reclaimable space first, "
        "with the bytes keeping one copy would free (hard links are not duplicates). For a plan of "
        "everything to free, reclaim_plan."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=handle,
    merge=summary_merge(
        "Duplicates are found within each host: files are not compared across hosts."
    ),  # per-host summaries
)
