"""verify_checksums names its manifest file exactly, as every tool names a file: a name that ends in a
space is that name, not another file's."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio


async def test_a_manifest_whose_name_ends_in_a_space_is_the_file_verified(tmp_path: Path) -> None:
    """``SHA256SUMS `` (trailing space) lists f rightly; ``SHA256SUMS`` beside it is an older list whose
    line for f no longer matches. The path was stripped, so the older list was verified instead."""
    (tmp_path / "f").write_bytes(b"now\n")
    (tmp_path / "SHA256SUMS ").write_text(f"{hashlib.sha256(b'now' + bytes([10])).hexdigest()}  f\n")
    (tmp_path / "SHA256SUMS").write_text(f"{hashlib.sha256(b'before').hexdigest()}  f\n")
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("verify_checksums", {"manifest": f"{tmp_path}/SHA256SUMS "})
        assert reply["result"]["isError"] is False, result_text(reply)
        assert reply["result"]["structuredContent"]["all_ok"] is True, result_text(reply)
        assert reply["result"]["structuredContent"]["manifest"] == f"{tmp_path}/SHA256SUMS ", result_text(
            reply
        )
        plain = await wire.call("verify_checksums", {"manifest": f"{tmp_path}/SHA256SUMS"})
        assert plain["result"]["structuredContent"]["all_ok"] is False, result_text(plain)


async def test_a_manifest_path_that_starts_with_a_space_is_refused_as_relative_as_any_tool_refuses_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "SHA256SUMS").write_text(f"{hashlib.sha256(b'').hexdigest()}  f\n")
    async with spawn() as wire:
        await wire.initialize()
        for tool, argument in (("verify_checksums", "manifest"), ("disk_usage", "path")):
            reply = await wire.call(tool, {argument: f" {tmp_path}/SHA256SUMS"})
            assert reply["result"]["isError"] is True, result_text(reply)
            assert f"path ' {tmp_path}/SHA256SUMS' is relative: give an absolute path" in result_text(reply)
