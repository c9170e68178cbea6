"""hash_tree: a checksum manifest of every regular file under a directory (sha256sum/b3sum over a tree).

Why a manifest and not a list of digests: the output is exactly what ``find . -type f | sort |
xargs sha256sum`` would write, so an admin can save it as SHA256SUMS and check it later with
``sha256sum -c`` — or with ``verify_checksums``, which also notices files that appeared. The model
sees a summary and the first lines; the whole manifest is a ``resources/read`` away.
"""

from __future__ import annotations

import os
import shlex
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sysmcp.fs.checksums import (
    ALGORITHM_NAMES,
    ALGORITHMS,
    HASH_THREADS,
    MANIFEST_NAMES,
    Algorithm,
    Job,
    PoolCounters,
    Style,
    format_line,
    hash_many,
)
from sysmcp.fs.paths import display, printable
from sysmcp.fs.safeopen import kind
from sysmcp.fs.units import human_bytes, plural, rate
from sysmcp.fs.walk import SkipCounter, WalkOptions, throttled, walk_files
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ToolError
from sysmcp.tools.merging import summary_merge
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput
from sysmcp.tools.walking import denied_by, skipped_phrase, walk_options, walk_properties

MAX_LISTED = 50  # unreadable files named in the result; the rest are counted

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "minLength": 1,
            "description": "Absolute path of the directory to hash (every regular file below it), or of one "
            "file. Manifest names are relative to this directory (to the file's directory for a file).",
        },
        "algorithm": {
            "type": "string",
            "enum": list(ALGORITHM_NAMES),
            "default": "sha256",
            "description": "Digest algorithm: md5, sha1, sha256 (default, what sha256sum writes), sha512, "
            "blake2b (b2sum's 512-bit) or blake3 (b3sum; several times faster than sha256).",
        },
        "format": {
            "type": "string",
            "enum": ["gnu", "bsd"],
            "default": "gnu",
            "description": "'gnu': '<digest>  <name>' lines as sha256sum/b3sum print them; 'bsd': "
            "'SHA256 (<name>) = <digest>' lines as sha256sum --tag prints them.",
        },
        "max_lines": {
            "type": "integer",
            "minimum": 0,
            "maximum": 1000,
            "default": 20,
            "description": "Manifest lines to show inline (0 to 1000). The full manifest is always available "
            "as a resource link (read it with resources/read).",
        },
        **walk_properties("path"),
    },
    "required": ["path"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "base_dir": {"type": "string", "description": "The directory the manifest's names are relative to."},
        "algorithm": {"type": "string"},
        "format": {"type": "string", "enum": ["gnu", "bsd"]},
        "files": {"type": "integer", "description": "Files in the manifest."},
        "total_bytes": {"type": "integer", "description": "Bytes hashed for the manifest."},
        "seconds": {"type": "number"},
        "lines": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The first manifest lines (sorted by name), without their newline.",
        },
        "lines_not_shown": {"type": "integer"},
        "manifest_uri": {
            "type": ["string", "null"],
            "description": "sysmcp:// resource holding the whole manifest, exactly as it would be saved.",
        },
        "skipped": {
            "type": "object",
            "additionalProperties": {"type": "integer"},
            "description": "Entries left out of the walk by reason: excluded, special_file, other_filesystem, "
            "pseudo_filesystem, unreadable (directories), vanished.",
        },
        "unreadable_count": {"type": "integer", "description": "Files that could not be hashed."},
        "unreadable": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "error": {"type": "string"}},
                "required": ["path", "error"],
            },
            "description": f"The first {MAX_LISTED} files that could not be hashed, with the reason.",
        },
        "non_utf8_names": {
            "type": "integer",
            "description": "Names that are not valid UTF-8: shown with \\xNN escapes, so a checker would not "
            "find them.",
        },
    },
    "required": [
        "path",
        "base_dir",
        "algorithm",
        "format",
        "files",
        "total_bytes",
        "seconds",
        "lines",
        "lines_not_shown",
        "manifest_uri",
        "skipped",
        "unreadable_count",
        "unreadable",
        "non_utf8_names",
    ],
    "additionalProperties": False,
}


