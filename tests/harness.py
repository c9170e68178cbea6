"""What tests of tools share: a client that records what a call sends it, a tool context, and
``call_tool``, which calls a tool's handler as the server would and holds the call to the tool's own
schemas both ways (the arguments to its inputSchema, the structuredContent to its outputSchema), and a
second user to run a probe as (``python_as_nobody``). ``tests/conftest.py`` offers the first ones as
fixtures too (``peer``, ``ctx``)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import anyio
import jsonschema

from sysmcp.engine.paths import PathPolicy, real_root
from sysmcp.protocol.context import RequestContext
from sysmcp.results import ResultStore
from sysmcp.tools import RECLAIM, TOOL_MODULES
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.registry import Handler, Tool, ToolContext, ToolOutput

PROGRESS = "notifications/progress"


class RecordingPeer:
    """The client end of a call: keeps every notification the server sends, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        self.sent.append((method, params))

    @property
    def progress(self) -> list[dict[str, Any]]:
        """The ``notifications/progress`` params, in the order sent."""
        return [params for method, params in self.sent if method == PROGRESS]


def tool_context(
    roots: Sequence[str | os.PathLike[str]] | None = None,
    *,
    peer: RecordingPeer | None = None,
    progress_token: str | int | None = None,
) -> ToolContext:
    """A handler's context: the operator's ``roots`` (None: the whole filesystem) and a peer that
    records (progress is sent only with a ``progress_token``, as a client asks for it)."""
    request = RequestContext(1, "tools/call", peer or RecordingPeer(), progress_token=progress_token)
    policy = PathPolicy(operator_roots=None if roots is None else [real_root(r) for r in roots])
    return ToolContext(request, policy, ResultStore())


def tool(name: str) -> Tool:
    """The tool served under ``name`` (``reclaim`` too)."""
    module = dict([*TOOL_MODULES, RECLAIM])[name]
    found: Tool = importlib.import_module(module).TOOL
    return found


async def call_tool(
    name: str, /, ctx: ToolContext | None = None, *, handler: Handler | None = None, **args: Any
) -> ToolOutput:
    """``name``'s answer to ``args`` (schema defaults filled in, an ``ArgumentError`` for arguments its
    inputSchema refuses), its structuredContent checked against its outputSchema; ``handler`` stands
    in for the tool's own (one built with a test's readers), and no call takes over two minutes."""
    served = tool(name)
    with anyio.fail_after(120):
        output = await (handler or served.handler)(
            validate_arguments(served.input_schema, args), ctx or tool_context()
        )
    jsonschema.validate(output.structured, served.output_schema)
    return output


def python_as_nobody(probe: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``probe`` run by this interpreter as ``nobody`` (uid and gid 65534, no groups) through setpriv:
    a second user, for what the server may and may not reach as someone other than root."""
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
