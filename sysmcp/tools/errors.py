"""The one boundary where an engine's failure becomes the model's words.

Engines raise ``sysmcp.engine.faults.EngineError`` subclasses with facts; a tool handler lets them
through and the server's tool call passes every one to ``as_tool_error`` (``Server._run_tool``). A
class that needs other words than its detail gets them here, not in the engine: the rule that
refused, what to do instead.
"""

from __future__ import annotations

import os

from sysmcp.engine.commands import BadOutput, CommandFailed, CommandMissing, CommandTimedOut
from sysmcp.engine.faults import (
    EngineError,
    InvalidPath,
    NotFound,
    OutsideRoots,
    PermissionRefused,
    Refused,
    Unavailable,
    WrongKind,
)
from sysmcp.protocol.failures import ArgumentError, ToolError
from sysmcp.render import human_bytes

__all__ = ["as_tool_error", "file_error", "unreadable_reason", "words"]

#: A path that met a symlink at open time (``engine.opens`` opens every component with O_NOFOLLOW).
_SWAPPED_WHY = " (swapped in after the check, or a symlink loop), and sysmcp never follows symlinks when opening. Refused"
CONTAINMENT = (
    "Containment is checked after resolving '..' and symlinks, so a link inside a root that points out "
    "of it is refused too; a name outside the roots is never looked at, so a symlink there leading into "
    "a root (such as /home -> /var/home) is not followed: name the path through an allowed root"
)
_KEPT_GROWING = (
    "; hash it once nothing writes to it (kernel pseudo-files like /proc/*/pagemap cannot be hashed)"
)
#: What a checksum manifest's lines look like, for a text that has none.
_MANIFEST_LINES = "Expected lines like '<hex digest>  <name>' or 'SHA256 (<name>) = <hex digest>'."
_ADVICE: dict[tuple[type[EngineError], str], str] = {
    (InvalidPath, "empty"): ": give an absolute path, e.g. '/var/log'",
    (InvalidPath, "relative"): ": give an absolute path (sysmcp has no useful working directory)",
    (InvalidPath, "user_home"): (
        ": under roots no user is looked up (the user database lies outside them), so give the absolute path"
    ),
    (WrongKind, "not_directory"): (
        ": a name with '/', '/.', '/..' or another name after it must be a directory, as the kernel (and "
        "stat, ls, sha256sum) looks it up; name a file without them"
    ),
    (NotFound, "before_dot_dot"): (
        ": a name before a '..' does not exist, and the kernel (and stat, realpath) looks each name up "
        "before going back up"
    ),
    (PermissionRefused, "before_dot_dot"): (
        ": a name before a '..' cannot be looked at, and the kernel (and stat, realpath) looks each name "
        "up before going back up"
    ),
    (Refused, "replaced"): "; try again",
    (WrongKind, "not_regular"): "; only regular files can be read",
    (WrongKind, "symlink"): _SWAPPED_WHY,
    (WrongKind, "not_hashable"): "; only regular files can be hashed",
    (WrongKind, "not_tree"): "; give a directory or a regular file",
    (Refused, "swapped_for_link"): "; refused",
    (Refused, "replaced_while_opened"): "; refused. Call again if the change was expected.",
    (Refused, "not_a_manifest"): f", so this does not look like a checksum manifest. {_MANIFEST_LINES}",
    (Refused, "no_entries"): f". {_MANIFEST_LINES}",
    (Refused, "manifest_changed"): "; check it again once nothing writes to it",
    (EngineError, "kept_growing"): _KEPT_GROWING,
    (Refused, "tampered"): "; nothing removed: make a new plan with reclaim_plan and review it",
    (
        CommandMissing,
        "missing",
    ): " (lvm2, btrfs-progs or zfsutils-linux has it): the figures it gives are unknown",
    (CommandTimedOut, "timeout"): "; it was stopped and the figures it gives are left out: call again",
    (CommandFailed, "failed"): "; the figures it gives are left out (some need root)",
    (BadOutput, "lvs"): "; the thin pool figures are left out",
    (BadOutput, "btrfs"): "; the btrfs figures it gives are left out",
    (BadOutput, "zfs"): "; the ZFS figures are left out",
    (NotFound, "no_engine"): ". Docker or Podman is not running here, or name its API socket in 'socket'",
    (WrongKind, "not_socket"): (
        ": name the engine's API socket in 'socket' (Docker's: /var/run/docker.sock), or leave "
        "'socket' out to ask where engines listen"
    ),
    (PermissionRefused, "engine_socket"): ": run sysmcp as root or as a member of the socket's group",
    (Unavailable, "engine_silent"): ": the engine is hung or overloaded; try again or raise timeout_s",
}


def words(exc: EngineError) -> str:
    """What the model reads for an engine failure: its facts, then the rule and what to do."""
    if isinstance(exc, OutsideRoots) and exc.allowed is not None:
        allowed = ", ".join(exc.allowed) or "none"
        if exc.more:
            allowed += f" … and {exc.more} more"
        return f"{exc.detail}: refused. {CONTAINMENT}. Allowed roots: {allowed}"
    if exc.reason == "manifest_too_large":  # its limit said in a size, not in bytes
        return f"The manifest {getattr(exc, 'shown', '')} is larger than {human_bytes(getattr(exc, 'limit', 0))}; split it"
    if exc.reason == "manifest_unsized":
        return (
            f"The manifest {getattr(exc, 'shown', '')} says it is empty yet gave more than "
            f"{human_bytes(getattr(exc, 'limit', 0))} when read: a kernel-generated file (such as "
            "/proc/*/pagemap) is no checksum manifest"
        )
    advice = next(
        (_ADVICE[kind, exc.reason] for kind in type(exc).__mro__ if (kind, exc.reason) in _ADVICE), ""
    )
    if isinstance(exc, PermissionRefused) and not exc.detail.lower().startswith("permission denied"):
        return f"Permission denied: {exc.detail}{advice}"
    if isinstance(exc, NotFound) and not exc.detail.lower().startswith("no such"):
        return f"Not found: {exc.detail}{advice}"
    return exc.detail + advice


def as_tool_error(exc: EngineError) -> ToolError:
    """The ``ToolError`` (an ``isError`` result) for an engine failure; a path outside the roots is a
    refused argument (``ArgumentError``: nothing was done, ``sysmcp call`` exits 2 on it)."""
    return (ArgumentError if isinstance(exc, OutsideRoots) else ToolError)(words(exc))


def file_error(error: str) -> str:
    """Why one file of a list could not be hashed (hash_tree, verify_checksums), with the advice its
    fact calls for: a file that kept growing (``KeptGrowing``) is hashed once nothing writes to it."""
    return error + _KEPT_GROWING if error.startswith("read error: it kept growing") else error


def unreadable_reason() -> str:
    """Why another process's /proc entries were refused (deleted_open_files and disk_io count such
    processes), as the text should say it: without root it is ownership; as root, a sandbox or
    security module (ptrace limits, another PID namespace's init)."""
    if os.geteuid() != 0:
        return "other users' processes need root"
    return "refused even to root: a sandbox or security module restricts them"
