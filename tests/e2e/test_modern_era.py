"""2026-07-28 against the real process: discovery, the per-request envelope, and how the era is chosen.

Every message the server writes is validated against the 2026-07-28 schema by ``tests.wire``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.modern import MODERN, envelope, modern
from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio

SERVER_INFO = "io.modelcontextprotocol/serverInfo"


async def test_discover_lists_modern_and_legacy_versions_capabilities_and_cache_hints() -> None:
    async with spawn(version=MODERN) as wire:
        result = (await modern(wire, "server/discover"))["result"]
        assert result["supportedVersions"][0] == MODERN
        assert {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"} <= set(result["supportedVersions"])
        assert "tools" in result["capabilities"]
        assert "logging" not in result["capabilities"]  # deprecated in this era (SEP-2577): logs per request
        assert "read-only" in result["instructions"]
        assert result["resultType"] == "complete"
        assert result["ttlMs"] >= 0 and result["cacheScope"] in ("public", "private")
        assert result["_meta"][SERVER_INFO]["name"] == "sysmcp"
        assert "serverInfo" not in result and "protocolVersion" not in result


async def test_a_client_may_start_with_any_request_no_handshake_needed() -> None:
    async with spawn(version=MODERN) as wire:
        reply = await modern(wire, "tools/list")
        assert reply["result"]["tools"]


async def test_every_result_is_complete_and_names_the_server(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    async with spawn(version=MODERN) as wire:
        calls = [
            ("server/discover", {}),
            ("tools/list", {}),
            ("tools/call", {"name": "file_sha256", "arguments": {"path": str(tmp_path / "f")}}),
            ("tools/call", {"name": "file_sha256", "arguments": {"path": str(tmp_path / "absent")}}),
            ("resources/list", {}),
            ("resources/templates/list", {}),
        ]
        for method, params in calls:
            result = (await modern(wire, method, params))["result"]
            assert result["resultType"] == "complete", method
            assert result["_meta"][SERVER_INFO]["version"], method


async def test_tools_list_carries_cache_fields_and_a_deterministic_order() -> None:
    async with spawn(version=MODERN) as wire:
        first = (await modern(wire, "tools/list"))["result"]
        second = (await modern(wire, "tools/list"))["result"]
        assert isinstance(first["ttlMs"], int) and first["ttlMs"] >= 0
        assert first["cacheScope"] in ("public", "private")
        assert [t["name"] for t in first["tools"]] == [t["name"] for t in second["tools"]]
        for tool in first["tools"]:
            assert tool["outputSchema"] and tool["annotations"]["readOnlyHint"] is True
            assert "execution" not in tool


async def test_tool_results_are_structured_and_bad_arguments_are_error_results(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    async with spawn(version=MODERN) as wire:
        reply = await modern(
            wire, "tools/call", {"name": "file_sha256", "arguments": {"path": str(tmp_path / "f")}}
        )
        assert reply["result"]["structuredContent"]["size_bytes"] == 3
        bad = await modern(wire, "tools/call", {"name": "dir_usage", "arguments": {"path": "/", "top_n": 0}})
        assert bad["result"]["isError"] is True and "top_n" in result_text(bad)
        unknown = await modern(wire, "tools/call", {"name": "rm_rf", "arguments": {}})
        assert unknown["error"]["code"] == -32602


async def test_an_unsupported_version_is_refused_with_the_supported_list() -> None:
    async with spawn(version=MODERN) as wire:
        reply = await wire.request("tools/list", {"_meta": envelope("2099-01-01")})
        error = reply["error"]
        assert error["code"] == -32022
        assert error["data"]["requested"] == "2099-01-01"
        assert MODERN in error["data"]["supported"]


async def test_a_modern_connection_needs_the_envelope_on_every_request() -> None:
    async with spawn(version=MODERN) as wire:
        await modern(wire, "server/discover")
        bare = await wire.request("tools/list", {})
        assert bare["error"]["code"] == -32602 and "_meta" in bare["error"]["message"]
        half = await wire.request(
            "tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}
        )
        assert half["error"]["code"] == -32602 and "clientCapabilities" in half["error"]["message"]
        loud = await modern(wire, "tools/list", log_level="loud")
        assert loud["error"]["code"] == -32602


async def test_handshake_methods_do_not_exist_once_the_connection_is_modern() -> None:
    async with spawn(version=MODERN) as wire:
        await modern(wire, "server/discover")
        init = await wire.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        )
        assert init["error"]["code"] == -32022
        assert init["error"]["data"] == {"supported": [MODERN], "requested": "2025-11-25"}
        assert (await modern(wire, "ping"))["error"]["code"] == -32601
        set_level = await modern(wire, "logging/setLevel", {"level": "debug"})
        assert set_level["error"]["code"] == -32601
        assert (await modern(wire, "tools/list"))["result"]["tools"]


async def test_a_failed_probe_falls_back_to_initialize_and_stays_legacy() -> None:
    async with spawn(version=MODERN) as wire:
        probe = await wire.request("server/discover", {"_meta": envelope("2099-01-01")})
        assert probe["error"]["code"] == -32022
        wire.version = "2025-11-25"
        await wire.initialize("2025-11-25")
        listed = (await wire.request("tools/list"))["result"]
        assert "resultType" not in listed and "ttlMs" not in listed
        late = await modern(wire, "tools/list")
        assert late["error"]["code"] == -32600


async def test_a_legacy_client_that_sends_discover_gets_an_error_then_initializes() -> None:
    async with spawn() as wire:
        probe = await wire.request("server/discover", {})
        assert probe["error"]["code"] == -32602
        reply = await wire.initialize("2025-06-18")
        assert reply["result"]["protocolVersion"] == "2025-06-18"


async def test_log_messages_only_for_requests_that_ask_for_them(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    arguments = {"name": "file_sha256", "arguments": {"path": str(tmp_path / "f")}}
    async with spawn(version=MODERN) as wire:
        await modern(wire, "tools/call", arguments)
        assert not [n for n in wire.notifications if n["method"] == "notifications/message"]
        await modern(wire, "tools/call", arguments, log_level="debug")
        logged = [n["params"] for n in wire.notifications if n["method"] == "notifications/message"]
        assert logged and all(p["level"] == "debug" for p in logged)
        wire.notifications.clear()
        await modern(wire, "tools/call", arguments, log_level="info")  # debug lines are below info
        assert not [n for n in wire.notifications if n["method"] == "notifications/message"]


async def test_progress_works_as_before(tmp_path: Path) -> None:
    target = tmp_path / "big.bin"
    target.write_bytes(os.urandom(1 << 20) * 16)
    async with spawn(version=MODERN) as wire:
        reply = await modern(
            wire, "tools/call", {"name": "file_sha256", "arguments": {"path": str(target)}}, progressToken="p"
        )
        assert reply["result"]["isError"] is False
        progress = [n["params"] for n in wire.notifications if n["method"] == "notifications/progress"]
        assert progress and all(p["progressToken"] == "p" for p in progress)
        assert progress[-1]["progress"] == progress[-1]["total"] == 16 << 20


async def test_a_cancelled_modern_call_gets_no_response(tmp_path: Path) -> None:
    sparse = (
        tmp_path / "sparse.img"
    )  # 8 GiB that costs no disk: hashing it takes seconds, creating it nothing
    with sparse.open("wb") as out:
        out.truncate(8 << 30)
    async with spawn(version=MODERN) as wire:
        await wire.send(
            {
                "jsonrpc": "2.0",
                "id": "hash",
                "method": "tools/call",
                "params": {
                    "name": "file_sha256",
                    "arguments": {"path": str(sparse)},
                    "_meta": envelope(progressToken=1),
                },
            }
        )
        first = await wire.receive()
        assert first["method"] == "notifications/progress"
        await wire.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": "hash", "reason": "t"},
            }
        )
        await wire.send(
            {"jsonrpc": "2.0", "id": "last", "method": "tools/list", "params": {"_meta": envelope()}}
        )
        while True:
            message = await wire.receive()
            assert message.get("id") != "hash"
            if message.get("id") == "last":
                break


async def test_a_missing_resource_is_invalid_params_in_2026() -> None:
    async with spawn(version=MODERN) as wire:
        reply = await modern(wire, "resources/read", {"uri": "sysmcp://result/nope"})
        assert reply["error"]["code"] == -32602
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.request("resources/read", {"uri": "sysmcp://result/nope"})
        assert reply["error"]["code"] == -32002


async def test_batches_are_refused_in_2026() -> None:
    async with spawn(version=MODERN) as wire:
        await modern(wire, "server/discover")
        await wire.send(
            [{"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": envelope()}}]
        )
        refused = await wire.receive()
        assert refused["error"]["code"] == -32600


@pytest.mark.parametrize("after_a_modern_request", [False, True])
async def test_initialize_in_the_2026_envelope_is_method_not_found(after_a_modern_request: bool) -> None:
    async with spawn(version=MODERN) as wire:
        if after_a_modern_request:
            await modern(wire, "tools/list")
        reply = await modern(wire, "initialize")
        assert reply["error"]["code"] == -32601
