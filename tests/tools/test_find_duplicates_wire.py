"""find_duplicates through the real server: schema-valid groups, the full list as a resource, cancellation."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio


async def test_duplicates_over_the_wire_with_the_full_list_as_a_resource(tmp_path: Path) -> None:
    for i in range(4):
        for copy in range(3):
            (tmp_path / f"g{i}-{copy}").write_bytes(b"%d" % i * (100 + i))
    (tmp_path / "alone").write_bytes(b"nothing like it")
    async with spawn() as wire:
        await wire.initialize("2025-11-25")
        reply = await wire.call("find_duplicates", {"path": str(tmp_path), "top_n": 2})
        result = reply["result"]
        assert result["isError"] is False
        structured = result["structuredContent"]
        assert structured["groups_found"] == 4 and structured["groups_not_shown"] == 2
        assert structured["duplicate_files"] == 8
        assert [g["size_bytes"] for g in structured["groups"]] == [103, 102]
        assert "… and 2 more groups not shown" in result_text(reply)
        links = [c for c in result["content"] if c["type"] == "resource_link"]
        assert len(links) == 1
        read = await wire.request("resources/read", {"uri": links[0]["uri"]})
        text = read["result"]["contents"][0]["text"]
        assert text.count("3 copies x") == 4 and f"{tmp_path}/g0-2" in text
    assert (tmp_path / "alone").exists()  # nothing deleted


async def test_cancelled_duplicate_search_gets_no_response_and_the_server_keeps_serving(
    tmp_path: Path,
) -> None:
    for name in ("a", "b"):  # identical sparse files: gigabytes to hash, no disk used
        with (tmp_path / name).open("wb") as sparse:
            sparse.truncate(8 << 30)
    async with spawn() as wire:
        await wire.initialize()
        await wire.start_call("find_duplicates", {"path": str(tmp_path)}, msg_id="dups", progress="p")
        while True:  # wait until the full hash is under way (the comparing phase reports a total)
            message = await wire.receive(timeout=30)
            assert message.get("id") != "dups", "the search finished before it could be cancelled"
            if message.get("method") == "notifications/progress" and "total" in message["params"]:
                break
        await wire.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "dups"}}
        )
        await wire.send({"jsonrpc": "2.0", "id": "after", "method": "ping"})
        while True:
            message = await wire.receive(timeout=60)
            assert message.get("id") != "dups"
            if message.get("id") == "after":
                break
        await wire.send({"jsonrpc": "2.0", "id": "last", "method": "ping"})
        while (message := await wire.receive(timeout=60)).get("id") != "last":
            assert message.get("id") != "dups"
