"""Version and era decisions, checked without any I/O."""

from __future__ import annotations

from typing import Any

import pytest

from sysmcp.protocol.failures import ProtocolError
from sysmcp.protocol.lifecycle import (
    ADVERTISED_VERSIONS,
    LEGACY_VERSIONS,
    META_SERVER_INFO,
    Features,
    Lifecycle,
    Phase,
    complete_result,
    negotiate,
    read_envelope,
)

MODERN = "2026-07-28"
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}


def meta(version: Any = MODERN, **extra: Any) -> dict[str, Any]:
    envelope: dict[str, Any] = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    envelope.update(extra)
    return {"_meta": envelope}


def refused(lifecycle: Lifecycle, method: str, params: dict[str, Any]) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        lifecycle.admit(method, params)
    return caught.value


def test_negotiate_echoes_legacy_versions_and_answers_others_with_the_latest_legacy() -> None:
    for version in LEGACY_VERSIONS:
        assert negotiate(version) == version
    assert negotiate(MODERN) == "2025-11-25"  # 2026 has no initialize
    assert negotiate("1999-01-01") == "2025-11-25"


def test_advertised_versions_list_modern_first_then_every_legacy_version() -> None:
    assert ADVERTISED_VERSIONS == (MODERN, "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")


def test_a_valid_envelope_makes_the_connection_modern() -> None:
    lifecycle = Lifecycle()
    admission = lifecycle.admit("server/discover", meta())
    assert admission.modern and admission.features.modern
    assert admission.envelope is not None and admission.envelope.log_level is None
    assert lifecycle.phase is Phase.MODERN


def test_a_failed_probe_decides_nothing_so_initialize_still_works() -> None:
    lifecycle = Lifecycle()
    error = refused(lifecycle, "server/discover", meta("2099-01-01"))
    assert error.code == -32022
    assert error.data == {"supported": list(ADVERTISED_VERSIONS), "requested": "2099-01-01"}
    assert refused(lifecycle, "server/discover", {}).code == -32602
    assert lifecycle.phase is Phase.AWAITING_INITIALIZE
    assert not lifecycle.admit("initialize", INIT).modern


def test_initialize_on_a_modern_connection_is_unsupported_version_naming_only_modern_ones() -> None:
    lifecycle = Lifecycle()
    lifecycle.admit("tools/list", meta())
    error = refused(lifecycle, "initialize", INIT)
    assert error.code == -32022
    assert error.data == {"supported": [MODERN], "requested": "2025-11-25"}


def test_modern_requests_on_a_legacy_connection_are_invalid() -> None:
    lifecycle = Lifecycle()
    lifecycle.admit("initialize", INIT)
    lifecycle.initialize(INIT)
    lifecycle.initialized()
    assert refused(lifecycle, "tools/list", meta()).code == -32600
    assert refused(lifecycle, "server/discover", {}).code == -32600
    assert lifecycle.admit("tools/list", {}).features.version == "2025-11-25"


@pytest.mark.parametrize("method", ["ping", "logging/setLevel", "resources/subscribe"])
def test_methods_removed_in_2026_are_not_found_at_that_version(method: str) -> None:
    assert refused(Lifecycle(), method, meta()).code == -32601


def test_a_modern_connection_requires_the_envelope_on_every_request() -> None:
    lifecycle = Lifecycle()
    lifecycle.admit("server/discover", meta())
    error = refused(lifecycle, "tools/list", {})
    assert error.code == -32602 and "clientCapabilities" in error.message


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}, -32602),
        ({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}, -32602),
        (meta(20260728), -32602),
        ({"_meta": {**meta()["_meta"], "io.modelcontextprotocol/clientCapabilities": []}}, -32602),
        (meta(**{"io.modelcontextprotocol/logLevel": "loud"}), -32602),
        (meta("2025-11-25"), -32022),
        (meta("draft"), -32022),
    ],
)
def test_malformed_envelopes_are_invalid_params_and_unknown_versions_unsupported(
    params: dict[str, Any], code: int
) -> None:
    with pytest.raises(ProtocolError) as caught:
        read_envelope(params)
    assert caught.value.code == code


def test_the_log_level_is_taken_from_the_envelope() -> None:
    envelope = read_envelope(meta(**{"io.modelcontextprotocol/logLevel": "info"}))
    assert envelope.log_level == "info"


def test_complete_result_adds_result_type_cache_hints_and_server_info() -> None:
    info = {"name": "sysmcp", "version": "1"}
    listed = complete_result("tools/list", {"tools": []}, info)
    assert listed["resultType"] == "complete"
    assert isinstance(listed["ttlMs"], int) and listed["ttlMs"] >= 0
    assert listed["cacheScope"] in ("public", "private")
    assert listed["_meta"][META_SERVER_INFO] == info
    called = complete_result("tools/call", {"content": [], "_meta": {"x.y/z": 1}}, info)
    assert "ttlMs" not in called and called["_meta"] == {"x.y/z": 1, META_SERVER_INFO: info}


def test_resource_not_found_is_invalid_params_only_in_the_modern_era() -> None:
    assert Features("2025-11-25").resource_not_found_code == -32002
    assert Features(MODERN).resource_not_found_code == -32602


def test_features_follow_the_version() -> None:
    assert Features("2024-11-05").completions_capability is False
    assert Features("2025-03-26").batching and not Features(MODERN).batching
    assert Features(MODERN).structured_output and Features(MODERN).validation_errors_as_results


def test_initialize_in_the_2026_envelope_is_method_not_found_on_a_fresh_connection() -> None:
    lifecycle = Lifecycle()
    assert refused(lifecycle, "initialize", {**INIT, **meta()}).code == -32601
    assert lifecycle.phase is Phase.AWAITING_INITIALIZE  # a refused request decides nothing
    assert not lifecycle.admit("initialize", INIT).modern


def test_initialize_in_the_2026_envelope_is_method_not_found_after_a_2026_request() -> None:
    lifecycle = Lifecycle()
    lifecycle.admit("server/discover", meta())
    assert refused(lifecycle, "initialize", {**INIT, **meta()}).code == -32601
    assert refused(lifecycle, "initialize", meta()).code == -32601
    assert refused(lifecycle, "initialize", INIT).code == -32022  # a legacy initialize still learns why
