"""A container engine's API answered from recorded answers, on a Unix socket of the test's own."""

from __future__ import annotations

import http.server
import json
import os
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def recorded_engine(
    answers: dict[str, Any],
    path: str,
    mode: int | None = None,
    slow: dict[str, float] | None = None,
    asked: list[str] | None = None,
    keep_alive: bool = False,
    on_ask: Callable[[str], None] | None = None,
) -> Iterator[str]:
    """An HTTP server on the Unix socket ``path`` answering each GET with ``answers`` by its path (the
    query left out; 404 for any other), ``mode`` its socket's permissions (None: as made), after
    ``slow[path]`` seconds where given; each path is added to ``asked`` as it arrives, and given to
    ``on_ask`` before it is answered. ``keep_alive``: HTTP/1.1, a connection kept for the next GET (as
    an engine does), not closed after each answer."""

    class Recorded(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

        def do_GET(self) -> None:
            url = self.path.split("?")[0]
            if asked is not None:
                asked.append(url)
            if on_ask is not None:
                on_ask(url)
            time.sleep((slow or {}).get(url, 0))
            body = json.dumps(answers.get(url, {"message": "no such"})).encode()
            self.send_response(200 if url in answers else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

        def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
            conn, _ = super().get_request()
            return conn, ("engine", 0)  # BaseHTTPRequestHandler wants a host and port

        def handle_error(self, request: Any, client_address: Any) -> None:
            if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up (a cancel)
                super().handle_error(request, client_address)

    with Server(path, Recorded) as server:
        if mode is not None:
            os.chmod(path, mode)
        # shutdown() returns once the serving loop next looks up: every 10 ms, not the standard half second
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        try:
            yield path
        finally:
            server.shutdown()
