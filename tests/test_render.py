"""The shared words: sizes, plurals, rates, ages, cut lists and aligned rows say things one way, correctly."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sysmcp import render
from sysmcp.render import age, and_more, human_bytes, more_not_shown, noun, plural, rate, table, took


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (1, "1 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (5 << 30, "5.0 GiB")],
)
def test_sizes_are_exact_bytes_below_a_kib_then_binary_units(size: int, text: str) -> None:
    assert human_bytes(size) == text


def test_the_largest_unit_holds_anything_larger() -> None:
    assert human_bytes(1 << 70) == "1024.0 EiB"


@pytest.mark.parametrize(
    ("count", "noun", "text"),
    [
        (1, "file", "1 file"),
        (0, "file", "0 files"),
        (3, "file", "3 files"),
        (1, "deleted file", "1 deleted file"),
        (2, "deleted file", "2 deleted files"),
        (3, "pseudo filesystem", "3 pseudo filesystems"),
        (32, "special file", "32 special files"),
        (1, "character", "1 character"),
        (2, "directory", "2 directories"),
        (2, "entry", "2 entries"),
        (2, "more copy", "2 more copies"),
        (1, "more copy", "1 more copy"),
        (2, "match", "2 matches"),
        (2, "process", "2 processes"),
        (2, "day", "2 days"),
        (2, "key", "2 keys"),
        (1234, "group", "1,234 groups"),
    ],
)
def test_a_count_takes_the_noun_it_needs(count: int, noun: str, text: str) -> None:
    assert plural(count, noun) == text


def test_an_explicit_plural_wins() -> None:
    assert plural(2, "host", "hosts that answered") == "2 hosts that answered"
    assert plural(1, "host", "hosts that answered") == "1 host"


def test_a_cut_list_says_how_many_more_in_the_right_number() -> None:
    assert more_not_shown(1, "group") == "… and 1 more group not shown"
    assert more_not_shown(12, "group") == "… and 12 more groups not shown"
    assert more_not_shown(2, "copy") == "… and 2 more copies not shown"


def test_rates_are_decimal_and_none_for_no_time() -> None:
    assert rate(512e6, 1.0) == "512.0 MB/s"
    assert rate(2.4e9, 2.0) == "1.20 GB/s"
    assert rate(100, 0) == "—"


def test_a_tiny_or_instant_read_has_no_rate() -> None:
    """Issue 27: 'hashed in 0.00 s (0.0 MB/s)' for a 3-byte file said nothing true."""
    assert took(3, 0.0001) == "under 0.01 s"
    assert took(3, 0.3) == "0.30 s"  # a slow open, not a slow read: no rate
    assert took(100 << 20, 0.02) == "0.02 s"  # too short to time a rate
    assert took(100 << 20, 0.5) == "0.50 s (209.7 MB/s)"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (59.9, "59 s"),
        (60, "1 min"),
        (125, "2 min"),
        (3599, "59 min"),
        (3600, "1 h"),
        (7200, "2 h"),
        (3 * 86400, "3 d"),
        (2 * 365 * 86400 - 1, "729 d"),
        (800 * 86400, "2 y"),
    ],
)
def test_an_age_is_one_unit_rounded_down(seconds: float, text: str) -> None:
    assert age(seconds) == text


def test_an_age_takes_a_suffix() -> None:
    assert age(3600, " old") == "1 h old"


def test_a_clock_stepped_back_a_moment_ago_is_no_negative_second() -> None:
    assert age(-0.5) == "0 s"
    assert age(-0.5, " ago") == "0 s ago"


def test_a_noun_alone_agrees_with_a_count_written_otherwise() -> None:
    assert [noun(n, "filesystem") for n in (0, 1, 2)] == ["filesystems", "filesystem", "filesystems"]
    assert noun(2, "host", "hosts here") == "hosts here"
    assert f"{1000} {noun(1000, 'copy')}" == "1000 copies"


def test_a_cut_list_under_a_title_ends_in_how_many_more() -> None:
    assert and_more(1) == "… and 1 more"
    assert and_more(1234) == "… and 1,234 more"


def test_a_table_lines_its_columns_up_and_ends_no_line_in_spaces() -> None:
    rows = [["1", "group", "12.0 KiB"], ["12", "groups", "1.0 MiB"], ["123", "x", "0 B"]]
    assert table(rows, right=(0, 2), indent="  ") == [
        "    1  group   12.0 KiB",
        "   12  groups   1.0 MiB",
        "  123  x            0 B",
    ]
    lines = table([["a", "long name"], ["bbbb", "c"]])
    assert lines == ["a     long name", "bbbb  c"]
    assert not any(line.endswith(" ") for line in lines)


def test_a_short_row_simply_ends() -> None:
    assert table([["aa", "b", "c"], ["a"]]) == ["aa  b  c", "a"]
    assert table([]) == []


def test_an_empty_last_cell_leaves_no_spaces_behind() -> None:
    """A right-aligned last column with an empty cell (a fleet row with no inode figure)."""
    rows = [["HOST", "USE%", "IUSE%"], ["web01", "97%", "95%"], ["web02", "error", ""]]
    assert table(rows, right=(1, 2)) == ["HOST    USE%  IUSE%", "web01    97%    95%", "web02  error"]
    assert table([["a", ""], ["", ""]], indent="  ") == ["  a", ""]


def test_no_engine_words_a_quantity() -> None:
    """Engines produce numbers: none imports render's words (not even through engine/units.py, which
    once re-exported them)."""
    package = Path(render.__file__).parent
    words = {"human_bytes", "plural", "rate"}
    wording = set()
    for path in [*(package / "fs").rglob("*.py"), *(package / "history").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found = any(alias.name == "sysmcp.render" for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                names = {alias.name for alias in node.names}
                found = node.module == "sysmcp.render" or (node.module == "sysmcp" and "render" in names)
                found = found or (node.module == "sysmcp.engine.units" and bool(names & words))
            else:
                continue
            if found:
                wording.add(path.relative_to(package).as_posix())
    assert wording == set()


def test_a_cell_too_wide_for_a_column_spills_over_its_own_row_and_widens_no_other() -> None:
    """One fleet host's 500 KB mount point (schema-valid) padded every host's row of the merged table to
    it: 200 hosts, 5 filesystems each, made a 500 MB text of spaces."""
    wide = "/" + "m" * 500_000
    rows = [
        ["HOST", "MOUNT", "USE%"],
        ["liar", wide, "1%"],
        *([f"web{i:03}", "/", "40%"] for i in range(1000)),
    ]
    lines = table(rows, right=(2,))
    assert lines[:3] == ["HOST    MOUNT  USE%", f"liar    {wide}    1%", "web000  /       40%"]
    assert sum(map(len, lines)) < len(wide) + 1002 * 20
    assert table([["a", "x" * 200, "b"], ["c", "y", "d"]])[1] == "c  " + "y".ljust(200) + "  d"
