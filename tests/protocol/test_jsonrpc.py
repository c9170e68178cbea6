"""Classifying JSON-RPC messages, without I/O."""

from __future__ import annotations

from typing import Any

import pytest

from sysmcp.protocol.jsonrpc import (
    ErrorCode,
    Invalid,
    Notification,
    Request,
    Response,
    TooComplex,
    decode_json,
    more_values_than,
    parse_line,
    parse_message,
    request_id_in_head,
)


@pytest.mark.parametrize("msg_id", [0, 1, -1, "x", "", 2**70])
def test_requests_keep_their_id_exactly(msg_id: Any) -> None:
    message = parse_message({"jsonrpc": "2.0", "id": msg_id, "method": "ping"})
    assert message == Request(msg_id, "ping", {})


@pytest.mark.parametrize(
    "line", [b'{"jsonrpc":"2.0","id":7.0,"method":"ping"}', b'{"jsonrpc":"2.0","id":7e0,"method":"ping"}']
)
def test_an_integer_id_written_with_a_fraction_or_exponent_is_that_integer(line: bytes) -> None:
    """MCP's ``RequestId`` is a JSON Schema ``integer``, which 7.0 is (and JavaScript's SDKs read it as 7):
    it was refused with an error of id null, which answers nothing, so the client waited for ever."""
    assert parse_line(line) == Request(7, "ping", {})


@pytest.mark.parametrize("msg_id", [True, False, 1.5, None, [], {}])
def test_ids_that_are_not_strings_or_integers_are_invalid(msg_id: Any) -> None:
    message = parse_message({"jsonrpc": "2.0", "id": msg_id, "method": "ping"})
    assert isinstance(message, Invalid) and message.code == ErrorCode.INVALID_REQUEST
    assert message.id is None


def test_a_message_without_id_is_a_notification() -> None:
    assert parse_message({"jsonrpc": "2.0", "method": "notifications/initialized"}) == Notification(
        "notifications/initialized", {}
    )


def test_client_responses_are_recognised() -> None:
    assert parse_message({"jsonrpc": "2.0", "id": "s-1", "result": {"roots": []}}) == Response(
        "s-1", {"roots": []}, None
    )


@pytest.mark.parametrize(
    "value",
    [
        [],
        "text",
        {"id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": "x"},
        {"jsonrpc": "2.0", "id": 1, "result": 5},
    ],
)
def test_malformed_messages_are_invalid_requests(value: Any) -> None:
    message = parse_message(value)
    assert isinstance(message, Invalid) and message.code == ErrorCode.INVALID_REQUEST


def test_a_request_with_bytes_that_are_not_utf8_is_refused_by_its_id() -> None:
    """A client that writes a Latin-1 file name as it is: its request was refused with id null, which
    answers no request, and the client waited for the answer for ever. The error says where the byte is."""
    line = b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"arguments":{"path":"/srv/caf\xe9"}}}'
    refused = parse_line(line)
    assert isinstance(refused, Invalid) and refused.code == ErrorCode.PARSE_ERROR and refused.id == 5
    where = line.index(0xE9)
    assert f"not valid UTF-8 (byte 0xe9 at offset {where})" in refused.message
    for other in (
        b'{"jsonrpc":"2.0","id":5,"result":{"x":"\xe9"}}',  # a response: its id is one of ours
        b'[{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":"\xe9"}}]',
        b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":"\xe9"}',  # and not JSON either
    ):
        refused = parse_line(other)
        assert isinstance(refused, Invalid) and refused.code == ErrorCode.PARSE_ERROR and refused.id is None


@pytest.mark.parametrize("bad_id", [b'"ab\xffc"', b'"\xe9"'])
def test_a_byte_that_is_not_utf8_inside_the_id_leaves_the_refusal_without_an_id(bad_id: bytes) -> None:
    """Read with U+FFFD for the byte, the id was another id than the one written ("ab\ufffdc"): the
    refusal answered a request of that id, if one was in flight, and never the one sent. JSON-RPC: an id
    that cannot be told is null."""
    line = b'{"jsonrpc":"2.0","id":' + bad_id + b',"method":"ping"}'
    refused = parse_line(line)
    assert isinstance(refused, Invalid) and refused.code == ErrorCode.PARSE_ERROR and refused.id is None
    assert "not valid UTF-8" in refused.message
    # the replacement character itself, written as UTF-8, is an id like any other
    fine = b'{"jsonrpc":"2.0","id":"ab\xef\xbf\xbdc","method":"ping","params":{"x":"\xff"}}'
    refused = parse_line(fine)
    assert isinstance(refused, Invalid) and refused.id == "ab\ufffdc"


@pytest.mark.parametrize("line", [b"{", b"\xff", b"[" * 200_000, b"1" * 10_000, b'{"a": "\x00"}', b"NaN-ish"])
def test_undecodable_lines_are_parse_errors_not_exceptions(line: bytes) -> None:
    value = decode_json(line)
    assert isinstance(value, Invalid) and value.code == ErrorCode.PARSE_ERROR


def test_a_byte_order_mark_before_a_message_is_skipped() -> None:
    assert parse_line(b'\xef\xbb\xbf{"jsonrpc": "2.0", "id": 1, "method": "ping"}') == Request(1, "ping")


