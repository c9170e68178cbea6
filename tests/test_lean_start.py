"""A session imports only what its answers need: a fleet's remote start (``initialize`` and one
``disk_usage``) loads neither the other tools nor their engines nor structlog, and tools stay
complete when they are listed. Why it matters: every host of a cold fan-out pays its remote start's
CPU, and on the gateway's side the simulated hosts share its cores (docs/fleet.md)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from sysmcp.cli import build_parser, plain_serve_args
from sysmcp.history.state import STATE_ENV
from sysmcp.tools import TOOL_MODULES
from sysmcp.tools.registry import LazyTool, Registry
from tests.profile import child_env
from tests.wire import answered_session

# The session as `python -m sysmcp` runs it, with no arguments (as a fleet's hosts run it: history in
# $SYSMCP_STATE_DIR); the modules it loaded are written to argv[1] as it exits (stdout is the wire).
# The server ends its process once the session is over (cli.serve._exit_now runs the atexit hooks first).
SESSION = """
import atexit, gc, json, runpy, sys
out = sys.argv[1]
sys.argv = ["sysmcp", *sys.argv[2:]]

def record():
    from sysmcp import platform
    collector = {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}
    with open(out, "w") as handle:
        json.dump({"modules": sorted(sys.modules), "mountinfo": platform.has_mountinfo(), **collector}, handle)

atexit.register(record)
runpy.run_module("sysmcp", run_name="__main__")
"""

HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}


def session(tmp_path: Path, *calls: dict[str, object]) -> tuple[list[dict[str, object]], set[str], bool]:
    """The answers and the modules loaded of one session that makes ``calls`` then sees EOF."""
    lines: list[dict[str, Any]] = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HELLO},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *({"jsonrpc": "2.0", "id": 2 + n, **call} for n, call in enumerate(calls)),
    ]
    record = tmp_path / "modules.json"
    replies, stderr, status = answered_session(
        [sys.executable, "-c", SESSION, str(record)],
        lines,
        env=child_env({**os.environ, STATE_ENV: str(tmp_path / "state")}),
        timeout=120,
    )
    assert status == 0, stderr
    answers = [replies[key] for key in sorted(replies)]
    loaded = json.loads(record.read_text())
    # The collector, off while the start made its modules, serves on, the start's objects frozen.
    assert loaded["enabled"] and loaded["frozen"] > 10_000
    return answers, set(loaded["modules"]), loaded["mountinfo"]


def test_a_remote_start_imports_only_the_tool_it_is_asked_for(tmp_path: Path) -> None:
    answers, loaded, mountinfo = session(
        tmp_path, {"method": "tools/call", "params": {"name": "disk_usage", "arguments": {}}}
    )
    assert [a["id"] for a in answers] == [1, 2]
    result = answers[1]["result"]
    assert isinstance(result, dict) and not result["isError"] and result["structuredContent"]["filesystems"]
    others = {module for name, module in TOOL_MODULES if name != "disk_usage"} | {"sysmcp.tools.reclaim"}
    assert "sysmcp.tools.disk_usage" in loaded
    assert sorted(others & loaded) == []
    # Nor their engines, nor a logging library for lines nobody logs at the default level.
    heavy = {
        "sysmcp.engine.walk._walk",
        "sysmcp.engine.usage",
        "sysmcp.engine.space._space",
        "sysmcp.engine.hashing._checksums",
        "sysmcp.engine.procs._openfiles",  # disk_usage names procfs through platform.PROC, not the process engine
        "sysmcp.tools.disk_explain",  # explain's result types: made for an explain or tools/list only
        "structlog",
        "yaml",  # only a YAML inventory needs it, on the gateway
    }
    assert sorted(heavy & loaded) == []
    if mountinfo:  # the mount table comes from /proc/self/mountinfo: psutil is for other tools
        assert "psutil" not in loaded
    # A bare `sysmcp` parses no command line, and methods nobody called load nothing.
    assert sorted({"argparse", "sysmcp.server.prompts"} & loaded) == []


def test_a_bare_start_means_what_an_empty_command_line_means() -> None:
    assert vars(plain_serve_args()) == vars(build_parser().parse_args([]))


def test_a_remote_start_keeps_its_disk_reading_and_leaves_the_store_merged(tmp_path: Path) -> None:
    """The process ends without the interpreter's teardown: the history connection is still closed
    first (its WAL checkpointed into the database), and the reading is there for the next session."""
    call: dict[str, object] = {
        "method": "tools/call",
        "params": {"name": "disk_usage", "arguments": {"path": "/"}},
    }
    answers, loaded, _ = session(tmp_path, call)
    result = answers[1]["result"]
    assert "sqlite3" in loaded and isinstance(result, dict) and not result["isError"]
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["history.sqlite3"]  # no -wal left
    session(tmp_path, call)
    with contextlib.closing(sqlite3.connect(tmp_path / "state" / "history.sqlite3")) as db:
        assert db.execute("SELECT count(*) FROM readings WHERE mount = ?", (b"/",)).fetchone() == (2,)


def test_the_tools_are_all_listed_and_each_loads_when_called(tmp_path: Path) -> None:
    answers, loaded, _ = session(
        tmp_path,
        {"method": "tools/list", "params": {}},
        {"method": "tools/call", "params": {"name": "nosuch", "arguments": {}}},
    )
    listed = answers[1]["result"]
    assert isinstance(listed, dict)
    assert [tool["name"] for tool in listed["tools"]] == [name for name, _ in TOOL_MODULES]
    unknown = answers[2]
    assert "error" in unknown and "known tools: disk_usage, dir_usage" in json.dumps(unknown)
    assert {module for _, module in TOOL_MODULES} <= loaded


def test_a_lazy_tool_is_imported_when_first_looked_up_and_must_be_the_tool_named() -> None:
    registry = Registry(
        [LazyTool("ghost", "sysmcp.tools.no_such_module"), LazyTool("disk_usage", "sysmcp.tools.disk_usage")]
    )
    assert registry.names() == ["ghost", "disk_usage"] and len(registry) == 2  # nothing imported yet
    from sysmcp.tools import disk_usage

    assert registry.get("disk_usage") is disk_usage.TOOL
    with pytest.raises(ModuleNotFoundError):
        registry.get("ghost")
    with pytest.raises(ValueError, match=r"disk_usage\.TOOL is 'disk_usage', listed as 'dir_usage'"):
        LazyTool("dir_usage", "sysmcp.tools.disk_usage").load()


def test_a_server_loads_its_tools_lazily_even_once_all_tools_was_asked_for() -> None:
    """``ALL_TOOLS`` (every tool, imported) asked for by anything in the process does not decide what a
    server is handed: the server still gets lazy tools, so no engine is imported before a call."""
    import sysmcp.tools as tools

    assert len(tools.ALL_TOOLS) == len(TOOL_MODULES)  # asked for, as sysmcp call and many tests do
    served = tools.served_tools(allow_reclaim=True)
    assert all(isinstance(tool, LazyTool) for tool in served)
    assert [tool.name for tool in served] == [name for name, _ in TOOL_MODULES] + ["reclaim"]
