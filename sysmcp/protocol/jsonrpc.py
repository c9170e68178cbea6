"""JSON-RPC 2.0 message shapes and parsing, free of I/O.

``parse_message`` classifies one decoded JSON value; the session decides what each kind means
under the negotiated protocol version.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

#: A string or an integer; an integer written with a fraction or an exponent (7.0, 7e0) is kept as the
#: float it was read as, equal to the int (and hashed alike), so that it is answered as it was written.
RequestId = str | int | float


class ErrorCode(IntEnum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    RESOURCE_NOT_FOUND = -32002
    UNSUPPORTED_PROTOCOL_VERSION = -32022


@dataclass(frozen=True, slots=True)
class Request:
    id: RequestId
    method: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Response:
    """A response to a request we made (the client's to ``roots/list``, a server's to the client half)."""

    id: RequestId | None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Invalid:
    """Anything that is not a valid message; ``id`` is kept when one could be read so the error can echo it."""

    code: ErrorCode
    message: str
    id: RequestId | None = None


Message = Request | Notification | Response | Invalid


@dataclass(frozen=True, slots=True)
class TooComplex:
    """A line that may hold more JSON values than its reader takes: refused before it is parsed."""

    limit: int
    length: int  # the line's length in characters


def is_request_id(value: object) -> bool:
    """MCP ids are strings or integers; ``True`` is an int to Python but not to JSON-RPC."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def request_id(value: object) -> RequestId | None:
    """A request id (or progress token) as MCP's schema reads it, or None. Its ``integer`` is JSON
    Schema's: any number without a fraction, so ``7.0`` and ``7e0`` are 7, as a JavaScript client reads
    them; refused, the error could name no request and the client waited for its answer for ever.
    Such a one stays the float it was read as (7.0 == 7 for every lookup): the answer carries it as
    written, for a client that keeps ids as JSON values, to which 7.0 is not 7."""
    if isinstance(value, float) and value.is_integer():
        return value
    return value if is_request_id(value) else None  # type: ignore[return-value]


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


class _OutOfRange(ValueError):
    """A JSON number no float holds."""


def _finite(text: str) -> float:
    """A JSON number with a fraction or exponent; one past any float (``1e400``) is refused, not made
    Infinity, which no answer could then carry (a fleet host's result is summed and sent on)."""
    number = float(text)
    if math.isinf(number):
        raise _OutOfRange(f"{text[:20]} is out of the range of a number")
    return number


#: The decoder's own string scanner (its C one, when Python has it): the end of the string at a position.
_scan_string: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
# Python's decoder takes NaN, Infinity and -Infinity by default (and 1e400 as Infinity); JSON has no such numbers.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite)


def decode_json(
    line: bytes, max_values: int | None = None, chars_per_value: int = 0
) -> Any | Invalid | TooComplex:
    """Decode one line; every way it can fail becomes a parse error, never an exception.

    A UTF-8 byte order mark before the JSON is skipped (RFC 8259 lets a parser ignore one): a Windows
    client's writer may put one before its first line, which was refused as "Expecting value".
    With ``max_values``, a line that may hold more values than that is ``TooComplex``, not parsed; with
    ``chars_per_value`` too, a longer line may hold one value in that many characters where that is more.
    """
    if line.startswith(b"\xef\xbb\xbf"):
        line = line[3:]
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _not_utf8(line, exc, max_values, chars_per_value)
    return _decode_text(text, max_values, chars_per_value)


