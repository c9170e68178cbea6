"""An exclude pattern is compiled in a worker thread that cannot be stopped: one too long to compile
quickly is refused with the arguments, naming the argument, by every tool that walks."""

from __future__ import annotations

from pathlib import Path

import pytest

from sysmcp.protocol.failures import ArgumentError
from tests.harness import call_tool

pytestmark = pytest.mark.anyio

MAX_PATTERN = 4096  # characters: a generous bound on one glob


@pytest.mark.parametrize("tool", ["dir_usage", "find_duplicates", "hash_tree", "what_changed"])
async def test_an_exclude_pattern_longer_than_the_bound_is_refused_naming_the_argument(
    tmp_path: Path, tool: str
) -> None:
    too_long = "a*" * (MAX_PATTERN // 2) + "a"
    with pytest.raises(ArgumentError, match=r"'exclude' must have at most 4,096 characters"):
        await call_tool(tool, path=str(tmp_path), exclude=too_long)
    with pytest.raises(ArgumentError, match=r"'exclude'\[1\] must have at most 4,096 characters"):
        await call_tool(tool, path=str(tmp_path), exclude=[".git", too_long])


async def test_an_exclude_pattern_of_the_bound_itself_is_walked_with(tmp_path: Path) -> None:
    (tmp_path / "kept").write_bytes(b"x" * 10)
    output = await call_tool("dir_usage", path=str(tmp_path), exclude="kep" + "*" * (MAX_PATTERN - 3))
    assert output.structured["skipped"]["excluded"] == 1, output.structured
