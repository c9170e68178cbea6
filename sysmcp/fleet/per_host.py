"""``sysmcp call … hosts=… -o DIR``: each host's full result as its own file, not the merged summary.

Pure: which of a host's links hold its full result, and the file each lands in. The client reads
the links through the gateway (``sysmcp://hosts/<host>/results/…``) while the server still lives.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Container
from typing import Any
from urllib.parse import quote, unquote

from sysmcp.engine.paths import EXACT_BYTES
from sysmcp.fleet.links import HOST_PREFIX

_UNSAFE = re.compile(r"[^A-Za-z0-9_.@%+\-\[\]:]")
#: Characters of a file's stem (the host's name) and of its extension (from the host's own link): a
#: name past the file system's 255 bytes stopped ``-o DIR`` at that host, and every host after it.
STEM_KEPT = 200
#: Hex digits of the host name's digest that end a stem cut to ``STEM_KEPT``: two hosts alike in their
#: first 200 characters keep files that say whose each is, whichever answered first.
STEM_DIGEST = 12
EXT_KEPT = 16
#: Links of one host read into files: a sysmcp's result holds one or two (a manifest, a long
#: listing); a host's answer naming thousands made as many reads and files.
MAX_LINKS = 16


def host_links(host: str, result: Any) -> list[str]:
    """The host's own gateway links in its result (its manifest, its long listing), in order, once
    each, the first ``MAX_LINKS``."""
    prefix = f"{HOST_PREFIX}{quote(host, safe='')}/results/"
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            for match in re.finditer(re.escape(prefix) + r"\S+", value):
                uri = match.group(0).rstrip(").,;'\"")
                if uri not in found and len(found) < MAX_LINKS:
                    found.append(uri)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(result)
    return found


def file_name(host: str, uri: str | None) -> str:
    """``<host>.<ext>``: the link's own name's extension (``dir_usage.json`` → json) or the name itself
    (``SHA256SUMS``); ``<host>.json`` for a host whose structured answer is its full result."""
    safe = _UNSAFE.sub("_", host).lstrip(".") or "_"
    if len(safe) > STEM_KEPT:
        digest = hashlib.sha256(host.encode("utf-8", "surrogatepass")).hexdigest()[:STEM_DIGEST]
        safe = f"{safe[: STEM_KEPT - STEM_DIGEST - 1]}~{digest}"
    if uri is None:
        return f"{safe}.json"
    name = unquote(uri.rstrip("/").rsplit("/", 1)[-1])
    ext = name.rsplit(".", 1)[-1] if "." in name else name
    return f"{safe}.{_UNSAFE.sub('_', ext)[:EXT_KEPT] or 'txt'}"


def free_name(taken: Container[str], name: str) -> str:
    """``name``, or ``<stem>-2.<ext>``, ``-3`` … when a host before took it: two hosts whose names differ
    only in what files cannot hold (``.web`` and ``web``, ``a/b`` and ``a_b``) each keep their own file."""
    stem, dot, ext = name.rpartition(".") if "." in name else (name, "", "")
    candidate, number = name, 2
    while candidate in taken:
        candidate, number = f"{stem}-{number}{dot}{ext}", number + 1
    return candidate


def structured_text(entry: dict[str, Any], exact: dict[str, str] | None = None) -> str:
    """A host's answer as a file when no link holds more: its structured result, with ``exact`` (its
    names' exact bytes, ``host_exact_bytes``) as its own ``exact_bytes``, so the file alone names each
    file exactly, as the host's answer did."""
    result = entry.get("result", {})
    if exact and isinstance(result, dict):
        result = {**result, EXACT_BYTES: exact}
    return json.dumps(result, indent=2, ensure_ascii=False) + "\n"


def host_exact_bytes(answer: dict[str, Any], index: int) -> dict[str, str]:
    """The fleet answer's ``exact_bytes`` for the names in ``hosts[index]``'s result, each pointer
    from that result: the answer lists them once, at its top."""
    marks = answer.get(EXACT_BYTES)
    prefix = f"/hosts/{index}/result/"
    if not isinstance(marks, dict):
        return {}
    return {
        pointer[len(prefix) - 1 :]: encoded
        for pointer, encoded in marks.items()
        if isinstance(pointer, str) and pointer.startswith(prefix)
    }


__all__ = ["file_name", "free_name", "host_exact_bytes", "host_links", "structured_text"]
