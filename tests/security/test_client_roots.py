"""Client roots (``roots/list``) over real pipes: they narrow the operator's scope and never widen it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from sysmcp.engine.paths import real_root
from tests.mcp_schema import check, check_server_message
from tests.wire import Wire, result_text, spawn

pytestmark = pytest.mark.anyio

ROOTS_CAPABILITY = {"roots": {"listChanged": True}}


class RootsWire(Wire):
    """A client that also receives the server's requests (``roots/list``) and answers them."""

    async def receive(self, timeout: float = 10) -> Any:
        with anyio.fail_after(timeout):
            while not self._queue:
                assert self.process.stdout is not None
                self._buffer += await self.process.stdout.receive()
                *lines, self._buffer = self._buffer.split(b"\n")
                self._queue.extend(json.loads(line.decode("utf-8")) for line in lines)
        message = self._queue.pop(0)
        if "method" in message and "id" in message:
            check(self.version, "JSONRPCRequest", message)
            check(self.version, "ServerRequest", message)
        else:
            check_server_message(self.version, message, self._methods.get(message.get("id")))
        return message

    async def expect_roots_request(self) -> Any:
        message = await self.receive()
        assert message.get("method") == "roots/list", message
        return message["id"]

    async def answer(self, msg_id: Any, roots: list[Path]) -> None:
        listed = [{"uri": root.as_uri(), "name": root.name} for root in roots]
        await self.send({"jsonrpc": "2.0", "id": msg_id, "result": {"roots": listed}})


@asynccontextmanager
async def spawn_roots(*args: str) -> AsyncIterator[RootsWire]:
    async with spawn(*args, wire_class=RootsWire) as wire:
        assert isinstance(wire, RootsWire)
        yield wire


@pytest.fixture
def base(tmp_path: Path) -> Path:
    base = real_root(tmp_path)
    for name in ("root/a", "root/b", "outside"):
        (base / name).mkdir(parents=True)
        (base / name / "f.txt").write_text(name)
    return base


async def hash_of(wire: Wire, path: Path) -> dict[str, Any]:
    result: dict[str, Any] = (await wire.call("file_sha256", {"path": str(path)}))["result"]
    return result


async def test_client_roots_narrow_the_operator_scope(base: Path) -> None:
    async with spawn_roots("--root", str(base / "root")) as wire:
        await wire.initialize(capabilities=ROOTS_CAPABILITY)
        await wire.answer(await wire.expect_roots_request(), [base / "root" / "a"])
        assert not (await hash_of(wire, base / "root" / "a" / "f.txt"))["isError"]
        refused = await hash_of(wire, base / "root" / "b" / "f.txt")
        assert refused["isError"] and "client's roots" in result_text({"result": refused})


async def test_client_roots_can_never_widen_the_operator_scope(base: Path) -> None:
    async with spawn_roots("--root", str(base / "root")) as wire:
        await wire.initialize(capabilities=ROOTS_CAPABILITY)
        await wire.answer(await wire.expect_roots_request(), [Path("/"), base / "outside"])
        refused = await hash_of(wire, base / "outside" / "f.txt")
        assert refused["isError"] and "operator's roots" in result_text({"result": refused})
        assert not (await hash_of(wire, base / "root" / "b" / "f.txt"))["isError"]


async def test_list_changed_refreshes_the_client_roots(base: Path) -> None:
    async with spawn_roots() as wire:
        await wire.initialize(capabilities=ROOTS_CAPABILITY)
        await wire.answer(await wire.expect_roots_request(), [base / "root" / "a"])
        assert (await hash_of(wire, base / "outside" / "f.txt"))["isError"]
        await wire.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
        await wire.answer(await wire.expect_roots_request(), [base / "outside"])
        assert not (await hash_of(wire, base / "outside" / "f.txt"))["isError"]
        assert (await hash_of(wire, base / "root" / "a" / "f.txt"))["isError"]


async def test_roots_of_which_none_can_be_used_allow_nothing_instead_of_widening_back(base: Path) -> None:
    async with spawn_roots() as wire:
        await wire.initialize(capabilities=ROOTS_CAPABILITY)
        await wire.answer(await wire.expect_roots_request(), [base / "root" / "a"])
        assert (await hash_of(wire, base / "outside" / "f.txt"))["isError"]
        await wire.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
        elsewhere = [{"uri": f"file://otherhost{base}/root/a"}, {"uri": "https://example.com/repo"}]
        msg_id = await wire.expect_roots_request()
        await wire.send({"jsonrpc": "2.0", "id": msg_id, "result": {"roots": elsewhere}})
        for path in (base / "outside" / "f.txt", base / "root" / "a" / "f.txt"):
            refused = await hash_of(wire, path)
            assert refused["isError"] and "client's roots" in result_text({"result": refused}), refused


async def test_an_empty_roots_list_does_not_narrow(base: Path) -> None:
    async with spawn_roots("--root", str(base / "root")) as wire:
        await wire.initialize(capabilities=ROOTS_CAPABILITY)
        await wire.answer(await wire.expect_roots_request(), [])
        assert not (await hash_of(wire, base / "root" / "b" / "f.txt"))["isError"]
        assert (await hash_of(wire, base / "outside" / "f.txt"))["isError"]


