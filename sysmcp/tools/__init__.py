"""The tools sysmcp serves, one module each, in ``TOOL_MODULES``; ``ALL_TOOLS`` is their ``TOOL``s.

Nothing is imported here until it is asked for: ``ALL_TOOLS`` imports every tool (and its engines)
on first use, and ``served_tools`` gives a server ``LazyTool``s, so a session imports only the tools
it is asked about (a fleet's remote start: ``initialize`` and one ``disk_usage``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sysmcp.tools.registry import LazyTool, Tool

    ALL_TOOLS: tuple[Tool, ...]

#: Every tool served by default, in the order tools/list gives them: (name, module).
_NAMES = (
    "disk_usage dir_usage file_sha256 find_duplicates hash_tree verify_checksums deleted_open_files disk_io "
    "disk_health container_usage reclaim_plan what_changed"
)
TOOL_MODULES: tuple[tuple[str, str], ...] = tuple((name, f"sysmcp.tools.{name}") for name in _NAMES.split())
RECLAIM = ("reclaim", "sysmcp.tools.reclaim")  # only with --allow-reclaim
#: Tools a test's server serves after the default ones (a test double run as a real process).
EXTRA_TOOLS: tuple[Tool, ...] = ()


def served_tools(allow_reclaim: bool) -> tuple[Tool | LazyTool, ...]:
    """The tool list a server serves, each loaded when first asked for (whether or not something in
    the process asked for ``ALL_TOOLS``): ``reclaim`` only when the operator allowed it."""
    from sysmcp.tools.registry import LazyTool

    tools: tuple[Tool | LazyTool, ...] = (*(LazyTool(*entry) for entry in TOOL_MODULES), *EXTRA_TOOLS)
    return (*tools, LazyTool(*RECLAIM)) if allow_reclaim else tools


def __getattr__(name: str) -> Any:
    """``ALL_TOOLS`` on first use (a module ``__getattr__``: only for names not yet set)."""
    if name != "ALL_TOOLS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    tools = tuple(importlib.import_module(module).TOOL for _, module in TOOL_MODULES)
    globals()["ALL_TOOLS"] = tools
    return tools


__all__ = ["ALL_TOOLS", "EXTRA_TOOLS", "RECLAIM", "TOOL_MODULES", "served_tools"]
