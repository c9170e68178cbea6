"""The wire rules of the foundation, checked against the real process over real pipes."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from tests.e2e.modern import MODERN, modern
from tests.wire import read_stderr, result_text, spawn

pytestmark = pytest.mark.anyio

LEGACY = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]


@pytest.mark.parametrize("version", LEGACY)
async def test_initialize_echoes_each_supported_version(version: str) -> None:
    async with spawn() as wire:
        reply = await wire.initialize(version)
        result = reply["result"]
        assert result["protocolVersion"] == version
        assert result["serverInfo"]["name"] == "sysmcp"
        assert "tools" in result["capabilities"] and "logging" in result["capabilities"]
        assert "read-only" in result["instructions"]
        assert ("title" in result["serverInfo"]) == (version >= "2025-06-18")


async def test_unknown_version_is_answered_with_our_latest() -> None:
    async with spawn() as wire:
        reply = await wire.initialize("1999-01-01")
        assert reply["result"]["protocolVersion"] == "2025-11-25"


async def test_unknown_method_gets_method_not_found_before_and_after_initialize() -> None:
    async with spawn() as wire:
        before = await wire.request("server/nonsense")
        assert before["error"]["code"] == -32601
        await wire.initialize()
        after = await wire.request("no/such/method", {})
        assert after["error"]["code"] == -32601


async def test_requests_before_initialize_are_refused_but_ping_works() -> None:
    async with spawn() as wire:
        assert (await wire.request("ping"))["result"] == {}
        refused = await wire.request("tools/list")
        assert refused["error"]["code"] == -32600
        assert "initialize" in refused["error"]["message"]


async def test_second_initialize_is_refused() -> None:
    async with spawn() as wire:
        await wire.initialize()
        again = await wire.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        )
        assert again["error"]["code"] == -32600


async def test_ids_are_echoed_exactly_including_zero_and_strings() -> None:
    async with spawn() as wire:
        await wire.initialize()
        for msg_id in (0, -7, 2**53, "abc", "", "0"):
            reply = await wire.request("ping", msg_id=msg_id)
            assert reply["id"] == msg_id and type(reply["id"]) is type(msg_id)


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"this is not json", -32700),
        (b'{"jsonrpc": "2.0", "id": 1, "method": ', -32700),
        (b"\xff\xfe{}", -32700),
        (b"[" * 100_000 + b"]" * 100_000, -32700),
        (b'"a string"', -32600),
        (b"42", -32600),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1}', -32600),
        (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": 5}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": NaN}}', -32700),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"n": -Infinity}}', -32700),
    ],
)
async def test_malformed_lines_get_an_error_and_the_server_keeps_serving(line: bytes, code: int) -> None:
    async with spawn() as wire:
        await wire.initialize()
        await wire.send(line + b"\n")
        error = await wire.receive()
        assert error["error"]["code"] == code
        assert (await wire.request("ping"))["result"] == {}


async def test_an_error_keeps_the_id_when_one_could_be_read() -> None:
    async with spawn() as wire:
        await wire.send(b'{"jsonrpc": "1.0", "id": "keep-me", "method": "ping"}\n')
        error = await wire.receive()
        assert error["id"] == "keep-me" and error["error"]["code"] == -32600


async def test_an_oversized_line_is_rejected_not_buffered() -> None:
    async with spawn() as wire:
        await wire.initialize()
        await wire.send(
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"a" * (5 << 20) + b'"}}\n'
        )
        error = await wire.receive()
        assert error["error"]["code"] == -32600 and "limit" in error["error"]["message"]
        assert (await wire.request("ping"))["result"] == {}


async def test_an_oversized_request_is_refused_by_its_id_when_its_start_names_it() -> None:
    """The id comes first in what every SDK writes: an error with id null answered no request, and the
    client waited for its call (a verify_checksums of a 5 MiB manifest given as text) until its timeout.
    A line whose start does not name it as a request (a response of the client's, params first) still
    gets the one error with id null: guessing would answer a request the client did not make."""
    big = "a" * (5 << 20)
    lines = [
        {
            "jsonrpc": "2.0",
            "id": "big",
            "method": "tools/call",
            "params": {"name": "x", "arguments": {"m": big}},
        },
        {"jsonrpc": "2.0", "params": {"x": big}, "id": "late", "method": "ping"},
        {"jsonrpc": "2.0", "id": "ours", "result": {"x": big}},
    ]
    async with spawn() as wire:
        await wire.initialize()
        for line in lines:
            await wire.send(line)
        refused = [await wire.receive() for _ in lines]
        assert [r["id"] for r in refused] == ["big", None, None], refused
        assert all(r["error"]["code"] == -32600 and "limit" in r["error"]["message"] for r in refused)
        assert (await wire.request("ping", msg_id="after"))["id"] == "after"


async def test_an_oversized_request_whose_start_cuts_its_id_is_not_answered_by_part_of_it() -> None:
    """The first 4 KiB of a line may end inside its id: ``"id":123`` of ``"id":123456``. Answered as 123,
    the refusal took the place of the answer to another request of the client's, id 123, in flight."""
    start = b'{"jsonrpc":"2.0","method":"ping","pad":"'
    tail = b'","id":123'
    pad = b"a" * (4096 - len(start) - len(tail))
    line = start + pad + tail + b'456,"params":{"x":"' + b"a" * (5 << 20) + b'"}}\n'
    async with spawn() as wire:
        await wire.initialize()
        await wire.send(line)
        refused = await wire.receive()
        assert refused["id"] is None and "limit" in refused["error"]["message"], refused
        assert (await wire.request("ping", msg_id=123)) == {"jsonrpc": "2.0", "id": 123, "result": {}}


async def test_notifications_are_never_answered() -> None:
    async with spawn() as wire:
        await wire.initialize()
        await wire.send({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {}})
        await wire.send({"jsonrpc": "2.0", "method": "tools/list"})  # a request without id is a notification
        reply = await wire.request("ping", msg_id="after")
        assert reply["id"] == "after"  # nothing came before the ping's answer


async def test_batches_are_answered_only_in_2025_03_26() -> None:
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "nope"},
    ]
    async with spawn() as wire:
        await wire.initialize("2025-03-26")
        await wire.send(batch)
        replies = await wire.receive()
        assert isinstance(replies, list)
        assert sorted(r["id"] for r in replies) == [1, 2]
        assert {r["id"]: ("result" in r) for r in replies} == {1: True, 2: False}
    async with spawn() as wire:
        await wire.initialize("2025-06-18")
        await wire.send(batch)
        refused = await wire.receive()
        assert refused["error"]["code"] == -32600


