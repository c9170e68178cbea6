"""Nothing a protocol version does not know leaks onto its wire; what it knows is there and well-formed.

Every test drives the real process over real pipes; ``Wire`` already checks each message against the
official schema of the negotiated version, and these tests add what a schema cannot say: that
optional fields the version lacks are absent, and that structured results match the tool's own
``outputSchema``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from sysmcp.tools import TOOL_MODULES
from tests.wire import Wire, spawn

pytestmark = pytest.mark.anyio

BEFORE_STRUCTURED = ["2024-11-05", "2025-03-26"]
STRUCTURED = ["2025-06-18", "2025-11-25"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small directory: an 8 MiB file (enough for progress) and two small ones."""
    (tmp_path / "big.bin").write_bytes(os.urandom(1 << 20) * 8)
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("beta\n")
    return tmp_path


async def tools_of(wire: Wire) -> dict[str, dict[str, Any]]:
    reply = await wire.request("tools/list", {})
    assert "nextCursor" not in reply["result"]
    return {tool["name"]: tool for tool in reply["result"]["tools"]}


async def sample_calls(wire: Wire, tree: Path) -> dict[str, dict[str, Any]]:
    """One successful call of each kind that has structured data or a resource link to leak."""
    calls: dict[str, dict[str, Any]] = {
        "file_sha256": {"path": str(tree / "big.bin")},
        "hash_tree": {"path": str(tree)},  # always links its full manifest
        "dir_usage": {"path": str(tree)},
        "disk_usage": {"path": str(tree)},
        "deleted_open_files": {"path": str(tree)},
        "disk_io": {"sample_s": 0.2},
    }
    results: dict[str, dict[str, Any]] = {}
    for name, arguments in calls.items():
        reply = await wire.call(name, arguments)
        assert reply["result"]["isError"] is False, reply
        results[name] = reply["result"]
    return results


async def progress_of_a_hash(wire: Wire, path: Path) -> list[dict[str, Any]]:
    wire.notifications.clear()
    reply = await wire.call("file_sha256", {"path": str(path)}, progress="gate")
    assert reply["result"]["isError"] is False
    progress = [n["params"] for n in wire.notifications if n["method"] == "notifications/progress"]
    assert progress, "a call with a progress token gets at least its final progress notification"
    assert all(p["progressToken"] == "gate" for p in progress)
    return progress


# -- 2024-11-05 and 2025-03-26: no titles, output schemas, structured content or resource links ---------


async def test_2024_11_05_tools_have_no_title_output_schema_or_annotations() -> None:
    async with spawn() as wire:
        await wire.initialize("2024-11-05")
        tools = await tools_of(wire)
        assert len(tools) == len(TOOL_MODULES)
        for tool in tools.values():
            assert set(tool) == {"name", "description", "inputSchema"}, tool["name"]


async def test_2024_11_05_server_info_has_no_title() -> None:
    async with spawn() as wire:
        reply = await wire.initialize("2024-11-05")
        assert wire.version == "2024-11-05"
        assert set(reply["result"]["serverInfo"]) == {"name", "version"}


async def test_2024_11_05_progress_notifications_carry_no_message(tree: Path) -> None:
    async with spawn() as wire:
        await wire.initialize("2024-11-05")
        for params in await progress_of_a_hash(wire, tree / "big.bin"):
            assert "message" not in params, params
            assert set(params) <= {"progressToken", "progress", "total"}


async def test_progress_notifications_carry_a_message_from_2025_03_26_on(tree: Path) -> None:
    # The counterpart of the test above: the message exists, so its absence in 2024-11-05 is the gate.
    async with spawn() as wire:
        await wire.initialize("2025-03-26")
        progress = await progress_of_a_hash(wire, tree / "big.bin")
        assert isinstance(progress[-1].get("message"), str) and progress[-1]["message"]


async def test_2025_03_26_tools_have_annotations_but_no_title_or_output_schema() -> None:
    async with spawn() as wire:
        await wire.initialize("2025-03-26")
        tools = await tools_of(wire)
        assert len(tools) == len(TOOL_MODULES)
        for tool in tools.values():
            assert set(tool) == {"name", "description", "inputSchema", "annotations"}, tool["name"]
            assert tool["annotations"]["readOnlyHint"] is True
            assert tool["annotations"]["destructiveHint"] is False


async def test_2025_03_26_server_info_has_no_title() -> None:
    async with spawn() as wire:
        reply = await wire.initialize("2025-03-26")
        assert set(reply["result"]["serverInfo"]) == {"name", "version"}


@pytest.mark.parametrize("version", BEFORE_STRUCTURED)
async def test_call_results_have_no_structured_content_or_resource_links_before_2025_06_18(
    version: str, tree: Path
) -> None:
    async with spawn() as wire:
        await wire.initialize(version)
        results = await sample_calls(wire, tree)
        for name, result in results.items():
            assert "structuredContent" not in result, name
            assert {block["type"] for block in result["content"]} == {"text"}, name
        # The link still reaches the client, as text naming the resource it can read.
        manifest = [block["text"] for block in results["hash_tree"]["content"][1:]]
        assert len(manifest) == 1 and manifest[0].startswith("Full result: sysmcp://results/")


# -- 2025-06-18 and 2025-11-25: all of it, and structured content matches the declared schema ------------


@pytest.mark.parametrize("version", STRUCTURED)
async def test_tools_have_title_output_schema_and_annotations_from_2025_06_18_on(version: str) -> None:
    async with spawn() as wire:
        reply = await wire.initialize(version)
        assert reply["result"]["serverInfo"]["title"]
        tools = await tools_of(wire)
        assert len(tools) == len(TOOL_MODULES)
        for tool in tools.values():
            assert isinstance(tool["title"], str) and tool["title"], tool["name"]
            assert tool["outputSchema"]["type"] == "object", tool["name"]
            assert tool["annotations"]["readOnlyHint"] is True, tool["name"]
            Draft202012Validator.check_schema(tool["outputSchema"])


@pytest.mark.parametrize("version", STRUCTURED)
async def test_structured_content_is_valid_against_the_tools_output_schema(version: str, tree: Path) -> None:
    async with spawn() as wire:
        await wire.initialize(version)
        tools = await tools_of(wire)
        results = await sample_calls(wire, tree)
        for name, result in results.items():
            assert isinstance(result["structuredContent"], dict), name
            errors = list(
                Draft202012Validator(tools[name]["outputSchema"]).iter_errors(result["structuredContent"])
            )
            assert not errors, f"{name}: {errors[0].message}"
        assert len(results["file_sha256"]["structuredContent"]["sha256"]) == 64


@pytest.mark.parametrize("version", STRUCTURED)
async def test_full_results_are_resource_links_from_2025_06_18_on(version: str, tree: Path) -> None:
    async with spawn() as wire:
        await wire.initialize(version)
        result = (await wire.call("hash_tree", {"path": str(tree)}))["result"]
        links = [block for block in result["content"] if block["type"] == "resource_link"]
        assert len(links) == 1 and links[0]["uri"].startswith("sysmcp://results/")
        read = await wire.request("resources/read", {"uri": links[0]["uri"]})
        assert read["result"]["contents"][0]["text"].count("\n") == 3  # big.bin, a.txt, sub/b.txt
