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

import sys
from pathlib import Path

import anyio
import anyio.to_thread

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bare_server import Reader, answer, reply  # beside this file, not a package


async def serve(read_fd: int, write_fd: int) -> None:
    reader = Reader(read_fd)
    async with anyio.create_task_group() as group:
        while not reader.ended:
            await anyio.wait_readable(read_fd)
            for message in reader.requests():
                reply(write_fd, message, await anyio.to_thread.run_sync(answer, message))
        group.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(serve, 0, 1)
