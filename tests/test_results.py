"""The result store: bounded in all, and no single result bigger than one reply can carry."""

from __future__ import annotations

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
