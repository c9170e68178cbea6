"""The words every tool shares: sizes, counts with their nouns, rates, ages, aligned rows, "… and N more".

What belongs here: how a quantity is said to a person (the model reading a result), in one voice for
every tool: "1.5 KiB", "1 file" / "3 files", "hashed in 0.42 s (310.2 MB/s)", "6 h old", "… and 3 more
groups not shown", a table whose columns line up. What does not: what a tool says about its own
findings (its sentences stay in its ``tools/`` module), structured content (integer bytes and
seconds, never text), and anything an engine does (engines produce numbers; nothing under
``sysmcp/engine``, ``sysmcp/history`` or ``sysmcp/reclaim`` words its results). This module imports nothing from sysmcp.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

__all__ = [
    "age",
    "and_more",
    "human_bytes",
    "more_not_shown",
    "noun",
    "plural",
    "rate",
    "table",
    "titled",
    "took",
]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_bytes(size: float) -> str:
    """1536 → '1.5 KiB'; exact bytes below 1 KiB (binary units, as du -h and ls -lh show them)."""
    value = float(size)
    for unit in _UNITS[:-1]:
        if abs(value) < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_UNITS[-1]}"


# Nouns whose plural no rule below gives. Words of the tools' vocabulary, not a dictionary.
_IRREGULAR = {"child": "children", "person": "people", "datum": "data", "index": "indexes"}


def _many(noun: str) -> str:
    """The plural of the last word of ``noun``: 'copy' → 'copies', 'process' → 'processes', 'day' → 'days'."""
    head, space, last = noun.rpartition(" ")
    if last in _IRREGULAR:
        many = _IRREGULAR[last]
    elif last.endswith(("s", "x", "z", "ch", "sh")):
        many = last + "es"
    elif len(last) > 1 and last.endswith("y") and last[-2] not in "aeiou":
        many = last[:-1] + "ies"
    else:
        many = last + "s"
    return head + space + many


def noun(count: int, singular: str, many: str | None = None) -> str:
    """The form of ``singular`` that goes with ``count``: 'file' for 1, 'files' for any other count.

    For a count written some other way than ``plural`` writes it ('3 of 12 filesystems').
    """
    if count == 1:
        return singular
    return many if many is not None else _many(singular)


def plural(count: int, singular: str, many: str | None = None) -> str:
    """'1 file', '2 files', '1,000 directories', '3 pseudo filesystems', '1 more copy': never '1 files'.

    ``singular`` is the noun (its last word takes the plural); ``many`` overrides the plural form.
    """
    return f"{count:,} {noun(count, singular, many)}"


def more_not_shown(count: int, singular: str) -> str:
    """'… and 1 more group not shown', '… and 12 more groups not shown': what a cut list leaves out."""
    return f"… and {plural(count, 'more ' + singular)} not shown"


def and_more(count: int) -> str:
    """'… and 1,234 more': the end of a cut list whose title already names what it lists."""
    return f"… and {count:,} more"


def titled(title: str, items: Iterable[str], cut: int, singular: str = "", indent: str = "  ") -> list[str]:
    """A titled list: ``title``, each item indented, then the ``cut`` items left out, as
    ``more_not_shown`` says them with a ``singular``, else as ``and_more``."""
    lines = [title, *(indent + item for item in items)]
    if cut > 0:
        lines.append(indent + (more_not_shown(cut, singular) if singular else and_more(cut)))
    return lines


def rate(size: float, seconds: float) -> str:
    """Throughput in decimal units, as hashing tools usually report it: '512.0 MB/s', '1.20 GB/s'."""
    if seconds <= 0:
        return "—"
    per_second = size / seconds
    if per_second >= 1e9:
        return f"{per_second / 1e9:.2f} GB/s"
    return f"{per_second / 1e6:.1f} MB/s"


# Below these a rate says more about opening a file and the clock's grain than about the reading.
RATE_FROM_S = 0.05
RATE_FROM_BYTES = 1 << 20


def took(size: float, seconds: float) -> str:
    """How long reading ``size`` bytes took, with the rate where it means something.

    '0.42 s (310.2 MB/s)'; a tiny or instant read has no rate worth saying: '0.01 s', 'under 0.01 s'
    (not '0.00 s (0.0 MB/s)').
    """
    if seconds < 0.005:
        return "under 0.01 s"
    if seconds < RATE_FROM_S or size < RATE_FROM_BYTES:
        return f"{seconds:.2f} s"
    return f"{seconds:.2f} s ({rate(size, seconds)})"


_AGES = ((3600, 60, "min"), (86400, 3600, "h"), (2 * 365 * 86400, 86400, "d"))


def age(seconds: float, suffix: str = "") -> str:
    """'45 s', '12 min', '6 h', '3 d', '2 y': one unit, rounded down, as a person glances at a date.

    ``suffix`` follows the number and unit: age(3600, ' old') is '1 h old'. Seconds are cut towards
    zero, so a clock stepped back a moment ago says '0 s', not '-1 s'.
    """
    if seconds < 60:
        return f"{int(seconds)} s{suffix}"
    for below, unit_s, unit in _AGES:
        if seconds < below:
            return f"{int(seconds // unit_s)} {unit}{suffix}"
    return f"{int(seconds // (365 * 86400))} y{suffix}"


WIDEST = 200  # characters of the widest cell a table's column is padded to


def table(
    rows: Sequence[Sequence[str]], right: Sequence[int] = (), indent: str = "", gap: str = "  "
) -> list[str]:
    """Rows of cells as lines whose columns line up; the columns named in ``right`` align right (numbers).

    No line ends in spaces (an empty last cell leaves none behind); a row shorter than the others
    simply ends. A cell wider than ``WIDEST`` widens no column: it spills over its own row only (one
    fleet host's 500 KB mount point padded every host's row to it, half a gigabyte of spaces).
    """
    widths = [
        max((len(cell) for cell in column if len(cell) <= WIDEST), default=0)
        for column in itertools.zip_longest(*rows, fillvalue="")
    ]
    lines = []
    for row in rows:
        cells = (cell.rjust(widths[c]) if c in right else cell.ljust(widths[c]) for c, cell in enumerate(row))
        lines.append((indent + gap.join(cells)).rstrip())
    return lines
