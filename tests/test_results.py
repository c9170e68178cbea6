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


@pytest.mark.parametrize(
    "uri",
    [
        "sysmcp://results/²/x",  # a digit to str.isdigit, none to int()
        "sysmcp://results/١/x",
        "sysmcp://results/" + "9" * 5000 + "/x",  # more digits than int() converts
        "sysmcp://results/ 1/x",
        "sysmcp://results/+1/x",
        "sysmcp://results/0/x",
        "sysmcp://results/",
    ],
)
def test_a_uri_that_is_no_number_this_store_handed_out_was_never_dropped(uri: str) -> None:
    """``resources/read`` of such a URI was an Internal error (int() raised in ``dropped``), with a
    traceback in the server's log: it is a resource not found, like any URI never handed out."""
    store = ResultStore(cap_bytes=10)
    store.put("a", "12345", description="a")
    store.put("b", "1234567890", description="b")  # the first dropped: 1 and 2 were handed out
    assert store.dropped(uri) is None
    assert store.dropped("sysmcp://results/1/a") is not None
