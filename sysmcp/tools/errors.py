"""The one boundary where an engine's failure becomes the model's words.

Engines raise ``sysmcp.fs.errors.EngineError`` subclasses with facts; a tool handler lets them
through and the server's tool call passes every one to ``as_tool_error`` (``server._run_tool``). A
class that needs other words than its detail gets them here, not in the engine.
"""

from __future__ import annotations

from sysmcp.fs.errors import EngineError, NotFound, PermissionRefused
from sysmcp.protocol.errors import ToolError

__all__ = ["as_tool_error"]


def as_tool_error(exc: EngineError) -> ToolError:
    """The ``ToolError`` (an ``isError`` result) for an engine failure."""
    if isinstance(exc, PermissionRefused) and not exc.detail.lower().startswith("permission denied"):
        return ToolError(f"Permission denied: {exc.detail}")
    if isinstance(exc, NotFound) and not exc.detail.lower().startswith("no such"):
        return ToolError(f"Not found: {exc.detail}")
    return ToolError(exc.detail)
