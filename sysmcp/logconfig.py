"""structlog configured to write JSON lines to stderr — never stdout, which is the wire.

Writing a log line must never hold up the event loop: an MCP host that never reads the server's stderr
pipe fills it after some 64 KiB, and a plain ``write`` then blocks the whole server. Lines for a real
file descriptor therefore go through a :class:`QueuedLogWriter`: ``write`` only puts the line on a
bounded queue (dropping and counting it when the queue is full) and a daemon thread writes the queue to
the descriptor, blocking there if it must. Streams without a descriptor (``io.StringIO``) are written
directly.

Why not ``logging.handlers.QueueHandler``/``QueueListener``: they carry records, not structlog's text
lines, so structlog would have to log through the standard library or through an adapter holding
each thread's partial line, as this writer does; a full queue raises ``queue.Full`` into
``handleError``, which prints a traceback to the very stderr that is stuck; the queue bounds lines,
not bytes; nothing says how many lines were dropped; ``QueueListener.stop`` joins its thread with no
time limit (an exit would hang on an unread stderr); and ``logging.handlers`` would load pickle into
every start. Keeping those promises on top of them costs more code than this.

structlog itself (some 30 modules) is imported only when a line passes the level: ``get_logger``
gives a :class:`Logger` that checks the configured level first, and ``configure`` applies
structlog's configuration when structlog is first needed. A session that logs nothing at its level
(the default, warning, and nothing going wrong) never imports it: a fleet's remote start is cheaper.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO, cast

#: The signals the main thread handles (Ctrl-C, kill, a hang-up), blocked in the writer thread.
_PROCESS_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}

LEVELS = ("debug", "info", "warning", "error", "critical")
#: Each level's number; structlog logs an exception at error level, with its traceback.
_NUMBERS = {
    **{level: logging.getLevelNamesMapping()[level.upper()] for level in LEVELS},
    "exception": logging.ERROR,
}

MAX_QUEUED_LINES = 4096
MAX_QUEUED_BYTES = 1 << 20
EXIT_DRAIN_TIMEOUT = 0.2  # seconds the process may spend at exit writing what is still queued
DROPPED_EVENT = "log lines dropped: stderr was not being read"


class QueuedLogWriter:
    """A file-like object whose ``write`` never blocks: a daemon thread writes to ``fd`` instead.

    Each complete line (or run of lines from one ``write``) is written to ``fd`` in one piece; a
    thread's text up to its next newline is held back, so lines from different threads never mix.
    When the queue is full the line is dropped and counted, and before the next line it writes, the
    thread writes one JSON line saying how many were dropped.
    """

    def __init__(
        self,
        fd: int,
        *,
        encoding: str = "utf-8",
        max_lines: int = MAX_QUEUED_LINES,
        max_bytes: int = MAX_QUEUED_BYTES,
    ) -> None:
        self.fd = fd
        self.encoding = encoding
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self._cond = threading.Condition(threading.Lock())
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued_bytes = 0
        self._dropped = 0
        self.lost = 0  # lines dropped or discarded since the start, never reset (``lines_lost``)
        self._busy = False  # the thread holds a line it has not finished writing
        self._broken = False  # the descriptor refused a write (closed pipe): discard from now on
        self._partial = threading.local()
        self._thread = threading.Thread(target=self._run, name=f"sysmcp-log-writer-{fd}", daemon=True)
        self._thread.start()

    # -- the file-like side, called from any thread (the event loop's included) ---------------------

    def write(self, text: str) -> int:
        held: str = getattr(self._partial, "text", "")
        text_all = held + text
        end = text_all.rfind("\n") + 1
        self._partial.text = text_all[end:]
        if end:
            self._put(text_all[:end].encode(self.encoding, "backslashreplace"))
        return len(text)

    def flush(self) -> None:
        """Nothing to do here: the thread writes each line as soon as it can (see :meth:`drain`)."""

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def dropped(self) -> int:
        """Lines dropped and not yet reported."""
        with self._cond:
            return self._dropped

    def drain(self, timeout: float = EXIT_DRAIN_TIMEOUT) -> bool:
        """Wait at most ``timeout`` seconds for everything queued to be written; True if it was."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._broken or not self._thread.is_alive() or not self._pending(), timeout
            )
            return not self._pending()

    def _pending(self) -> bool:
        """Lines queued or being written, or a count of dropped ones still to say (with ``_cond`` held)."""
        return bool(self._queue or self._busy or (self._dropped and not self._broken))

    def _put(self, data: bytes) -> None:
        with self._cond:
            if self._broken:
                self.lost += data.count(b"\n")
                return
            full = len(self._queue) >= self.max_lines or (
                self._queue and self._queued_bytes + len(data) > self.max_bytes
            )
            if full:
                self._dropped += data.count(b"\n")
                self.lost += data.count(b"\n")
            else:
                self._queue.append(data)
                self._queued_bytes += len(data)
            self._cond.notify_all()

    # -- the writer thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        # A signal sent to the process reaches one of its threads that does not block it: were it this one,
        # the main thread's blocking read (an --inventory pipe not yet written) would never be interrupted
        # and Ctrl-C would be handled only once that read ended. Left to the main thread, it interrupts it.
        signal.pthread_sigmask(signal.SIG_BLOCK, _PROCESS_SIGNALS)
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._dropped)
                dropped, self._dropped = self._dropped, 0
                data = self._queue.popleft() if self._queue else b""
                self._queued_bytes -= len(data)
                self._busy = True
            try:
                if dropped:
                    self._write_all(_dropped_line(dropped))
                if data:
                    self._write_all(data)
            except OSError:  # the reader is gone (EPIPE) or the descriptor closed: nothing to write to
                with self._cond:
                    self._broken = True
                    self.lost += sum(line.count(b"\n") for line in [data, *self._queue])
                    self._queue.clear()
                    self._queued_bytes = 0
                    self._dropped = 0
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except BlockingIOError:  # a descriptor someone made non-blocking: wait as a blocking one would
                select.select([], [self.fd], [])


