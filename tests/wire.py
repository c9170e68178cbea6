"""Drive the real ``sysmcp`` process over real pipes with raw JSON-RPC, checking every message it writes."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from tests import words
from tests.mcp_schema import check_server_message
from tests.profile import child_env

SERVER = [sys.executable, "-m", "sysmcp"]
#: How long a test waits for the server's next message before calling it hung. A guard, not a measure:
#: on a loaded machine (CI with a CPU hog) a server's start alone took more than 10 s.
HANG_S = 60.0


class Wire:
    """One connection to a server process, as a test client sees it."""

    def __init__(self, process: Process, version: str) -> None:
        self.process = process
        self.version = version  # what every server message is validated against
        self.notifications: list[dict[str, Any]] = []
        self.ids = itertools.count(1)
        self._methods: dict[Any, str] = {}
        self._buffer = b""
        self._queue: list[dict[str, Any]] = []
        self.raw_lines: list[bytes] = []

    async def send(self, message: dict[str, Any] | list[Any] | bytes | str) -> None:
        for item in message if isinstance(message, list) else [message]:
            if isinstance(item, dict) and "id" in item and "method" in item:
                self._methods[item["id"]] = item["method"]
        if isinstance(message, (dict, list)):
            data = json.dumps(message).encode() + b"\n"
        elif isinstance(message, str):
            data = message.encode() + b"\n"
        else:
            data = message
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def receive(self, timeout: float = HANG_S) -> Any:
        """The next message the server writes (a dict, or a list for a batch), validated."""
        with anyio.fail_after(timeout):
            while not self._queue:
                assert self.process.stdout is not None
                chunk = await self.process.stdout.receive()
                self._buffer += chunk
                *lines, self._buffer = self._buffer.split(b"\n")
                for line in lines:
                    self.raw_lines.append(line)
                    value = json.loads(line.decode("utf-8"))  # strict UTF-8: the wire must be valid
                    self._queue.append(value)
        message = self._queue.pop(0)
        words.collect_message(message)  # checked for "1 files" when the session ends (tests/conftest.py)
        for item in message if isinstance(message, list) else [message]:
            check_server_message(self.version, item, self._methods.get(item.get("id")))
        return message

    async def response(self, msg_id: Any, timeout: float = HANG_S) -> dict[str, Any]:
        """Wait for the response to ``msg_id``, keeping notifications seen on the way."""
        while True:
            message = await self.receive(timeout)
            if isinstance(message, dict) and "method" in message:
                self.notifications.append(message)
                continue
            assert isinstance(message, dict), message
            if message.get("id") == msg_id:
                return message
            raise AssertionError(f"expected the response to {msg_id!r}, got {message}")

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, msg_id: Any = None
    ) -> dict[str, Any]:
        msg_id = next(self.ids) if msg_id is None else msg_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self.response(msg_id)

    async def initialize(
        self, version: str = "2025-11-25", capabilities: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        reply = await self.request(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": capabilities or {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        )
        self.version = reply["result"]["protocolVersion"]
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply

    async def start_call(
        self, tool: str, arguments: dict[str, Any], *, msg_id: Any, progress: str | int | None = None
    ) -> None:
        """Send a ``tools/call`` without waiting for its answer (to cancel it, or to ping meanwhile)."""
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if progress is not None:
            params["_meta"] = {"progressToken": progress}
        await self.send({"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": params})

    async def call(
        self, tool: str, arguments: dict[str, Any], *, progress: str | int | None = None, msg_id: Any = None
    ) -> dict[str, Any]:
        msg_id = next(self.ids) if msg_id is None else msg_id
        await self.start_call(tool, arguments, msg_id=msg_id, progress=progress)
        return await self.response(msg_id)

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    async def wait_exit(self, timeout: float = 30) -> int:
        """The exit status. ``timeout`` is a guard: what "promptly" is measured against is work that would
        take minutes or never end (a sparse file of hundreds of GiB, a thread stuck in the kernel)."""
        with anyio.fail_after(timeout):
            return await self.process.wait()

    async def drain_stdout(self, timeout: float = 30) -> bytes:
        """Everything left on stdout until the server closes it."""
        assert self.process.stdout is not None
        rest = self._buffer
        with anyio.fail_after(timeout):
            try:
                while True:
                    rest += await self.process.stdout.receive()
            except anyio.EndOfStream:
                pass
        return rest


def result_text(reply: dict[str, Any]) -> str:
    return "\n".join(block["text"] for block in reply["result"]["content"] if block["type"] == "text")


@asynccontextmanager
async def spawn(
    *args: str,
    version: str = "2025-11-25",
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    wire_class: type[Wire] = Wire,
) -> AsyncIterator[Wire]:
    """Start the real server; kill it if the test leaves it running."""
    full_env = child_env({**os.environ, **(env or {})})  # the portable profile too, when the run is under it
    process = await anyio.open_process([*(command or SERVER), *args], env=full_env)
    wire = wire_class(process, version)
    try:
        yield wire
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.move_on_after(5):
            await process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()


async def read_stderr(process: Process) -> str:
    assert process.stderr is not None
    text = ""
    with anyio.move_on_after(5):
        async for chunk in TextReceiveStream(process.stderr):
            text += chunk
    return text


def answered_session(
    argv: list[str], messages: list[dict[str, Any]], *, env: dict[str, str], timeout: float = HANG_S
) -> tuple[dict[Any, dict[str, Any]], str, int]:
    """Send ``messages`` to a server started as ``argv``, read until every request among them is
    answered, then close its stdin as a host does: its replies by id, its stderr and its exit status.

    Closing stdin right after the last request, as a piped ``input=`` does, tells the server the client is
    gone: calls still running then get only a short grace, which a loaded machine can outlast.
    """
    wanted = {message["id"] for message in messages if "id" in message and "method" in message}
    replies: dict[Any, dict[str, Any]] = {}
    with (
        tempfile.TemporaryFile() as stderr,
        subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env
        ) as process,
    ):
        assert process.stdin is not None and process.stdout is not None
        deadline_timer = _kill_after(process, timeout)
        try:
            process.stdin.write(b"".join(json.dumps(message).encode() + b"\n" for message in messages))
            process.stdin.flush()
            for line in process.stdout:
                message = json.loads(line)
                if isinstance(message, dict) and "id" in message and "method" not in message:
                    replies[message["id"]] = message
                if wanted <= replies.keys():
                    break
            process.stdin.close()
            for line in process.stdout.read().splitlines():  # what it writes after the end of input
                message = json.loads(line)
                if isinstance(message, dict) and "id" in message and "method" not in message:
                    replies.setdefault(message["id"], message)
            status = process.wait()
        finally:
            deadline_timer.cancel()
        stderr.seek(0)
        return replies, stderr.read().decode("utf-8", "replace"), status


def _kill_after(process: subprocess.Popen[bytes], seconds: float) -> threading.Timer:
    """A timer that kills ``process`` if it is still running after ``seconds``: a hung server fails the
    test (its replies stop short) instead of hanging it."""
    timer = threading.Timer(seconds, process.kill)
    timer.daemon = True
    timer.start()
    return timer
