"""Corners the other suites leave open: unknown capabilities, blank lines, pages, the worker limit, shutdown.

The real process over real pipes wherever it can show the behaviour; the in-process session only for
a small page size and a limiter of one, which the command line does not expose.
"""

from __future__ import annotations

import base64
import json
import signal
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest

from sysmcp.protocol.context import Meter
from sysmcp.protocol.session import Session
from sysmcp.server import build_server
from sysmcp.tools import ALL_TOOLS
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput
from tests.mcp_schema import check_server_message
from tests.memory_transport import MemoryTransport
from tests.security.test_client_roots import spawn_roots
from tests.wire import Wire, read_stderr, spawn

pytestmark = pytest.mark.anyio

TOOL_NAMES = [tool.name for tool in ALL_TOOLS]


# -- initialize with capabilities the server has never heard of ---------------------------------------


async def test_unknown_client_capabilities_are_ignored_and_tools_are_served() -> None:
    capabilities = {"experimentalThing": {"x": 1}, "futureFeature": {"deep": {"nested": [1, 2]}}}
    async with spawn() as wire:
        reply = await wire.initialize("2025-11-25", capabilities)
        assert reply["result"]["protocolVersion"] == "2025-11-25"
        assert reply["result"]["serverInfo"]["name"] == "sysmcp"
        listed = await wire.request("tools/list", {})
        assert [tool["name"] for tool in listed["result"]["tools"]] == TOOL_NAMES
        assert wire.notifications == []  # and it asked nothing of the client: it has no roots capability


async def test_unknown_keys_inside_a_known_capability_keep_it_working(tmp_path: Path) -> None:
    capabilities = {
        "experimentalThing": {"x": 1},
        "roots": {"listChanged": True, "weird": 2},
        "somethingNew": {},
    }
    (tmp_path / "f.txt").write_text("x")
    async with spawn_roots() as wire:
        reply = await wire.initialize("2025-11-25", capabilities)
        assert reply["result"]["protocolVersion"] == "2025-11-25"
        assert "tools" in reply["result"]["capabilities"]
        # The roots capability is still recognised: the server asks for the client's roots.
        await wire.answer(await wire.expect_roots_request(), [tmp_path])
        listed = await wire.request("tools/list", {})
        assert [tool["name"] for tool in listed["result"]["tools"]] == TOOL_NAMES
        inside = await wire.call("file_sha256", {"path": str(tmp_path / "f.txt")})
        assert inside["result"]["isError"] is False


# -- blank lines ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "filler",
    [b"\n", b"\n\n\n", b"   \n", b"\t \t\n", b"\r\n", b" \r\n\r\n", b"\n \n\t\n\r\n"],
    ids=["empty", "several", "spaces", "tabs", "crlf", "space-crlf", "mixed"],
)
async def test_blank_and_whitespace_lines_are_skipped_without_a_reply(filler: bytes) -> None:
    async with spawn() as wire:
        await wire.send(filler)
        await wire.initialize()
        await wire.send(filler)
        await wire.send(filler + b'{"jsonrpc": "2.0", "id": "a", "method": "ping"}\r\n' + filler)
        # ``response`` fails on any message other than the one awaited: a reply to filler would show here.
        assert (await wire.response("a"))["result"] == {}
        await wire.send(filler)
        assert (await wire.request("ping", msg_id="b"))["result"] == {}
        assert wire.notifications == []
        await wire.send(filler)
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
        assert await wire.drain_stdout() == b""  # nothing came after the last ping's answer


async def test_a_crlf_terminated_request_is_answered_like_any_other() -> None:
    async with spawn() as wire:
        await wire.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": "init",
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "t", "version": "0"},
                    },
                }
            ).encode()
            + b"\r\n"
        )
        wire._methods["init"] = "initialize"
        assert (await wire.response("init"))["result"]["protocolVersion"] == "2025-06-18"
        wire.version = "2025-06-18"
        await wire.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\r\n')
        await wire.send(b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}\r\n')
        wire._methods[2] = "tools/list"
        assert [tool["name"] for tool in (await wire.response(2))["result"]["tools"]] == TOOL_NAMES


# -- the in-process session -------------------------------------------------------------------------------


