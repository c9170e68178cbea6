"""Nothing the short descriptions leave out is lost: every served tool has its section in docs/tools.md, naming
every argument it takes, and an example in docs/examples.md (the descriptions are short on purpose:
tests/test_tool_budget.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sysmcp.tools import RECLAIM, served_tools
from sysmcp.tools.registry import Registry, Tool

DOCS = Path(__file__).parent.parent / "docs"
#: Parts of a tool documented in a section of their own, as their own question.
PARTS = {"disk_usage": ["disk_usage explain"]}


def sections(name: str) -> dict[str, str]:
    """The doc's second-level sections by their `code` title."""
    text = (DOCS / name).read_text(encoding="utf-8")
    return {m[1]: m[2] for m in re.finditer(r"^## `([^`]+)`\n(.*?)(?=^## |\Z)", text, re.M | re.S)}


SERVED = list(Registry(served_tools(allow_reclaim=True)))


def test_reclaim_is_among_the_tools_checked() -> None:
    assert RECLAIM[0] in [tool.name for tool in SERVED]


@pytest.mark.parametrize("tool", SERVED, ids=lambda tool: tool.name)
def test_every_served_tool_has_a_tools_md_section_naming_each_argument(tool: Tool) -> None:
    documented = sections("tools.md")
    names = [tool.name, *PARTS.get(tool.name, [])]
    for name in names:
        assert name in documented, f"docs/tools.md has no section ## `{name}`"
    text = "".join(documented[name] for name in names)
    for argument in tool.input_schema["properties"]:
        assert f"`{argument}`" in text, f"docs/tools.md does not name {tool.name}'s `{argument}`"


@pytest.mark.parametrize("tool", SERVED, ids=lambda tool: tool.name)
def test_every_served_tool_has_an_example_of_a_real_call(tool: Tool) -> None:
    examples = sections("examples.md")
    for name in [tool.name, *PARTS.get(tool.name, [])]:
        assert name in examples, f"docs/examples.md has no section ## `{name}`"
        assert re.search(rf"\$ sysmcp call .*\b{name.split()[0]}\b", examples[name]), name
