"""What the session answers inline (before it reads the next line) must never wait on anything: the
read loop it holds is what reads pings, cancellations and the client's answers to our own requests."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from sysmcp.fleet.schema import hosts_property
from sysmcp.protocol.session import Session
from sysmcp.server import build_server
from sysmcp.tools import ALL_TOOLS
from tests.fleet.test_server_fleet import MemoryFleet
from tests.memory_transport import MemoryTransport

pytestmark = pytest.mark.anyio

INIT = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


class HeldReads(MemoryFleet):
    """A host whose ``resources/read`` is answered only once the test lets it (a slow ssh link)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = anyio.Event()

    async def read_resource(self, host: str, uri: str) -> dict[str, Any]:
        await self.release.wait()
        return await super().read_resource(host, uri)


def replies(transport: MemoryTransport) -> dict[Any, dict[str, Any]]:
    return {m["id"]: m for m in map(json.loads, bytes(transport.written).splitlines()) if "id" in m}


async def test_a_ping_is_answered_while_a_hosts_link_is_still_being_read() -> None:
    """A gateway link is read from its host, over the network: it was served inline, so until the host
    answered the server read nothing more (no ping, no cancellation, no other request)."""
    fleet = HeldReads()
    transport = MemoryTransport()
    session = Session(build_server(ALL_TOOLS, fleet=fleet, hosts_property=hosts_property(41)), transport)
    lines = [
        INIT,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": "read",
            "method": "resources/read",
            "params": {"uri": "sysmcp://hosts/web07/results/1/SHA256SUMS"},
        },
        {"jsonrpc": "2.0", "id": "ping", "method": "ping"},
    ]
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(session.run)
            transport.feed(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
            while "ping" not in replies(transport):
                await transport.wrote.wait()
            assert "read" not in replies(transport)  # still with its host
            fleet.release.set()
            while "read" not in replies(transport):
                await transport.wrote.wait()
            transport.feed(b"")
    assert replies(transport)["read"]["result"]["contents"][0]["text"] == "abc  ./f\n"
    assert replies(transport)["ping"]["result"] == {}