def _dropped_line(count: int) -> bytes:
    import datetime  # here: a line is dropped only when stderr is not being read

    record = {
        "event": DROPPED_EVENT,
        "dropped": count,
        "level": "warning",
        "logger": __name__,
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z"),
    }
    return json.dumps(record).encode() + b"\n"


_writers: list[tuple[TextIO, QueuedLogWriter]] = []
_writers_lock = threading.Lock()


def log_writer(stream: TextIO) -> TextIO:
    """What to log to for ``stream``: one queued writer per stream with a file descriptor, else itself.

    The writer is made once per stream (``configure`` runs more than once) and drained at exit, for at
    most :data:`EXIT_DRAIN_TIMEOUT` seconds even if nobody reads the stream.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return stream  # io.StringIO and the like: in memory, a write cannot block
    with _writers_lock:
        for known, writer in _writers:
            if known is stream and writer.fd == fd and writer.alive:
                return cast(TextIO, writer)
        with contextlib.suppress(OSError, ValueError):
            stream.flush()  # what was written to the stream itself comes first
        encoding = getattr(stream, "encoding", None) or "utf-8"
        writer = QueuedLogWriter(fd, encoding=encoding)
        _writers[:] = [(known, w) for known, w in _writers if known is not stream]
        _writers.append((stream, writer))
        atexit.register(writer.drain, EXIT_DRAIN_TIMEOUT)
        return cast(TextIO, writer)


def lines_lost() -> int:
    """Log lines dropped (a full queue: the host does not read stderr) or discarded (stderr closed) so
    far: a caller that says it logged on stderr compares this before and after."""
    with _writers_lock:
        return sum(writer.lost for _, writer in _writers)


def logs_at(level: str) -> bool:
    """Whether a line at ``level`` is written at all (the configured ``--log-level``)."""
    return _threshold is None or _NUMBERS[level] >= _threshold


def drain_logs(timeout: float = EXIT_DRAIN_TIMEOUT) -> None:
    """Write out what is queued, for at most ``timeout`` seconds in all: for exits that skip ``atexit``."""
    deadline = time.monotonic() + timeout
    with _writers_lock:
        writers = [writer for _, writer in _writers]
    for writer in writers:
        writer.drain(max(deadline - time.monotonic(), 0))


_threshold: int | None = None  # the configured level; None: not configured, every line goes through
_pending: Callable[[], None] | None = None  # structlog's configuration, applied when it is first needed
_config_lock = threading.Lock()


def _structlog() -> Any:
    """structlog, imported (and configured as ``configure`` asked) on first need."""
    global _pending
    if _pending is not None:
        with _config_lock:
            if _pending is not None:  # another thread may have applied it meanwhile
                _pending()
                _pending = None
    import structlog

    return structlog


class Logger:
    """``structlog.get_logger(name)``, except that structlog is imported only for a line at or above
    the configured level: below it a call returns at once and costs no import."""

    __slots__ = ("_logger", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: Any = None

    def _log(self, method: str, event: str, fields: dict[str, Any]) -> None:
        if _threshold is not None and _NUMBERS[method] < _threshold:
            return
        if self._logger is None:
            self._logger = _structlog().get_logger(self.name)
        getattr(self._logger, method)(event, **fields)

    def debug(self, event: str, **fields: Any) -> None:
        self._log("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._log("error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """At error level, with the exception being handled (call it in an ``except`` block)."""
        self._log("exception", event, fields)


def get_logger(name: str) -> Logger:
    return Logger(name)


class _LibraryFormatter(logging.Formatter):
    """The standard library's records (asyncio's, for one) as the same JSON lines: structlog's
    ``ProcessorFormatter``, made on the first record (rare), so configuring imports no structlog."""

    def __init__(self) -> None:
        super().__init__()
        self._inner: logging.Formatter | None = None

    def format(self, record: logging.LogRecord) -> str:
        if self._inner is None:
            structlog = _structlog()
            self._inner = structlog.stdlib.ProcessorFormatter(
                processors=[
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info,
                    structlog.processors.JSONRenderer(),
                ],
                foreign_pre_chain=[
                    structlog.stdlib.add_log_level,
                    structlog.stdlib.add_logger_name,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                ],
            )
        return self._inner.format(record)


def configure(level: str = "warning", stream: TextIO | None = None) -> None:
    """Route structlog (and stdlib logging, for libraries) to ``stream`` (stderr) as JSON lines.

    structlog is configured now if it is imported already (a caller using it directly), else when
    the first line passes the level.
    """
    global _threshold, _pending
    out = log_writer(stream if stream is not None else sys.stderr)
    numeric = logging.getLevelName(level.upper())

    def apply() -> None:
        import structlog

        structlog.configure(
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(numeric),
            logger_factory=structlog.PrintLoggerFactory(file=out),
            cache_logger_on_first_use=True,
        )

    with _config_lock:
        _threshold = numeric
        if "structlog" in sys.modules:
            apply()
            _pending = None
        else:
            _pending = apply
    # Libraries log through the standard library (asyncio, for one): the same JSON lines, same stream.
    handler = logging.StreamHandler(out)
    handler.setFormatter(_LibraryFormatter())
    logging.basicConfig(handlers=[handler], level=numeric, force=True)
