"""The official TypeScript SDK clients against the real sysmcp process, each behind ``sysmcp trace``.

``@modelcontextprotocol/sdk`` 1.x (the initialize handshake) and ``@modelcontextprotocol/client`` 2.x,
once in its ``auto`` negotiation mode (it must end up on 2026-07-28) and once in ``legacy`` mode. Each
lists the tools, calls every tool with progress, and cancels a long hash at its first progress
notification; the trace shows the SDK's ``notifications/cancelled`` reached the server and that the
cancelled call got no answer. Skips (with the reason) without Node >= 22.19 or the packages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sysmcp.tools import ALL_TOOLS
from tests.interop.node import Unavailable, node22, npm_package
from tests.interop.tool_arguments import REPORTS_PROGRESS, plan

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("ts_client.cjs")
SDK1 = ("@modelcontextprotocol/sdk", "1.32.2")
SDK2 = ("@modelcontextprotocol/client", "2.4.0")

CASES = {
    "sdk1": (SDK1, "v1", None, "2025-11-25"),
    "client2-auto": (SDK2, "v2", "auto", "2026-07-28"),
    "client2-legacy": (SDK2, "v2", "legacy", "2025-11-25"),
}


def trace_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def spoken(sent: list[dict[str, Any]], received: list[dict[str, Any]]) -> str:
    """The version the conversation used: the one every tools/call carried (2026), else initialize's."""
    calls = [m for m in sent if m.get("method") == "tools/call"]
    carried = {m["params"].get("_meta", {}).get("io.modelcontextprotocol/protocolVersion") for m in calls}
    if carried != {None}:
        (version,) = carried
        return str(version)
    (init,) = [m for m in sent if m.get("method") == "initialize"]
    (answer,) = [m for m in received if m.get("id") == init["id"] and "result" in m]
    return str(answer["result"]["protocolVersion"])


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_typescript_client_lists_calls_every_tool_with_progress_and_cancels(
    tmp_path: Path, case: str
) -> None:
    (package, version), sdk, mode, protocol = CASES[case]
    try:
        node = node22()
        prefix = npm_package(package, version)
    except Unavailable as exc:
        pytest.skip(f"TypeScript SDK unavailable: {exc}")
    work = tmp_path / "work"
    work.mkdir()
    calls = plan({tool.name: tool.input_schema for tool in ALL_TOOLS}, work)
    big = work / "sparse.bin"
    with big.open("wb") as handle:
        handle.truncate(64 << 30)  # sparse: nothing on disk, minutes to hash, so it is surely cut short
    trace = tmp_path / "trace.jsonl"
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        json.dumps(
            {
                "sdk": sdk,
                "prefix": str(prefix),
                "mode": mode,
                "command": [
                    sys.executable,
                    *("-m", "sysmcp", "trace", "-o", str(trace), "--"),
                    *(sys.executable, "-m", "sysmcp"),
                ],
                "cwd": str(REPO),
                "tools": {name: arguments for name, (arguments, _) in calls.items()},
                "bigFile": str(big),
            }
        )
    )
    done = subprocess.run(
        [str(node), str(SCRIPT), str(plan_file)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={**os.environ, "PATH": f"{node.parent}{os.pathsep}{os.environ.get('PATH', '')}"},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report.get("protocolVersion", protocol) == protocol  # 1.x does not say: the trace does, below
    assert report["serverName"] == "sysmcp"
    assert {"tools", "resources", "prompts"} <= set(report["capabilities"])
    assert sorted(report["tools"]) == sorted(calls)
    for name, (_, must_succeed) in calls.items():
        call = report["calls"][name]
        if must_succeed:
            assert call["isError"] is False and call["structured"], (name, call)
        assert call["progress"] == sorted(call["progress"]), (name, call)
    records = trace_records(trace)
    sent = [r["message"] for r in records if r.get("direction") == "client→server" and "message" in r]
    received = [r["message"] for r in records if r.get("direction") == "server→client" and "message" in r]
    assert spoken(sent, received) == protocol
    # A quick call's only progress is its final one, just before the result; the SDKs run notification
    # handlers a tick later and drop progress for a request already answered, so the wire is the
    # witness here, and the long call below shows progress reaching the client's callback.
    tokens: dict[str, Any] = {}
    for m in sent:
        if m.get("method") == "tools/call" and m["params"]["name"] in REPORTS_PROGRESS:
            tokens.setdefault(m["params"]["name"], m["params"].get("_meta", {}).get("progressToken"))
    progressed = {
        m["params"]["progressToken"] for m in received if m.get("method") == "notifications/progress"
    }
    assert set(tokens) == REPORTS_PROGRESS and set(tokens.values()) <= progressed, (tokens, progressed)
    cancel = report["cancel"]
    assert cancel["progressBeforeAbort"] >= 1, cancel  # the abort is made in the progress callback
    assert cancel["rejected"] is True and cancel["servingAfter"] is True, cancel
    (big_call,) = [
        m
        for m in sent
        if m.get("method") == "tools/call" and m["params"]["arguments"].get("path") == str(big)
    ]
    cancelled = [m for m in sent if m.get("method") == "notifications/cancelled"]
    assert [m["params"]["requestId"] for m in cancelled] == [big_call["id"]]
    assert not [m for m in received if m.get("id") == big_call["id"] and "method" not in m]