class Client:
    """A test client of an in-process session, checking each message against the official schema."""

    def __init__(self, transport: MemoryTransport, version: str = "2025-11-25") -> None:
        self.transport = transport
        self.version = version
        self.seen = 0
        self.methods: dict[Any, str] = {}

    def send(self, message: dict[str, Any]) -> None:
        if "id" in message and "method" in message:
            self.methods[message["id"]] = message["method"]
        self.transport.feed(json.dumps(message).encode() + b"\n")

    def request(self, msg_id: Any, method: str, params: dict[str, Any] | None = None) -> None:
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params or {}})

    async def next(self, timeout: float = 5) -> dict[str, Any]:
        with anyio.fail_after(timeout):
            while True:
                lines = bytes(self.transport.written).split(b"\n")[:-1]
                if len(lines) > self.seen:
                    self.seen += 1
                    message: dict[str, Any] = json.loads(lines[self.seen - 1])
                    check_server_message(self.version, message, self.methods.get(message.get("id")))
                    return message
                await self.transport.wrote.wait()

    async def initialize(self) -> None:
        self.request(
            "init",
            "initialize",
            {
                "protocolVersion": self.version,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        )
        assert (await self.next())["result"]["protocolVersion"] == self.version
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


@asynccontextmanager
async def in_process(tools: list[Tool] | tuple[Tool, ...], **options: Any) -> AsyncIterator[Client]:
    page_size = options.pop("page_size", 100)
    transport = MemoryTransport()
    session = Session(build_server(tools, page_size=page_size), transport, **options)
    async with anyio.create_task_group() as group:
        group.start_soon(session.run)
        client = Client(transport)
        await client.initialize()
        yield client
        transport.feed(b"")


async def test_tools_list_pages_follow_their_cursors_to_every_tool_once_in_order() -> None:
    async with in_process(ALL_TOOLS, page_size=2) as client:
        pages: list[list[str]] = []
        cursor: str | None = None
        while True:
            client.request(len(pages), "tools/list", {} if cursor is None else {"cursor": cursor})
            result = (await client.next())["result"]
            pages.append([tool["name"] for tool in result["tools"]])
            cursor = result.get("nextCursor")
            if cursor is None:
                break
            assert isinstance(cursor, str) and cursor
            assert len(pages) <= len(ALL_TOOLS), "the cursors never end"
        assert pages == [TOOL_NAMES[i : i + 2] for i in range(0, len(TOOL_NAMES), 2)]
        assert [name for page in pages for name in page] == TOOL_NAMES


async def test_a_cursor_is_reusable_and_the_same_page_comes_back() -> None:
    async with in_process(ALL_TOOLS, page_size=2) as client:
        client.request(1, "tools/list")
        cursor = (await client.next())["result"]["nextCursor"]
        client.request(2, "tools/list", {"cursor": cursor})
        client.request(3, "tools/list", {"cursor": cursor})
        first, again = (await client.next())["result"], (await client.next())["result"]
        assert first == again and [tool["name"] for tool in first["tools"]] == TOOL_NAMES[2:4]


def _altered(cursor: str) -> list[str]:
    offset = base64.urlsafe_b64decode(cursor).decode().partition(":")[2]

    def encoded(text: str) -> str:
        return base64.urlsafe_b64encode(text.encode()).decode()

    middle = len(cursor) // 2
    return [
        cursor[:middle] + ("A" if cursor[middle] != "A" else "B") + cursor[middle + 1 :],
        cursor[:-2],
        cursor.swapcase(),
        encoded(f"other:{offset}"),
        encoded("sysmcp:0"),
        encoded("sysmcp:-2"),
        encoded("sysmcp:99"),
        encoded(f"sysmcp:{offset}x"),
        encoded(f"sysmcp:0{offset}"),  # the same number, written another way
        encoded(f"sysmcp: {offset}"),
        encoded("sysmcp:" + "9" * 5000),  # more digits than int() reads from a string
        cursor + "x",  # trailing characters after the padding
        " " + cursor,
        cursor + "\n",
        "",
    ]


async def test_an_altered_cursor_is_invalid_params() -> None:
    async with in_process(ALL_TOOLS, page_size=2) as client:
        client.request("first", "tools/list")
        cursor = (await client.next())["result"]["nextCursor"]
        bad_cursors: list[Any] = [*_altered(cursor), 2, ["x"]]
        for number, bad in enumerate(bad_cursors):
            client.request(number, "tools/list", {"cursor": bad})
            reply = await client.next()
            assert reply["id"] == number
            assert reply.get("error", {}).get("code") == -32602, (bad, reply)
        client.request("still", "tools/list", {"cursor": cursor})
        assert [tool["name"] for tool in (await client.next())["result"]["tools"]] == TOOL_NAMES[2:4]


# -- the worker limit -------------------------------------------------------------------------------------


class Gate:
    """A tool whose worker thread holds its slot until the test opens the gate."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered: list[int] = []
        self.arrived = {1: anyio.Event(), 2: anyio.Event()}  # set from each call's worker thread

    def tool(self) -> Tool:
        async def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
            number = int(arguments["n"])

            def work(meter: Meter) -> int:
                self.entered.append(number)
                anyio.from_thread.run_sync(self.arrived[number].set)
                if not self.open.wait(timeout=30):  # a bound, not an ordering: the test opens it
                    raise RuntimeError("the gate was never opened")
                meter.cancel()
                return number

            done = await ctx.run_in_worker(work)
            return ToolOutput(f"call {done} done", {"n": done})

        return Tool(
            name="gated",
            title="Gated",
            description="Waits in a worker thread until the test lets it go.",
            input_schema={
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
                "additionalProperties": False,
            },
            output={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            handler=handler,
        )


async def test_a_second_worker_call_waits_for_the_only_slot_while_ping_and_tools_list_are_answered() -> None:
    gate = Gate()
    limiter = anyio.CapacityLimiter(1)
    async with in_process([gate.tool(), *ALL_TOOLS], limiter=limiter) as client:
        try:
            client.request("one", "tools/call", {"name": "gated", "arguments": {"n": 1}})
            with anyio.fail_after(5):
                await gate.arrived[1].wait()
            client.request("two", "tools/call", {"name": "gated", "arguments": {"n": 2}})
            client.request("ping", "ping")
            assert (await client.next())["id"] == "ping"
            await anyio.wait_all_tasks_blocked()  # call two has gone as far as it can
            assert gate.entered == [1]
            stats = limiter.statistics()
            assert stats.borrowed_tokens == 1 and stats.tasks_waiting == 1
            client.request("list", "tools/list")
            listed = await client.next()
            assert listed["id"] == "list" and len(listed["result"]["tools"]) == len(ALL_TOOLS) + 1
            client.request("ping-again", "ping")
            assert (await client.next())["id"] == "ping-again"
            assert gate.entered == [1]
        finally:
            gate.open.set()  # never leave a worker thread waiting behind a failed test
        replies = {reply["id"]: reply["result"] for reply in [await client.next(), await client.next()]}
        assert replies["one"]["structuredContent"] == {"n": 1}
        assert replies["two"]["structuredContent"] == {"n": 2}
        assert gate.entered == [1, 2]


async def test_with_two_slots_the_second_worker_call_does_not_wait() -> None:
    # The counterpart: the waiting above is the limiter's doing, not the session's.
    gate = Gate()
    async with in_process([gate.tool()], limiter=anyio.CapacityLimiter(2)) as client:
        try:
            client.request("one", "tools/call", {"name": "gated", "arguments": {"n": 1}})
            client.request("two", "tools/call", {"name": "gated", "arguments": {"n": 2}})
            with anyio.fail_after(5):
                await gate.arrived[1].wait()
                await gate.arrived[2].wait()  # both in their threads at once, the gate still shut
            assert sorted(gate.entered) == [1, 2]
        finally:
            gate.open.set()
        assert {(await client.next())["id"], (await client.next())["id"]} == {"one", "two"}


# -- shutdown with work in flight -------------------------------------------------------------------------


EXIT_S = 30.0  # "promptly": well under the ~100 s the hash below needs at the fastest


async def hash_in_flight(wire: Wire, tmp_path: Path) -> None:
    """Start hashing a sparse 200 GiB file and wait until it reports progress.

    Minutes of work even at 2 GB/s (SHA extensions): an exit within ``EXIT_S`` is the call's cancellation,
    never its end, on a fast machine too; and ``EXIT_S`` is long enough for a loaded one.
    """
    sparse = tmp_path / "sparse.img"
    with sparse.open("wb") as handle:
        handle.truncate(200 << 30)
    await wire.initialize()
    await wire.start_call("file_sha256", {"path": str(sparse)}, msg_id="hash", progress="p")
    first = await wire.receive()
    assert first.get("method") == "notifications/progress", first
    assert first["params"]["progressToken"] == "p"


async def rest_of_stdout(wire: Wire) -> list[Any]:
    """Every message still unread; each line is parsed and schema-checked, and none may be cut short."""
    messages: list[Any] = []
    try:
        while True:
            messages.append(await wire.receive())
    except anyio.EndOfStream:
        pass
    assert wire._buffer == b"", f"a partial line at the end of stdout: {wire._buffer[:200]!r}"
    return messages


def only_progress_or_a_valid_answer(messages: list[Any]) -> None:
    for message in messages:
        assert isinstance(message, dict) and message["jsonrpc"] == "2.0", message
        if "method" in message:
            assert message["method"] == "notifications/progress", message
        else:
            assert message["id"] == "hash", message


async def test_closing_stdin_during_a_long_call_exits_zero_promptly_with_only_whole_lines(
    tmp_path: Path,
) -> None:
    async with spawn() as wire:
        await hash_in_flight(wire, tmp_path)
        await wire.close_stdin()
        assert await wire.wait_exit(timeout=EXIT_S) == 0
        only_progress_or_a_valid_answer(await rest_of_stdout(wire))
        assert "Traceback" not in await read_stderr(wire.process)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_during_a_long_call_exits_zero_promptly_with_only_whole_lines(
    signum: signal.Signals, tmp_path: Path
) -> None:
    async with spawn() as wire:
        await hash_in_flight(wire, tmp_path)
        wire.process.send_signal(signum)
        assert await wire.wait_exit(timeout=EXIT_S) == 0
        only_progress_or_a_valid_answer(await rest_of_stdout(wire))
        assert "Traceback" not in await read_stderr(wire.process)


async def test_a_signal_while_a_slow_client_reads_a_reply_lets_it_finish_that_line() -> None:
    """Each tools/list reply is longer than a pipe holds, so the server is in the middle of one when the
    client stops reading; signalled then, it wrote the rest of that line, never half of it."""
    async with spawn() as wire:
        await wire.initialize()
        for msg_id in range(20):
            await wire.send({"jsonrpc": "2.0", "id": msg_id, "method": "tools/list"})
        assert wire.process.stdout is not None
        begun = await wire.process.stdout.receive(1024)  # the first reply is being written
        wire.process.send_signal(signal.SIGTERM)
        rest = begun + await wire.drain_stdout()
        assert await wire.wait_exit(timeout=EXIT_S) == 0
        assert rest.endswith(b"\n"), f"the last line is cut short: …{rest[-100:]!r}"
        for line in rest.splitlines():
            json.loads(line)


async def test_closing_stdin_during_a_batch_still_writes_the_replies_its_other_requests_got(
    tmp_path: Path,
) -> None:
    """A batch's line goes out when its last request is done; the call cancelled at the end of input
    never was, so the ping's answer in the same batch was never written (nothing came at all)."""
    sparse = tmp_path / "sparse.img"
    with sparse.open("wb") as handle:
        handle.truncate(200 << 30)
    async with spawn(version="2025-03-26") as wire:
        await wire.initialize("2025-03-26")
        call = {"name": "file_sha256", "arguments": {"path": str(sparse)}, "_meta": {"progressToken": "p"}}
        await wire.send(
            [
                {"jsonrpc": "2.0", "id": "ping", "method": "ping"},
                {"jsonrpc": "2.0", "id": "hash", "method": "tools/call", "params": call},
            ]
        )
        first = await wire.receive()
        assert first.get("method") == "notifications/progress", first  # the hash is under way
        await wire.close_stdin()
        assert await wire.wait_exit(timeout=EXIT_S) == 0
        rest = await rest_of_stdout(wire)
        batches = [message for message in rest if isinstance(message, list)]
        assert batches == [[{"jsonrpc": "2.0", "id": "ping", "result": {}}]], rest
