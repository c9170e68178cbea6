"""The line decoder is I/O-free: these tests feed it bytes directly, no event loop."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from sysmcp.protocol.framing import HEAD, LineDecoder, OversizedLine, encode

messages = st.lists(
    st.dictionaries(
        st.text(max_size=8),
        st.one_of(st.integers(), st.text(max_size=30), st.booleans(), st.none()),
        max_size=4,
    ),
    min_size=1,
    max_size=8,
)


def _decode_all(decoder: LineDecoder, pieces: list[bytes]) -> list[bytes | OversizedLine]:
    frames: list[bytes | OversizedLine] = []
    for piece in pieces:
        frames += decoder.feed(piece)
    return frames + decoder.finish()


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    pieces, start = [], 0
    for point in points:
        pieces.append(data[start:point])
        start = point
    pieces.append(data[start:])
    return pieces


@given(messages, st.lists(st.integers(min_value=0, max_value=2000), max_size=20))
def test_any_split_of_the_stream_gives_the_same_messages(
    values: list[dict[str, object]], cuts: list[int]
) -> None:
    stream = b"".join(encode(value) for value in values)
    frames = _decode_all(LineDecoder(), _split(stream, cuts))
    assert [json.loads(frame) for frame in frames if isinstance(frame, bytes)] == values


@given(st.binary(max_size=4000), st.lists(st.integers(min_value=0, max_value=4000), max_size=10))
def test_arbitrary_bytes_never_crash_the_decoder(data: bytes, cuts: list[int]) -> None:
    frames = _decode_all(LineDecoder(max_line=256), _split(data, cuts))
    for frame in frames:
        if isinstance(frame, bytes):
            assert b"\n" not in frame and len(frame) <= 256


def test_a_line_over_the_bound_is_reported_and_dropped_not_buffered() -> None:
    decoder = LineDecoder(max_line=10)
    assert decoder.feed(b"0123456789abc") == []
    assert decoder.feed(b"def") == []
    assert decoder.feed(b"ghi\nok\n") == [OversizedLine(19, b"0123456789abcdefghi"), b"ok"]


def test_crlf_line_endings_are_accepted() -> None:
    assert LineDecoder().feed(b'{"a":1}\r\n') == [b'{"a":1}']


def test_a_final_line_without_newline_counts_at_end_of_stream() -> None:
    decoder = LineDecoder()
    assert decoder.feed(b'{"a":1}') == []
    assert decoder.finish() == [b'{"a":1}']


def test_encode_writes_one_line_with_non_ascii_as_is() -> None:
    line = encode({"text": "résumé\nnext 日本"})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert "résumé".encode() in line and "日本".encode() in line


def test_a_lone_surrogate_is_escaped_never_written_as_invalid_utf8() -> None:
    line = encode({"path": "/tmp/\ud800", "other": "é"})
    assert json.loads(line.decode("utf-8")) == {"path": "/tmp/\ud800", "other": "é"}


def test_an_oversized_line_keeps_its_start_however_it_arrives() -> None:
    line = b'{"id":7,' + b"x" * (2 * HEAD)
    whole = LineDecoder(max_line=50).feed(line + b"\nok\n")
    decoder = LineDecoder(max_line=50)
    pieces = [frame for i in range(0, len(line), 999) for frame in decoder.feed(line[i : i + 999])]
    pieces += decoder.feed(b"\nok\n")
    assert whole == pieces == [OversizedLine(len(line), line[:HEAD]), b"ok"]
    decoder.feed(line[:3000])  # its start buffered, the rest beyond the bound, then the stream ends
    decoder.feed(line[3000:])
    assert decoder.finish() == [OversizedLine(len(line), line[:HEAD])]
