"""A liveness check is answered whatever is in flight: the in-flight limit refuses work, never ``ping``.

The real server with the ``stuck`` tool (``stuck_server.py``): every in-flight slot is held by a call
that never finishes, which the server's own "busy" answer to one more call proves, then a ping comes.
"""

from __future__ import annotations

import pytest

from sysmcp.protocol.session import DEFAULT_MAX_IN_FLIGHT
from tests.e2e.test_stuck_workers import STUCK_SERVER
from tests.wire import spawn

pytestmark = pytest.mark.anyio


async def test_ping_is_answered_while_every_in_flight_slot_is_held() -> None:
    async with spawn(command=STUCK_SERVER) as wire:
        await wire.initialize()
        for n in range(DEFAULT_MAX_IN_FLIGHT):
            await wire.start_call("stuck", {}, msg_id=f"stuck-{n}")
        refused = await wire.call("stuck", {}, msg_id="one-too-many")  # read after all the others
        assert refused["error"]["code"] == -32000 and "busy" in refused["error"]["message"]
        await wire.send({"jsonrpc": "2.0", "id": "alive", "method": "ping"})
        assert await wire.response("alive") == {"jsonrpc": "2.0", "id": "alive", "result": {}}
        answered = await wire.request("tools/list", {})  # answered from memory: no slot needed either
        assert any(tool["name"] == "stuck" for tool in answered["result"]["tools"])
