"""A cut answer's whole text, read back with ``resources/read``, is escaped as the answer itself is: the
link hands over the rest of the same answer, not a raw copy of it; and the budget holds for the text as
sent, escaped."""

from __future__ import annotations

from typing import Any

import pytest

from sysmcp.server import ANSWER_BUDGET
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput
from tests.e2e.test_protocol_corners import in_process

pytestmark = pytest.mark.anyio

RAW = "name-\x1b]0;pwned\x07-\u202etxt.exe"


def long_answer_tool() -> Tool:
    async def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        # as a tool's words would be if they forgot to escape a name: the one door escapes them
        lines = [f"{i:06}\t{RAW}" for i in range(ANSWER_BUDGET // 20)]
        return ToolOutput("\n".join(lines), {"n": len(lines)})

    return Tool(
        name="long",
        title="Long",
        description="An answer longer than the budget, naming a hostile name on every line.",
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        output={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        handler=handler,
    )


async def test_the_whole_text_of_a_cut_answer_is_escaped_as_the_answer_is() -> None:
    async with in_process([long_answer_tool()]) as client:
        client.request(1, "tools/call", {"name": "long", "arguments": {}})
        reply = await client.next()
        while "id" not in reply:  # resources/list_changed comes first
            reply = await client.next()
        result = reply["result"]
        text = result["content"][0]["text"]
        assert "answer cut at" in text and "\x1b" not in text and "\u202e" not in text
        assert len(text) <= ANSWER_BUDGET  # measured as sent: escaping lengthens it
        uri = next(block["uri"] for block in result["content"] if block["type"] == "resource_link")
        client.request(2, "resources/read", {"uri": uri})
        whole = (await client.next())["result"]["contents"][0]["text"]
        assert "\x1b" not in whole and "\u202e" not in whole
        shown = text[: text.index("\n… answer cut at")]
        assert whole.startswith(shown) and whole.count("\n") == ANSWER_BUDGET // 20 - 1
