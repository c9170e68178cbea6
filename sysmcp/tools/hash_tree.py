"""hash_tree: a checksum manifest of every regular file under a directory (sha256sum/b3sum over a tree).

The MCP face of ``sysmcp.engine.hashing._treehash`` (the walk and the hashing): the schema, the request built from
the arguments, the summary and first lines in words, the whole manifest kept as a resource, and the
history hook that keeps it as an integrity baseline.

Why a manifest and not a list of digests: the output is exactly what ``find . -type f | sort |
xargs sha256sum`` would write, so an admin can save it as SHA256SUMS and check it later with
``sha256sum -c`` — or with ``verify_checksums``, which also notices files that appeared. The model
sees a summary and the first lines; the whole manifest is a ``resources/read`` away.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from sysmcp.engine.errors import PermissionRefused
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
from sysmcp.engine.paths import display, printable
from sysmcp.engine.walk import SkipCounter, WalkOptions
from sysmcp.protocol.context import Meter
from sysmcp.protocol.threads import run_in_thread
from sysmcp.render import human_bytes, plural, rate, took
from sysmcp.results import MAX_ITEM, TooLarge
from sysmcp.tools import schemas as js
from sysmcp.tools.recording import record_baseline
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput
from sysmcp.tools.walking import (
    skipped_phrase,
    timeout_property,
    unreadable_directory,
    walk_options,
    walk_properties,
)

MAX_LISTED = 50  # unreadable files named in the result; the rest are counted
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 600.0

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
        "timeout_s": timeout_property(DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S),
        "baseline": js.boolean(
            "Also keep it as an integrity baseline for what_changed (gnu only).", default=False
        ),
        **walk_properties("path"),
    }
)

OUTPUT_SCHEMA: dict[str, Any] = js.result(
    {
        "path": js.string(),
        "complete": js.boolean(
            "False when the time budget ran out: the manifest then covers only some files."
        ),
        "stopped_reason": js.string(null=True),
        "files_not_hashed": js.integer(
            "Files listed but not hashed when the budget ran out (0 when complete)."
        ),
        "walk_complete": js.boolean(
            "False when the walk itself was cut: files in directories not yet listed are "
            "neither in the manifest nor counted."
        ),
        "base_dir": js.string("The directory the manifest's names are relative to."),
        "algorithm": js.string(),
        "format": js.string(enum=["gnu", "bsd"]),
        "files": js.integer("Files in the manifest."),
        "total_bytes": js.integer("Bytes hashed for the manifest."),
        "seconds": js.number(),
        "lines": js.names("The first manifest lines (sorted by name), without their newline."),
        "lines_not_shown": js.integer(),
        "manifest_uri": js.string(
            "sysmcp:// resource holding the whole manifest, exactly as it would be saved.", null=True
        ),
        "skipped": js.counts(
            "Entries left out of the walk by reason: excluded, special_file, other_filesystem, "
            "pseudo_filesystem, unreadable (directories), vanished."
        ),
        "unreadable_count": js.integer("Files that could not be hashed."),
        "unreadable": js.path_errors(
            f"The first {MAX_LISTED} files that could not be hashed, with the reason."
        ),
        "non_utf8_names": js.integer(
            "Names that are not valid UTF-8: shown with \\xNN escapes, so a checker would not find them."
        ),
    }
)


MAX_SHOWN = 1000  # the schema's largest max_lines


def run(
    path: bytes,
    shown: str,
    algorithm: Algorithm,
    style: Style,
    options: WalkOptions,
    skipped: SkipCounter,
    meter: Meter,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> TreeHash:
    """The whole call, in the worker thread: the engine's request, its progress into the meter, and a
    directory that may not be read named with the component that refused (a look: here, not on the loop)."""

    def report(files: int, done: int) -> None:
        meter.extra["bytes"] = done
        meter.extra["files"] = files
        meter.done = done + files  # both only grow: progress that moves for big and tiny files

    request = TreeRequest(
        path, algorithm, style, options, timeout_s=timeout_s, keep_limit=MAX_ITEM, first_lines=MAX_SHOWN
    )
    try:
        return hash_path(request, skipped, shown, check_cancelled=meter.checkpoint, report=report)
    except PermissionRefused:
        raise unreadable_directory(shown, Path(os.fsdecode(path))) from None


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    path = await ctx.resolve(args["path"])
    shown = display(path)
    algorithm = ALGORITHMS[args["algorithm"]]
    style: Style = "bsd" if args["format"] == "bsd" else "gnu"
    options = walk_options(args)
    skipped = SkipCounter()
    timeout_s = min(float(args["timeout_s"]), MAX_TIMEOUT_S)

    def describe(meter: Meter, elapsed: float) -> str:
        done = meter.extra.get("bytes", 0)
        return f"{plural(int(meter.extra.get('files', 0)), 'file')}, {human_bytes(done)} hashed at {rate(done, elapsed)}"

    tree = await ctx.run_in_worker(
        lambda meter: run(os.fsencode(path), shown, algorithm, style, options, skipped, meter, timeout_s),
        describe=describe,
    )
    output = render(args, ctx, tree, shown, algorithm, style, skipped)
    if args.get("baseline"):  # the history hook: an integrity baseline for what_changed
        said = await run_in_thread(
            lambda _: (
                record_baseline(
                    tree.base, bytes(tree.manifest or b""), algorithm.name, options, bool(tree.stopped)
                )
                if style == "gnu" and tree.manifest is not None
                else "No baseline kept: it needs the GNU format and the whole manifest."
            ),
            None,
            None,
        )
        output = replace(output, text=f"{output.text}\n{said}")
    return output


def checking_hint(algorithm: Algorithm, style: Style, base: str) -> str:
    """How an admin checks the manifest once saved, with the usual tool (b3sum reads no --tag lines).
    Never "saved": the server writes no file (``sysmcp call -o`` does, and says so itself)."""
    name = MANIFEST_NAMES[algorithm.name]
    if algorithm.name == "blake3" and style == "bsd":
        return f"Put in {base} as {name}, it checks with verify_checksums (b3sum reads only the GNU format)."
    tool = algorithm.tool.split()[0]
    return f"Put in {base} as {name}, it checks with `cd {shlex.quote(base)} && {tool} -c {name}` or with verify_checksums."


def render(
    args: dict[str, Any],
    ctx: ToolContext,
    tree: TreeHash,
    shown: str,
    algorithm: Algorithm,
    style: Style,
    skipped: SkipCounter,
) -> ToolOutput:
    """Summary and the first lines inline; the whole manifest as a resource."""
    base = display(tree.base)
    non_utf8 = tree.non_utf8
    skips = skipped.as_dict()
    links: tuple[ResourceLink, ...] = ()
    uri: str | None = None
    not_kept: str | None = None  # why the full manifest could not be kept, if it could not
    if tree.files:
        if tree.manifest is None:
            not_kept = TooLarge(tree.manifest_bytes).reason
        else:
            link = ctx.keep(
                MANIFEST_NAMES[algorithm.name],
                tree.manifest.decode("utf-8", "backslashreplace"),
                description=f"{algorithm.name} manifest ({style} format) of {plural(tree.files, 'file')}, names "
                f"relative to {base}",
            )
            if isinstance(link, str):
                not_kept = link
            else:
                uri = link.uri
                links = (link,)
    max_lines: int = args["max_lines"]
    shown_lines = [line.decode("utf-8", "backslashreplace").rstrip("\n") for line in tree.first[:max_lines]]
    not_shown = tree.files - len(shown_lines)

    out = []
    if tree.stopped:
        unlisted = "" if tree.walk_complete else ", and the walk had not finished (files in directories not "
        unlisted += "" if tree.walk_complete else "yet listed are neither in the manifest nor counted)"
        were = "was" if tree.not_hashed == 1 else "were"
        out.append(
            f"PARTIAL RESULT: hashing stopped early ({tree.stopped}); the manifest covers the "
            f"{plural(tree.files, 'file')} hashed by then, each line correct; {plural(tree.not_hashed, 'file')} "
            f"listed {were} not hashed{unlisted}. Give a larger timeout_s (at most {MAX_TIMEOUT_S:g}) or a "
            "subdirectory."
        )
    out += [
        f"{algorithm.name} manifest of {shown}: {plural(tree.files, 'file')}, {human_bytes(tree.total_bytes)} hashed in "
        f"{took(tree.total_bytes, tree.seconds)}; names relative to {base}"
    ]
    if skips:
        out.append("skipped: " + skipped_phrase(skips, skipped.named, base))
    if tree.unreadable_count:
        out.append(f"{plural(tree.unreadable_count, 'file')} could not be hashed (left out of the manifest):")
        out += [f"  {printable(name)}: {error}" for name, error in tree.unreadable[:MAX_LISTED]]
        if tree.unreadable_count > MAX_LISTED:
            out.append(f"  … and {tree.unreadable_count - MAX_LISTED:,} more")
    if non_utf8:
        out.append(
            "1 name is not valid UTF-8: it appears with \\xNN escapes, so a checker would report it missing"
            if non_utf8 == 1
            else f"{non_utf8:,} names are not valid UTF-8: they appear with \\xNN escapes, so a checker would "
            "report them missing"
        )
    if uri is not None or not_kept is not None:
        where = f"{uri} (resources/read)" if uri is not None else f"not kept, {not_kept}"
        hint = f" {checking_hint(algorithm, style, base)}" if uri is not None else ""
        out.append(f"Full manifest: {where}.{hint}")
        out.append(f"First {plural(len(shown_lines), 'line')}:" if not_shown else "Manifest:")
        out += shown_lines
        if not_shown:
            out.append(f"… {plural(not_shown, 'more line')} in the full manifest")
    elif tree.stopped and tree.not_hashed:
        out.append(f"None of the {plural(tree.not_hashed, 'file')} listed was hashed before it stopped.")
    else:
        out.append("No regular files to hash.")
    structured = {
        "path": shown,
        "complete": tree.stopped is None,
        "stopped_reason": tree.stopped,
        "files_not_hashed": tree.not_hashed,
        "walk_complete": tree.walk_complete,
        "base_dir": base,
        "algorithm": algorithm.name,
        "format": style,
        "files": tree.files,
        "total_bytes": tree.total_bytes,
        "seconds": round(tree.seconds, 6),
        "lines": shown_lines,
        "lines_not_shown": not_shown,
        "manifest_uri": uri,
        "skipped": skips,
        "unreadable_count": tree.unreadable_count,
        "unreadable": [
            {"path": printable(name), "error": error} for name, error in tree.unreadable[:MAX_LISTED]
        ],
        "non_utf8_names": non_utf8,
    }
    return ToolOutput("\n".join(out), structured, links=links)


TOOL = Tool(
    name="hash_tree",
    title="Checksum manifest of a tree",
    description=(
        "A checksum manifest of a tree, exactly as sha256sum or b3sum writes it, to check later with "
        "verify_checksums; for one file, file_sha256. Returns a summary, the first lines and a link to the "
        "whole manifest."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=handle,
)
