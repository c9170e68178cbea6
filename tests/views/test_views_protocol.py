"""The MCP Apps extension on the wire, against the real process: views are offered to clients that
declare ``io.modelcontextprotocol/ui`` and to no one else, whose answers stay exactly as they were."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from sysmcp import __version__
from sysmcp.tools import container_usage, dir_usage, disk_health, disk_usage
from sysmcp.views import CONTRACT_VERSION
from tests.e2e.modern import MODERN, envelope, modern
from tests.wire import Wire, spawn

pytestmark = pytest.mark.anyio

EXTENSION = "io.modelcontextprotocol/ui"
MIME = "text/html;profile=mcp-app"
UI = {"extensions": {EXTENSION: {"mimeTypes": [MIME]}}}
LINKED = {
    "dir_usage": "ui://sysmcp/dir-usage",
    "disk_usage": "ui://sysmcp/disks",
    "container_usage": "ui://sysmcp/containers",
    "disk_health": "ui://sysmcp/health",
}


def ui_links(tools: list[dict[str, Any]]) -> dict[str, str]:
    return {t["name"]: t["_meta"]["ui"]["resourceUri"] for t in tools if "ui" in t.get("_meta", {})}


async def started(wire: Wire, version: str, capabilities: dict[str, Any] | None) -> dict[str, Any]:
    result: dict[str, Any] = (await wire.initialize(version, capabilities))["result"]
    return result


@pytest.mark.parametrize("version", ["2024-11-05", "2025-06-18", "2025-11-25"])
async def test_a_client_that_declares_the_extension_gets_links_resources_and_the_server_extension(
    version: str,
) -> None:
    async with spawn(version=version) as wire:
        init = await started(wire, version, UI)
        assert init["capabilities"]["extensions"] == {EXTENSION: {"mimeTypes": [MIME]}}
        tools = (await wire.request("tools/list"))["result"]["tools"]
        assert ui_links(tools) == LINKED
        listed = (await wire.request("resources/list"))["result"]["resources"]
        views = {r["uri"]: r for r in listed if r["uri"].startswith("ui://")}
        assert set(views) == set(LINKED.values())
        assert all(r["mimeType"] == MIME for r in views.values())
        assert all(("title" in r) == (version >= "2025-06-18") for r in views.values())


@pytest.mark.parametrize(
    "capabilities",
    [
        None,
        {"extensions": {}},
        {"extensions": {EXTENSION: {"mimeTypes": ["text/uri-list"]}}},  # not a type we serve
        {"extensions": {EXTENSION: {}}},  # mimeTypes is required
        {"experimental": {EXTENSION: {"mimeTypes": [MIME]}}},
    ],
)
async def test_a_client_without_the_extension_sees_no_views(capabilities: dict[str, Any] | None) -> None:
    async with spawn() as wire:
        init = await started(wire, "2025-11-25", capabilities)
        assert "extensions" not in init["capabilities"]
        tools = (await wire.request("tools/list"))["result"]["tools"]
        assert all("_meta" not in tool for tool in tools)
        listed = (await wire.request("resources/list"))["result"]["resources"]
        assert not [r for r in listed if r["uri"].startswith("ui://")]


def comparable(reply: dict[str, Any]) -> dict[str, Any]:
    """A dir_usage answer without its timings and the files' ages (read against the clock when each scan
    ends: the second scan may come a second later), the only parts two scans may differ in."""
    result = dict(reply["result"])
    result["structuredContent"] = {k: v for k, v in result["structuredContent"].items() if k != "elapsed_s"}
    result["content"] = [
        {
            **block,
            "text": re.sub(r"\((\d[^)]*) old\)", "(… old)", re.sub(r"\[\d+\.\d+ s\]", "[s]", block["text"])),
        }
        for block in result["content"]
    ]
    return result


async def test_tool_answers_are_the_same_with_and_without_the_extension(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * 70_000)
    (tmp_path / "g").write_bytes(b"y" * 5_000)
    answers = []
    for capabilities in (None, UI):
        async with spawn() as wire:
            await started(wire, "2025-11-25", capabilities)
            dirs = await wire.call("dir_usage", {"path": str(tmp_path)})
            disks = await wire.call("disk_usage", {"path": str(tmp_path)})
            answers.append((comparable(dirs), disks["result"]))
    (plain_dirs, plain_disks), (ui_dirs, ui_disks) = answers
    assert plain_dirs == ui_dirs
    assert "_meta" not in ui_dirs
    # Free space may move between the two calls; the shape and the filesystem may not.
    assert plain_disks.keys() == ui_disks.keys()
    assert plain_disks["structuredContent"]["path"] == ui_disks["structuredContent"]["path"]


async def test_each_view_is_one_self_contained_html_document_under_60_kb() -> None:
    async with spawn() as wire:
        await started(wire, "2025-11-25", UI)
        for uri in LINKED.values():
            contents = (await wire.request("resources/read", {"uri": uri}))["result"]["contents"]
            assert len(contents) == 1
            content = contents[0]
            assert content["uri"] == uri and content["mimeType"] == MIME
            assert content["_meta"]["ui"]["csp"] == {}  # no domains: the host's default CSP applies
            html = content["text"]
            assert html.startswith("<!DOCTYPE html>")
            assert len(html.encode()) < 60_000
            assert "/*@" not in html and "@SYSMCP_VERSION@" not in html  # every shared part inlined
            assert __version__ in html
            assert not re.search(r"<(link|img|iframe|object|embed)\b", html, re.I)
            assert not re.search(r"\b(src|href)\s*=", html, re.I)
            assert not re.search(r"\b(fetch|XMLHttpRequest|WebSocket|EventSource|import)\s*\(", html)
            assert not re.search(r"https?://", html)


async def test_a_view_can_be_read_by_a_client_that_did_not_declare_the_extension() -> None:
    """A host may prefetch; reading is harmless and the document is the same."""
    async with spawn() as wire:
        await started(wire, "2025-11-25", None)
        reply = await wire.request("resources/read", {"uri": "ui://sysmcp/disks"})
        assert reply["result"]["contents"][0]["mimeType"] == MIME
        missing = await wire.request("resources/read", {"uri": "ui://sysmcp/nothing"})
        assert missing["error"]["code"] == -32002


async def test_modern_clients_declare_the_extension_per_request() -> None:
    async with spawn(version=MODERN) as wire:
        discover = (await modern(wire, "server/discover"))["result"]
        assert discover["capabilities"]["extensions"] == {EXTENSION: {"mimeTypes": [MIME]}}
        with_ui = await wire.request("tools/list", {"_meta": envelope(capabilities=UI)})
        assert ui_links(with_ui["result"]["tools"]) == LINKED
        without = (await modern(wire, "tools/list"))["result"]
        assert all("_meta" not in tool for tool in without["tools"])
        # The list depends on what the request declared, so no cache may hand one client's list to another.
        assert with_ui["result"]["cacheScope"] == without["cacheScope"] == "private"
        listed = await wire.request("resources/list", {"_meta": envelope(capabilities=UI)})
        assert {r["uri"] for r in listed["result"]["resources"]} >= set(LINKED.values())
        plain = (await modern(wire, "resources/list"))["result"]["resources"]
        assert not [r for r in plain if r["uri"].startswith("ui://")]


def test_the_fields_of_the_views_contract_are_in_the_tools_output_schemas() -> None:
    """sysmcp/views/CONTRACT.md, version 1: a tool that drops one of these breaks its view."""
    assert CONTRACT_VERSION == 1
    dirs = dir_usage.TOOL.output_schema
    assert {
        "path",
        "sort_by",
        "totals",
        "complete",
        "stopped_reason",
        "largest_directories",
        "largest_files",
        "directories_not_shown",
        "files_not_shown",
        "skipped",
    } <= set(dirs["required"])
    assert {"disk_bytes", "apparent_bytes", "files", "directories"} <= set(
        dirs["properties"]["totals"]["required"]
    )
    assert {"path", "disk_bytes", "apparent_bytes", "files", "depth"} <= set(
        dirs["properties"]["largest_directories"]["items"]["required"]
    )
    assert {"path", "disk_bytes", "apparent_bytes"} <= set(
        dirs["properties"]["largest_files"]["items"]["required"]
    )
    disks = disk_usage.TOOL.output_schema
    assert {"filesystems", "alert_threshold_percent"} <= set(disks["required"])
    entry = disks["properties"]["filesystems"]["items"]["properties"]
    assert {
        "mount_point",
        "device",
        "fs_type",
        "read_only",
        "status",
        "reason",
        "total_bytes",
        "used_bytes",
        "free_bytes",
        "reserved_bytes",
        "percent_used",
        "inodes",
        "alerts",
    } <= set(entry)
    usage = container_usage.TOOL.output_schema
    assert {"engine", "socket", "data_root", "reconciliation", "note"} <= set(usage["required"])
    for part, fields in {
        "images": {"count", "layer_bytes", "dangling", "dangling_unique_bytes"},
        "containers": {"count", "running", "writable_bytes", "stopped_writable_bytes"},
        "volumes": {"count", "bytes", "dangling", "dangling_bytes"},
        "build_cache": {"bytes", "in_use_bytes"},
        "logs": {"count", "bytes", "without_limit"},
    }.items():
        assert fields <= set(usage["properties"][part]["required"])
    assert {"walked_bytes", "difference_bytes", "complete"} <= set(
        usage["properties"]["reconciliation"]["required"]
    )
    health = disk_health.TOOL.output_schema
    assert {"devices", "devices_not_shown", "arrays", "btrfs", "notes"} <= set(health["required"])
    for part, fields in {
        "devices": {"device", "verdict", "reasons", "smart", "note", "model", "protocol", "passed"}
        | {"power_on_hours", "temperature_c", "attributes", "io_errors"},
        "arrays": {"name", "verdict", "level", "slots", "failed", "degraded", "operation"}
        | {"progress_percent", "finish", "speed"},
        "btrfs": {"device", "mount_point", "verdict", "errors"},
    }.items():
        assert fields <= set(health["properties"][part]["items"]["required"])
