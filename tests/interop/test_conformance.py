"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``) against sysmcp.

The suite only speaks Streamable HTTP, so sysmcp runs behind ``tests/interop/http_bridge.py``.
Scenarios that need the suite's own fixture tools, prompts and resources, or server-to-client
requests sysmcp never makes, are listed with reasons in ``conformance-expected-failures.yml``; the
suite passes only if exactly those fail. Skips (with the reason) without Node >= 22.19 or the package.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop.node import Unavailable, node_path, npm_bin

HERE = Path(__file__).parent
CONFORMANCE_VERSION = "0.1.16"


@pytest.fixture
def bridge_url() -> Iterator[str]:
    bridge = subprocess.Popen(
        [sys.executable, str(HERE / "http_bridge.py"), "--", sys.executable, "-m", "sysmcp"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert bridge.stdout is not None
        url = bridge.stdout.readline().strip()  # the bridge prints its URL first, before serving
        assert url.startswith("http://127.0.0.1:"), url
        yield url
    finally:
        bridge.terminate()
        bridge.wait(timeout=10)


@pytest.mark.slow
def test_conformance_suite_passes_every_scenario_that_applies(bridge_url: str, tmp_path: Path) -> None:
    try:
        conformance = npm_bin("@modelcontextprotocol/conformance", CONFORMANCE_VERSION, "conformance")
        path = node_path()
    except Unavailable as exc:
        pytest.skip(f"conformance suite unavailable: {exc}")
    done = subprocess.run(
        [
            str(conformance),
            "server",
            "--url",
            bridge_url,
            "--expected-failures",
            str(HERE / "conformance-expected-failures.yml"),
            "--output-dir",
            str(tmp_path / "results"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PATH": path},
        stdin=subprocess.DEVNULL,
    )
    summary = done.stdout[done.stdout.find("=== SUMMARY ===") :]
    assert done.returncode == 0, summary + done.stderr[-2000:]
    for scenario in ("server-initialize", "ping", "logging-set-level", "tools-list", "prompts-list"):
        assert f"✓ {scenario}:" in summary
