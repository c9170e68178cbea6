"""The official Python SDK 1.x ``ClientSession`` against the real sysmcp process.

mcp 1.x and 2.x cannot share an environment, so the 1.x client runs in a throwaway one made by
``uv run --with`` (cached by uv under ~/.cache/uv after the first run) and reports back as JSON.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sysmcp.tools import ALL_TOOLS
from tests.interop.tool_arguments import REPORTS_PROGRESS, plan

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("sdk1_client.py")
SDK1 = "mcp>=1.30,<2"


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("uv") is None, reason="uv is not installed: cannot build the mcp 1.x environment"
)
def test_sdk1_client_negotiates_2025_11_25_and_calls_every_tool(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    calls = plan({tool.name: tool.input_schema for tool in ALL_TOOLS}, work)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        json.dumps(
            {
                "command": [sys.executable, "-m", "sysmcp"],
                "cwd": str(REPO),
                "tools": {name: arguments for name, (arguments, _) in calls.items()},
            }
        )
    )
    done = subprocess.run(
        ["uv", "run", "--no-project", "--quiet", "--with", SDK1, "python", str(SCRIPT), str(plan_file)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["protocolVersion"] == "2025-11-25"
    assert report["serverInfo"] == "sysmcp"
    assert {"tools", "logging"} <= set(report["capabilities"])
    assert sorted(report["tools"]) == sorted(calls)
    for name, (_, must_succeed) in calls.items():
        call = report["calls"][name]
        if must_succeed:
            assert call["isError"] is False and call["structured"], (name, call)
        if name in REPORTS_PROGRESS:
            assert call["progress"] and call["progress"] == sorted(call["progress"]), (name, call)
    assert "debug" in report["logs"]  # logging/setLevel debug, then the tool-call debug lines