async def test_a_failed_roots_list_keeps_the_operator_scope(base: Path) -> None:
    async with spawn_roots("--root", str(base / "root")) as wire:
        await wire.initialize(capabilities=ROOTS_CAPABILITY)
        msg_id = await wire.expect_roots_request()
        await wire.send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": "no roots"}})
        assert not (await hash_of(wire, base / "root" / "b" / "f.txt"))["isError"]
        assert (await hash_of(wire, base / "outside" / "f.txt"))["isError"]


async def test_a_tool_call_waits_for_the_roots_the_client_is_still_sending(base: Path) -> None:
    async with spawn_roots() as wire:
        await wire.initialize(capabilities=ROOTS_CAPABILITY)
        msg_id = await wire.expect_roots_request()
        await wire.send(
            {
                "jsonrpc": "2.0",
                "id": 99,
                "method": "tools/call",
                "params": {"name": "file_sha256", "arguments": {"path": str(base / "outside" / "f.txt")}},
            }
        )
        await wire.answer(msg_id, [base / "root"])  # the call was sent first, but must not run wider
        reply = await wire.response(99)
        assert reply["result"]["isError"] and "client's roots" in result_text(reply)


async def test_a_client_without_the_roots_capability_is_never_asked(base: Path) -> None:
    async with spawn_roots() as wire:
        await wire.initialize()
        reply = await wire.call("file_sha256", {"path": str(base / "outside" / "f.txt")})  # no request first
        assert not reply["result"]["isError"]


async def test_a_flood_of_list_changed_costs_a_bounded_number_of_roots_requests(base: Path) -> None:
    async with spawn_roots() as wire:
        await wire.initialize(capabilities=ROOTS_CAPABILITY)
        await wire.answer(await wire.expect_roots_request(), [base / "root"])
        flood = b'{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}\n' * 5000
        await wire.send(flood)
        await wire.send(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "file_sha256", "arguments": {"path": str(base / "outside" / "f.txt")}},
            }
        )
        asked = 0
        while True:
            message = await wire.receive()
            if message.get("method") == "roots/list":
                asked += 1
                await wire.answer(message["id"], [base / "outside"])
            elif message.get("id") == 7:
                break
        assert 1 <= asked <= 3  # one fetch in flight, at most one catching up: not one per notification
        assert not message["result"]["isError"]  # and the call ran on the latest roots


async def test_a_result_kept_under_wider_roots_is_not_served_once_the_client_narrows_them(base: Path) -> None:
    """A full result kept as a resource names what the scope of its call allowed: once the client's
    roots narrow, it is neither listed, read, nor taken as a manifest (its names lie outside them)."""
    async with spawn_roots() as wire:
        await wire.initialize(capabilities=ROOTS_CAPABILITY)
        await wire.answer(await wire.expect_roots_request(), [base])
        reply = await wire.call("hash_tree", {"path": str(base), "max_lines": 1})
        uri = next(b["uri"] for b in reply["result"]["content"] if b["type"] == "resource_link")
        read = await wire.request("resources/read", {"uri": uri})
        assert "outside/f.txt" in read["result"]["contents"][0]["text"]  # served while the scope allows it
        await wire.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
        await wire.answer(await wire.expect_roots_request(), [base / "root" / "a"])
        read = await wire.request("resources/read", {"uri": uri})
        assert "error" in read and "outside" not in json.dumps(read), read
        listed = await wire.request("resources/list")
        assert uri not in json.dumps(listed["result"])
        as_manifest = await wire.call(
            "verify_checksums", {"manifest": uri, "base_dir": str(base / "root" / "a")}
        )
        assert as_manifest["result"]["isError"] and "outside/f.txt" not in json.dumps(as_manifest)


@pytest.mark.parametrize("method", ["resources/read", "resources/list"])
async def test_a_resource_asked_for_while_the_client_changes_its_roots_waits_for_the_new_ones(
    base: Path, method: str
) -> None:
    """Resources are answered without a task, before the next line is read. Asked for right after
    ``roots/list_changed``, the read waited for the client's new roots, which the server could not read
    while it waited: after 5 s it gave up, served the resource under the old, wider roots and dropped
    the client's answer, so the old roots stayed in force for every call after it too."""
    async with spawn_roots() as wire:
        await wire.initialize(capabilities=ROOTS_CAPABILITY)
        await wire.answer(await wire.expect_roots_request(), [base])
        reply = await wire.call("hash_tree", {"path": str(base), "max_lines": 1})
        uri = next(b["uri"] for b in reply["result"]["content"] if b["type"] == "resource_link")
        await wire.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
        await wire.send({"jsonrpc": "2.0", "id": "asked", "method": method, "params": {"uri": uri}})
        await wire.answer(await wire.expect_roots_request(), [base / "root" / "a"])
        answered = await wire.response("asked")
        assert uri not in json.dumps(answered.get("result")), answered  # neither read nor listed
        assert (await hash_of(wire, base / "outside" / "f.txt"))["isError"]  # the new roots are in force