@dataclass
class TreeHash:
    """What the worker hands back: the sorted manifest lines and what could not be in it."""

    lines: list[bytes] = field(default_factory=list)
    total_bytes: int = 0
    unreadable: list[tuple[bytes, str]] = field(default_factory=list)
    seconds: float = 0.0
    base: bytes = b"/"
    non_utf8: int = 0


def hash_tree(
    root: bytes,
    single: os.stat_result | None,
    algorithm: Algorithm,
    style: Style,
    options: WalkOptions,
    skipped: SkipCounter,
    meter: Meter,
    threads: int,
) -> TreeHash:
    """Walk (or take the one file), hash on a small pool, and build the sorted manifest."""
    started = time.perf_counter()
    counters = PoolCounters()

    def update_meter() -> None:
        done_bytes, done_files = counters.bytes, counters.files
        meter.extra["bytes"] = done_bytes
        meter.extra["files"] = done_files
        meter.done = done_bytes + done_files  # both only grow: progress that moves for big and tiny files

    def report_and_check() -> None:
        update_meter()
        meter.checkpoint()

    check = throttled(report_and_check)  # summing the threads' counters for every file would cost too much

    def jobs() -> Iterator[Job]:
        if single is not None:
            yield Job(0, root, (algorithm,), single)
            return
        for key, entry in enumerate(walk_files(root, options, skipped, check)):
            yield Job(key, entry.path, (algorithm,), entry.stat)

    base = os.path.dirname(root) if single is not None else root
    prefix_length = len(base.rstrip(b"/")) + 1
    result = TreeHash()
    entries: list[tuple[bytes, str]] = []
    for outcome in hash_many(jobs(), checkpoint=check, counters=counters, threads=threads):
        relative = outcome.job.path[prefix_length:]
        if outcome.digest is None:
            if outcome.missing:
                skipped.add("vanished")  # this thread is also the walk's: one counter for both
            else:
                result.unreadable.append((relative, outcome.error or "unreadable"))
        elif outcome.digest.changed:
            result.unreadable.append((relative, f"changed while being hashed: {outcome.digest.changed}"))
        else:
            entries.append((relative, outcome.digest.hexdigests[algorithm.name]))
            result.total_bytes += outcome.digest.size
    update_meter()
    entries.sort()
    result.lines = [format_line(name, digest, algorithm, style) for name, digest in entries]
    result.non_utf8 = sum(1 for name, _ in entries if not _is_utf8(name))
    result.base = base
    result.unreadable.sort()
    result.seconds = time.perf_counter() - started
    return result


