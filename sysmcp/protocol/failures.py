"""The two kinds of failure MCP distinguishes.

A ``ProtocolError`` becomes a JSON-RPC error; a ``ToolError`` becomes a normal tool result with
``isError: true`` so the model can read it and act. Anything else is our bug: logged, and answered
with -32603 and no internals.
"""

from __future__ import annotations

from typing import Any

from sysmcp.protocol.jsonrpc import ErrorCode


class ProtocolError(Exception):
    def __init__(self, code: int, message: str, data: Any | None = None) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message
        self.data = data


def invalid_params(message: str, data: Any | None = None) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_PARAMS, message, data)


class ToolError(Exception):
    """A business failure the model should see as text (no such file, permission denied, …)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


#: The ``_meta`` key of an ``isError`` result whose arguments were refused before any work (a bad
#: argument, a path outside the roots): the model reads the text; ``sysmcp call`` exits 2 on it.
META_REFUSED = "sysmcp/refused"


class ArgumentError(ToolError):
    """Arguments that do not satisfy the tool's input schema.

    Sessions on 2025-11-25 and later see it as an ``isError`` result (SEP-1303); older ones as -32602.
    """
