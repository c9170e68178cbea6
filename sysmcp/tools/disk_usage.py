"""disk_usage: how full is the filesystem that holds a path (df for one mount)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

import anyio
import anyio.to_thread
import psutil

from sysmcp.fs.paths import display
from sysmcp.fs.units import human_bytes
from sysmcp.protocol.errors import ToolError
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput

STATVFS_TIMEOUT = 5.0  # seconds; a dead network mount must not hang the call


class Usage(NamedTuple):
    total: int
    used: int
    free: int


UsageProvider = Callable[[str], Usage]


def psutil_usage(path: str) -> Usage:
    raw = psutil.disk_usage(path)
    return Usage(int(raw.total), int(raw.used), int(raw.free))


def percent_used(used: int, free: int) -> float:
    """df's formula: used / (used + available), so reserved blocks do not hide a full disk."""
    return round(100.0 * used / (used + free), 1) if used + free else 0.0


INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "description": "Absolute path of any file or directory on the filesystem to report, e.g. '/' or '/var'.",
            "minLength": 1,
        },
        "unit": {
            "type": "string",
            "enum": ["percent", "mb"],
            "default": "percent",
            "description": "How the text states usage: 'percent' used, or 'mb' free (MiB). "
            "Structured content is always in bytes.",
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "total_bytes": {"type": "integer"},
        "used_bytes": {"type": "integer"},
        "free_bytes": {"type": "integer", "description": "Available to unprivileged users."},
        "percent_used": {"type": "number", "description": "used / (used + free) × 100, as df computes it."},
    },
    "required": ["path", "total_bytes", "used_bytes", "free_bytes", "percent_used"],
    "additionalProperties": False,
}


def make_handler(provider: UsageProvider = psutil_usage, timeout: float = STATVFS_TIMEOUT) -> Any:
    async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        path = ctx.paths.resolve(args["path"])
        shown = display(path)
        try:
            with anyio.fail_after(timeout):
                usage = await anyio.to_thread.run_sync(provider, os.fsdecode(path), abandon_on_cancel=True)
        except TimeoutError:
            raise ToolError(
                f"The filesystem holding {shown} did not answer within {timeout:g} s (a hung mount?)"
            ) from None
        except FileNotFoundError:
            raise ToolError(f"No such file or directory: {shown}") from None
        except PermissionError:
            raise ToolError(f"Permission denied: {shown}") from None
        except OSError as exc:
            raise ToolError(f"Cannot read usage of {shown}: {exc.strerror or exc}") from None
        percent = percent_used(usage.used, usage.free)
        if args["unit"] == "mb":
            text = f"{shown}: {usage.free / (1 << 20):,.0f} MB free of {usage.total / (1 << 20):,.0f} MB"
        else:
            text = f"{shown}: {percent:.1f}% used ({human_bytes(usage.used)} of {human_bytes(usage.total)})"
        structured = {
            "path": shown,
            "total_bytes": usage.total,
            "used_bytes": usage.used,
            "free_bytes": usage.free,
            "percent_used": percent,
        }
        return ToolOutput(text, structured)

    return handle


TOOL = Tool(
    name="disk_usage",
    title="Disk usage",
    description=(
        "Usage of the filesystem that holds `path`: total, used and free bytes, and percent used computed as df "
        "does (used / (used + available)). Read-only; reports on the whole filesystem, not the directory's own "
        "size (use dir_usage for that). A mount that does not answer within 5 s is reported, not waited on."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=make_handler(),
)
