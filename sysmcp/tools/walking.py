"""What every tool that walks a tree shares: its walk arguments, declared once, and their checks."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sysmcp.engine.paths import escaped
from sysmcp.engine.walk import WalkOptions
from sysmcp.protocol.failures import ArgumentError, ToolError
from sysmcp.render import plural
from sysmcp.tools import schemas as js
from sysmcp.tools.registry import ToolContext
from sysmcp.tools.typed import Open, prop, result


@result
class PathError(Open):
    """A file of the tree that could not be read or hashed, with why."""

    path: str = prop()
    error: str = prop()


def joined(directory: str, relative: str | bytes) -> str:
    """A name the walk found, relative to ``directory``, as ``os.fsdecode`` makes a name: the text
    shows it exactly (``escaped``), the structured content as ``display`` does (``in_json``)."""
    return directory.rstrip("/") + "/" + os.fsdecode(relative)


def walk_properties(base: str, *, note: str = "") -> dict[str, Any]:
    """The ``exclude`` and ``one_file_system`` schema properties, relative to the argument ``base``
    (their rules in full: docs/tools.md, "Walk rules")."""
    return {
        "exclude": js.typed(
            ["array", "string"],
            f"{note}Globs to skip, on names or paths relative to {base}.",
            items=js.string(minLength=1),
            minLength=1,
            maxItems=64,
            default=[],
        ),
        "one_file_system": js.boolean(f"{note}Stay on {base}'s filesystem." if note else None, default=True),
    }


#: The longest exclude pattern taken: a glob is compiled where it cannot be stopped, and a very long
#: one ("a*" repeated) takes seconds. Checked here, not in the schema, so tools/list stays as it is.
MAX_PATTERN = 4096


def walk_options(args: dict[str, Any]) -> WalkOptions:
    """The walk the validated arguments of ``walk_properties`` ask for (a pattern past ``MAX_PATTERN``
    is an ``ArgumentError`` naming it, as the schema's own checks word theirs)."""
    exclude = args["exclude"]
    patterns = (exclude,) if isinstance(exclude, str) else tuple(exclude)
    for index, pattern in enumerate(patterns):
        if len(pattern) > MAX_PATTERN:
            where = "'exclude'" if isinstance(exclude, str) else f"'exclude'[{index}]"
            raise ArgumentError(
                f"Invalid arguments: {where} must have at most {plural(MAX_PATTERN, 'character')}, "
                f"got {len(pattern):,}"
            )
    return WalkOptions(one_file_system=args["one_file_system"], exclude=patterns)


def require_directory(path: Path, shown: str, argument: str | None = None) -> None:
    """Refuse, with text a model can act on, a path that is missing, not a directory, or not ours to
    look at (a server run by a user meets directories it may not search: said, with where access stops)."""
    try:
        if stat.S_ISDIR(path.stat().st_mode):
            return
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"No such directory: {escaped(shown)}") from None
    except PermissionError:
        raise ToolError(f"Permission denied: {escaped(shown)}{denied_by(path)}") from None
    except OSError as exc:  # a symlink loop, a dead mount's EIO
        raise ToolError(f"Cannot look at {escaped(shown)}: {exc.strerror or exc}") from None
    named = escaped(shown)
    raise ToolError(f"{argument} is not a directory: {named}" if argument else f"Not a directory: {named}")


async def directory_argument(ctx: ToolContext, raw: str) -> tuple[Path, str]:
    """The directory a tool is asked to walk, resolved within the roots and refused unless it is a
    directory, and its name (``str(path)``: see ``joined``)."""
    path = await ctx.resolve(raw, lambda found: require_directory(found, str(found)))
    return path, str(path)


def unreadable_directory(shown: str, path: Path) -> ToolError:
    """The refusal of a walk whose directory may not be read, naming the component that refused."""
    return ToolError(f"Permission denied: cannot read the directory {escaped(shown)}{denied_by(path)}")


def scan_failure(shown: str, path: Path, exc: OSError) -> ToolError:
    """A walk of ``path`` the system refused: permission named with the component that refused,
    anything else as the system said it."""
    if isinstance(exc, PermissionError):
        return unreadable_directory(shown, path)
    return ToolError(f"Cannot scan {escaped(shown)}: {exc.strerror or exc}")


#: Skip reasons that are nouns ('1 symlink', '28 special files'); the others are adjectives ('3 unreadable').
SKIP_NOUNS = frozenset(
    {
        "other_filesystem",
        "btrfs_subvolume",
        "pseudo_filesystem",
        "special_file",
        "symlink",
        "directory_loop",
        "filesystem_error",
    }
)


def skipped_phrase(skipped: dict[str, int], named: Sequence[str] = (), base: str = "") -> str:
    """A walk's skip counts as one phrase for the text answer: '3 unreadable, 12 other filesystems',
    then the first unreadable directories by name (permission denied on each: the walk reached its
    parent, so that directory is where access stops)."""
    phrase = ", ".join(
        plural(count, reason.replace("_", " "))
        if reason in SKIP_NOUNS
        else f"{count:,} {reason.replace('_', ' ')}"
        for reason, count in skipped.items()
    )
    if named:
        shown = [escaped(os.path.join(base, name) if base else name) for name in named]
        more = skipped.get("unreadable", len(named)) - len(named)
        phrase += "; permission denied on " + ", ".join(shown) + (f" and {more:,} more" if more > 0 else "")
    return phrase


def denied_by(path: Path) -> str:
    """Which component refused us, for a 'Permission denied' answer: ' (no search permission on /root)'.

    The first ancestor this process may not search, else the path itself if it may not read it; ''
    when neither explains it (an LSM, a mount option). Only called after an access was refused.
    """
    for parent in reversed(path.parents):
        if not os.access(parent, os.X_OK):
            return f" (no search permission on {escaped(str(parent))})"
    if not os.access(path, os.R_OK):
        return f" (no read permission on {escaped(str(path))})"
    return ""