@pytest.mark.parametrize("line", [b'{"x": NaN}', b"[Infinity]", b'{"n": -Infinity}'])
def test_nan_and_infinity_are_parse_errors_because_json_has_no_such_numbers(line: bytes) -> None:
    value = decode_json(line)
    assert isinstance(value, Invalid) and value.code == ErrorCode.PARSE_ERROR
    assert "not JSON" in value.message


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"a": 1e400, "b": NaN}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"a": 1e400, "b": '
        + b"[" * 200_000
        + b"}}",
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"a": 1e400, "b": }',
    ],
)
def test_a_number_past_any_float_before_something_else_that_is_not_json_is_a_parse_error(line: bytes) -> None:
    value = decode_json(line)
    assert isinstance(value, Invalid) and value.code == ErrorCode.PARSE_ERROR and value.id is None


def test_params_by_position_on_a_request_are_invalid_params_with_its_id() -> None:
    message = parse_message({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": [1]})
    assert isinstance(message, Invalid) and message.code == ErrorCode.INVALID_PARAMS and message.id == 7


def test_params_by_position_on_a_notification_stay_an_invalid_request() -> None:
    message = parse_message({"jsonrpc": "2.0", "method": "notifications/initialized", "params": [1]})
    assert isinstance(message, Invalid) and message.code == ErrorCode.INVALID_REQUEST and message.id is None


@pytest.mark.parametrize(
    ("text", "many"),
    [
        ("[" + "{}," * 200 + "{}]", True),  # 201 objects, a list, and the line
        ("[" + "{}," * 30 + "{}]", False),
        ('["' + "a,[{" * 1000 + '"]', False),  # a long text full of commas is one value
        ('["' + '\\"{,' * 1000 + '"]', False),  # its escaped quotes do not end it
        ('{"' + '":"' * 250 + '"}', True),  # 251 strings (keys, values): more than twice 100
        ('["never closed ' + "," * 500, False),  # not JSON: for the parser to say
    ],
)
def test_the_values_a_line_may_hold_are_counted_outside_its_strings(text: str, many: bool) -> None:
    assert more_values_than(text, 100) is many


def test_a_line_of_more_values_than_its_reader_takes_is_not_parsed() -> None:
    line = ("[" + "{}," * 200 + "{}]").encode()
    assert decode_json(line, max_values=100) == TooComplex(100, len(line))
    assert decode_json(line, max_values=1000) == decode_json(line) == [{}] * 201


@pytest.mark.parametrize(
    ("head", "msg_id"),
    [
        (b'{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"arguments":{"m":"aaaa', "big"),
        (b' \r\n{ "id" : 12 , "method" : "x", "params": [[[[', 12),
        (b'{"jsonrpc":"2.0","method":"tools/call","id":7,"params":{"a":"\xe2\x82', 7),  # a character cut
        (b'{"id":3,"params":{"x":"aaaa', 3),  # params cut: a request whatever its method
        (b'{"params":{"x":"aaaa", "id": 3}', None),  # the id inside params is not the request's
        (b'{"jsonrpc":"2.0","params":{"x":"aaaa', None),  # the id, if any, is past the cut
        (b'{"jsonrpc":"2.0","id":"ours","result":{"x":"aaaa', None),  # a response: not ours to answer
        (b'{"jsonrpc":"2.0","id":5,"error":{"code":1,"message":"aaa', None),
        (b'{"jsonrpc":"2.0","id":5,"method":"x","result":{"x":"aaa', None),  # both: no guess
        (b'{"jsonrpc":"1.0","id":5,"method":"x","params":{"x":"aaa', None),
        (b'{"jsonrpc":"2.0","id":5,"method":7,"x":"aaa', None),  # a method that is no string
        (b'{"jsonrpc":"2.0","id":true,"method":"x","params":{"x":"aaa', None),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"x","params":{"x":"aaa', None),
        (b'{"jsonrpc":"2.0","id":1e400,"method":"x","params":{"x":"aaa', None),
        (b'{"jsonrpc":"2.0","id":"\xff","method":"x","params":{"x":"aaa', None),  # dropped: no id
        (b'[{"jsonrpc":"2.0","id":1,"method":"x","params":{"x":"aaa', None),  # a batch: no one id
        (b'{"jsonrpc":"2.0","id":1,"method":"x","x":' + b"[" * 5000, 1),  # too deep to read: cut there
        (b'{"jsonrpc":"2.0","method":"x","id":123', None),  # the cut may be inside the number: 1234…
        (b'{"jsonrpc":"2.0","method":"x","id":12 \r\n', None),  # what follows is unseen
        (b'{"jsonrpc":"2.0","method":"x","id":1.', None),  # 1.5, cut
        (b'{"jsonrpc":"2.0","method":"x","params":{},"id":"x"', None),  # the last key: no "," or "}" yet
        (b'{"jsonrpc":"2.0","method":"x","params":{},"id":12 }', 12),
        (b'{"method":"x","\\u0069d":7,"params":{"a":"', 7),  # an escaped key is the key it spells
        (b'{"method":"x","id":1,"id":2,"params":{"a":"', None),  # two ids: which one is meant, unsaid
        (b'{"method":"x","id":1,"id":1,"params":{"a":"', 1),
        (b'{"method":"x","method":2,"id":1,"params":{"a":"', 1),  # "params": a request however its method
        (b"not json at all", None),
        (b"", None),
    ],
)
def test_the_id_of_an_oversized_request_is_read_from_its_start_only_when_it_surely_is_one(
    head: bytes, msg_id: Any
) -> None:
    assert request_id_in_head(head) == msg_id
