"""The tools sysmcp serves, one module each, collected in ``ALL_TOOLS``."""

from sysmcp.tools import (
    deleted_open_files,
    dir_usage,
    disk_io,
    disk_usage,
    file_sha256,
    find_duplicates,
    hash_tree,
    reclaim_plan,
    verify_checksums,
    what_changed,
)
from sysmcp.tools.registry import Tool

ALL_TOOLS: tuple[Tool, ...] = (
    disk_usage.TOOL,
    dir_usage.TOOL,
    file_sha256.TOOL,
    find_duplicates.TOOL,
    hash_tree.TOOL,
    verify_checksums.TOOL,
    deleted_open_files.TOOL,
    disk_io.TOOL,
    reclaim_plan.TOOL,
    what_changed.TOOL,
)

__all__ = ["ALL_TOOLS", "Tool"]
