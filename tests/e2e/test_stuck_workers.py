"""A worker blocked in the kernel (a dead network mount) must not cost a slot or the exit for good.

The real server, with one extra tool whose worker thread never returns and never reaches a
checkpoint (``stuck_server.py``): what cancellation alone cannot stop.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.security.test_client_roots import RootsWire
from tests.wire import Wire, read_stderr, spawn

pytestmark = pytest.mark.anyio

STUCK_SERVER = [sys.executable, str(Path(__file__).with_name("stuck_server.py"))]
SLOTS = 4  # the server's worker limit


async def start_stuck_calls(wire: Wire, count: int) -> None:
    """Start ``count`` stuck calls and return once each has reported that its thread is in."""
    for n in range(count):
        await wire.start_call("stuck", {}, msg_id=f"stuck-{n}", progress=f"p{n}")
    seen: set[str] = set()
    with anyio.fail_after(10):
        while len(seen) < count:
            message = await wire.receive()
            if message.get("method") == "notifications/progress":
                seen.add(message["params"]["progressToken"])


async def cancel(wire: Wire, count: int) -> None:
    for n in range(count):
        await wire.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": f"stuck-{n}"}}
        )


async def test_cancelled_calls_stuck_in_the_kernel_give_their_worker_slots_back(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    target.write_bytes(b"abc")
    async with spawn(command=STUCK_SERVER) as wire:
        await wire.initialize()
        await start_stuck_calls(wire, SLOTS)  # every worker slot now held by a thread that never returns
        await cancel(wire, SLOTS)
        reply = await wire.call("file_sha256", {"path": str(target)})  # needs a slot of its own
        assert reply["result"]["structuredContent"]["sha256"].startswith("ba7816bf")
        assert all(not str(m.get("id", "")).startswith("stuck-") for m in wire.notifications)


@pytest.mark.parametrize("how", ["end of input", "SIGTERM", "SIGINT"])
async def test_the_server_still_exits_promptly_with_a_worker_stuck_in_the_kernel(how: str) -> None:
    async with spawn(command=STUCK_SERVER) as wire:
        await wire.initialize()
        await start_stuck_calls(wire, 1)
        if how == "end of input":
            await wire.close_stdin()
        else:
            wire.process.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGINT)
        assert await wire.wait_exit() == 0
        rest = await wire.drain_stdout()
        assert rest == b"" or rest.endswith(b"\n")  # nothing half-written
        assert b'"id":"stuck-0"' not in rest  # the stuck call was cancelled: no answer
        assert "exiting with worker threads still blocked" in await read_stderr(wire.process)  # logged


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("file_sha256", {"path": "/hung-mount/file"}),
        ("dir_usage", {"path": "/hung-mount/dir"}),
        ("hash_tree", {"path": "/hung-mount/dir"}),
        ("find_duplicates", {"path": "/hung-mount/dir"}),
        ("verify_checksums", {"manifest": "/hung-mount/SHA256SUMS"}),
        ("disk_usage", {"path": "~nis-user/x"}),  # a user lookup that never returns
        ("file_sha256", {"path": "~nis-user/x"}),
    ],
)
async def test_a_path_on_a_hung_mount_blocks_a_thread_never_the_server(
    tool: str, arguments: dict[str, str], tmp_path: Path
) -> None:
    target = tmp_path / "a.txt"
    target.write_bytes(b"abc")
    async with spawn(command=STUCK_SERVER) as wire:
        await wire.initialize()
        await wire.start_call(tool, arguments, msg_id="hung")  # resolving its path never returns
        assert (await wire.request("ping"))["result"] == {}  # the event loop is free meanwhile
        await wire.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "hung"}}
        )
        reply = await wire.call("file_sha256", {"path": str(target)})
        assert reply["result"]["structuredContent"]["sha256"].startswith("ba7816bf")
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
        assert b'"id":"hung"' not in await wire.drain_stdout()


async def test_a_prompt_argument_on_a_hung_mount_blocks_a_thread_never_the_server() -> None:
    async with spawn(command=STUCK_SERVER) as wire:
        await wire.initialize()
        prompts = (await wire.request("prompts/list"))["result"]["prompts"]
        prompt = next(p for p in prompts if any(a["name"] == "path" for a in p.get("arguments", [])))
        await wire.send(
            {
                "jsonrpc": "2.0",
                "id": "hung",
                "method": "prompts/get",
                "params": {"name": prompt["name"], "arguments": {"path": "/hung-mount/dir"}},
            }
        )
        assert (await wire.request("ping"))["result"] == {}
        await wire.close_stdin()
        assert await wire.wait_exit() == 0


async def test_a_client_root_on_a_hung_mount_blocks_a_thread_and_then_keeps_the_scope(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    target.write_bytes(b"abc")
    async with spawn(command=STUCK_SERVER, wire_class=RootsWire) as wire:
        assert isinstance(wire, RootsWire)
        await wire.initialize("2025-11-25", {"roots": {"listChanged": True}})
        await wire.answer(await wire.expect_roots_request(), [Path("/hung-mount/projects")])
        assert (await wire.request("ping"))["result"] == {}  # the event loop is free meanwhile
        # Tools wait for the roots, up to the time a client gets to answer; then the scope stays as it was.
        reply = await wire.call("file_sha256", {"path": str(target)})
        assert reply["result"]["structuredContent"]["sha256"].startswith("ba7816bf")


async def test_a_path_that_never_resolves_gets_an_error_result_after_a_while() -> None:
    async with spawn(command=STUCK_SERVER) as wire:
        await wire.initialize()
        reply = await wire.call("file_sha256", {"path": "/hung-mount/file"})  # wire.call waits up to 10 s
        assert reply["result"]["isError"] is True
        assert "within 5 s" in reply["result"]["content"][0]["text"]
        assert (await wire.request("ping"))["result"] == {}


@pytest.mark.parametrize(
    "path", ["/tmp/nope" + "/a" * 50_000, "/x/.." * 20_000 + "/tmp", "/tmp" + "/a" * 1500]
)
async def test_a_very_long_disk_usage_path_never_holds_up_the_server(path: str) -> None:
    async with spawn() as wire:
        await wire.initialize()
        await wire.start_call("disk_usage", {"path": path}, msg_id="long")
        await wire.send({"jsonrpc": "2.0", "id": "ping", "method": "ping"})
        replies: dict[str, Any] = {}
        while len(replies) < 2:  # in either order; the ping is answered while the tool is stuck
            message = await wire.receive()
            if "id" in message:
                replies[message["id"]] = message
        assert replies["ping"]["result"] == {}
        assert replies["long"]["result"]["isError"] is True  # too long, or no such file: an answer
