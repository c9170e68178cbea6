"""Opens that never follow a swapped-in symlink: every step relative to a descriptor, ``O_NOFOLLOW``,
the identity checked after the open.

This is the room's front door: other rooms import these names from here, never a private module.
"""

from sysmcp.engine.opens._safeopen import (
    KEPT_LEVELS,
    S_IFMT,
    FileSwap,
    NotRegularFile,
    Parents,
    closing_fd,
    extended_attributes,
    kind,
    open_parent,
    open_path,
    open_regular_at,
    read_small_regular_at,
    refused_symlink,
    through_symlink,
)

__all__ = [
    "KEPT_LEVELS",
    "S_IFMT",
    "FileSwap",
    "NotRegularFile",
    "Parents",
    "closing_fd",
    "extended_attributes",
    "kind",
    "open_parent",
    "open_path",
    "open_regular_at",
    "read_small_regular_at",
    "refused_symlink",
    "through_symlink",
]
