"""A reference MCP stdio server built on the official Python SDK (``mcp`` 2.x), for benchmarks only.

Why it exists: ``protocol_bench.py`` needs a fair yardstick, i.e. the same three seed tools as sysmcp written
the idiomatic SDK way (``MCPServer`` + decorated functions, typed structured output, default settings), so
that cold-start and round-trip ratios compare protocol stacks rather than tool implementations.

Run: ``python benchmarks/sdk_server.py`` (speaks newline-delimited JSON-RPC on stdin/stdout).
"""

from __future__ import annotations

import hashlib
import heapq
import os
import shutil
from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it for schemas on Python < 3.12

CHUNK = 1 << 20  # 1 MiB, the same chunk size sysmcp's file_sha256 uses

server = MCPServer(name="sdk-reference", version="1.0.0")


class DiskUsage(TypedDict):
    """Structured result of ``disk_usage``: sizes in bytes, like sysmcp's."""

    path: str
    total: int
    used: int
    free: int
    percent: float
    text: str


class FileHash(TypedDict):
    """Structured result of ``file_sha256``."""

    path: str
    sha256: str
    size: int
    text: str


class FileEntry(TypedDict):
    """One row of ``dir_usage``'s largest files."""

    path: str
    size: int


class DirUsage(TypedDict):
    """Structured result of ``dir_usage``."""

    path: str
    total_bytes: int
    files: int
    skipped: int
    largest: list[FileEntry]
    text: str


@server.tool()
def disk_usage(path: str, unit: Literal["percent", "mb"] = "percent") -> DiskUsage:
    """Usage of the filesystem holding `path`; `unit` picks the text form (percent used or MB free)."""
    du = shutil.disk_usage(path)
    # df's formula: used / (used + what unprivileged users may still use).
    denom = du.used + du.free
    percent = round(100.0 * du.used / denom, 1) if denom else 0.0
    text = f"{percent}% used" if unit == "percent" else f"{du.free // 1_000_000} MB free"
    return DiskUsage(path=path, total=du.total, used=du.used, free=du.free, percent=percent, text=text)


@server.tool()
def file_sha256(path: str) -> FileHash:
    """Streamed SHA-256 of a regular file, read in 1 MiB chunks into a reused buffer."""
    digest = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    size = 0
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            digest.update(view[:n])
            size += n
    hexdigest = digest.hexdigest()
    return FileHash(path=path, sha256=hexdigest, size=size, text=f"{hexdigest}  {path}")


@server.tool()
def dir_usage(path: str, top_n: Annotated[int, Field(ge=1, le=50)] = 5) -> DirUsage:
    """The `top_n` (1..50) largest files under `path`, largest first; unreadable entries are skipped."""
    heap: list[tuple[int, str]] = []
    total = files = skipped = 0

    def on_error(_exc: OSError) -> None:
        nonlocal skipped
        skipped += 1

    for root, _dirs, names in os.walk(path, onerror=on_error):
        for name in names:
            full = os.path.join(root, name)
            try:
                st = os.lstat(full)
            except OSError:
                skipped += 1
                continue
            files += 1
            total += st.st_size
            if len(heap) < top_n:
                heapq.heappush(heap, (st.st_size, full))
            elif st.st_size > heap[0][0]:
                heapq.heapreplace(heap, (st.st_size, full))
    largest = [FileEntry(path=p, size=s) for s, p in sorted(heap, reverse=True)]
    lines = [f"{e['size']:>15,}  {e['path']}" for e in largest]
    if files > len(largest):
        lines.append(f"({files - len(largest)} more files not shown)")
    return DirUsage(
        path=path, total_bytes=total, files=files, skipped=skipped, largest=largest, text="\n".join(lines)
    )


if __name__ == "__main__":
    server.run("stdio")
