"""The content tools against the tools admins trust (sha256sum, b3sum, fdupes), on real files.

Each test runs the reference tool itself on the same files and compares: where sysmcp differs from it on
purpose, the test says why, and tools.md says so too.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.faults import EngineError
from sysmcp.protocol.failures import ToolError
from sysmcp.tools.errors import as_tool_error
from tests.harness import call_tool

pytestmark = pytest.mark.anyio


async def refusal(name: str, **args: Any) -> str:
    """The words of ``name``'s refusal of ``args``, as the model reads them."""
    try:
        await call_tool(name, **args)
    except ToolError as refused:
        return refused.message
    except EngineError as failed:
        return as_tool_error(failed).message
    raise AssertionError(f"{name} {args} was not refused")


async def test_a_symlink_loop_is_named_as_sha256sum_names_it_never_as_a_swap(tmp_path: Path) -> None:
    """A loop is a fact of the tree, not a race: 'replaced by a symbolic link while it was being
    opened' sent the reader after an attacker that was never there."""
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    for path in (tmp_path / "loop1", tmp_path / "loop1" / "inside"):
        reference = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True)
        assert "Too many levels of symbolic links" in reference.stderr
        for name in ("file_sha256", "hash_tree"):
            words = await refusal(name, path=str(path))
            assert "Too many levels of symbolic links" in words, (name, words)
            assert "replaced" not in words and "swapped" not in words, (name, words)


async def test_expected_takes_the_digest_of_a_sha256sum_line_whose_name_holds_a_digest_too(
    tmp_path: Path,
) -> None:
    """A content-addressed store names each file by its digest (an OCI image layout's
    ``blobs/sha256/<hex>``): the line sha256sum writes for it, in either format, holds the digest twice
    or two digests, and was refused as 'not one SHA-256 digest'. The line's own digest field counts."""
    blobs = tmp_path / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    other = "0" * 64  # a name that is some other digest: the line's field decides, not the name
    for name in (hashlib.sha256(b"layer").hexdigest(), other, f"{other}  z"):
        (blobs / name).write_bytes(b"layer")
        for style in ([], ["--tag"]):
            line = subprocess.run(
                ["sha256sum", *style, f"blobs/sha256/{name}"],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.rstrip("\n")
            output = await call_tool("file_sha256", path=str(blobs / name), expected=line)
            assert output.structured["match"] is True, (line, output.structured)
            assert output.structured["expected"] == hashlib.sha256(b"layer").hexdigest()
