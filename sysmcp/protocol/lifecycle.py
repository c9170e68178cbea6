"""Protocol versions, what each allows, and the connection's era — free of I/O.

Every decision that depends on the protocol version is made here, so the rest of the code asks
``Features`` questions ("may I send outputSchema?") instead of comparing date strings.

Two eras share one process. The legacy era (2024-11-05 … 2025-11-25) starts with ``initialize``
and keeps the negotiated version for the connection. The modern era (2026-07-28) has no handshake:
every request carries its version and the client's capabilities in ``params._meta``. The first
request that settles the question decides the era of the stdio connection, as the official SDK
server does: after a successful modern request ``initialize`` is refused with -32022 naming the
modern versions (the 2.x client reads that as "stay modern"), and after ``initialize`` a modern
request is refused with -32600. Failed probes decide nothing, so ``server/discover`` → error →
``initialize`` (the 2.x client's fallback) works.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from typing import Any, overload

from sysmcp.protocol.failures import ProtocolError, invalid_params
from sysmcp.protocol.jsonrpc import ErrorCode

LEGACY_VERSIONS: tuple[str, ...] = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS: tuple[str, ...] = ("2026-07-28",)
LATEST_LEGACY = LEGACY_VERSIONS[-1]

#: The RFC 5424 levels of ``notifications/message``, least severe first.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

#: Legacy methods that need no handshake: a ping is a liveness check. (Modern requests never need one.)
HANDSHAKE_FREE = frozenset({"ping", "initialize"})

#: What ``server/discover`` and -32022 errors list: newest first, modern before legacy, so a client
#: that only knows the handshake still finds a version it can ``initialize`` with.
ADVERTISED_VERSIONS: tuple[str, ...] = tuple(reversed(MODERN_VERSIONS)) + tuple(reversed(LEGACY_VERSIONS))

# The request envelope of the modern era (schema ``RequestMetaObject``) and the result's server info.
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

#: Methods 2026-07-28 removed; asking for them at that version is asking for a method that does not exist.
REMOVED_IN_MODERN = frozenset({"ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"})
#: Methods that exist only in the modern era.
MODERN_ONLY = frozenset({"server/discover"})

#: Cache hints (``ttlMs``, ``cacheScope``) for the results 2026-07-28 makes cacheable. Tool and prompt
#: lists never change while the process lives; discovery names the operator's roots and resources are
#: this machine's data, so those are private; resources may change at any moment, so they are never fresh.
#: The tool list is private too: it depends on the extensions the request declared (views) and names the
#: operator's fleet groups when one is configured, so a shared cache must not serve it across clients.
CACHE_HINTS: dict[str, tuple[int, str]] = {
    "server/discover": (60_000, "private"),
    "tools/list": (3_600_000, "private"),
    "prompts/list": (3_600_000, "public"),
    "resources/templates/list": (3_600_000, "public"),
    "resources/list": (0, "private"),
    "resources/read": (0, "private"),
}


class Since:
    """A feature of every protocol version from ``first`` on: read on ``Features`` as a ``bool``
    (the versions are dates, so they compare as text), one comparison for every such feature."""

    def __init__(self, first: str, doc: str) -> None:
        self.first = first
        self.__doc__ = f"{doc} (from {first} on)"

    @overload
    def __get__(self, features: None, owner: type[Features]) -> Since: ...

    @overload
    def __get__(self, features: Features, owner: type[Features]) -> bool: ...

    def __get__(self, features: Features | None, owner: type[Features]) -> Since | bool:
        return self if features is None else features.version >= self.first


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

    tool_annotations = Since("2025-03-26", "Tool ``annotations``.")
    progress_message = Since("2025-03-26", "``message`` on progress notifications.")
    structured_output = Since(
        "2025-06-18", "``title``, ``outputSchema``, ``structuredContent`` and ``resource_link`` content."
    )
    validation_errors_as_results = Since(
        "2025-11-25", "SEP-1303: input validation failures are tool results the model can read and retry."
    )
    titles = Since(
        "2025-06-18", "``title`` on server info, prompts, prompt arguments and other ``BaseMetadata``."
    )
    implementation_details = Since(
        "2025-11-25", "``websiteUrl``, ``icons`` and ``description`` on the server's ``Implementation``."
    )

    @property
    def logging_capability(self) -> bool:
        """The ``logging`` capability: legacy era only. 2026-07-28 logs per request (``_meta`` logLevel)
        and deprecates the capability (SEP-2577), so it is not declared there."""
        return not self.modern

    completions_capability = Since(
        "2025-03-26", "``completion/complete`` exists from the start, its capability flag from 2025-03-26."
    )

    @property
    def resource_not_found_code(self) -> int:
        """-32002 in every legacy version; 2026-07-28 uses invalid params and forbids -32002."""
        return int(ErrorCode.INVALID_PARAMS if self.modern else ErrorCode.RESOURCE_NOT_FOUND)


@functools.cache
def features_of(version: str) -> Features:
    """The (immutable) ``Features`` of a version, built once per version instead of once per request."""
    return Features(version)


def negotiate(requested: object) -> str:
    """The version to answer an ``initialize`` with: the client's if we speak it, else our latest legacy one."""
    if isinstance(requested, str) and requested in LEGACY_VERSIONS:
        return requested
    return LATEST_LEGACY


