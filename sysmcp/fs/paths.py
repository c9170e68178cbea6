"""Which paths a tool may look at, and how names are shown.

The operator's roots bound everything; client roots can only narrow them. Containment is decided
on resolved real paths, component by component — never by string prefix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sysmcp.protocol.errors import ToolError


def display(path: str | bytes | os.PathLike[str]) -> str:
    """A name safe to put in JSON: undecodable bytes shown as \\xNN instead of lone surrogates."""
    raw = os.fsencode(path)
    return raw.decode("utf-8", "backslashreplace")


def is_within(path: Path, root: Path) -> bool:
    """True if ``path`` is ``root`` or below it, comparing whole components."""
    return path == root or root in path.parents


@dataclass
class PathPolicy:
    """The operator's roots (None: the whole filesystem) narrowed by the client's roots, if any."""

    operator_roots: Sequence[Path] | None = None
    client_roots: Sequence[Path] | None = field(default=None)

    def resolve(self, raw: str) -> Path:
        """An absolute, symlink-free path inside the allowed roots, or a ``ToolError`` naming the rule."""
        if not raw:
            raise ToolError("path is empty: give an absolute path, e.g. '/var/log'")
        if "\x00" in raw:
            raise ToolError("path contains a NUL byte")
        expanded = os.path.expanduser(raw)
        if not os.path.isabs(expanded):
            raise ToolError(
                f"path {raw!r} is relative: give an absolute path (sysmcp has no useful working directory)"
            )
        real = Path(os.path.realpath(expanded))
        for roots, who in (
            (self.operator_roots, "the operator's --root"),
            (self.client_roots, "the client's roots"),
        ):
            if roots is not None and not any(is_within(real, root) for root in roots):
                raise ToolError(f"path {raw!r} is outside {who} list; allowed: {', '.join(map(str, roots))}")
        return real

    @property
    def allowed(self) -> list[Path] | None:
        """The roots in force, or None for the whole filesystem."""
        if self.client_roots is None:
            return list(self.operator_roots) if self.operator_roots is not None else None
        if self.operator_roots is None:
            return list(self.client_roots)
        return [c for c in self.client_roots if any(is_within(c, o) for o in self.operator_roots)]
