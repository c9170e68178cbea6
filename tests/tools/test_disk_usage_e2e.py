"""disk_usage through the real server over real pipes, every message checked against the MCP schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio


async def test_listing_every_filesystem_over_the_wire() -> None:
    async with spawn() as wire:
        await wire.initialize("2025-11-25")
        reply = await wire.call("disk_usage", {})
        result = reply["result"]
        assert result["isError"] is False
        filesystems = result["structuredContent"]["filesystems"]
        root = next(fs for fs in filesystems if fs["mount_point"] == "/")
        assert root["status"] == "ok" and isinstance(root["total_bytes"], int)
        assert root["total_bytes"] == root["used_bytes"] + root["free_bytes"] + root["reserved_bytes"]
        assert "fullest first" in result_text(reply)
        everything = await wire.call("disk_usage", {"all": True, "unit": "human"})
        assert len(everything["result"]["structuredContent"]["filesystems"]) >= len(filesystems)


async def test_one_path_over_the_wire_in_each_unit(tmp_path: Path) -> None:
    async with spawn() as wire:
        await wire.initialize("2025-06-18")
        for unit, marker in (
            ("percent", "% used"),
            ("mb", "MiB free"),
            ("human", "iB used"),
            ("bytes", "bytes"),
        ):
            reply = await wire.call("disk_usage", {"path": str(tmp_path), "unit": unit})
            assert reply["result"]["isError"] is False
            text = result_text(reply)
            assert text.startswith(f"{tmp_path} is on ") and marker in text, text
            assert reply["result"]["structuredContent"]["path"] == str(tmp_path)


async def test_old_protocol_versions_get_text_only() -> None:
    async with spawn() as wire:
        await wire.initialize("2024-11-05")
        reply = await wire.call("disk_usage", {"path": "/"})
        assert "structuredContent" not in reply["result"]
        assert result_text(reply).startswith("/ is on / (")


async def test_tool_errors_over_the_wire(tmp_path: Path) -> None:
    async with spawn() as wire:
        await wire.initialize("2025-11-25")
        missing = await wire.call("disk_usage", {"path": str(tmp_path / "absent")})
        assert missing["result"]["isError"] is True and "No such file" in result_text(missing)
        bad_unit = await wire.call("disk_usage", {"unit": "furlongs"})
        assert bad_unit["result"]["isError"] is True and "'unit' must be one of" in result_text(bad_unit)
