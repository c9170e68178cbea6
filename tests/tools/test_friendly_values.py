"""Values as people write them, accepted by the tools themselves (so models benefit too): sizes with
units, one exclude pattern as a string, digests as download pages show them; and refusals that say
what is wanted in words."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.units import parse_size
from sysmcp.protocol.failures import ArgumentError
from sysmcp.tools import ALL_TOOLS
from sysmcp.tools.arguments import validate_arguments

SCHEMAS = {tool.name: tool.input_schema for tool in ALL_TOOLS}


def valid(tool: str, **arguments: Any) -> dict[str, Any]:
    return validate_arguments(SCHEMAS[tool], arguments)


def refusal(tool: str, **arguments: Any) -> str:
    with pytest.raises(ArgumentError) as caught:
        validate_arguments(SCHEMAS[tool], arguments)
    return caught.value.message


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4k", 4096),
        ("4K", 4096),
        ("100M", 100 << 20),
        ("1.5G", 3 << 29),
        ("2TiB", 2 << 40),
        ("512", 512),
        ("512B", 512),
        (" 10 M ", 10 << 20),
        (".5k", 512),
    ],
)
def test_sizes_take_binary_units_as_du_and_find(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "M", "1.2.3", "4q", "-1", "1MB", "4KB", "1iB", "1e3", "9" * 320 + ".5"])
def test_what_is_not_a_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_min_size_takes_units_and_integers_and_keeps_its_minimum() -> None:
    assert valid("dir_usage", path="/", min_size="100M")["min_size"] == 100 << 20
    assert valid("dir_usage", path="/", min_size=4096)["min_size"] == 4096
    assert valid("find_duplicates", path="/", min_size="1.5k")["min_size"] == 1536
    assert "must be >= 1" in refusal("find_duplicates", path="/", min_size="0k")
    message = refusal("dir_usage", path="/", min_size="lots")
    assert "'min_size' must be a size such as 4096, '4k', '100M' or '1.5G'" in message


def test_a_refusal_quotes_a_long_value_or_name_only_in_part() -> None:
    # A model reads the refusal: a megabyte it sent is not sent back (the answer budget is 40,000 characters).
    for arguments, rule in (
        ({"algorithm": "x" * 1_000_000}, "'blake3', got 'xxx"),
        ({"y" * 1_000_000: 1}, "is not a known argument (known: algorithm, baseline"),
    ):
        message = refusal("hash_tree", path="/", **arguments)
        assert rule in message and len(message) < 1000, message[:300]


def test_exclude_takes_one_pattern_as_a_string(tmp_path: Path) -> None:
    from sysmcp.tools.walking import walk_options

    args = valid("hash_tree", path=str(tmp_path), exclude=".git")
    assert walk_options(args).exclude == (".git",)
    assert walk_options(valid("hash_tree", path=str(tmp_path), exclude=["a", "b"])).exclude == ("a", "b")
    refused = refusal("hash_tree", path=str(tmp_path), exclude="")
    assert "at least 1 character" in refused and "1 characters" not in refused


@pytest.mark.parametrize(
    "form",
    [
        "{d}",
        "{D}",
        "sha256:{d}",
        "SHA256:{d}",
        "{d}  debian-13.iso",
        "{d} *debian-13.iso",
        "SHA256 (debian-13.iso) = {d}",
    ],
)
def test_expected_takes_a_digest_as_download_pages_show_it(form: str) -> None:
    digest = hashlib.sha256(b"abc").hexdigest()
    given = form.format(d=digest, D=digest.upper())
    assert valid("file_sha256", path="/x", expected=given)["expected"] == digest


def test_a_bad_digest_is_explained_in_words_not_a_regex() -> None:
    message = refusal("file_sha256", path="/x", expected="abc" * 30)
    assert "64 hex digits" in message and "^[" not in message and "{64}" not in message
    assert "64 hex digits" in refusal("file_sha256", path="/x", expected=f"{'a' * 64} {'b' * 64}")


def test_no_input_schema_quotes_a_regex_at_the_user() -> None:
    for name, schema in SCHEMAS.items():
        for argument, prop in schema["properties"].items():
            assert "pattern" not in prop, (name, argument)  # a refusal would quote it
