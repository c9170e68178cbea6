"""Newline-delimited JSON framing, free of I/O.

The stdio transport feeds whatever bytes a read returned; the decoder hands back complete lines.
Keeping this free of I/O lets the tests split streams arbitrarily without an event loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_LINE = 4 << 20
#: Bytes kept of the start of a line too long to keep: where a request names its id (``jsonrpc_head``).
HEAD = 4096


@dataclass(frozen=True, slots=True)
class OversizedLine:
    """A line that exceeded the bound; its bytes were discarded, only its length and its first ``HEAD``
    bytes are kept (the start of a request names its id, so its refusal can answer it)."""

    length: int
    head: bytes = b""


Frame = bytes | OversizedLine


class LineDecoder:
    """Splits a byte stream into lines, discarding (not buffering) any line longer than ``max_line``."""

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        self.max_line = max_line
        self._buffer = bytearray()
        self._discarding = 0  # bytes dropped so far of an oversized line still in progress
        self._head = b""  # the first HEAD bytes of that line

    def feed(self, data: bytes) -> list[Frame]:
        """Add ``data`` and return every frame it completes, in order."""
        frames: list[Frame] = []
        start = 0
        while True:
            newline = data.find(b"\n", start)
            if newline < 0:
                self._absorb(data[start:])
                return frames
            piece = data[start:newline]
            start = newline + 1
            if self._discarding:
                frames.append(OversizedLine(self._discarding + len(piece), self._head_with(piece)))
                self._discarding, self._head = 0, b""
                continue
            if len(self._buffer) + len(piece) > self.max_line:
                frames.append(OversizedLine(len(self._buffer) + len(piece), self._start_of(piece)))
                self._buffer.clear()
                continue
            if self._buffer:
                self._buffer += piece
                line = bytes(self._buffer)
                self._buffer.clear()
            else:
                line = bytes(piece)
            frames.append(_strip_cr(line))

    @property
    def overflowing(self) -> int:
        """Bytes of an oversized line still in progress (0: none): a reader may stop at once."""
        return self._discarding

    @property
    def buffered(self) -> int:
        """Bytes held of a line not yet ended."""
        return len(self._buffer)

    def held_after(self, data: bytes) -> int:
        """Bytes ``feed(data)`` will leave held of an unfinished line: what a reader claims of a
        memory budget before it feeds them (0 while the line is too long to keep, and dropped)."""
        newline = data.rfind(b"\n")
        if newline < 0:
            held = 0 if self._discarding else len(self._buffer) + len(data)
        else:
            held = len(data) - newline - 1
        return 0 if held > self.max_line else held

    def clear(self) -> None:
        """Drop what is held of an unfinished line (its memory freed): the stream will not be read on."""
        self._buffer = bytearray()
        self._discarding = 0

    def finish(self) -> list[Frame]:
        """End of stream: a final line without a newline still counts."""
        if self._discarding:
            oversized = OversizedLine(self._discarding, self._head)
            self._discarding, self._head = 0, b""
            return [oversized]
        if self._buffer.strip():
            line = bytes(self._buffer)
            self._buffer.clear()
            return [_strip_cr(line)]
        self._buffer.clear()
        return []

    def _absorb(self, rest: bytes) -> None:
        if self._discarding:
            self._discarding += len(rest)
            self._head = self._head_with(rest)
        elif len(self._buffer) + len(rest) > self.max_line:
            self._discarding = len(self._buffer) + len(rest)
            self._head = self._start_of(rest)
            self._buffer.clear()
        else:
            self._buffer += rest

    def _start_of(self, rest: bytes) -> bytes:
        """The first ``HEAD`` bytes of the buffered line followed by ``rest``."""
        return bytes(self._buffer[:HEAD]) + rest[: max(HEAD - len(self._buffer), 0)]

    def _head_with(self, rest: bytes) -> bytes:
        """The oversized line's first ``HEAD`` bytes, completed from ``rest`` if it has fewer."""
        return self._head if len(self._head) >= HEAD else self._head + rest[: HEAD - len(self._head)]


def _strip_cr(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line


# Built once: ``json.dumps`` with options builds a new encoder for every message.
_UTF8_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ASCII_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode(message: Any) -> bytes:
    """One message as one line: compact JSON, non-ASCII as-is, never an embedded newline.

    A lone surrogate (a client's ``"\\ud800"`` echoed back) cannot be UTF-8: such a message is
    written with JSON escapes instead, so the wire never carries bytes a client cannot decode.
    """
    text = _UTF8_ENCODER.encode(message)
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return _ASCII_ENCODER.encode(message).encode("ascii") + b"\n"