def _decode_text(text: str, max_values: int | None, chars_per_value: int) -> Any | Invalid | TooComplex:
    if max_values is not None:
        limit = max(max_values, len(text) // chars_per_value) if chars_per_value > 0 else max_values
        if more_values_than(text, limit):
            return TooComplex(limit, len(text))
    try:
        return _DECODER.decode(text)
    except RecursionError:
        return Invalid(ErrorCode.PARSE_ERROR, "Parse error: JSON nested too deeply")
    except _OutOfRange as exc:
        return _out_of_range(text, exc)
    except ValueError as exc:  # JSONDecodeError, and ints longer than Python allows
        return Invalid(ErrorCode.PARSE_ERROR, f"Parse error: {_short(exc)}")


def _not_utf8(line: bytes, exc: UnicodeDecodeError, max_values: int | None, chars_per_value: int) -> Invalid:
    """A line with bytes that are not UTF-8: a parse error saying where, answered by the id of the
    request it otherwise is, as a line too long to read is: a client that wrote a Latin-1 file name as
    it is waits for no answer that never comes. Where the byte is in the id itself, no id read from the
    line is the one the client sent, and the refusal has none (JSON-RPC's null)."""
    said = f"Parse error: the line is not valid UTF-8 (byte 0x{line[exc.start]:02x} at offset {exc.start})"
    # each such byte read as a lone surrogate (U+DC80…U+DCFF); an id with one is refused with null (one
    # the client wrote as the escape \udcXX too, which no client's id needs)
    value = _decode_text(line.decode("utf-8", "surrogateescape"), max_values, chars_per_value)
    msg_id = request_id(value.get("id")) if isinstance(value, dict) and "method" in value else None
    if isinstance(msg_id, str) and _ESCAPED_BYTE.search(msg_id):
        msg_id = None  # the bad byte is in the id: any id read from it is not the one the client sent
    return Invalid(ErrorCode.PARSE_ERROR, said, msg_id)


_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def more_values_than(text: str, limit: int) -> bool:
    """Whether the JSON ``text`` may decode into more than ``limit`` values, told without decoding it.

    Parsed, a line costs far more than its length when its values are tiny: ``[{},{},…]`` is some 25
    bytes of Python objects for each byte (80 MiB of it, 2 GiB and seconds of parsing). Counted here:
    the commas and opening brackets outside strings (a value, a key-value pair or a container each, at
    most ~100 bytes parsed), one turn per string, stopping once past ``limit`` (strings past twice
    ``limit`` too: each is a value or a key). The strings are skipped by the decoder's own C scanner,
    so a long text answer (a manifest full of commas) costs one pass and is never mistaken for many
    values. Not JSON (a string never closed, a bad escape): False, for the parser to say why.
    """
    if len(text) <= limit:  # every value takes a character
        return False
    values, strings, start = 1, 0, 0
    while values <= limit and strings <= 2 * limit:
        quote = text.find('"', start)
        end = len(text) if quote < 0 else quote
        values += text.count(",", start, end) + text.count("[", start, end) + text.count("{", start, end)
        if quote < 0:
            break
        strings += 1
        try:
            start = _scan_string(text, quote + 1, True)[1]
        except ValueError:
            break
    return values > limit or strings > 2 * limit


def _out_of_range(text: str, exc: _OutOfRange) -> Invalid:
    """A line that is JSON but holds a number no float holds: a request among them is answered by its
    id (its params cannot be used), anything else is a parse error with no id. Read again with 1e400 as
    Infinity, the rest of the line may still not be JSON (a NaN, nesting too deep): a parse error too."""
    try:
        message = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        message = None
    msg_id = request_id(message.get("id")) if isinstance(message, dict) else None
    if isinstance(message, dict) and "method" in message and msg_id is not None:
        return Invalid(ErrorCode.INVALID_PARAMS, f"Invalid params: {exc}", msg_id)
    return Invalid(ErrorCode.PARSE_ERROR, f"Parse error: {exc}")


_SPACE = " \t\n\r"
_AMBIGUOUS = object()  # a key the start gives twice, with two values


def request_id_in_head(head: bytes) -> RequestId | None:
    """The id of the request whose line starts with ``head`` (the rest of it unseen), or None.

    A line too long to read is refused whole; the id lets the refusal answer the request, whose client
    would otherwise wait for it until its own timeout. Read as far as the start allows, key by key at the
    top level of an object: the id counts only when it comes before anything left unread, and the keys
    read say the line is a request ("method", or "params" however cut) and not a response ("result",
    "error"), so a refusal never answers a request the client did not make. A value counts only once
    the "," or "}" after it is seen: the start may end inside a number, and ``"id":123`` cut from
    ``"id":123456`` names another request of the client's.
    """
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:  # a character the cut split is dropped; a line not UTF-8 has no id
        if exc.reason != "unexpected end of data":
            return None
        text = head[: exc.start].decode("utf-8")
    text = text.lstrip(_SPACE)
    if not text.startswith("{"):
        return None
    seen: dict[str, Any] = {}
    keys: set[str] = set()
    pos = 1
    try:
        while True:
            pos = _skip_space(text, pos)
            if text.startswith("}", pos) or not text.startswith('"', pos):
                break
            key, pos = _scan_string(text, pos + 1, True)
            keys.add(key)
            pos = _skip_space(text, pos)
            if not text.startswith(":", pos):
                break
            value, pos = _DECODER.raw_decode(text, _skip_space(text, pos + 1))
            pos = _skip_space(text, pos)
            if not text.startswith((",", "}"), pos):  # the cut may be inside it: "id":123 of "id":123456
                break
            # A key given twice: which one a parser keeps, JSON does not say (Python's, the last).
            seen[key] = value if seen.get(key, value) == value else _AMBIGUOUS
            if text.startswith("}", pos):
                break
            pos += 1
    except (ValueError, RecursionError):  # the value the start cuts off (or no JSON at all)
        pass
    request = isinstance(seen.get("method"), str) or "params" in keys
    if not request or keys & {"result", "error"} or seen.get("jsonrpc", "2.0") != "2.0":
        return None
    return request_id(seen.get("id"))


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _SPACE:
        pos += 1
    return pos


def parse_message(value: Any) -> Message:
    """Classify one JSON value (not a batch) as a request, notification, response or invalid message."""
    if not isinstance(value, dict):
        return Invalid(ErrorCode.INVALID_REQUEST, "Invalid Request: a message must be a JSON object")
    msg_id = request_id(value.get("id"))
    if "method" not in value and ("result" in value or "error" in value):
        # A response's id is one of ours: an error about a malformed one must not carry it, or the
        # client reads it as the answer to its own request of that id (and then gets a second).
        if value.get("jsonrpc") != "2.0":
            return Invalid(ErrorCode.INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"')
        return _parse_response(value, msg_id)
    if value.get("jsonrpc") != "2.0":
        return Invalid(ErrorCode.INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', msg_id)
    if "method" not in value:
        return Invalid(ErrorCode.INVALID_REQUEST, 'Invalid Request: "method" is missing', msg_id)
    method = value["method"]
    if not isinstance(method, str):
        return Invalid(ErrorCode.INVALID_REQUEST, 'Invalid Request: "method" must be a string', msg_id)
    params = value.get("params", {})
    if params is None:
        params = {}
    if isinstance(params, list) and msg_id is not None:
        # By-position params are valid JSON-RPC, but every MCP method takes its params by name.
        return Invalid(
            ErrorCode.INVALID_PARAMS,
            "Invalid params: MCP methods take params by name (an object), not by position (an array)",
            msg_id,
        )
    if not isinstance(params, dict):
        return Invalid(ErrorCode.INVALID_REQUEST, 'Invalid Request: "params" must be an object', msg_id)
    if "id" not in value:
        return Notification(method, params)
    if msg_id is None:
        return Invalid(ErrorCode.INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer')
    return Request(msg_id, method, params)


def parse_line(line: bytes) -> Message | list[Message]:
    """One line's message, or a batch's messages; a line that is not JSON is one ``Invalid``."""
    return parse_decoded(decode_json(line))


def parse_decoded(value: Any | Invalid) -> Message | list[Message]:
    """``parse_line`` of a line ``decode_json`` has decoded."""
    if isinstance(value, list):
        return [parse_message(item) for item in value]
    return value if isinstance(value, Invalid) else parse_message(value)


def _parse_response(value: dict[str, Any], msg_id: RequestId | None) -> Message:
    result, error = value.get("result"), value.get("error")
    if result is not None and not isinstance(result, dict):
        return Invalid(ErrorCode.INVALID_REQUEST, 'Invalid Request: "result" must be an object')
    if error is not None and not isinstance(error, dict):
        return Invalid(ErrorCode.INVALID_REQUEST, 'Invalid Request: "error" must be an object')
    return Response(msg_id, result, error)


def result_message(msg_id: RequestId, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def error_message(
    msg_id: RequestId | None, code: int, message: str, data: Any | None = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": int(code), "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": msg_id, "error": error}


def notification_message(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def request_message(msg_id: RequestId, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, **notification_message(method, params)}  # keys in this order


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "…"
