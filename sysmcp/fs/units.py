"""Sizes for people: the structured data stays in integer bytes, the text uses binary units."""

from __future__ import annotations

import re

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_bytes(size: float) -> str:
    """1536 → '1.5 KiB'; exact bytes below 1 KiB."""
    value = float(size)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def rate(size: float, seconds: float) -> str:
    """Throughput in decimal units, as hashing tools usually report it."""
    if seconds <= 0:
        return "—"
    per_second = size / seconds
    if per_second >= 1e9:
        return f"{per_second / 1e9:.2f} GB/s"
    return f"{per_second / 1e6:.1f} MB/s"


_BINARY = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50, "e": 1 << 60}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*([kmgtpe]?)(i?b?)\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'4k' → 4096, '1.5G' → 1610612736, '100M', '2TiB', '512' → bytes, as du and find read sizes.

    Units are binary, as in ``du -t 100M`` and ``find -size +4k``: k is 1024 bytes, M 1024²; 'MiB' is
    the same as 'M'. A fraction is rounded down to whole bytes. ValueError for anything else.
    """
    found = _SIZE.fullmatch(text)
    suffix = found[3].lower() if found else ""
    # 'iB' after a unit, 'B' after a plain number; '100MB' is refused: du reads it as 10^8, find not at all.
    if found is None or suffix not in ("", "ib" if found[2] else "b"):
        raise ValueError(f"not a size: {text!r}")
    number, unit = found[1], found[2].lower()
    if "." in number:
        return int(float(number) * _BINARY[unit])
    return int(number) * _BINARY[unit]


_IRREGULAR = {"directory": "directories", "entry": "entries", "copy": "copies", "match": "matches"}


def plural(count: int, noun: str, many: str | None = None) -> str:
    """'1 file', '2 files', '1,000 directories': the count with the noun it needs (never '1 files')."""
    if count == 1:
        return f"{count:,} {noun}"
    if many is None:
        head, _, last = noun.rpartition(" ")  # 'more copy' → 'more copies'
        many = (head + " " if head else "") + _IRREGULAR.get(last, last + "s")
    return f"{count:,} {many}"
