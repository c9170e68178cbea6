"""hash_tree and verify_checksums say only what is true: nothing "saved" that was not, a relative
manifest path called relative, and the README's promise of new files tied to report_new."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


async def test_hash_tree_without_o_says_nothing_was_saved_and_how_to_check_it_once_it_is(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").write_bytes(b"abc")
    async with spawn() as wire:
        await wire.initialize()
        text = result_text(await wire.call("hash_tree", {"path": str(tmp_path)}))
    assert "saved" not in text.lower(), text
    assert not list(tmp_path.glob("SHA256SUMS*"))
    assert (
        f"Put in {tmp_path} as SHA256SUMS, it checks with `cd {tmp_path} && sha256sum -c SHA256SUMS`" in text
    )


async def test_a_relative_manifest_path_over_mcp_is_refused_as_relative(tmp_path: Path) -> None:
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("verify_checksums", {"manifest": "relative/SHA256SUMS"})
    assert reply["result"]["isError"] is True
    text = result_text(reply)
    assert "'relative/SHA256SUMS' is relative: give an absolute path" in text, text
    assert "base_dir is required" not in text


async def test_a_one_line_text_manifest_still_needs_base_dir(tmp_path: Path) -> None:
    line = f"{hashlib.sha256(b'abc').hexdigest()}  a"
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("verify_checksums", {"manifest": line})
    assert reply["result"]["isError"] is True
    assert "base_dir is required" in result_text(reply)


async def test_files_the_manifest_does_not_mention_are_listed_only_with_report_new_as_the_readme_says(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").write_bytes(b"abc")
    (tmp_path / "new").write_bytes(b"not in the manifest")
    (tmp_path / "SUMS").write_text(f"{hashlib.sha256(b'abc').hexdigest()}  a\n")
    manifest = str(tmp_path / "SUMS")
    async with spawn() as wire:
        await wire.initialize()
        plain = await wire.call("verify_checksums", {"manifest": manifest})
        asked = await wire.call("verify_checksums", {"manifest": manifest, "report_new": True})
    assert plain["result"]["structuredContent"]["new"] is None
    assert plain["result"]["structuredContent"]["new_files"] == []
    assert asked["result"]["structuredContent"]["new_files"] == ["new"]
    (row,) = [line for line in README.splitlines() if line.startswith("| `verify_checksums` |")]
    if "does not mention" in row:
        assert re.search(r"with `report_new`,? the files the manifest does not mention", row), row
