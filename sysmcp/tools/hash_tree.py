"""hash_tree: a checksum manifest of every regular file under a directory (sha256sum/b3sum over a tree).

The MCP face of ``sysmcp.engine.hashing._treehash``, with the history hook that keeps the manifest as an
integrity baseline. Why a manifest and not a list of digests: the output is exactly what ``find . -type f | sort |
xargs sha256sum`` would write, so an admin can save it as SHA256SUMS and check it later with
``sha256sum -c`` — or with ``verify_checksums``, which also notices files that appeared. The model
sees a summary and the first lines; the whole manifest is a ``resources/read`` away.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from sysmcp.engine.calls import Cancel, Progress
from sysmcp.engine.faults import PermissionRefused
from sysmcp.engine.hashing import (
    ALGORITHM_NAMES,
    ALGORITHMS,
    MANIFEST_NAMES,
    Algorithm,
    Style,
    TreeHash,
    TreeRequest,
    hash_path,
)
from sysmcp.engine.paths import escaped, shell_word
from sysmcp.engine.walk import SkipCounter, WalkOptions, more_time_helps
from sysmcp.history.recording import unreadable_of
from sysmcp.protocol.context import Meter
from sysmcp.protocol.threads import run_in_thread
from sysmcp.render import human_bytes, plural, rate, titled, took
from sysmcp.results import MAX_ITEM, TooLarge
from sysmcp.tools import schemas as js
from sysmcp.tools import walking
from sysmcp.tools.errors import file_error
from sysmcp.tools.history_hooks import record_baseline
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput
from sysmcp.tools.typed import prop, result

MAX_LISTED = 50  # unreadable files named in the result; the rest are counted
TIMEOUT = js.TimeBudget(default=30.0, maximum=600.0)

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "path": js.path_argument("A directory (names relative to it) or one file."),
        "algorithm": js.string(enum=list(ALGORITHM_NAMES), default="sha256"),
        "format": js.string(
            "gnu: as sha256sum; bsd: as sha256sum --tag.", enum=["gnu", "bsd"], default="gnu"
        ),
        "max_lines": js.integer(
            "Lines shown inline; the rest by link.", minimum=0, maximum=1000, default=100
        ),
        "timeout_s": TIMEOUT.property(),
        "baseline": js.boolean(
            "Also keep it as an integrity baseline for what_changed (gnu only).", default=False
        ),
        **walking.walk_properties("path"),
    }
)


@result
class HashTree:
    path: str = prop()
    complete: bool = prop("False when hashing stopped early: the manifest then covers only some files.")
    stopped_reason: str | None = prop()
    files_not_hashed: int = prop("Files listed but not hashed when it stopped (0 when complete).")
    walk_complete: bool = prop(
        "False when the walk itself was cut: files in directories not yet listed are "
        "neither in the manifest nor counted."
    )
    base_dir: str = prop()
    algorithm: str = prop()
    format: Style = prop()
    files: int = prop("Files in the manifest.")
    total_bytes: int = prop("Bytes hashed for the manifest.")
    seconds: float = prop()
    lines: list[str] = prop("The first manifest lines (sorted by name), without their newline.")
    lines_not_shown: int = prop("Manifest lines beyond those inlined (in the full manifest, if kept).")
    manifest_uri: str | None = prop(
        "sysmcp:// resource holding the whole manifest, exactly as it would be saved."
    )
    skipped: dict[str, int] = prop(
        "Entries left out of the walk by reason: excluded, symlink (never followed), special_file, "
        "other_filesystem, btrfs_subvolume, pseudo_filesystem, unreadable (directories), vanished, directory_loop (a bind "
        "mount of a directory above it), filesystem_error (a directory the filesystem would not open or list)."
    )
    unreadable_count: int = prop("Files that could not be hashed.")
    unreadable: list[walking.PathError] = prop(
        f"The first {MAX_LISTED} files that could not be hashed, with the reason."
    )
    non_utf8_names: int = prop(
        "Names that are not valid UTF-8: shown with \\xNN escapes, so a checker would not find them."
    )


def tree_request(
    path: Path, shown: str, algorithm: Algorithm, style: Style, options: WalkOptions, timeout_s: float
) -> TreeRequest:
    """The engine's request for a tree hashed to answer a call (or kept as a baseline)."""
    return TreeRequest(
        os.fsencode(path),
        algorithm,
        style,
        options,
        timeout_s=timeout_s,
        keep_limit=MAX_ITEM,
        first_lines=1000,  # the schema's largest max_lines
        shown=shown,
    )


