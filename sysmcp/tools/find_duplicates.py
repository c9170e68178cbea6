"""find_duplicates, the MCP side: arguments into a ``DuplicatesRequest``, its typed result, the words.

The engine (three sieves over one shared walk, in bounded memory) is ``sysmcp.engine.duplicates._duplicates``.
Read-only: nothing is ever deleted or changed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from sysmcp.engine.duplicates import DuplicatesRequest, Search, find_duplicates
from sysmcp.engine.faults import EngineError, PermissionRefused
from sysmcp.engine.paths import escaped
from sysmcp.protocol.context import Meter
from sysmcp.protocol.failures import ToolError
from sysmcp.render import human_bytes, more_not_shown, plural, titled
from sysmcp.tools import schemas as js
from sysmcp.tools import walking
from sysmcp.tools.arguments import size_argument
from sysmcp.tools.merging import summary_merge
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput, listing_name, with_link
from sysmcp.tools.typed import Open, prop, result

PATHS_INLINE = 5  # paths shown per group in the text and structured content
FULL_TEXT_CAP = 8 << 20  # the full group list resource is cut (and says so) beyond this
TIMEOUT = js.TimeBudget(default=60.0, maximum=600.0)

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "path": js.path_argument(),
        "min_size": size_argument("Only files this big.", minimum=1, default=1),
        "top_n": js.top_n_argument(maximum=50, default=10),
        "timeout_s": TIMEOUT.property(),
        **walking.walk_properties("path"),
    }
)


@result
class DuplicateGroup(Open):
    size_bytes: int = prop()
    copies: int = prop()
    reclaimable_bytes: int = prop()
    blake3: str = prop("BLAKE3 (256 bits) of the content.")
    paths: list[str] = prop()
    paths_not_shown: int = prop()


@result
class Duplicates:
    path: str = prop()
    complete: bool = prop("False when the search stopped early.")
    stopped_reason: str | None = prop()
    elapsed_s: float = prop()
    files_scanned: int = prop("Regular files at least min_size.")
    files_read: int = prop("Opens for a head/tail or full hash: a file once per sieve it reaches.")
    bytes_read: int = prop()
    groups_found: int = prop()
    duplicate_files: int = prop("Extra copies: files minus groups.")
    reclaimable_bytes: int = prop("Disk space freed by keeping one copy of each group.")
    hard_links_ignored: int = prop("Further names of a file already counted (same inode), not duplicates.")
    groups: list[DuplicateGroup] = prop()
    groups_not_shown: int = prop()
    skipped: dict[str, int] = prop()


def answer_of(shown: str, search: Search, top_n: int) -> Duplicates:
    """The search as the answer's result: the first ``top_n`` groups, each with its first paths."""
    groups = [
        DuplicateGroup(
            group.size,
            len(group.copies),
            group.reclaimable,
            group.digest,
            [walking.joined(shown, c.relative) for c in group.copies[:PATHS_INLINE]],
            max(0, len(group.copies) - PATHS_INLINE),
        )
        for group in search.groups[:top_n]
    ]
    return Duplicates(
        path=shown,
        complete=search.stopped is None,
        stopped_reason=search.stopped,
        elapsed_s=round(search.elapsed, 3),
        files_scanned=search.files_scanned,
        files_read=search.files_read,
        bytes_read=search.bytes_read,
        groups_found=len(search.groups),
        duplicate_files=sum(len(g.copies) - 1 for g in search.groups),
        reclaimable_bytes=sum(g.reclaimable for g in search.groups),
        hard_links_ignored=search.hard_links,
        groups=groups,
        groups_not_shown=len(search.groups) - len(groups),
        skipped=search.skipped.as_dict(),
    )


