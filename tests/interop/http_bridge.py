"""A small stdio-to-Streamable-HTTP bridge, so HTTP-only test tools can drive a stdio MCP server.

``python tests/interop/http_bridge.py -- COMMAND …`` listens on 127.0.0.1 (a free port), prints
``http://127.0.0.1:PORT/mcp`` on its first stdout line, and starts one COMMAND process per MCP session
(per ``initialize``). It is test scaffolding for the conformance suite, not a production transport:
requests of one session are forwarded one at a time, so every notification the server writes before
a response belongs to that request and goes back in the same SSE stream, ahead of the response.
Only the standard library is used.
"""

from __future__ import annotations

import argparse
import itertools
import json
import queue
import subprocess
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SESSION_HEADER = "Mcp-Session-Id"
RESPONSE_TIMEOUT = 60.0
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]"}
MAX_SESSIONS = 4
MODERN = "2026-07-28"
#: How 2026-07-28's HTTP transport carries a refused request: the status says what the JSON-RPC code
#: says (the code itself is the server's; the bridge only picks the status for it).
HTTP_STATUS = {-32600: 400, -32602: 400, -32022: 400, -32601: 404}


def _enveloped(message: dict[str, Any]) -> bool:
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and "io.modelcontextprotocol/protocolVersion" in meta


class Session:
    """One server process and the lines it writes."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip():
                self.lines.put(line)
        self.lines.put(None)

    def send(self, message: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def exchange(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        """Forward a request; return the notifications it caused, then its response."""
        with self.lock:
            self.send(request)
            out: list[dict[str, Any]] = []
            while True:
                line = self.lines.get(timeout=RESPONSE_TIMEOUT)
                if line is None:
                    raise ConnectionError("the server exited")
                message = json.loads(line)
                if "method" in message and "id" in message:  # a request to the client: we cannot relay it
                    self.send(
                        {
                            "jsonrpc": "2.0",
                            "id": message["id"],
                            "error": {"code": -32601, "message": "the HTTP bridge relays no server requests"},
                        }
                    )
                    continue
                out.append(message)
                if "method" not in message and message.get("id") == request.get("id"):
                    return out

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Bridge(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, command: list[str]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.command = command
        self.sessions: dict[str, Session] = {}
        self.ids = itertools.count(1)
        self.spare = Session(command)  # started ahead: a new session costs no process start-up
        self.spare_lock = threading.Lock()
        # 2026-07-28 has no handshake and no HTTP session: each request stands alone, so one process
        # answers them all (its stdio connection is in the modern era from the first one on).
        self.stateless = Session(command)

    def new_session(self) -> str:
        """A session on the spare process; the oldest are closed so clients that never DELETE stay cheap."""
        with self.spare_lock:
            session, self.spare = self.spare, Session(self.command)
            session_id = f"s{next(self.ids)}"
            self.sessions[session_id] = session
            while len(self.sessions) > MAX_SESSIONS:
                self.sessions.pop(next(iter(self.sessions))).close()
        return session_id


class Handler(BaseHTTPRequestHandler):
    server: Bridge
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write("bridge: " + format % args + "\n")

    def _reply(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, messages: list[dict[str, Any]], headers: dict[str, str]) -> None:
        data = b"".join(b"event: message\ndata: " + json.dumps(m).encode() + b"\n\n" for m in messages)
        self.send_response(HTTPStatus.OK)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _local(self) -> bool:
        """DNS-rebinding protection: only local Host and Origin headers are served."""
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        origin = self.headers.get("Origin")
        origin_host = origin.split("://", 1)[-1].rsplit(":", 1)[0] if origin else None
        return host in LOCAL_HOSTS and (origin_host is None or origin_host in LOCAL_HOSTS)

    def _stateless(self, message: dict[str, Any]) -> bool:
        """A 2026-07-28 request: it says so in its header or in its ``_meta``."""
        return self.headers.get("MCP-Protocol-Version") == MODERN or _enveloped(message)

    def _error(self, status: int, code: int, message: str, msg_id: Any = None) -> None:
        self._reply(status, {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})

    def do_POST(self) -> None:
        # The body is read first, whatever the answer: left unread on a kept-alive connection, it would
        # be taken for the next request's first line.
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.path.split("?")[0] != "/mcp":
            return self._reply(HTTPStatus.NOT_FOUND)
        if not self._local():
            return self._error(HTTPStatus.FORBIDDEN, -32600, "Forbidden: non-local Host or Origin")
        try:
            message = json.loads(body)
        except ValueError:
            return self._error(HTTPStatus.BAD_REQUEST, -32700, "Parse error")
        if not isinstance(message, dict):
            return self._error(HTTPStatus.BAD_REQUEST, -32600, "Invalid Request: one message per POST")
        session_id = self.headers.get(SESSION_HEADER)
        if message.get("method") == "initialize" and not _enveloped(message):
            session_id = self.server.new_session()
        session = self.server.sessions.get(session_id or "")
        if session is None and not session_id and self._stateless(message):
            session = self.server.stateless
        if session is None:
            if session_id:
                return self._error(HTTPStatus.NOT_FOUND, -32001, "Session not found", message.get("id"))
            return self._error(
                HTTPStatus.BAD_REQUEST, -32600, "Bad Request: no Mcp-Session-Id", message.get("id")
            )
        if "method" not in message or "id" not in message:  # a notification or a response
            session.send(message)
            return self._reply(HTTPStatus.ACCEPTED)
        try:
            replies = session.exchange(message)
        except (queue.Empty, ConnectionError) as exc:
            return self._error(HTTPStatus.INTERNAL_SERVER_ERROR, -32603, f"bridge: {exc}", message.get("id"))
        headers = {SESSION_HEADER: session_id} if session_id else {}
        error = replies[-1].get("error")
        if session is self.server.stateless and isinstance(error, dict) and error.get("code") in HTTP_STATUS:
            return self._reply(HTTP_STATUS[error["code"]], replies[-1])
        if "text/event-stream" in (self.headers.get("Accept") or ""):
            return self._stream(replies, headers)
        return self._reply(HTTPStatus.OK, replies[-1], headers)

    def do_GET(self) -> None:
        self._reply(HTTPStatus.METHOD_NOT_ALLOWED, headers={"Allow": "POST, DELETE"})

    def do_DELETE(self) -> None:
        session = self.server.sessions.pop(self.headers.get(SESSION_HEADER) or "", None)
        if session is None:
            return self._reply(HTTPStatus.NOT_FOUND)
        session.close()
        self._reply(HTTPStatus.OK)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    command = parser.parse_args().command
    command = command[1:] if command[:1] == ["--"] else command
    bridge = Bridge(command)
    print(f"http://127.0.0.1:{bridge.server_address[1]}/mcp", flush=True)
    try:
        bridge.serve_forever()
    finally:
        for session in [*bridge.sessions.values(), bridge.spare, bridge.stateless]:
            session.close()


if __name__ == "__main__":
    main()
