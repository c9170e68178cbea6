"""dir_usage: what fills a directory — the largest files under a path, bounded (du + sort | head)."""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass, field
from typing import Any

from sysmcp.fs.paths import display
from sysmcp.fs.units import human_bytes
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ToolError
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "minLength": 1,
            "description": "Absolute path of the directory to scan, e.g. '/var/log'.",
        },
        "top_n": {
            "type": "integer",
            "minimum": 1,
            "maximum": 50,
            "default": 5,
            "description": "How many of the largest files to list (1 to 50).",
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "files": {"type": "integer", "description": "Regular files seen."},
        "total_bytes": {"type": "integer", "description": "Apparent size of all regular files seen."},
        "skipped": {"type": "integer", "description": "Entries that could not be read."},
        "largest": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "size_bytes": {"type": "integer"}},
                "required": ["path", "size_bytes"],
            },
        },
        "not_shown": {"type": "integer", "description": "Files seen but not listed."},
    },
    "required": ["path", "files", "total_bytes", "skipped", "largest", "not_shown"],
    "additionalProperties": False,
}


@dataclass
class Scan:
    files: int = 0
    total: int = 0
    skipped: int = 0
    heap: list[tuple[int, bytes]] = field(default_factory=list)


def scan(root: bytes, top_n: int, meter: Meter) -> Scan:
    """Walk without following symlinks, keeping only a top-N heap so memory stays bounded."""
    result = Scan()
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = os.scandir(directory)
        except OSError:
            result.skipped += 1
            continue
        with entries:
            for entry in entries:
                meter.checkpoint()
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                        continue
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    size = entry.stat(follow_symlinks=False).st_size
                except OSError:
                    result.skipped += 1
                    continue
                result.files += 1
                result.total += size
                meter.done = result.files
                if len(result.heap) < top_n:
                    heapq.heappush(result.heap, (size, entry.path))
                elif size > result.heap[0][0]:
                    heapq.heapreplace(result.heap, (size, entry.path))
    return result


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    path = ctx.paths.resolve(args["path"])
    shown = display(path)
    if not path.is_dir():
        raise ToolError(f"Not a directory: {shown}" if path.exists() else f"No such directory: {shown}")
    top_n: int = args["top_n"]
    result = await ctx.run_in_worker(
        lambda meter: scan(os.fsencode(path), top_n, meter),
        describe=lambda meter, _: f"{int(meter.done):,} files scanned",
    )
    largest = sorted(result.heap, reverse=True)
    lines = [f"{human_bytes(size):>10}  {display(name)}" for size, name in largest]
    not_shown = result.files - len(largest)
    text = f"Largest files under {shown} ({result.files:,} files, {human_bytes(result.total)} in all):\n"
    text += "\n".join(lines) if lines else "(no regular files)"
    if not_shown:
        text += f"\n… and {not_shown:,} more files not shown"
    if result.skipped:
        text += f"\n{result.skipped:,} entries could not be read and were skipped"
    structured = {
        "path": shown,
        "files": result.files,
        "total_bytes": result.total,
        "skipped": result.skipped,
        "largest": [{"path": display(name), "size_bytes": size} for size, name in largest],
        "not_shown": not_shown,
    }
    return ToolOutput(text, structured)


TOOL = Tool(
    name="dir_usage",
    title="Directory usage",
    description=(
        "The largest files under a directory, largest first, with totals. Never follows symlinks; unreadable "
        "entries are skipped and counted; at most top_n (1-50) files are listed and the text says how many "
        "were not shown. Read-only; returns names and sizes, never contents."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=handle,
)
