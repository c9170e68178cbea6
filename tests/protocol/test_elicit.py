"""When a tool may ask the client something (elicitation), and what it gets back."""

from __future__ import annotations

from typing import Any

import pytest

from sysmcp.protocol.context import ClientDeclined, RequestContext
from sysmcp.protocol.jsonrpc import Response
from sysmcp.protocol.lifecycle import features_of
from tests.harness import RecordingPeer

pytestmark = pytest.mark.anyio


class Answering(RecordingPeer):
    def __init__(self, response: Response) -> None:
        super().__init__()
        self.response = response
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def request(
        self, method: str, params: dict[str, Any] | None = None, timeout: float = 10
    ) -> Response:
        self.asked.append((method, params or {}))
        return self.response


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        ({}, False),
        ({"elicitation": {}}, True),
        ({"elicitation": {"form": {}}}, True),
        ({"elicitation": {"url": {}}}, False),
        ({"elicitation": True}, False),
    ],
)
def test_only_a_client_that_declared_form_elicitation_is_asked(
    declared: dict[str, Any], expected: bool
) -> None:
    ctx = RequestContext(1, "tools/call", RecordingPeer(), client_capabilities=declared)
    assert ctx.can_elicit() is expected


def test_a_modern_request_is_never_asked() -> None:
    ctx = RequestContext(
        1,
        "tools/call",
        RecordingPeer(),
        features=features_of("2026-07-28"),
        client_capabilities={"elicitation": {}},
    )
    assert ctx.can_elicit() is False


async def test_ask_returns_the_clients_result_and_an_error_or_no_channel_is_declined() -> None:
    peer = Answering(Response(id="s-1", result={"action": "accept", "content": {"confirm": True}}))
    ctx = RequestContext(1, "tools/call", peer)
    assert await ctx.ask("elicitation/create", {"message": "?"}, 5) == {
        "action": "accept",
        "content": {"confirm": True},
    }
    assert peer.asked == [("elicitation/create", {"message": "?"})]
    refusing = RequestContext(
        1, "tools/call", Answering(Response(id="s-2", error={"code": -1, "message": "no"}))
    )
    with pytest.raises(ClientDeclined, match="no"):
        await refusing.ask("elicitation/create", {}, 5)
    with pytest.raises(ClientDeclined):
        await RequestContext(1, "tools/call", RecordingPeer()).ask("elicitation/create", {}, 5)
