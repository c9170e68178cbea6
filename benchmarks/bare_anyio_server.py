"""``bare_server.py`` on anyio: the least an anyio stdio answerer costs, the floor under sysmcp's start.

Why it exists: sysmcp's protocol core runs on anyio (a rule of the house), and anyio's import, its
asyncio backend and its worker threads cost a fresh process some 30 ms of CPU more than plain asyncio.
``fleet_scale_bench.py start`` puts this beside ``bare_server.py``, so a remote start's figure can be
read against both floors. The same answers as ``bare_server.py`` (its ``answer``), read with
``anyio.wait_readable`` in a task group, the statvfs in a worker thread as sysmcp's would be; no MCP
rules at all, so a measuring stick only.

Run: ``python benchmarks/bare_anyio_server.py`` (speaks on stdin/stdout until EOF).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bare_server import answer  # beside this file, not a package


async def serve(read_fd: int, write_fd: int) -> None:
    os.set_blocking(read_fd, False)
    pending = b""
    async with anyio.create_task_group() as group:
        while True:
            await anyio.wait_readable(read_fd)
            try:
                chunk = os.read(read_fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                message: dict[str, Any] = json.loads(line)
                if "id" in message and "method" in message:
                    result = await anyio.to_thread.run_sync(answer, message)
                    reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
                    os.write(write_fd, json.dumps(reply).encode() + b"\n")
        group.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(serve, 0, 1)
