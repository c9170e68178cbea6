"""The engine layer's own failures: what went wrong, in facts, never in the model's words.

Engines (``sysmcp.engine``, ``sysmcp.history``, ``sysmcp.reclaim``) raise these; the tool layer turns each into a
``ToolError`` with the words a model can act on in one place (``sysmcp.tools.errors``), as httpx
maps httpcore's exceptions at one boundary. An engine therefore never imports ``sysmcp.protocol``.
"""

from __future__ import annotations

__all__ = [
    "EngineError",
    "InvalidPath",
    "NotFound",
    "OutsideRoots",
    "PermissionRefused",
    "Refused",
    "Unavailable",
    "WrongKind",
]


class EngineError(Exception):
    """Base of every engine failure. ``detail`` is a plain statement of fact (no advice); ``reason``
    a short code naming which fact it is (``"symlink"``, ``"replaced"``, ...) when the tool layer
    words one case of a class differently."""

    def __init__(self, detail: str, *, reason: str = "") -> None:
        super().__init__(detail)
        self.detail = detail
        self.reason = reason


class NotFound(EngineError):
    """The named thing does not exist (a file, a directory, a snapshot, a plan)."""


class PermissionRefused(EngineError):
    """The operating system refused access."""


class WrongKind(EngineError):
    """The named thing exists but is not the kind the engine works on (a FIFO for a file, ...)."""


class OutsideRoots(EngineError):
    """A path outside the operator's or the client's allowed roots; ``allowed``: the first few roots
    in force as shown (None: not listed), ``more``: how many more there are."""

    def __init__(
        self, detail: str, *, reason: str = "", allowed: list[str] | None = None, more: int = 0
    ) -> None:
        super().__init__(detail, reason=reason)
        self.allowed = allowed
        self.more = more


class InvalidPath(EngineError):
    """A path no file can have (empty, relative, a NUL byte, too long) or that cannot be resolved."""


class Refused(EngineError):
    """The request asks for something the engine will not do (an item that changed, a bad plan id)."""


class Unavailable(EngineError):
    """A facility the work needs is not there (no history store, a filesystem that does not answer)."""