@pytest.mark.parametrize("version", ["2024-11-05", "2025-06-18", "2025-11-25"])
async def test_a_batch_where_there_are_none_is_refused_to_each_request_in_it_by_its_id(version: str) -> None:
    """The one error with id null left the client's requests unanswered: a client that sent a batch
    where its version has none waited for answers to ids 1 and 2 until its own timeout."""
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
        {"jsonrpc": "2.0", "id": "two", "method": "tools/list"},
    ]
    async with spawn(version=version) as wire:
        await wire.initialize(version)
        await wire.send(batch)
        for msg_id in (1, "two"):
            refused = await wire.receive()
            assert refused["id"] == msg_id and refused["error"]["code"] == -32600, refused
            assert "has no batches: send each message on its own line" in refused["error"]["message"]
        await wire.send([{"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}])
        refused = await wire.receive()  # no request to answer: the line's one error
        assert refused["id"] is None and refused["error"]["code"] == -32600, refused
        assert (await wire.request("ping", msg_id="after"))["id"] == "after"  # and nothing else came


async def test_tools_list_describes_every_tool_for_the_version() -> None:
    async with spawn() as wire:
        await wire.initialize("2025-06-18")
        tools = (await wire.request("tools/list"))["result"]["tools"]
        assert {"disk_usage", "file_sha256", "dir_usage"} <= {t["name"] for t in tools}
        for tool in tools:
            schema = tool["inputSchema"]
            assert tool["title"] and tool["description"] and "outputSchema" in tool
            assert schema["additionalProperties"] is False
            # a property's rules are in its keywords, its words in docs/tools.md (tests/test_tool_docs.py)
            assert all(prop.get("type") for prop in schema["properties"].values())
            assert tool["annotations"]["readOnlyHint"] is True
            assert tool["annotations"]["destructiveHint"] is False
    async with spawn() as wire:
        await wire.initialize("2024-11-05")
        for tool in (await wire.request("tools/list"))["result"]["tools"]:
            assert not {"title", "outputSchema", "annotations"} & set(tool)


@pytest.mark.parametrize(
    "method", ["tools/list", "resources/list", "resources/templates/list", "prompts/list"]
)
async def test_lists_reject_a_cursor_they_did_not_issue(method: str) -> None:
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.request(method, {"cursor": "bogus"})
        assert reply["error"]["code"] == -32602


async def test_unknown_tool_is_invalid_params() -> None:
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("rm_rf", {})
        assert reply["error"]["code"] == -32602 and "rm_rf" in reply["error"]["message"]


@pytest.mark.parametrize(
    ("version", "as_result"), [("2025-06-18", False), ("2025-11-25", True), ("2024-11-05", False)]
)
async def test_bad_arguments_name_the_field_and_rule_per_version(version: str, as_result: bool) -> None:
    async with spawn() as wire:
        await wire.initialize(version)
        reply = await wire.call("dir_usage", {"path": "/tmp", "top_n": 0, "colour": "red"})
        if as_result:
            assert reply["result"]["isError"] is True
            text = result_text(reply)
        else:
            assert reply["error"]["code"] == -32602
            text = reply["error"]["message"]
        assert "'top_n' must be >= 1" in text and "'colour' is not a known argument" in text


async def test_set_level_accepts_the_eight_levels_and_refuses_others() -> None:
    async with spawn() as wire:
        await wire.initialize()
        for level in ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"):
            assert (await wire.request("logging/setLevel", {"level": level}))["result"] == {}
        assert (await wire.request("logging/setLevel", {"level": "loud"}))["error"]["code"] == -32602


async def test_business_failures_are_error_results(tmp_path: Path) -> None:
    async with spawn() as wire:
        await wire.initialize()
        missing = await wire.call("file_sha256", {"path": str(tmp_path / "absent")})
        assert missing["result"]["isError"] is True and "No such file" in result_text(missing)
        directory = await wire.call("file_sha256", {"path": str(tmp_path)})
        assert directory["result"]["isError"] is True and "directory" in result_text(directory)
        relative = await wire.call("disk_usage", {"path": "relative/path"})
        assert relative["result"]["isError"] is True and "absolute" in result_text(relative)


async def test_progress_echoes_the_token_and_increases(tmp_path: Path) -> None:
    target = tmp_path / "big.bin"
    target.write_bytes(os.urandom(1 << 20) * 64)
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("file_sha256", {"path": str(target)}, progress="tok-1")
        assert reply["result"]["isError"] is False
        progress = [n["params"] for n in wire.notifications if n["method"] == "notifications/progress"]
        assert progress, "expected at least the final progress notification"
        assert all(p["progressToken"] == "tok-1" for p in progress)
        values = [p["progress"] for p in progress]
        assert values == sorted(set(values))
        assert progress[-1]["progress"] == progress[-1]["total"] == 64 << 20
    async with spawn() as wire:
        await wire.initialize()
        await wire.call("file_sha256", {"path": str(target)}, progress=99)
        assert all(n["params"]["progressToken"] == 99 for n in wire.notifications)


async def test_cancelled_call_gets_no_response_and_the_server_keeps_serving(tmp_path: Path) -> None:
    # A sparse 256 GiB file takes minutes to hash (even at 2 GB/s), so the call is surely still running
    # when it is cancelled, and an exit within wait_exit's guard is the thread stopping, not finishing.
    sparse = tmp_path / "sparse.img"
    with sparse.open("wb") as handle:
        handle.truncate(256 << 30)
    async with spawn() as wire:
        await wire.initialize()
        await wire.start_call("file_sha256", {"path": str(sparse)}, msg_id="hash", progress=1)
        first = await wire.receive()  # a progress notification: the hash is running
        assert first["method"] == "notifications/progress"
        await wire.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "hash"}}
        )
        await wire.send({"jsonrpc": "2.0", "id": "after-cancel", "method": "ping"})
        # Until the ping's answer, anything for "hash" may only be progress, never a response.
        while (message := await wire.receive()).get("id") != "after-cancel":
            assert message["method"] == "notifications/progress"
        await wire.send({"jsonrpc": "2.0", "id": "last", "method": "ping"})
        while (message := await wire.receive()).get("id") != "last":
            assert message["method"] == "notifications/progress"
        assert (await wire.call("disk_usage", {"path": "/"}))["result"]["isError"] is False
        # The worker thread really stopped: otherwise the process could not exit promptly.
        await wire.close_stdin()
        assert await wire.wait_exit() == 0


