"""``sysmcp trace -- COMMAND …``: a transparent stdio proxy that records an MCP conversation.

Put it in front of any stdio MCP server (not only sysmcp) in a client's configuration; the client
and the server see each other's bytes unchanged, and every line that passes is written as one
JSON record (time, direction, the message) to a file or to stderr. Bytes are forwarded as soon as
they arrive — never held back until a line is complete — so the proxy cannot change timing-sensitive
behaviour such as progress or cancellation. The proxy exits with the server's exit status.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.to_thread
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from sysmcp.cli.outfile import open_output
from sysmcp.protocol.framing import LineDecoder, OversizedLine
from sysmcp.protocol.jsonrpc import Invalid, decode_json
from sysmcp.protocol.stdio import FdTransport, write_all

CLIENT_TO_SERVER = "client→server"
SERVER_TO_CLIENT = "server→client"
MAX_RECORDED_LINE = 64 << 20  # longer lines are forwarded intact but recorded only by length


@dataclass
class Recorder:
    """Writes one JSON line per event to a descriptor, unbuffered, so ``tail -f`` shows it live.

    A record that cannot be written (a full disk, a stderr nobody reads any more) stops, said once on
    stderr: the conversation it records goes on, as if the proxy were not there.
    """

    fd: int
    started: float
    stopped: bool = False

    def write(self, record: dict[str, Any]) -> None:
        if self.stopped:
            return
        line = {
            "time": datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "elapsed_s": round(time.monotonic() - self.started, 6),
            **record,
        }
        data = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")
        try:
            write_all(self.fd, data)
        except OSError as exc:
            self.stopped = True
            if self.fd != 2:
                with contextlib.suppress(OSError):
                    write_all(2, f"sysmcp trace: the record stopped: {exc.strerror or exc}\n".encode())

    def line(self, direction: str, frame: bytes | OversizedLine) -> None:
        if isinstance(frame, OversizedLine):
            self.write({"direction": direction, "oversized_bytes": frame.length})
            return
        if not frame.strip():
            return
        # Read as the session reads a line: never an exception (a line nested too deeply for the parser
        # would end the proxy, and the conversation with it), never a NaN or Infinity the record could
        # only write as no JSON reader takes it.
        message = decode_json(frame)
        if isinstance(message, Invalid):
            self.write({"direction": direction, "invalid": frame.decode("utf-8", "backslashreplace")})
            return
        self.write({"direction": direction, "message": message})

    def lines(self, direction: str, decoder: LineDecoder, data: bytes) -> None:
        """Every line ``data`` completes; ``b""``: the stream's end (a last line may lack its newline)."""
        for frame in decoder.feed(data) if data else decoder.finish():
            self.line(direction, frame)


class CommandNotStarted(Exception):
    """The server's command could not be run: why, worded."""


async def _pump_client(client: FdTransport, server_in: ByteSendStream, recorder: Recorder) -> None:
    """Client → server; at the client's end of input, the server's input ends too."""
    decoder = LineDecoder(MAX_RECORDED_LINE)
    while True:
        data = await client.receive()
        if not data:
            recorder.lines(CLIENT_TO_SERVER, decoder, data)
            recorder.write({"event": "client closed its output"})
            break
        try:
            await server_in.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            recorder.write({"event": "server stopped reading"})
            break
        recorder.lines(CLIENT_TO_SERVER, decoder, data)
    await server_in.aclose()


async def _pump_server(server_out: ByteReceiveStream, client: FdTransport, recorder: Recorder) -> None:
    """Server → client, until the server closes its output."""
    decoder = LineDecoder(MAX_RECORDED_LINE)
    client_gone = False
    async for data in server_out:
        if not client_gone:
            try:
                await client.send(data)
            except OSError:
                client_gone = True  # keep draining so the server is never blocked on a full pipe
                recorder.write({"event": "client stopped reading"})
        recorder.lines(SERVER_TO_CLIENT, decoder, data)
    recorder.lines(SERVER_TO_CLIENT, decoder, b"")


async def _trace(command: Sequence[str], recorder: Recorder) -> int:
    client = FdTransport(0, 1)
    try:
        process: Process = await anyio.open_process(
            list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None
        )
    except OSError as exc:
        raise CommandNotStarted(exc.strerror or str(exc)) from None
    recorder.write({"event": "started", "command": list(command), "pid": process.pid})
    assert process.stdin is not None and process.stdout is not None
    async with anyio.create_task_group() as group:

        async def forward_signals() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
                async for signum in signals:
                    recorder.write({"event": "signal forwarded", "signal": signal.Signals(signum).name})
                    process.send_signal(signum)

        group.start_soon(forward_signals)
        group.start_soon(_pump_client, client, process.stdin, recorder)
        await _pump_server(process.stdout, client, recorder)
        returncode = await process.wait()
        group.cancel_scope.cancel()  # the client may still be connected; its input no longer matters
    recorder.write({"event": "exited", "returncode": returncode})
    return returncode if returncode >= 0 else 128 - returncode


def run_trace(command: Sequence[str], output: str | None) -> int:
    """Proxy stdio to ``command``, recording to ``output`` (a file, truncated) or stderr."""
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        sys.stderr.write("sysmcp trace: give the server command after --, e.g. sysmcp trace -- uvx sysmcp\n")
        return 2
    try:  # the record holds the whole conversation: a new file is the operator's only (0600)
        fd = open_output(output, mode=0o600) if output else 2
    except OSError as exc:
        sys.stderr.write(f"sysmcp trace: -o {output}: {exc.strerror or exc}\n")
        return 2
    try:
        return anyio.run(_trace, command, Recorder(fd, time.monotonic()))
    except CommandNotStarted as exc:
        sys.stderr.write(f"sysmcp trace: cannot run {command[0]!r}: {exc}\n")
        return 127
    finally:
        if output:
            os.close(fd)
