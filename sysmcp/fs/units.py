"""Sizes for people: the structured data stays in integer bytes, the text uses binary units."""

from __future__ import annotations

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