def unsupported_version(requested: object, supported: tuple[str, ...] = ADVERTISED_VERSIONS) -> ProtocolError:
    """The spec's UnsupportedProtocolVersionError (-32022), naming what we would accept instead."""
    shown = requested if isinstance(requested, str) else ""
    return ProtocolError(
        ErrorCode.UNSUPPORTED_PROTOCOL_VERSION,
        f"Unsupported protocol version {shown!r}; supported: {', '.join(supported)}",
        {"supported": list(supported), "requested": shown},
    )


@dataclass(frozen=True, slots=True)
class Envelope:
    """What a modern request says about its client, read from ``params._meta``."""

    version: str
    client_capabilities: dict[str, Any]
    client_info: dict[str, Any]
    log_level: str | None  # None: the client wants no log messages for this request


def is_enveloped(params: dict[str, Any]) -> bool:
    """A request that names its protocol version in ``_meta`` is a modern request."""
    meta = params.get("_meta")
    return isinstance(meta, dict) and META_PROTOCOL_VERSION in meta


def read_envelope(params: dict[str, Any]) -> Envelope:
    """Check a modern request's ``_meta``: missing or malformed keys are -32602, an unknown version -32022."""
    meta = params.get("_meta")
    meta = meta if isinstance(meta, dict) else {}
    missing = [key for key in (META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES) if key not in meta]
    if missing:
        raise invalid_params(
            "Invalid params: params._meta is missing the required key(s) "
            + ", ".join(missing)
            + " (every 2026-07-28 request carries them; older clients start with initialize)"
        )
    version = meta[META_PROTOCOL_VERSION]
    if not isinstance(version, str):
        raise invalid_params(f"Invalid params: {META_PROTOCOL_VERSION} must be a string")
    capabilities = meta[META_CLIENT_CAPABILITIES]
    if not isinstance(capabilities, dict):
        raise invalid_params(f"Invalid params: {META_CLIENT_CAPABILITIES} must be an object")
    level = meta.get(META_LOG_LEVEL)
    if level is not None and level not in LOG_LEVELS:
        raise invalid_params(f"Invalid params: {META_LOG_LEVEL} must be one of {', '.join(LOG_LEVELS)}")
    if version not in MODERN_VERSIONS:
        raise unsupported_version(version)
    info = meta.get(META_CLIENT_INFO)
    return Envelope(version, capabilities, info if isinstance(info, dict) else {}, level)


