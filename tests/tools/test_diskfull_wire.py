"""The "why is my disk full" tools and arguments through the real server over real pipes: every
message checked against the MCP schema, every structured result against the tool's outputSchema."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.wire import Wire, result_text, spawn

pytestmark = pytest.mark.anyio


async def schemas(wire: Wire) -> dict[str, dict[str, Any]]:
    tools = (await wire.request("tools/list"))["result"]["tools"]
    return {tool["name"]: tool["outputSchema"] for tool in tools}


def valid(schema: dict[str, Any], result: dict[str, Any]) -> None:
    assert result["isError"] is False, result
    errors = list(Draft202012Validator(schema).iter_errors(result["structuredContent"]))
    assert not errors, errors[0].message


async def test_new_tools_and_arguments_answer_with_valid_structured_content(tmp_path: Path) -> None:
    (tmp_path / "new.log").write_bytes(b"n" * 5000)
    old = tmp_path / "old.tar.gz"
    old.write_bytes(b"o" * 9000)
    month_ago = time.time() - 30 * 86400
    os.utime(old, (month_ago, month_ago))
    async with spawn() as wire:
        await wire.initialize("2025-11-25")
        outputs = await schemas(wire)
        sampled = await wire.call("disk_usage", {"path": str(tmp_path), "sample_s": 0.5}, progress="rate")
        valid(outputs["disk_usage"], sampled["result"])
        assert sampled["result"]["structuredContent"]["filesystems"][0]["rate"]["samples"] >= 3
        progress = [n["params"] for n in wire.notifications if n["method"] == "notifications/progress"]
        assert any("sampling free space" in p.get("message", "") for p in progress)
        recent = await wire.call(
            "dir_usage", {"path": str(tmp_path), "modified_within": "7d", "show": "all", "top_n": 10}
        )
        valid(outputs["dir_usage"], recent["result"])
        content = recent["result"]["structuredContent"]
        assert [row["path"] for row in content["largest_files"]] == [str(tmp_path / "new.log")]
        assert [row["extension"] for row in content["extensions"]] == [".log"]
        stale = await wire.call(
            "dir_usage", {"path": str(tmp_path), "modified_before": "2w", "show": "files"}
        )
        valid(outputs["dir_usage"], stale["result"])
        assert "old.tar.gz  (30 d old)" in result_text(stale)
        for name, arguments in (
            ("deleted_open_files", {"path": str(tmp_path)}),
            ("disk_io", {"sample_s": 0.3}),
        ):
            valid(outputs[name], (await wire.call(name, arguments))["result"])


async def test_bad_inputs_are_clear_errors_and_the_server_keeps_serving(tmp_path: Path) -> None:
    async with spawn() as wire:
        await wire.initialize("2025-11-25")
        for name, arguments, message in (
            ("dir_usage", {"path": str(tmp_path), "modified_within": "3 fortnights"}, "must be a duration"),
            (
                "dir_usage",
                {"path": str(tmp_path), "modified_within": "1d", "modified_before": "2d"},
                "shorter",
            ),
            ("disk_usage", {"sample_s": 600}, "'sample_s' must be <= 60"),
            ("disk_io", {"sample_s": 0}, "'sample_s' must be >= 0.1"),
            ("deleted_open_files", {"top_n": "all"}, "'top_n' must be an integer"),
        ):
            reply = await wire.call(name, arguments)
            assert reply["result"]["isError"] is True, reply
            assert message in result_text(reply), result_text(reply)
        assert (await wire.request("ping"))["result"] == {}
