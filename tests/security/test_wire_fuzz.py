"""The wire cannot be broken: hostile input in, only well-formed JSON-RPC out, every request answered.

The property tests drive the real ``Server`` and ``Session`` through an in-memory transport (fast);
the stress test pushes 100,000 random lines through the real process over real pipes.
"""

from __future__ import annotations

import json
import os
import random
import sys
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sysmcp.protocol.session import Session
from sysmcp.server import build_server
from sysmcp.tools import ALL_TOOLS
from tests.memory_transport import MemoryTransport
from tests.wire import SERVER

INIT = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "f", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
FINAL_PING = {"jsonrpc": "2.0", "id": "final-ping", "method": "ping"}
METHODS = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "logging/setLevel",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "server/discover",
    "notifications/cancelled",
    "notifications/initialized",
    "notifications/roots/list_changed",
]


def strict_json(text: str) -> Any:
    """JSON as the spec means it: NaN and Infinity are not JSON."""

    def refuse(name: str) -> Any:
        raise ValueError(f"non-JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def check_output(output: bytes) -> list[dict[str, Any]]:
    """Every line the server wrote is one JSON-RPC response or notification, in strict UTF-8 JSON."""
    messages = []
    assert output.endswith(b"\n") or not output
    for line in output.split(b"\n")[:-1]:
        message = strict_json(line.decode("utf-8"))
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", line[:200]
        if "method" in message:
            assert "id" not in message and isinstance(message["method"], str), line[:200]
        else:
            assert "id" in message and ("result" in message) != ("error" in message), line[:200]
            if "error" in message:
                error = message["error"]
                assert isinstance(error["code"], int) and isinstance(error["message"], str)
                assert error["code"] != -32603, f"an internal error is a bug: {line[:300]!r}"
            else:
                assert isinstance(message["result"], dict)
        messages.append(message)
    return messages


async def exchange(lines: list[bytes], *, chunk: int = 0) -> list[dict[str, Any]]:
    """Run a fresh server over these lines (after the handshake, before a final ping) to the end."""
    transport = MemoryTransport()
    session = Session(build_server(ALL_TOOLS), transport, eof_grace=5)
    data = b"".join(
        line + b"\n" for line in [*map(_encode, (INIT, INITIALIZED)), *lines, _encode(FINAL_PING)]
    )
    step = chunk or len(data)
    for start in range(0, len(data), step):
        transport.feed(data[start : start + step])
    transport.feed(b"")
    with anyio.fail_after(30):
        await session.run()
    return check_output(bytes(transport.written))


def _encode(message: Any) -> bytes:
    return json.dumps(message).encode()


def requests_in(lines: list[bytes]) -> list[Any]:
    """The ids of the lines that are valid requests: each must get exactly one response.

    Requests a ``notifications/cancelled`` in the same input may cancel are left out: a cancelled
    request is, rightly, never answered.
    """
    ids = []
    cancelled = []
    for line in lines:
        try:
            value = strict_json(line.decode("utf-8"))  # NaN or Infinity: a parse error, no request
        except (ValueError, RecursionError):
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and item.get("method") == "notifications/cancelled":
                params = item.get("params")
                cancelled.append(params.get("requestId") if isinstance(params, dict) else None)
        if (
            isinstance(value, dict)
            and value.get("jsonrpc") == "2.0"
            and isinstance(value.get("method"), str)
            and isinstance(value.get("params", {}), dict | None)
            and (isinstance(value.get("id"), str) or type(value.get("id")) is int)
        ):
            ids.append(value["id"])
    return [i for i in ids if i not in cancelled]


def assert_answered(lines: list[bytes], messages: list[dict[str, Any]]) -> None:
    responses = [m for m in messages if "id" in m]
    answered = [m["id"] for m in responses]
    for msg_id in requests_in(lines):
        assert msg_id in answered, f"request {msg_id!r} got no response"
    final = [m for m in responses if m["id"] == "final-ping"]
    assert final == [{"jsonrpc": "2.0", "id": "final-ping", "result": {}}]  # and it keeps serving


# -- strategies -----------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
_MISSING = object()
anything = json_values | st.just(_MISSING)
ids = st.integers(min_value=-(2**63), max_value=2**63) | st.text(max_size=8) | json_values
paths = st.sampled_from(
    ["/", "/tmp", "/proc/self/root", "/dev/null", "relative", "", "/nonexistent/x"]
) | st.text(max_size=40)
tool_arguments = st.fixed_dictionaries(
    {},
    optional={
        "path": paths | json_values,
        "top_n": st.integers(min_value=-5, max_value=100) | json_values,
        "unit": st.sampled_from(["percent", "mb", "PB"]) | json_values,
    },
)
params = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.sampled_from([t.name for t in ALL_TOOLS]) | json_values,
            "arguments": tool_arguments | json_values,
            "_meta": st.fixed_dictionaries({}, optional={"progressToken": ids}) | json_values,
            "cursor": json_values,
            "uri": st.text(max_size=30) | json_values,
            "level": st.sampled_from(["debug", "info", "nope"]) | json_values,
            "requestId": ids,
            "protocolVersion": st.sampled_from(["2025-11-25", "2026-07-28"]) | json_values,
        },
    ),
    json_values,
)


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    """Requests, notifications and responses with every field sometimes missing or of the wrong type."""
    fields = {
        "jsonrpc": draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2]) | anything),
        "id": draw(ids | anything),
        "method": draw(st.sampled_from(METHODS) | st.text(max_size=20) | anything),
        "params": draw(params | anything),
    }
    if draw(st.booleans()):
        fields["result" if draw(st.booleans()) else "error"] = draw(json_values)
    return {k: v for k, v in fields.items() if v is not _MISSING}


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["message", "message", "truncated", "bytes", "batch"]))
    if kind == "bytes":
        return draw(st.binary(max_size=80)).replace(b"\n", b"")
    line = json.dumps(draw(messages()) if kind != "batch" else draw(st.lists(messages(), max_size=3)))
    line_bytes = line.encode("utf-8", "surrogatepass")
    if kind == "truncated":
        return line_bytes[: draw(st.integers(min_value=0, max_value=len(line_bytes)))]
    return line_bytes


