"""verify_checksums from the wrong directory (issue 27, defect 6): every entry MISSING gets a hint."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio


@pytest.fixture
def made_from_above(tmp_path: Path) -> Path:
    """A manifest written from tmp_path (names like sub/f) but saved inside sub/."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_text("a\n")
    manifest = tmp_path / "sub" / "m.sha256"
    manifest.write_text(f"{hashlib.sha256(b'a' + bytes([10])).hexdigest()}  sub/f\n")
    return manifest


async def test_every_entry_missing_says_names_are_relative_to_base_dir(made_from_above: Path) -> None:
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("verify_checksums", {"manifest": str(made_from_above)})
        text = result_text(reply)
        assert reply["result"]["structuredContent"]["missing"] == 1
        assert f"names are relative to base_dir, here {made_from_above.parent}" in text
        assert "Give base_dir= the directory the manifest was made in" in text
        elsewhere = await wire.call(
            "verify_checksums",
            {"manifest": str(made_from_above), "base_dir": str(made_from_above.parent.parent.parent)},
        )
        assert f"try base_dir={made_from_above.parent}" in result_text(elsewhere)
        right = await wire.call(
            "verify_checksums",
            {"manifest": str(made_from_above), "base_dir": str(made_from_above.parent.parent)},
        )
        assert right["result"]["structuredContent"]["all_ok"] is True
        assert "MISSING:" not in result_text(right)
