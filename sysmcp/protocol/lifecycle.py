"""Protocol versions, what each allows, and the connection's lifecycle state — free of I/O.

Every decision that depends on the protocol version is made here, so the rest of the code asks
``Features`` questions ("may I send outputSchema?") instead of comparing date strings.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from sysmcp.protocol.errors import ProtocolError
from sysmcp.protocol.jsonrpc import ErrorCode

LEGACY_VERSIONS: tuple[str, ...] = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS: tuple[str, ...] = ("2026-07-28",)
SUPPORTED_VERSIONS: tuple[str, ...] = LEGACY_VERSIONS + MODERN_VERSIONS
LATEST_LEGACY = LEGACY_VERSIONS[-1]
LATEST = SUPPORTED_VERSIONS[-1]

#: Methods that need no handshake: a ping is a liveness check, discovery is how modern clients start.
HANDSHAKE_FREE = frozenset({"ping", "initialize", "server/discover"})


@dataclass(frozen=True, slots=True)
class Features:
    """What a protocol version lets us send or expects of us."""

    version: str

    @property
    def modern(self) -> bool:
        return self.version in MODERN_VERSIONS

    @property
    def batching(self) -> bool:
        """JSON-RPC batches exist only in 2025-03-26."""
        return self.version == "2025-03-26"

    @property
    def tool_annotations(self) -> bool:
        return self.version >= "2025-03-26"

    @property
    def structured_output(self) -> bool:
        """``title``, ``outputSchema``, ``structuredContent`` and ``resource_link`` content."""
        return self.version >= "2025-06-18"

    @property
    def validation_errors_as_results(self) -> bool:
        """SEP-1303: input validation failures are tool results the model can read and retry."""
        return self.version >= "2025-11-25"

    @property
    def server_title(self) -> bool:
        return self.version >= "2025-06-18"


def negotiate(requested: object) -> str:
    """The version to answer an ``initialize`` with: the client's if we speak it, else our latest legacy one."""
    if isinstance(requested, str) and requested in LEGACY_VERSIONS:
        return requested
    return LATEST_LEGACY


class Phase(enum.Enum):
    AWAITING_INITIALIZE = "awaiting initialize"
    INITIALIZED = "initialized"  # initialize answered; the client's notification may not have arrived
    READY = "ready"
    MODERN = "modern"  # no handshake: each request carries its own version


@dataclass
class Lifecycle:
    """The connection's handshake state and what the client told us about itself."""

    phase: Phase = Phase.AWAITING_INITIALIZE
    version: str | None = None
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    client_info: dict[str, Any] = field(default_factory=dict)

    @property
    def features(self) -> Features:
        return Features(self.version or LATEST_LEGACY)

    def initialize(self, params: dict[str, Any]) -> str:
        """Record an ``initialize`` request and return the negotiated version."""
        if self.phase in (Phase.INITIALIZED, Phase.READY):
            raise ProtocolError(ErrorCode.INVALID_REQUEST, "Invalid Request: already initialized")
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise ProtocolError(
                ErrorCode.INVALID_PARAMS, 'Invalid params: "protocolVersion" must be a string'
            )
        capabilities = params.get("capabilities", {})
        info = params.get("clientInfo", {})
        self.version = negotiate(requested)
        self.client_capabilities = capabilities if isinstance(capabilities, dict) else {}
        self.client_info = info if isinstance(info, dict) else {}
        self.phase = Phase.INITIALIZED
        return self.version

    def initialized(self) -> None:
        if self.phase is Phase.INITIALIZED:
            self.phase = Phase.READY

    def enter_modern(self) -> None:
        if self.phase is Phase.AWAITING_INITIALIZE:
            self.phase = Phase.MODERN

    def check(self, method: str) -> None:
        """Refuse requests that need a handshake before one happened."""
        if self.phase is Phase.AWAITING_INITIALIZE and method not in HANDSHAKE_FREE:
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST,
                f"Invalid Request: {method!r} before initialize; send initialize first",
            )

    @property
    def batching_allowed(self) -> bool:
        return self.version is not None and self.features.batching
