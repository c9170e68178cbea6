"""The official Python SDK client (``mcp`` 2.x) against the real sysmcp process.

In its default mode the client probes with ``server/discover`` and must end up on 2026-07-28; in
``legacy`` mode it must do the ``initialize`` handshake. Either way it lists and calls every tool
sysmcp has, with progress, and its own strict per-version validation must accept every result.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import PromptReference

from tests.interop.tool_arguments import REPORTS_PROGRESS, plan

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]
SERVER = StdioServerParameters(command=sys.executable, args=["-m", "sysmcp"], cwd=str(REPO))


class Recorder:
    """A progress callback that keeps the values it is given."""

    def __init__(self, seen: list[float]) -> None:
        self.seen = seen

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append(progress)


async def exercise_every_tool(client: Client, tmp_path: Path) -> dict[str, list[float]]:
    """Call each listed tool once; return the progress values seen per tool."""
    listed = (await client.list_tools()).tools
    schemas = {tool.name: tool.input_schema for tool in listed}
    outputs = {tool.name: tool.output_schema for tool in listed}
    assert {"disk_usage", "dir_usage", "file_sha256"} <= set(schemas)
    progress: dict[str, list[float]] = {}
    for name, (arguments, must_succeed) in plan(schemas, tmp_path).items():
        seen: list[float] = []
        with anyio.fail_after(30):
            result = await client.call_tool(name, arguments, progress_callback=Recorder(seen))
        if must_succeed:
            assert result.is_error is False, (name, result.content)
        if not result.is_error:
            assert result.structured_content is not None, name
            jsonschema.validate(result.structured_content, outputs[name])
        assert result.content and result.content[0].type == "text", name
        progress[name] = seen
    return progress


async def test_default_mode_discovers_and_speaks_2026(tmp_path: Path) -> None:
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params)

    async with Client(
        SERVER, cache=None, log_level="debug", logging_callback=on_log, read_timeout_seconds=30
    ) as c:
        assert c.protocol_version == "2026-07-28"
        assert c.session.discover_result is not None
        assert c.server_info is not None and c.server_info.name == "sysmcp"
        assert c.server_capabilities is not None and c.server_capabilities.tools is not None
        assert c.instructions and "read-only" in c.instructions
        progress = await exercise_every_tool(c, tmp_path)
        for name in REPORTS_PROGRESS & set(progress):
            assert progress[name], f"no progress from {name}"
            assert progress[name] == sorted(progress[name])
        assert "debug" in {entry.level for entry in logs}  # asked for per request, and received
        with pytest.raises(MCPError) as caught:
            await c.call_tool("no_such_tool", {})
        assert caught.value.code == -32602
        await use_prompts(c, tmp_path)


async def use_prompts(client: Client, tmp_path: Path) -> None:
    """List the prompts, fetch one, and complete a path argument, as a host's prompt picker would."""
    names = [prompt.name for prompt in (await client.list_prompts()).prompts]
    assert names == ["disk_full_triage", "verify_download"]
    target = tmp_path / "download.iso"
    target.write_bytes(b"iso")
    got = await client.get_prompt("verify_download", {"path": str(target), "digest": "0" * 64})
    assert got.messages[0].role == "user" and str(target) in got.messages[0].content.text  # type: ignore[union-attr]
    done = await client.complete(
        PromptReference(type="ref/prompt", name="verify_download"),
        {"name": "path", "value": f"{tmp_path}/downl"},
    )
    assert done.completion.values == [str(target)]


async def test_legacy_mode_handshakes_on_2025_11_25(tmp_path: Path) -> None:
    async with Client(SERVER, mode="legacy", cache=None, read_timeout_seconds=30) as c:
        assert c.protocol_version == "2025-11-25"
        assert c.session.discover_result is None
        progress = await exercise_every_tool(c, tmp_path)
        for name in REPORTS_PROGRESS & set(progress):
            assert progress[name], f"no progress from {name}"


async def test_a_client_that_skips_the_probe_is_served_from_its_first_request(tmp_path: Path) -> None:
    async with Client(SERVER, mode="2026-07-28", cache=None, read_timeout_seconds=30) as c:
        assert c.protocol_version == "2026-07-28"
        result = await c.call_tool("disk_usage", {"path": str(tmp_path)})
        assert result.is_error is False and result.structured_content
