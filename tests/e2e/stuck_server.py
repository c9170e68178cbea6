"""sysmcp with two stand-ins for a dead network mount, for tests only.

- The tool ``stuck``: its worker reports progress once, then waits on an event nobody sets. It never
  reaches a checkpoint, so cancelling its request cannot stop it: only the server's handling of such
  threads decides whether the slot comes back and whether the server can still exit.
- The path ``/hung-mount``: ``lstat`` of anything below it never returns, as on a hard NFS mount whose
  server is gone, so resolving such a path blocks wherever it runs.
- The user ``nis-user``: looking it up never returns, as with a user database on a dead LDAP server,
  so expanding ``~nis-user`` blocks wherever it runs.

Run: ``python tests/e2e/stuck_server.py`` (speaks MCP on stdio like ``sysmcp``).
"""

from __future__ import annotations

import os
import pwd
import sys
import threading
from typing import Any

import sysmcp.tools
from sysmcp.cli import main
from sysmcp.protocol.context import Meter
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput

NEVER = threading.Event()
HUNG = "/hung-mount"
_lstat = os.lstat
_getpwnam = pwd.getpwnam


def hanging_getpwnam(name: str) -> pwd.struct_passwd:
    if name == "nis-user":
        NEVER.wait()
    return _getpwnam(name)


def hanging_lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
    if isinstance(path, (str, bytes)) and os.fsdecode(path).startswith(HUNG):
        NEVER.wait()
    return _lstat(path, *args, **kwargs)


def block(meter: Meter) -> None:
    meter.done = 1  # one progress notification tells the test the thread is in
    NEVER.wait()


async def handle(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    await ctx.request.run_in_worker(block, total=2)
    return ToolOutput("unreachable", {})


STUCK = Tool(
    name="stuck",
    title="Stuck",
    description="Blocks its worker thread for ever (a test double for a read in a dead mount).",
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    output={"type": "object"},
    handler=handle,
)

if __name__ == "__main__":
    sysmcp.tools.EXTRA_TOOLS = (STUCK,)
    os.lstat = hanging_lstat  # os.path.realpath looks it up on every call
    pwd.getpwnam = hanging_getpwnam  # and os.path.expanduser this one
    sys.argv = ["sysmcp"]
    raise SystemExit(main())