FUZZ = settings(
    max_examples=int(os.environ.get("SYSMCP_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(st.lists(lines(), min_size=1, max_size=12))
def test_hostile_lines_get_only_json_rpc_out_and_every_request_an_answer(batch: list[bytes]) -> None:
    messages = anyio.run(exchange, batch)
    assert_answered(batch, messages)


@FUZZ
@given(st.lists(lines(), min_size=1, max_size=8), st.integers(min_value=1, max_value=64))
def test_lines_split_at_any_byte_are_read_the_same(batch: list[bytes], chunk: int) -> None:
    # Timing may legitimately change the outcome of a duplicate id or a cancellation: leave those out.
    ids = requests_in(batch)
    assume(len(ids) == len(set(ids)) and not any(b"notifications/cancelled" in line for line in batch))
    whole = anyio.run(exchange, batch)
    split = anyio.run(lambda: exchange(batch, chunk=chunk))
    assert responses_of(whole) == responses_of(split)


def responses_of(messages: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(m, sort_keys=True) for m in messages if "id" in m)


# -- the named hostile inputs, each once ----------------------------------------------------------

NAMED: dict[str, bytes] = {
    "100,000 nested arrays": b"[" * 100_000 + b"]" * 100_000,
    "100,000 nested objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "deep params": b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":'
    + b"[" * 50_000
    + b"]" * 50_000
    + b"}}",
    "deep tool arguments": b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"dir_usage",'
    b'"arguments":{"path":' + b"[" * 900 + b"]" * 900 + b"}}}",
    "huge integer": b"1" * 10_000,
    "huge integer id": b'{"jsonrpc":"2.0","id":' + b"9" * 5_000 + b',"method":"ping"}',
    "big but legal integer id": b'{"jsonrpc":"2.0","id":' + b"9" * 40 + b',"method":"ping"}',
    "huge float": b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"dir_usage","arguments":'
    b'{"path":"/tmp","top_n":1e400}}}',
    "huge float, then NaN": b'{"jsonrpc":"2.0","id":16,"method":"ping","params":{"a":1e400,"b":NaN}}',
    "huge float, then deep nesting": b'{"jsonrpc":"2.0","id":17,"method":"ping","params":{"a":1e400,"b":'
    + b"[" * 100_000
    + b"]" * 100_000
    + b"}}",
    "NaN and Infinity": b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"dir_usage",'
    b'"arguments":{"path":"/tmp","top_n":NaN,"x":Infinity}}}',
    "invalid UTF-8": b'{"jsonrpc":"2.0","id":5,"method":"ping\xff\xfe"}',
    "lone surrogate in a path": b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"file_sha256",'
    b'"arguments":{"path":"/tmp/\\ud800"}}}',
    "NUL bytes": b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"file_sha256",'
    b'"arguments":{"path":"/etc/\\u0000passwd"}}}',
    "raw NUL": b"\x00" * 100,
    "enormous string": b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"dir_usage",'
    b'"arguments":{"path":"/' + b"a" * 3_000_000 + b'"}}}',
    "enormous method name": b'{"jsonrpc":"2.0","id":9,"method":"' + b"m" * 1_000_000 + b'"}',
    "response sent by the client": b'{"jsonrpc":"2.0","id":10,"result":{}}',
    "error sent by the client": b'{"jsonrpc":"2.0","id":11,"error":{"code":1,"message":"x"}}',
    "notification with a null id": b'{"jsonrpc":"2.0","id":null,"method":"notifications/initialized"}',
    "cancel of nothing": b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":[1]}}',
    "duplicate ids": b'{"jsonrpc":"2.0","id":12,"method":"ping"}\n{"jsonrpc":"2.0","id":12,"method":"ping"}',
    "batch outside 2025-03-26": b'[{"jsonrpc":"2.0","id":13,"method":"ping"}]',
    "empty batch": b"[]",
    "CRLF": b'{"jsonrpc":"2.0","id":14,"method":"ping"}\r',
    "id true": b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
    "id float": b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
    "params array": b'{"jsonrpc":"2.0","id":15,"method":"tools/list","params":[1,2]}',
}


@pytest.mark.anyio
@pytest.mark.parametrize("name", list(NAMED))
async def test_named_hostile_input_is_answered_and_the_server_keeps_serving(name: str) -> None:
    batch = NAMED[name].split(b"\n")
    messages = await exchange(batch)
    assert_answered(batch, messages)


@pytest.mark.anyio
async def test_duplicate_ids_each_get_an_answer() -> None:
    batch = [b'{"jsonrpc":"2.0","id":12,"method":"ping"}'] * 2
    messages = await exchange(batch)
    assert len([m for m in messages if m.get("id") == 12]) == 2


# -- through the real process ---------------------------------------------------------------------


def random_lines(count: int, seed: int) -> tuple[list[bytes], list[str]]:
    """Random garbage, truncated JSON and mangled messages, with a real ping every 97 lines."""
    rng = random.Random(seed)
    pings: list[str] = []
    out: list[bytes] = []
    templates = [_encode(INIT), _encode(FINAL_PING), b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}']
    for i in range(count):
        roll = rng.random()
        if i % 97 == 0:
            pings.append(f"p{i}")
            out.append(_encode({"jsonrpc": "2.0", "id": f"p{i}", "method": "ping"}))
        elif roll < 0.4:
            out.append(rng.randbytes(rng.randint(0, 100)).replace(b"\n", b""))
        elif roll < 0.7:
            line = rng.choice(templates)
            out.append(line[: rng.randint(0, len(line))])
        else:
            mangled = bytearray(rng.choice(templates))
            for _ in range(rng.randint(1, 4)):
                mangled[rng.randrange(len(mangled))] = rng.randrange(256)
            out.append(bytes(mangled).replace(b"\n", b""))
    return out, pings


@pytest.mark.anyio
@pytest.mark.slow
async def test_100_000_random_lines_through_the_real_process() -> None:
    garbage, pings = random_lines(100_000, seed=6)
    data = b"".join(line + b"\n" for line in garbage)
    process = await anyio.open_process([*SERVER])
    output = bytearray()
    errors = bytearray()
    try:
        with anyio.fail_after(90):
            async with anyio.create_task_group() as group:

                async def feed() -> None:
                    assert process.stdin is not None
                    for start in range(0, len(data), 1 << 16):
                        await process.stdin.send(data[start : start + (1 << 16)])
                    await process.stdin.aclose()

                async def collect(stream: Any, into: bytearray) -> None:
                    async for chunk in stream:
                        into.extend(chunk)

                group.start_soon(feed)
                group.start_soon(collect, process.stdout, output)
                group.start_soon(collect, process.stderr, errors)
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
    messages = check_output(bytes(output))
    answered = {m["id"]: m for m in messages if isinstance(m.get("id"), str)}
    assert all(answered[p] == {"jsonrpc": "2.0", "id": p, "result": {}} for p in pings)
    assert len(messages) <= len(garbage)
    assert b"Traceback" not in errors, bytes(errors[-2000:]).decode("utf-8", "replace")
    print(f"{len(garbage)} lines in, {len(messages)} messages out", file=sys.stderr)