def _is_utf8(name: bytes) -> bool:
    try:
        name.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def run(
    path: bytes,
    shown: str,
    algorithm: Algorithm,
    style: Style,
    options: WalkOptions,
    skipped: SkipCounter,
    meter: Meter,
) -> TreeHash:
    """The whole call, in the worker thread."""
    try:
        looked = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        raise ToolError(f"No such file or directory: {shown}") from None
    except OSError as exc:
        raise ToolError(f"Cannot read {shown}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(looked.st_mode) and not stat.S_ISREG(looked.st_mode):
        raise ToolError(
            f"Cannot hash {shown}: it is {kind(looked.st_mode)}; give a directory or a regular file"
        )
    single = looked if stat.S_ISREG(looked.st_mode) else None
    try:
        return hash_tree(path, single, algorithm, style, options, skipped, meter, HASH_THREADS)
    except PermissionError:
        raise ToolError(
            f"Permission denied: cannot read the directory {shown}{denied_by(Path(os.fsdecode(path)))}"
        ) from None
    except OSError as exc:
        raise ToolError(f"Cannot walk {shown}: {exc.strerror or exc}") from None


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    path = await ctx.resolve(args["path"])
    shown = display(path)
    algorithm = ALGORITHMS[args["algorithm"]]
    style: Style = "bsd" if args["format"] == "bsd" else "gnu"
    options = walk_options(args)
    skipped = SkipCounter()

    def describe(meter: Meter, elapsed: float) -> str:
        done = meter.extra.get("bytes", 0)
        return f"{plural(int(meter.extra.get('files', 0)), 'file')}, {human_bytes(done)} hashed at {rate(done, elapsed)}"

    tree = await ctx.run_in_worker(
        lambda meter: run(os.fsencode(path), shown, algorithm, style, options, skipped, meter),
        describe=describe,
    )
    return render(args, ctx, tree, shown, algorithm, style, skipped)


def checking_hint(algorithm: Algorithm, style: Style, base: str) -> str:
    """How an admin checks the saved manifest with the usual tool (b3sum reads no --tag lines)."""
    name = MANIFEST_NAMES[algorithm.name]
    if algorithm.name == "blake3" and style == "bsd":
        return (
            f"Saved as {name} in {base}, it checks with verify_checksums (b3sum reads only the GNU format)."
        )
    tool = algorithm.tool.split()[0]
    return f"Saved as {name} in {base}, it checks with `cd {shlex.quote(base)} && {tool} -c {name}` or with verify_checksums."


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
    texts = [line.decode("utf-8", "backslashreplace") for line in tree.lines]
    non_utf8 = tree.non_utf8
    manifest = "".join(texts)
    skips = skipped.as_dict()
    links: tuple[ResourceLink, ...] = ()
    uri: str | None = None
    not_kept: str | None = None  # why the full manifest could not be kept, if it could not
    if tree.lines:
        link = ctx.keep(
            MANIFEST_NAMES[algorithm.name],
            manifest,
            description=f"{algorithm.name} manifest ({style} format) of {len(tree.lines):,} files, names relative "
            f"to {base}",
        )
        if isinstance(link, str):
            not_kept = link
        else:
            uri = link.uri
            links = (link,)
    max_lines: int = args["max_lines"]
    shown_lines = [text.rstrip("\n") for text in texts[:max_lines]]
    not_shown = len(texts) - len(shown_lines)

    out = [
        f"{algorithm.name} manifest of {shown}: {plural(len(tree.lines), 'file')}, {human_bytes(tree.total_bytes)} hashed in "
        f"{tree.seconds:.2f} s ({rate(tree.total_bytes, tree.seconds)}); names relative to {base}"
    ]
    if skips:
        out.append("skipped: " + skipped_phrase(skips, skipped.named, base))
    if tree.unreadable:
        out.append(f"{plural(len(tree.unreadable), 'file')} could not be hashed and are not in the manifest:")
        out += [f"  {printable(name)}: {error}" for name, error in tree.unreadable[:MAX_LISTED]]
        if len(tree.unreadable) > MAX_LISTED:
            out.append(f"  … and {len(tree.unreadable) - MAX_LISTED:,} more")
    if non_utf8:
        out.append(
            f"{non_utf8:,} names are not valid UTF-8: they appear with \\xNN escapes, so a checker would report them "
            "missing"
        )
    if uri is not None or not_kept is not None:
        where = f"{uri} (resources/read)" if uri is not None else f"not kept, {not_kept}"
        out.append(f"Full manifest: {where}. {checking_hint(algorithm, style, base)}")
        out.append(f"First {plural(len(shown_lines), 'line')}:" if not_shown else "Manifest:")
        out += shown_lines
        if not_shown:
            out.append(f"… {plural(not_shown, 'more line')} in the full manifest")
    else:
        out.append("No regular files to hash.")
    structured = {
        "path": shown,
        "base_dir": base,
        "algorithm": algorithm.name,
        "format": style,
        "files": len(tree.lines),
        "total_bytes": tree.total_bytes,
        "seconds": round(tree.seconds, 6),
        "lines": shown_lines,
        "lines_not_shown": not_shown,
        "manifest_uri": uri,
        "skipped": skips,
        "unreadable_count": len(tree.unreadable),
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
        "Hashes every regular file under a directory (or one file) and returns a checksum manifest exactly as "
        "sha256sum/b3sum would write it (GNU or BSD --tag format, names relative to the directory, sorted). "
        "Algorithms: md5, sha1, sha256 (default), sha512, blake2b, blake3. Never follows symlinks, stays on "
        "one filesystem, skips and counts special files; unreadable files are listed. Shows a summary and the "
        "first lines; the full manifest is a resource link. Check it later with verify_checksums."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=handle,
    merge=summary_merge(),  # per-host summaries
)
