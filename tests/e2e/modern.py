"""Helpers for speaking 2026-07-28 to the real server: every request carries its envelope."""

from __future__ import annotations

from typing import Any

from tests.wire import Wire

MODERN = "2026-07-28"


def envelope(
    version: str = MODERN, *, capabilities: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """The ``_meta`` of a modern request; ``extra`` adds keys such as ``progressToken``."""
    meta: dict[str, Any] = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": capabilities or {},
        "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "0"},
    }
    meta.update(extra)
    return meta


async def modern(
    wire: Wire,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    log_level: str | None = None,
    msg_id: Any = None,
    **meta: Any,
) -> dict[str, Any]:
    """One modern request and its (schema-checked) response."""
    extra = dict(meta)
    if log_level is not None:
        extra["io.modelcontextprotocol/logLevel"] = log_level
    return await wire.request(method, {**(params or {}), "_meta": envelope(**extra)}, msg_id=msg_id)