async def test_cancelling_unknown_or_finished_requests_is_ignored() -> None:
    async with spawn() as wire:
        await wire.initialize()
        await wire.request("ping", msg_id=5)
        for request_id in (5, 12345, "nope", None):
            await wire.send(
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
            )
        assert (await wire.request("ping"))["result"] == {}


async def test_a_long_call_does_not_delay_ping(tmp_path: Path) -> None:
    target = tmp_path / "large.bin"
    with target.open("wb") as out:
        out.truncate(2 << 30)  # sparse: instant to make, a second or two to hash
    async with spawn() as wire:
        await wire.initialize()
        await wire.start_call("file_sha256", {"path": str(target)}, msg_id="hash", progress=1)
        first = await wire.receive()
        assert first.get("method") == "notifications/progress"
        await wire.send({"jsonrpc": "2.0", "id": "ping", "method": "ping"})
        order: list[str] = []
        while len(order) < 2:
            message = await wire.receive(timeout=60)
            if "id" in message:
                order.append(message["id"])
        assert order == ["ping", "hash"]


async def test_end_of_stdin_exits_zero_with_only_protocol_on_stdout() -> None:
    async with spawn() as wire:
        await wire.initialize()
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
        assert await wire.drain_stdout() == b""
        for line in wire.raw_lines:
            assert json.loads(line)["jsonrpc"] == "2.0"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_signals_stop_the_server_cleanly(signum: signal.Signals) -> None:
    async with spawn() as wire:
        await wire.initialize()
        wire.process.send_signal(signum)
        assert await wire.wait_exit() == 0
        stderr = await read_stderr(wire.process)
        assert "Traceback" not in stderr