def complete_result(method: str, result: dict[str, Any], server_info: dict[str, Any]) -> dict[str, Any]:
    """A method's result as 2026-07-28 wants it: ``resultType``, cache hints where due, server info."""
    done = {"resultType": "complete", **result}
    hints = CACHE_HINTS.get(method)
    if hints is not None:
        done.setdefault("ttlMs", hints[0])
        done.setdefault("cacheScope", hints[1])
    meta = done.get("_meta")
    done["_meta"] = {**(meta if isinstance(meta, dict) else {}), META_SERVER_INFO: server_info}
    return done


class Phase(enum.Enum):
    AWAITING_INITIALIZE = "awaiting initialize"
    INITIALIZED = "initialized"  # initialize answered; the client's notification may not have arrived
    READY = "ready"
    MODERN = "modern"  # no handshake: each request carries its own version


@dataclass(frozen=True, slots=True)
class Admission:
    """How to serve one request: under which version, and (modern only) what its envelope said."""

    features: Features
    envelope: Envelope | None = None

    @property
    def modern(self) -> bool:
        return self.envelope is not None


@dataclass
class Lifecycle:
    """The connection's era and handshake state, and what the client told us about itself."""

    phase: Phase = Phase.AWAITING_INITIALIZE
    version: str | None = None
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    client_info: dict[str, Any] = field(default_factory=dict)
    _admission: Admission | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def features(self) -> Features:
        return features_of(self.version or LATEST_LEGACY)

    def admit(self, method: str, params: dict[str, Any]) -> Admission:
        """Decide the era a request belongs to, refusing what that era does not allow.

        Synchronous on purpose: requests are admitted in arrival order, so "what the client sent
        first" is well defined even though requests then run concurrently.
        """
        if method == "initialize" and is_enveloped(params):
            # An initialize that speaks 2026-07-28 asks for a method that revision removed: -32601 on
            # any connection (the conformance suite's server-stateless scenario), never a version error.
            raise ProtocolError(
                ErrorCode.METHOD_NOT_FOUND, "Method not found: initialize (removed in 2026-07-28)"
            )
        if self.phase is Phase.MODERN:
            if method == "initialize":
                raise unsupported_version(params.get("protocolVersion"), MODERN_VERSIONS)
            return self._admit_modern(method, params)
        if self.phase in (Phase.INITIALIZED, Phase.READY):
            if is_enveloped(params) or method in MODERN_ONLY:
                raise ProtocolError(
                    ErrorCode.INVALID_REQUEST,
                    f"Invalid Request: this connection negotiated {self.version} with initialize;"
                    " 2026-07-28 requests need a new connection",
                )
            return self._legacy_admission()
        if method != "initialize" and (is_enveloped(params) or method in MODERN_ONLY):
            admission = self._admit_modern(method, params)
            self.phase = Phase.MODERN  # only a request we accepted settles the era
            return admission
        if method not in HANDSHAKE_FREE:
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST,
                f"Invalid Request: {method!r} before initialize; send initialize first",
            )
        return self._legacy_admission()

    def _legacy_admission(self) -> Admission:
        """The connection's one Admission (immutable, so shared by every request until the version changes)."""
        features = self.features
        admission = self._admission
        if admission is None or admission.features is not features:
            admission = self._admission = Admission(features)
        return admission

    def _admit_modern(self, method: str, params: dict[str, Any]) -> Admission:
        if method in REMOVED_IN_MODERN:
            raise ProtocolError(
                ErrorCode.METHOD_NOT_FOUND, f"Method not found: {method} (removed in 2026-07-28)"
            )
        envelope = read_envelope(params)
        return Admission(features_of(envelope.version), envelope)

    def initialize(self, params: dict[str, Any]) -> str:
        """Record an ``initialize`` request and return the negotiated version."""
        if self.phase in (Phase.INITIALIZED, Phase.READY):
            raise ProtocolError(ErrorCode.INVALID_REQUEST, "Invalid Request: already initialized")
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise invalid_params('Invalid params: "protocolVersion" must be a string')
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

    @property
    def batching_allowed(self) -> bool:
        return self.version is not None and self.features.batching
