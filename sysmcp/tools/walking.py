"""What every tool that walks a tree shares: its walk arguments, declared once, and their checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sysmcp.fs.walk import WalkOptions
from sysmcp.protocol.errors import ToolError


def walk_properties(base: str, *, note: str = "") -> dict[str, Any]:
    """The ``exclude`` and ``one_file_system`` schema properties, relative to the argument ``base``."""
    return {
        "exclude": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "maxItems": 64,
            "default": [],
            "description": f"{note}Glob patterns to leave out (and not descend into), matched against each "
            f"entry's name and its path relative to '{base}', e.g. ['.git', '*.tmp', 'cache/*'].",
        },
        "one_file_system": {
            "type": "boolean",
            "default": True,
            "description": f"{note}Stay on the filesystem of '{base}' (like du -x): mount points below it "
            "are skipped and counted. Kernel pseudo-filesystems (/proc, /sys, /dev) are skipped either way.",
        },
    }


def timeout_property(default: float, maximum: float, *, stops: str) -> dict[str, Any]:
    """The ``timeout_s`` schema property of a tool that stops at a time budget with a partial result."""
    return {
        "type": "number",
        "minimum": 0.001,
        "maximum": maximum,
        "default": default,
        "description": f"Time budget in seconds (at most {maximum:g}). When it runs out {stops}",
    }


def walk_options(args: dict[str, Any]) -> WalkOptions:
    """The walk the validated arguments of ``walk_properties`` ask for."""
    return WalkOptions(one_file_system=args["one_file_system"], exclude=tuple(args["exclude"]))


def require_directory(path: Path, shown: str, argument: str | None = None) -> None:
    """Refuse, with text a model can act on, a path that is missing or not a directory."""
    if path.is_dir():
        return
    if not path.exists():
        raise ToolError(f"No such directory: {shown}")
    raise ToolError(f"{argument} is not a directory: {shown}" if argument else f"Not a directory: {shown}")


def skipped_phrase(skipped: dict[str, int]) -> str:
    """A walk's skip counts as one phrase for the text answer: '3 unreadable, 12 other filesystem'."""
    return ", ".join(f"{count:,} {reason.replace('_', ' ')}" for reason, count in skipped.items())