def render(answer: Duplicates, named: Sequence[str] = ()) -> str:
    """The text for the model; ``named``: the unreadable directories the walk names."""
    lines = []
    if answer.stopped_reason:
        lines.append(
            f"PARTIAL RESULT: the search stopped early ({answer.stopped_reason}); duplicates not yet confirmed are "
            "missing (the largest files are checked first)."
        )
    lines.append(
        f"{escaped(answer.path)}: {plural(answer.groups_found, 'group')} of identical files, {plural(answer.duplicate_files, 'extra copy')}, "
        f"{human_bytes(answer.reclaimable_bytes)} reclaimable; {plural(answer.files_scanned, 'file')} considered, "
        f"opened {plural(answer.files_read, 'time')} (a file once per sieve), {human_bytes(answer.bytes_read)} read [{answer.elapsed_s:.2f} s]"
    )
    for number, group in enumerate(answer.groups, 1):
        head = f"{number}. {group.copies} copies of {human_bytes(group.size_bytes)} — {human_bytes(group.reclaimable_bytes)} reclaimable:"
        lines += titled(head, map(escaped, group.paths), group.paths_not_shown, "copy", indent="     ")
    lines += [more_not_shown(answer.groups_not_shown, "group")] if answer.groups_not_shown else []
    if answer.hard_links_ignored:
        were = "was not treated as a copy" if answer.hard_links_ignored == 1 else "were not treated as copies"
        lines.append(
            f"{plural(answer.hard_links_ignored, 'hard-linked name')} of files already counted {were}"
        )
    if answer.skipped:
        lines.append("Skipped: " + walking.skipped_phrase(answer.skipped, named, answer.path))
    lines.append("Nothing was deleted: sysmcp is read-only.")
    return "\n".join(lines)


def full_list(answer: Duplicates, search: Search) -> str:
    """Every group and path, for the resource kept when the text had to cut (itself cut at FULL_TEXT_CAP)."""
    out = [
        f"# find_duplicates {escaped(answer.path)}: {plural(len(search.groups), 'group')}, {human_bytes(answer.reclaimable_bytes)} reclaimable"
    ]
    if search.stopped:
        out.append(f"# PARTIAL: {search.stopped}")
    size = 0
    for group in search.groups:
        block = [
            f"# {len(group.copies)} copies x {group.size} bytes, {group.reclaimable} reclaimable, "
            f"blake3 {group.digest}"
        ]
        block += [escaped(walking.joined(answer.path, c.relative)) for c in group.copies]
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
        timeout_s=TIMEOUT.of(args),
    )

    def describe(meter: Meter, elapsed: float) -> str:
        if meter.total is None:
            return f"listing: {plural(int(meter.done), 'file')}"
        return f"comparing: {int(meter.done):,} of {int(meter.total):,} steps"

    try:
        search = await ctx.run_engine(find_duplicates, request, describe=describe)
    except PermissionRefused:
        raise walking.unreadable_directory(shown, path) from None
    except EngineError as exc:
        raise ToolError(f"Cannot search {escaped(shown)}: {exc.detail}") from None
    answer = answer_of(shown, search, args["top_n"])
    text = render(answer, search.skipped.named)
    links: tuple[ResourceLink, ...] = ()
    if answer.groups_not_shown or any(g.paths_not_shown for g in answer.groups):
        name = listing_name("duplicates", shown, ".txt")
        link = ctx.keep(
            name, full_list(answer, search), description=f"All duplicate groups under {escaped(shown)}"
        )
        text, links = with_link(text, link, "All groups and paths: {}", "All groups and paths: not kept, {}")
    return ToolOutput.typed(text, answer, links)


TOOL = Tool(
    name="find_duplicates",
    title="Find duplicate files",
    description=(
        "Which files under a directory have identical content: groups, largest reclaimable space first, "
        "with the bytes keeping one copy would free (hard links are not duplicates). For a plan of "
        "everything to free, reclaim_plan."
    ),
    input_schema=INPUT_SCHEMA,
    output=Duplicates,
    handler=handle,
    merge=summary_merge(
        "Duplicates are found within each host: files are not compared across hosts."
    ),  # per-host summaries
)