def run(request: TreeRequest, progress: Progress, cancel: Cancel) -> TreeHash:
    """The engine's manifest; a refused directory named with the component that refused (a look at
    the path: in the worker thread, not on the loop)."""
    try:
        return hash_path(request, progress, cancel)
    except PermissionRefused:
        raise walking.unreadable_directory(
            os.fsdecode(request.root), Path(os.fsdecode(request.root))
        ) from None


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    path = await ctx.resolve(args["path"])
    shown = str(path)  # the name itself: the text escapes it (escaped), the JSON displays it
    algorithm = ALGORITHMS[args["algorithm"]]
    style: Style = "bsd" if args["format"] == "bsd" else "gnu"
    options = walking.walk_options(args)
    timeout_s = TIMEOUT.of(args)

    def describe(meter: Meter, elapsed: float) -> str:
        return f"{human_bytes(meter.done)} hashed at {rate(meter.done, elapsed)}"

    request = tree_request(path, escaped(shown), algorithm, style, options, timeout_s)
    if args.get("baseline"):  # a baseline records the directories, links and special files too
        request = replace(request, nodes=True)
    tree = await ctx.run_engine(run, request, describe=describe)
    output = answer(args, ctx, tree, shown, algorithm, style)
    if not args.get("baseline"):
        return output
    said = "No baseline kept: it needs the GNU format and the whole manifest."
    if style == "gnu" and tree.manifest is not None:  # the history hook: a baseline for what_changed
        # What it could not read (root squashed on NFS, another user's 0600) is recorded as unreadable, so
        # what_changed never calls it added; the baseline stays complete for the rest.
        manifest, stopped, unreadable = tree.manifest, bool(tree.stopped), unreadable_of(tree)
        said = await run_in_thread(
            lambda _: record_baseline(
                tree.base, bytes(manifest), algorithm.name, options, stopped, unreadable
            ),
            None,
            None,
        )
    return replace(output, text=f"{output.text}\n{said}")


def checking_hint(algorithm: Algorithm, style: Style, base: str) -> str:
    """How an admin checks the manifest once saved, with the usual tool (b3sum reads no --tag lines).
    Never "saved": the server writes no file (``sysmcp call -o`` does, and says so itself)."""
    name, shown = MANIFEST_NAMES[algorithm.name], escaped(base)
    if algorithm.name == "blake3" and style == "bsd":
        return f"Put in {shown} as {name}, it checks with verify_checksums (b3sum reads only the GNU format)."
    tool = algorithm.tool.split()[0]  # the directory as bash reads it back exactly: shell_word
    return f"Put in {shown} as {name}, it checks with `cd {shell_word(base)} && {tool} -c {name}` or with verify_checksums."


def answer(
    args: dict[str, Any], ctx: ToolContext, tree: TreeHash, shown: str, algorithm: Algorithm, style: Style
) -> ToolOutput:
    """The typed result: summary and the first lines inline; the whole manifest kept as a resource."""
    base = os.fsdecode(tree.base)
    not_kept: str | None = None  # why the manifest could not be kept
    links: tuple[ResourceLink, ...] = ()
    if tree.files:
        link = (
            TooLarge(tree.manifest_bytes).reason
            if tree.manifest is None
            else ctx.keep(
                MANIFEST_NAMES[algorithm.name],
                tree.manifest.decode("utf-8", "backslashreplace"),
                description=f"{algorithm.name} manifest ({style} format) of {plural(tree.files, 'file')}, names "
                f"relative to {escaped(base)}",
            )
        )
        not_kept, links = (link, ()) if isinstance(link, str) else (None, (link,))
    max_lines: int = args["max_lines"]
    lines = [line.decode("utf-8", "backslashreplace").rstrip("\n") for line in tree.first[:max_lines]]
    result = HashTree(
        shown,
        tree.stopped is None,
        tree.stopped,
        tree.not_hashed,
        tree.walk_complete,
        base,
        algorithm.name,
        style,
        tree.files,
        tree.total_bytes,
        round(tree.seconds, 6),
        lines,
        tree.files - len(lines),
        links[0].uri if links else None,
        tree.skipped,
        tree.unreadable_count,
        [
            walking.PathError(os.fsdecode(name), file_error(error))
            for name, error in tree.unreadable[:MAX_LISTED]
        ],
        tree.non_utf8,
    )
    named = tree.skipped_named[: SkipCounter.NAMED]
    return ToolOutput.typed(render(result, tree.seconds, named, not_kept), result, links)


