"""file_sha256: the SHA-256 digest of one regular file, streamed (sha256sum for one file)."""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Any

from sysmcp.fs.paths import display
from sysmcp.fs.units import human_bytes, rate
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ToolError
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput

CHUNK = 1 << 20

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "minLength": 1,
            "description": "Absolute path of the regular file to hash. Directories, FIFOs, sockets and devices "
            "are refused.",
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "size_bytes": {"type": "integer"},
    },
    "required": ["path", "sha256", "size_bytes"],
    "additionalProperties": False,
}

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def open_regular(path: str, shown: str) -> int:
    """Open without blocking and check the type on the descriptor, so a swapped path cannot hang us."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ToolError(f"No such file: {shown}") from None
    except PermissionError:
        raise ToolError(f"Permission denied: {shown}") from None
    except IsADirectoryError:
        raise ToolError(f"Not a regular file: {shown} is a directory") from None
    except OSError as exc:
        raise ToolError(f"Cannot open {shown}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise ToolError(f"Not a regular file: {shown} is {kind}; only regular files can be hashed")
    return fd


def hash_fd(fd: int, meter: Meter) -> tuple[str, int]:
    """Stream the file through SHA-256 in 1 MiB chunks into one reused buffer."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    size = 0
    with open(fd, "rb", buffering=0, closefd=False) as stream:
        while True:
            meter.checkpoint()
            count = stream.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
            size += count
            meter.done = size
    return digest.hexdigest(), size


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    path = ctx.paths.resolve(args["path"])
    shown = display(path)
    fd = open_regular(os.fsdecode(path), shown)
    try:
        expected_size = os.fstat(fd).st_size

        def describe(meter: Meter, elapsed: float) -> str:
            return f"{human_bytes(meter.done)} of {human_bytes(expected_size)} at {rate(meter.done, elapsed)}"

        try:
            digest, size = await ctx.run_in_worker(
                lambda m: hash_fd(fd, m), total=expected_size, describe=describe
            )
        except OSError as exc:
            raise ToolError(f"Read error in {shown}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return ToolOutput(
        f"{digest}  {shown}\nsize: {size} bytes ({human_bytes(size)})",
        {"path": shown, "sha256": digest, "size_bytes": size},
    )


TOOL = Tool(
    name="file_sha256",
    title="File SHA-256",
    description=(
        "SHA-256 digest of one regular file, streamed in chunks (never loaded whole), printed like sha256sum. "
        "Refuses directories, FIFOs, sockets and devices. Reports progress for large files and stops when "
        "cancelled. Returns only the digest and size, never file contents."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=handle,
)
