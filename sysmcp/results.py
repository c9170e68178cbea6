"""Full results too big to inline, kept in memory and served as ``sysmcp://`` resources.

Bounded: a total byte cap, oldest evicted first, so a long session cannot grow without limit.
"""

from __future__ import annotations

import itertools
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

DEFAULT_CAP = 64 << 20
#: One item at most: its ``resources/read`` reply (JSON escaping can double a backslash-rich text) must
#: stay under the session's 80 MiB result cap, and one item must not evict everything else.
MAX_ITEM = 32 << 20
URI_PREFIX = "sysmcp://results/"
_NUMBER = re.compile(r"[1-9][0-9]{0,18}")  # a URI's number, as ``put`` writes it


class TooLarge(Exception):
    """A result too big to keep (over ``limit``); ``reason`` is a sentence for the tool's answer."""

    def __init__(self, size: int, limit: int = MAX_ITEM) -> None:
        super().__init__(size)
        self.reason = (
            f"the full result ({size:,} bytes) is too big to keep as a resource (at most {limit:,} "
            "bytes): narrow the request (a subdirectory, exclude patterns) to get it"
        )


@dataclass(frozen=True, slots=True)
class StoredResult:
    uri: str
    name: str
    description: str
    mime_type: str
    text: str
    size: int  # UTF-8 bytes of text, counted once (resources/list reports it for every item)
    scope: tuple[Path, ...] | None = None  # the roots in force when it was made (None: the whole filesystem)


class ResultStore:
    def __init__(self, cap_bytes: int = DEFAULT_CAP, max_item: int = MAX_ITEM) -> None:
        self.cap_bytes = cap_bytes
        self.max_item = max_item
        self._items: OrderedDict[str, StoredResult] = OrderedDict()
        self._bytes = 0
        self._ids = itertools.count(1)
        self._issued = 0  # the number in the newest URI handed out

    def put(
        self,
        name: str,
        text: str,
        *,
        description: str,
        mime_type: str = "text/plain",
        scope: Sequence[Path] | None = None,
    ) -> StoredResult:
        """Keep ``text``, made under ``scope`` (the roots in force; None: the whole filesystem), which
        decides who may read it back (``PathPolicy.covers``)."""
        # The name comes from a path and may hold spaces, '#' or non-ASCII: percent-encode it in the URI.
        size = len(text.encode("utf-8"))
        if size > self.max_item:
            raise TooLarge(size, self.max_item)
        self._issued = next(self._ids)
        uri = f"{URI_PREFIX}{self._issued}/{quote(name, safe='-._~')}"
        kept = None if scope is None else tuple(scope)
        item = StoredResult(uri, name, description, mime_type, text, size, kept)
        self._items[uri] = item
        self._bytes += item.size
        while self._bytes > self.cap_bytes and len(self._items) > 1:
            _, old = self._items.popitem(last=False)
            self._bytes -= old.size
        return item

    def get(self, uri: str) -> StoredResult | None:
        return self._items.get(uri)

    def dropped(self, uri: str) -> str | None:
        """Why ``uri``, a result this store handed out, can no longer be read (None: it is kept, or was
        never one of ours): older results go to keep the newest within the cap."""
        number, _, _ = uri.removeprefix(URI_PREFIX).partition("/")
        # As put() writes it: ASCII digits, no leading zero (str.isdigit takes "²", which int() refuses).
        ours = uri.startswith(URI_PREFIX) and _NUMBER.fullmatch(number) is not None
        issued = ours and int(number) <= self._issued
        if not issued or uri in self._items:
            return None
        whole = self.cap_bytes % (1 << 20) == 0
        cap = f"{self.cap_bytes >> 20} MiB" if whole else f"{self.cap_bytes:,} bytes"
        return (
            f"{uri} is no longer kept: this server keeps its newest results, {cap} in all, and dropped "
            "it for newer ones; call the tool again to make it anew"
        )

    def list(self) -> list[StoredResult]:
        return list(self._items.values())