def render(tree: HashTree, seconds: float, skipped_named: list[str], not_kept: str | None) -> str:
    """The answer's text: partial or not, the summary, what was skipped or unreadable, the first lines."""
    base, not_shown = escaped(tree.base_dir), tree.lines_not_shown
    out = []
    if tree.stopped_reason:
        unlisted = (
            ""
            if tree.walk_complete
            else ", and the walk had not finished (files in directories not yet listed are neither in the "
            "manifest nor counted)"
        )
        were = "was" if tree.files_not_hashed == 1 else "were"
        more = (
            f" Give a larger timeout_s (at most {TIMEOUT.maximum:g}) or a subdirectory."
            if more_time_helps(tree.stopped_reason)
            else ""  # the reason says what to raise: more time would stop at the same place
        )
        out.append(
            f"PARTIAL RESULT: hashing stopped early ({tree.stopped_reason}); the manifest covers the "
            f"{plural(tree.files, 'file')} hashed by then, each line correct; {plural(tree.files_not_hashed, 'file')} "
            f"listed {were} not hashed{unlisted}.{more}"
        )
    out.append(
        f"{tree.algorithm} manifest of {escaped(tree.path)}: {plural(tree.files, 'file')}, {human_bytes(tree.total_bytes)} hashed in "
        f"{took(tree.total_bytes, seconds)}; names relative to {base}"
    )
    if tree.skipped:
        out.append("skipped: " + walking.skipped_phrase(tree.skipped, skipped_named, tree.base_dir))
    if tree.unreadable_count:
        out += titled(
            f"{plural(tree.unreadable_count, 'file')} could not be hashed (left out of the manifest):",
            [f"{escaped(item.path)}: {item.error}" for item in tree.unreadable],
            tree.unreadable_count - len(tree.unreadable),
        )
    non_utf8 = tree.non_utf8_names
    if non_utf8:
        out.append(
            "1 name is not valid UTF-8: it appears with \\xNN escapes, so a checker would report it missing"
            if non_utf8 == 1
            else f"{non_utf8:,} names are not valid UTF-8: they appear with \\xNN escapes, so a checker would "
            "report them missing"
        )
    if tree.manifest_uri is not None or not_kept is not None:
        if tree.manifest_uri is not None:
            hint = checking_hint(ALGORITHMS[tree.algorithm], tree.format, tree.base_dir)
            out.append(f"Full manifest: {tree.manifest_uri} (resources/read). {hint}")
        else:
            out.append(f"Full manifest: not kept, {not_kept}.")
        out += _lines_shown(tree, not_shown)
    elif tree.stopped_reason and tree.files_not_hashed:
        out.append(
            f"None of the {plural(tree.files_not_hashed, 'file')} listed was hashed before it stopped."
        )
    elif tree.stopped_reason:  # stopped before the walk listed a file: not an empty tree
        out.append("No file was hashed before it stopped.")
    else:
        out.append("No regular files to hash.")
    return "\n".join(out)


def _lines_shown(tree: HashTree, not_shown: int) -> list[str]:
    """The manifest lines inlined under a header that says what they are, and where the rest are: in
    the full manifest, or nowhere when it was not kept (too big) or none inlined (``max_lines`` 0)."""
    kept = tree.manifest_uri is not None
    if not tree.lines:
        return [
            f"No line shown (max_lines is 0): {plural(not_shown, 'line')} in the full manifest"
            if kept
            else "No line shown (max_lines is 0), and the full manifest was not kept"
        ]
    if not not_shown:
        return ["Manifest:", *tree.lines]
    rest = "in the full manifest" if kept else "not shown (the full manifest was not kept)"
    return [
        f"First {plural(len(tree.lines), 'line')}:",
        *tree.lines,
        f"… {plural(not_shown, 'more line')} {rest}",
    ]


TOOL = Tool(
    name="hash_tree",
    title="Checksum manifest of a tree",
    description=(
        "A checksum manifest of a tree, exactly as sha256sum or b3sum writes it, to check later with "
        "verify_checksums; for one file, file_sha256. Returns a summary, the first lines and a link to the "
        "whole manifest."
    ),
    input_schema=INPUT_SCHEMA,
    output=HashTree,
    handler=handle,
)
