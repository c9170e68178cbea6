"""A host's ``sysmcp://`` links, readable through the gateway.

A remote tool's full result (``hash_tree``'s manifest, a long listing) lives in that host's sysmcp, behind
a ``sysmcp://results/…`` link that means nothing on the gateway. The fan-out rewrites such links to
``sysmcp://hosts/<host>/results/…``; the gateway serves them by asking that host's session, and a tool
argument naming one (``verify_checksums``' manifest) goes to its own host as the host's link and to the
other hosts as the text behind it. Pure: no I/O here.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from sysmcp.results import URI_PREFIX

HOST_PREFIX = "sysmcp://hosts/"
#: The text behind a link is passed to other hosts inside one request line (the framing's limit is
#: 4 MiB, and JSON escaping can grow a text): past this it is refused with a reason.
MAX_INLINE = 3 << 20


def to_gateway(host: str, value: Any) -> Any:
    """``value`` (a result, a text) with every one of the host's own links made a gateway link. A link
    of the gateway's form in it (a host's claim, or its own fleet's) is put under this host, where it
    reads nothing: a host never gets to point the gateway at another host's results."""
    if isinstance(value, str):
        if "sysmcp://" not in value:
            return value
        own = f"{HOST_PREFIX}{quote(host, safe='')}/"
        value = value.replace(HOST_PREFIX, f"{own}{HOST_PREFIX[len('sysmcp://') :]}")
        return value.replace(URI_PREFIX, f"{own}{URI_PREFIX[len('sysmcp://') :]}")
    if isinstance(value, dict):  # its keys too: a link is a link wherever the host put it
        return {to_gateway(host, key): to_gateway(host, item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_gateway(host, item) for item in value]
    return value


def from_gateway(uri: str) -> tuple[str, str] | None:
    """``(host, the host's own URI)`` for a gateway link; None for any other URI."""
    if not uri.startswith(HOST_PREFIX):
        return None
    host, slash, rest = uri[len(HOST_PREFIX) :].partition("/")
    remote = f"sysmcp://{rest}"
    if not host or not slash or not remote.startswith(URI_PREFIX):
        return None
    return unquote(host), remote


def linked_arguments(arguments: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """The arguments whose whole value is a gateway link: name → (host, the host's own URI)."""
    found: dict[str, tuple[str, str]] = {}
    for name, value in arguments.items():
        parsed = from_gateway(value.strip()) if isinstance(value, str) else None
        if parsed is not None:
            found[name] = parsed
    return found


def for_host(
    arguments: dict[str, Any], host: str, linked: dict[str, tuple[str, str]], texts: dict[str, str]
) -> dict[str, Any]:
    """The arguments as ``host`` gets them: its own link as its own URI, another host's as the text."""
    if not linked:
        return arguments
    given = dict(arguments)
    for name, (origin, remote) in linked.items():
        given[name] = remote if origin == host else texts[name]
    return given


__all__ = ["HOST_PREFIX", "MAX_INLINE", "for_host", "from_gateway", "linked_arguments", "to_gateway"]
