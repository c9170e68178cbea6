"""Validate what sysmcp writes against the official schema of the negotiated protocol version."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator, Draft202012Validator

SCHEMAS = Path(__file__).parent / "schemas"

#: The result definition to check for each method's answer.
RESULT_TYPES: dict[str, str] = {
    "initialize": "InitializeResult",
    "ping": "EmptyResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
    "logging/setLevel": "EmptyResult",
    "resources/list": "ListResourcesResult",
    "resources/read": "ReadResourceResult",
    "resources/templates/list": "ListResourceTemplatesResult",
    "prompts/list": "ListPromptsResult",
    "prompts/get": "GetPromptResult",
    "completion/complete": "CompleteResult",
    "server/discover": "DiscoverResult",
}

#: Errors the schema defines as whole responses (2026-07-28), by code.
ERROR_TYPES: dict[int, str] = {-32022: "UnsupportedProtocolVersionError"}


@functools.cache
def _root(version: str) -> dict[str, Any]:
    root: dict[str, Any] = json.loads((SCHEMAS / version / "schema.json").read_text())
    return root


@functools.cache
def validator(version: str, name: str) -> Draft7Validator | Draft202012Validator:
    root = _root(version)
    key = "$defs" if "$defs" in root else "definitions"
    cls = Draft202012Validator if key == "$defs" else Draft7Validator
    return cls({"$schema": root["$schema"], key: root[key], "$ref": f"#/{key}/{name}"})


def has_definition(version: str, name: str) -> bool:
    root = _root(version)
    return name in root.get("$defs", root.get("definitions", {}))


def check(version: str, name: str, value: Any) -> None:
    errors = sorted(validator(version, name).iter_errors(value), key=str)
    if errors:
        raise AssertionError(f"{name} ({version}) rejects {json.dumps(value)[:500]}: {errors[0].message}")


def check_server_message(version: str, message: dict[str, Any], method: str | None = None) -> None:
    """Check one message the server wrote; ``method`` is the request a response answers, if known."""
    if "method" in message and "id" in message:  # a request to the client (roots/list, elicitation/create)
        check(version, "JSONRPCRequest", message)
        check(
            version,
            "ServerRequest",
            {k: v for k, v in message.items() if k != "jsonrpc"} | {"jsonrpc": "2.0"},
        )
        return
    if "method" in message:
        check(version, "JSONRPCNotification", message)
        check(
            version,
            "ServerNotification",
            {k: v for k, v in message.items() if k != "jsonrpc"} | {"jsonrpc": "2.0"},
        )
        return
    if "error" in message:
        if message.get("id") is None:
            # JSON-RPC 2.0 answers an unreadable request with "id": null; the MCP schemas cannot express that.
            assert set(message) == {"jsonrpc", "id", "error"} and message["jsonrpc"] == "2.0"
            check(
                version,
                "Error" if has_definition(version, "Error") else "JSONRPCError",
                _error_object(version, message),
            )
            return
        name = "JSONRPCErrorResponse" if has_definition(version, "JSONRPCErrorResponse") else "JSONRPCError"
        check(version, name, message)
        specific = ERROR_TYPES.get(message["error"].get("code"))
        if specific is not None and has_definition(version, specific):
            check(version, specific, message)
        return
    name = "JSONRPCResultResponse" if has_definition(version, "JSONRPCResultResponse") else "JSONRPCResponse"
    check(version, name, message)
    if method in RESULT_TYPES and has_definition(version, RESULT_TYPES[method]):
        check(version, RESULT_TYPES[method], message["result"])
        if has_definition(version, RESULT_TYPES[method] + "Response"):  # 2026-07-28: the whole response
            check(version, RESULT_TYPES[method] + "Response", message)


def _error_object(version: str, message: dict[str, Any]) -> Any:
    if has_definition(version, "Error"):
        return message["error"]
    return {**message, "id": 0}
