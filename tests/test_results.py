"""The result store: bounded in all, and no single result bigger than one reply can carry."""

from __future__ import annotations

from typing import Any

import pytest

from sysmcp.results import ResultStore, TooLarge
from sysmcp.tools.registry import ResourceLink, ToolContext
from tests.harness import RecordingPeer


def test_the_oldest_results_go_first_when_the_store_is_full() -> None:
    store = ResultStore(cap_bytes=10)
    first = store.put("a", "12345", description="a")
    second = store.put("b", "12345", description="b")
    third = store.put("c", "12345", description="c")
    assert [item.uri for item in store.list()] == [second.uri, third.uri]
    assert store.get(first.uri) is None


def test_a_result_too_big_for_one_reply_is_refused_and_evicts_nothing() -> None:
    store = ResultStore(cap_bytes=100, max_item=8)
    kept = store.put("small", "1234", description="small")
    with pytest.raises(TooLarge):
        store.put("big", "123456789", description="big")
    assert store.list() == [kept]


def test_a_tool_is_told_why_a_result_was_not_kept(peer: RecordingPeer, ctx: ToolContext) -> None:
    ctx.results.max_item = 8
    assert isinstance(ctx.keep("ok", "1234", description="ok"), ResourceLink)
    reason = ctx.keep("big", "123456789", description="big")
    assert isinstance(reason, str) and "too big to keep" in reason and "narrow the request" in reason
    assert peer.sent == []  # keeping a result sends the client nothing


def test_a_result_dropped_for_newer_ones_is_said_to_be_no_longer_kept() -> None:
    """A read of a result the store dropped to stay under its cap said only "Resource not found", and
    verify_checksums that results are kept "for this session", which this one still is: neither said
    that making it again is what helps."""
    import anyio

    from sysmcp.protocol.context import RequestContext
    from sysmcp.protocol.failures import ProtocolError
    from sysmcp.protocol.jsonrpc import Request
    from sysmcp.protocol.lifecycle import features_of
    from sysmcp.server import build_server
    from sysmcp.tools import ALL_TOOLS

    server = build_server(ALL_TOOLS)
    server.results = ResultStore(cap_bytes=10)
    dropped = server.results.put("SHA256SUMS", "12345", description="a manifest")
    server.results.put("newer", "1234567890", description="newer")
    ctx = RequestContext(1, "resources/read", RecordingPeer(), features=features_of("2025-11-25"))

    async def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await server.handle_request(Request(1, method, params), ctx)
        return result

    with pytest.raises(ProtocolError) as read:
        anyio.run(ask, "resources/read", {"uri": dropped.uri})
    assert read.value.code == -32002 and read.value.data == {"uri": dropped.uri}
    assert read.value.message.startswith(f"Resource not found: {dropped.uri} is no longer kept")
    assert "call the tool again" in read.value.message
    with pytest.raises(ProtocolError) as never:  # a URI never handed out: nothing more to say
        anyio.run(ask, "resources/read", {"uri": "sysmcp://results/99/SHA256SUMS"})
    assert never.value.message == "Resource not found"
    arguments = {"manifest": dropped.uri, "base_dir": "/"}
    checked = anyio.run(ask, "tools/call", {"name": "verify_checksums", "arguments": arguments})
    text = checked["content"][0]["text"]
    assert checked["isError"] is True and f"{dropped.uri} is no longer kept" in text, text