async def test_stray_prints_cannot_reach_the_wire() -> None:
    # fd 1 is pointed at stderr at start-up: a library that prints, or writes to fd 1, cannot corrupt the wire.
    # The noise starts once that is done (however long a loaded machine takes to start the server).
    script = (
        "import os, sys, threading, time\n"
        "from sysmcp.cli import main\n"
        "def noisy():\n"
        "    while not os.path.sameopenfile(1, 2): time.sleep(0.01)\n"
        "    print('POLLUTION', flush=True); os.write(1, b'POLLUTION\\n')\n"
        "threading.Thread(target=noisy, daemon=True).start()\n"
        "sys.exit(main())\n"
    )
    async with spawn(command=[sys.executable, "-c", script]) as wire:
        await wire.initialize()
        stderr_seen = ""
        with anyio.fail_after(5):
            while "POLLUTION" not in stderr_seen:
                assert wire.process.stderr is not None
                stderr_seen += (await wire.process.stderr.receive()).decode()
        await wire.close_stdin()
        await wire.wait_exit()
        assert b"POLLUTION" not in await wire.drain_stdout()


async def test_non_ascii_is_written_as_is(tmp_path: Path) -> None:
    name = tmp_path / "résumé-日本.txt"
    name.write_bytes(b"hello")
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("file_sha256", {"path": str(name)})
        assert "résumé-日本.txt" in result_text(reply)
        assert "résumé-日本.txt".encode() in b"\n".join(wire.raw_lines)


