"""Sizes as people write them, read from arguments: '4k', '1.5G', '100M' into integer bytes.

How sizes, counts and rates are *said* lives in ``sysmcp.render``, and no engine says them (an engine
error carries the number: ``hashing.ManifestTooLarge.limit``).
"""

from __future__ import annotations

import re

__all__ = ["parse_size"]

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
        try:
            return int(float(number) * _BINARY[unit])
        except OverflowError:  # hundreds of digits: the float is infinite
            raise ValueError(f"not a size: {text!r}") from None
    return int(number) * _BINARY[unit]
