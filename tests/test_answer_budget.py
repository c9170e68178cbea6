"""Every text answer stays within 40,000 characters whatever the argument values, and a cut answer says
what it left out and links the whole of it. Small inputs of the worst shape (names as long as a
filesystem takes, arguments at their maxima) stand in for the big ones benchmarks/answer_budget.py
measures."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import pytest

from sysmcp.server import ANSWER_BUDGET
from tests.wire import Wire, spawn

pytestmark = pytest.mark.anyio

LONG = 240  # bytes of a name (NAME_MAX is 255)


def long_name(i: int) -> str:
    return f"{i:04}-" + "n" * (LONG - 5)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """1,000 files with the longest names in one directory, in pairs of identical content; and a chain of
    directories with long names holding files of distinct sizes (long paths in every list)."""
    root = tmp_path / "t"
    flat = root / "flat"
    flat.mkdir(parents=True)
    for i in range(1000):
        (flat / long_name(i)).write_bytes(b"%d" % (i // 2) * 64)
    deep = root.joinpath(*(("d" * LONG + str(level)) for level in range(6)))
    deep.mkdir(parents=True)
    for i in range(60):
        (deep / long_name(i)).write_bytes(b"x" * (10_000 + i * 1000))
        (deep.parent / long_name(i)).mkdir()
    return root


async def call(wire: Wire, name: str, arguments: dict[str, Any]) -> str:
    reply = await wire.request("tools/call", {"name": name, "arguments": arguments})
    result = reply["result"]
    assert not result.get("isError"), result
    text: str = result["content"][0]["text"]
    return text


async def assert_bounded(wire: Wire, text: str, last: str) -> None:
    """Within budget; if cut, it says how much it left out and the link it gives holds the rest."""
    assert len(text) <= ANSWER_BUDGET
    cut = re.search(
        r"answer cut at 40,000 characters: [\d,]+ more lines? \(([\d,]+) characters\) not shown", text
    )
    if cut is None:
        assert last in text
        return
    uri = re.search(r"The whole answer: (sysmcp://\S+)", text)
    assert uri is not None, text[-500:]
    whole = (await wire.request("resources/read", {"uri": uri[1]}))["result"]["contents"][0]["text"]
    assert last in whole and last not in text
    assert len(whole) - len(text[: cut.start()].rstrip("… \n")) >= int(cut[1].replace(",", "")) - 2


async def test_every_answer_stays_within_budget_at_the_largest_arguments(tree: Path) -> None:
    flat = tree / "flat"
    manifest = tree / "SHA512SUMS"
    manifest.write_text("".join(f"{'0' * 128}  {long_name(i)}\n" for i in range(1000)) + "bad line\n")
    async with spawn("--no-history") as wire:
        await wire.initialize("2025-06-18")
        text = await call(
            wire,
            "hash_tree",
            {"path": str(flat), "algorithm": "sha512", "format": "bsd", "max_lines": 1000},
        )
        digest = hashlib.sha512((flat / long_name(999)).read_bytes()).hexdigest()
        await assert_bounded(wire, text, f"SHA512 ({long_name(999)}) = {digest}")
        text = await call(
            wire, "verify_checksums", {"manifest": str(manifest), "base_dir": str(flat), "max_listed": 1000}
        )
        assert "1,000" in text
        await assert_bounded(wire, text, long_name(999))
        cases: list[tuple[str, dict[str, Any]]] = [
            ("dir_usage", {"path": str(tree), "top_n": 50, "show": "all", "max_depth": 1000}),
            ("find_duplicates", {"path": str(tree), "top_n": 50}),
            ("disk_usage", {"all": True, "unit": "bytes"}),
            ("deleted_open_files", {"top_n": 100}),
        ]
        for name, arguments in cases:
            text = await call(wire, name, arguments)
            assert len(text) <= ANSWER_BUDGET, (name, len(text))


async def test_an_answer_within_budget_is_untouched(tree: Path) -> None:
    async with spawn("--no-history") as wire:
        await wire.initialize("2025-06-18")
        text = await call(wire, "hash_tree", {"path": str(tree / "flat"), "max_lines": 20})
    assert "answer cut" not in text and len(text.splitlines()) < 40
    assert os.path.basename(long_name(0)) in text


async def test_a_tree_of_a_hundred_files_is_shown_whole_by_default(tmp_path: Path) -> None:
    for i in range(100):
        (tmp_path / f"file-{i:03}.txt").write_bytes(b"%d" % i)
    async with spawn("--no-history") as wire:
        await wire.initialize("2025-06-18")
        text = await call(wire, "hash_tree", {"path": str(tmp_path)})
    for i in range(100):
        assert f"{hashlib.sha256(b'%d' % i).hexdigest()}  file-{i:03}.txt" in text
    assert len(text) <= ANSWER_BUDGET // 3