async def test_many_concurrent_calls_complete_out_of_order_correctly(tmp_path: Path) -> None:
    files = []
    for i in range(20):
        f = tmp_path / f"f{i}"
        f.write_bytes(os.urandom(i * 1000 + 1))
        files.append(f)
    async with spawn() as wire:
        await wire.initialize()
        for i, f in enumerate(files):
            await wire.send(
                {
                    "jsonrpc": "2.0",
                    "id": i,
                    "method": "tools/call",
                    "params": {"name": "file_sha256", "arguments": {"path": str(f)}},
                }
            )
        seen: dict[int, str] = {}
        with anyio.fail_after(20):
            while len(seen) < len(files):
                message = await wire.receive()
                seen[message["id"]] = message["result"]["structuredContent"]["sha256"]
        import hashlib

        assert seen == {i: hashlib.sha256(f.read_bytes()).hexdigest() for i, f in enumerate(files)}


async def test_every_tool_refuses_bad_arguments_naming_the_field_and_rule() -> None:
    async with spawn() as wire:
        await wire.initialize("2025-11-25")
        tools = (await wire.request("tools/list"))["result"]["tools"]
        assert len(tools) >= 6
        for tool in tools:
            properties = tool["inputSchema"]["properties"]
            string_field = next(
                (name for name, prop in properties.items() if prop.get("type") == "string"), None
            )
            if string_field is not None:
                wrong: object
                wrong, rule = 5, f"'{string_field}' must be a string, got integer 5"
            else:  # a tool without string arguments (disk_io): a string where a number belongs
                string_field = next(name for name, prop in properties.items() if prop.get("type") == "number")
                wrong, rule = "x", f"'{string_field}' must be a number, got string 'x'"
            reply = await wire.call(tool["name"], {string_field: wrong, "no_such_option": True})
            text = result_text(reply)
            assert reply["result"]["isError"] is True, tool["name"]
            assert rule in text, text
            assert "'no_such_option' is not a known argument" in text, text


async def test_a_stored_result_is_announced_with_resources_list_changed_before_the_result(
    tmp_path: Path,
) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    async with spawn() as wire:
        init = await wire.initialize()
        assert init["result"]["capabilities"]["resources"]["listChanged"] is True
        small = await wire.call("file_sha256", {"path": str(tmp_path / "f")})
        assert small["result"]["isError"] is False and wire.notifications == []  # nothing stored
        made = await wire.call("hash_tree", {"path": str(tmp_path)})
        assert made["result"]["isError"] is False
        assert [n["method"] for n in wire.notifications] == ["notifications/resources/list_changed"]
        listed = (await wire.request("resources/list"))["result"]["resources"]
        links = [b["uri"] for b in made["result"]["content"] if b["type"] == "resource_link"]
        assert links and links == [r["uri"] for r in listed]


async def test_the_2026_era_promises_no_resource_list_notifications() -> None:
    async with spawn(version=MODERN) as wire:
        result = (await modern(wire, "server/discover"))["result"]
        assert result["capabilities"]["resources"].get("listChanged") is not True
