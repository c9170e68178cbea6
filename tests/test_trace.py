"""``sysmcp trace``: the proxy is invisible to both sides and records every message, in order."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sysmcp.cli.trace import CLIENT_TO_SERVER, SERVER_TO_CLIENT
from tests.e2e.modern import MODERN, modern
from tests.wire import read_stderr, spawn

pytestmark = pytest.mark.anyio

SYSMCP = [sys.executable, "-m", "sysmcp"]


def trace_command(output: Path | None, *server: str) -> list[str]:
    return [*SYSMCP, "trace", *(["--output", str(output)] if output else []), "--", *server]


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_traced_sysmcp_session_is_recorded_both_ways_in_order(tmp_path: Path) -> None:
    log = tmp_path / "trace.jsonl"
    target = tmp_path / "f.bin"
    target.write_bytes(os.urandom(1 << 20))
    async with spawn(command=trace_command(log, *SYSMCP)) as wire:
        await wire.initialize()  # the wire checks every server message against the schema, through the proxy
        await wire.request("tools/list")
        reply = await wire.call("file_sha256", {"path": str(target)}, progress="p")
        assert reply["result"]["isError"] is False
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
    seen = records(log)
    assert seen[0]["event"] == "started" and seen[0]["command"] == SYSMCP
    assert seen[-1] == {**seen[-1], "event": "exited", "returncode": 0}
    sent = [r["message"] for r in seen if r.get("direction") == CLIENT_TO_SERVER]
    received = [r["message"] for r in seen if r.get("direction") == SERVER_TO_CLIENT]
    assert [m.get("method") for m in sent] == [
        "initialize",
        "notifications/initialized",
        "tools/list",
        "tools/call",
    ]
    assert received == [json.loads(line) for line in wire.raw_lines]  # exactly what the client got
    assert any(m.get("method") == "notifications/progress" for m in received)
    times = [r["elapsed_s"] for r in seen]
    assert times == sorted(times) and all(r["time"].endswith("Z") for r in seen)


async def test_a_modern_session_passes_through_unchanged(tmp_path: Path) -> None:
    log = tmp_path / "trace.jsonl"
    async with spawn(command=trace_command(log, *SYSMCP), version=MODERN) as wire:
        discovered = await modern(wire, "server/discover")
        assert discovered["result"]["supportedVersions"][0] == MODERN
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
    methods = [r["message"].get("method") for r in records(log) if r.get("direction") == CLIENT_TO_SERVER]
    assert methods == ["server/discover"]


async def test_lines_that_are_not_json_are_forwarded_intact_and_recorded_as_invalid(tmp_path: Path) -> None:
    log = tmp_path / "trace.jsonl"
    async with spawn(command=trace_command(log, "cat")) as wire:
        await wire.send(b"not json \xff\n")
        assert wire.process.stdout is not None
        echoed = b""
        while not echoed.endswith(b"\n"):
            echoed += await wire.process.stdout.receive()
        assert echoed == b"not json \xff\n"
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
    invalid = [r for r in records(log) if "invalid" in r]
    assert [r["direction"] for r in invalid] == [CLIENT_TO_SERVER, SERVER_TO_CLIENT]
    assert invalid[0]["invalid"] == "not json \\xff"


async def test_the_record_goes_to_stderr_without_output() -> None:
    async with spawn(command=trace_command(None, "cat")) as wire:
        await wire.send({"jsonrpc": "2.0", "method": "notifications/hello"})
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
        lines = [
            json.loads(line)
            for line in (await read_stderr(wire.process)).splitlines()
            if line.startswith("{")
        ]
    assert {r.get("direction") for r in lines} >= {CLIENT_TO_SERVER, SERVER_TO_CLIENT}


def test_the_exit_status_of_the_server_is_passed_on(tmp_path: Path) -> None:
    done = subprocess.run(
        trace_command(tmp_path / "t.jsonl", sys.executable, "-c", "import sys; sys.exit(3)"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 3
    assert records(tmp_path / "t.jsonl")[-1]["returncode"] == 3


def test_a_missing_command_is_a_usage_error() -> None:
    done = subprocess.run([*SYSMCP, "trace"], stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert done.returncode == 2 and b"after --" in done.stderr
    missing = subprocess.run(
        [*SYSMCP, "trace", "--", "/nonexistent/server"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    assert missing.returncode == 127 and b"cannot run" in missing.stderr


async def test_sigterm_is_forwarded_and_the_server_stops_cleanly(tmp_path: Path) -> None:
    log = tmp_path / "trace.jsonl"
    async with spawn(command=trace_command(log, *SYSMCP)) as wire:
        await wire.initialize()
        wire.process.send_signal(signal.SIGTERM)
        assert await wire.wait_exit() == 0
    assert any(r.get("signal") == "SIGTERM" for r in records(log))


def test_a_record_file_that_cannot_be_opened_is_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # as /tmp: another user may have planted the link
    (shared / "trace.jsonl").symlink_to(victim)
    for output, words in [
        (tmp_path / "missing" / "trace.jsonl", f"{tmp_path / 'missing'}: No such file or directory"),
        (shared / "trace.jsonl", "a symbolic link in a directory other users can write"),
    ]:
        done = subprocess.run(
            trace_command(output, "true"),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 2 and done.stderr == f"sysmcp trace: -o {output}: {words}\n"
    assert victim.read_text() == "precious\n"


def strict_records(path: Path) -> list[dict[str, Any]]:
    """The record's lines read as JSON is (RFC 8259): no NaN, no Infinity."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def test_lines_no_json_reader_takes_are_forwarded_intact_and_recorded_as_json(tmp_path: Path) -> None:
    """A line nested deeper than Python's parser goes killed the proxy (and with it the client's
    connection) on a RecursionError; NaN, Infinity and 1e400 were recorded as ``NaN`` and ``Infinity``,
    which no JSON reader (jq, the record's own readers) takes."""
    log = tmp_path / "trace.jsonl"
    deep = b"[" * 100_000 + b"]" * 100_000
    odd = [
        b'{"id":1,"result":{"x":NaN}}',
        b'{"id":2,"result":{"x":-Infinity}}',
        b'{"id":3,"result":{"x":1e400}}',
    ]
    after = b'{"jsonrpc":"2.0","method":"notifications/hello"}'
    sent = b"".join(line + b"\n" for line in [deep, *odd, after])
    done = subprocess.run(trace_command(log, "cat"), input=sent, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == sent  # the client got every byte back, in order
    assert b"Traceback" not in done.stderr
    seen = strict_records(log)
    for direction in (CLIENT_TO_SERVER, SERVER_TO_CLIENT):
        passed = [r for r in seen if r.get("direction") == direction]
        assert [r.get("invalid") for r in passed[:4]] == [line.decode() for line in [deep, *odd]]
        assert passed[4]["message"] == json.loads(after)
    assert seen[-1]["event"] == "exited"


def test_a_record_that_cannot_be_written_stops_the_record_not_the_conversation(tmp_path: Path) -> None:
    """A full disk under ``-o`` (here /dev/full) ended the proxy before the server started, said as
    "cannot run 'cat': No space left on device" (exit 127); a record on a stderr nobody reads any more
    (a closed pipe) ended it at its first line: the client lost its server either way."""
    sent = b'{"jsonrpc":"2.0","method":"notifications/hello"}\n' * 3
    done = subprocess.run(
        trace_command(Path("/dev/full"), "cat"), input=sent, capture_output=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, sent), done.stderr
    assert done.stderr.decode() == "sysmcp trace: the record stopped: No space left on device\n"
    reader, writer = os.pipe()
    os.close(reader)  # the record goes to a stderr nobody reads
    try:
        closed = subprocess.run(
            trace_command(None, "cat"), input=sent, stdout=subprocess.PIPE, stderr=writer, timeout=60
        )
    finally:
        os.close(writer)
    assert (closed.returncode, closed.stdout) == (0, sent)
