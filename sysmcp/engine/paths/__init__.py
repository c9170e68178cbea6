"""Paths: the ``--root`` policy and how names are shown (escaped for terminals).

This is the room's front door: other rooms import these names from here, never a private module.
"""

from sysmcp.engine.paths._paths import (
    EXACT_BYTES,
    PATH_MAX,
    PathPolicy,
    call_argument,
    display,
    echo,
    escaped,
    exact_bytes,
    exact_names,
    expands_locally,
    in_json,
    is_within,
    mount_source,
    on_the_way,
    one_line,
    printable_text,
    real_root,
    root_names,
    roots_from_uris,
    shell_word,
    too_long,
    within_roots,
)

__all__ = [
    "EXACT_BYTES",
    "PATH_MAX",
    "PathPolicy",
    "call_argument",
    "display",
    "echo",
    "escaped",
    "exact_bytes",
    "exact_names",
    "expands_locally",
    "in_json",
    "is_within",
    "mount_source",
    "on_the_way",
    "one_line",
    "printable_text",
    "real_root",
    "root_names",
    "roots_from_uris",
    "shell_word",
    "too_long",
    "within_roots",
]
