"""The MCP Inspector CLI (npm ``@modelcontextprotocol/inspector``) against sysmcp, in both eras.

``sysmcp trace`` sits between them, so the test also proves which era the Inspector really spoke:
``initialize`` first for ``--protocol-era legacy``, ``server/discover`` and enveloped requests for
``modern``. Skips (with the reason) when Node >= 22.19 or the package cannot be had here.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.interop.node import Unavailable, node_path, npm_bin

SYSMCP = [sys.executable, "-m", "sysmcp"]
ENVELOPE_VERSION = "io.modelcontextprotocol/protocolVersion"
INSPECTOR_VERSION = "2.12.0"


@pytest.fixture(scope="module")
def inspector() -> tuple[Path, str]:
    try:
        return npm_bin("@modelcontextprotocol/inspector", INSPECTOR_VERSION, "mcp-inspector"), node_path()
    except Unavailable as exc:
        pytest.skip(f"MCP Inspector unavailable: {exc}")


def run_inspector(
    inspector: tuple[Path, str], tmp_path: Path, era: str, *method: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One Inspector CLI run through ``sysmcp trace``: its JSON output and what crossed the wire."""
    executable, path = inspector
    trace = tmp_path / f"{era}-{len(list(tmp_path.glob('*.jsonl')))}.jsonl"
    home = tmp_path / "home"  # the Inspector keeps a catalog in $HOME; keep the real one untouched
    home.mkdir(exist_ok=True)
    done = subprocess.run(
        [
            str(executable),
            "--cli",
            "--protocol-era",
            era,
            "--format",
            "json",
            *method,
            "--",  # the server command follows: its own options (--output) are not the Inspector's
            *SYSMCP,
            "trace",
            "--output",
            str(trace),
            "--",
            *SYSMCP,
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "PATH": path, "HOME": str(home)},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    wire = [json.loads(line) for line in trace.read_text().splitlines()]
    assert done.stdout.startswith("{"), done.stdout[:2000]
    return json.loads(done.stdout), [r["message"] for r in wire if r.get("direction") == "client→server"]


@pytest.mark.slow
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_inspector_lists_and_calls_tools_in_each_era(
    inspector: tuple[Path, str], tmp_path: Path, era: str
) -> None:
    listed, sent = run_inspector(inspector, tmp_path, era, "--method", "tools/list")
    assert {"disk_usage", "dir_usage", "file_sha256"} <= {t["name"] for t in listed["result"]["tools"]}
    if era == "legacy":
        assert sent[0]["method"] == "initialize"
        assert all(ENVELOPE_VERSION not in m.get("params", {}).get("_meta", {}) for m in sent)
    else:
        assert sent[0]["method"] == "server/discover"
        assert "initialize" not in [m.get("method") for m in sent]
        requests = [m for m in sent if "id" in m]
        assert all(m["params"]["_meta"][ENVELOPE_VERSION] == "2026-07-28" for m in requests)
    target = tmp_path / "payload.bin"
    target.write_bytes(b"inspected\n")
    called, _ = run_inspector(
        inspector,
        tmp_path,
        era,
        "--method",
        "tools/call",
        "--tool-name",
        "file_sha256",
        "--tool-args-json",
        json.dumps({"path": str(target)}),
    )
    result = called["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["sha256"] == hashlib.sha256(b"inspected\n").hexdigest()
