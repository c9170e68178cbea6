"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``) against sysmcp.

Every server scenario of the suite (``--suite all``) for each spec version sysmcp's two eras speak:
2025-11-25 (the ``initialize`` handshake) and 2026-07-28 (stateless, the ``_meta`` envelope). The suite
only speaks Streamable HTTP, so sysmcp runs behind ``tests/interop/http_bridge.py``. Scenarios that need
the suite's own fixture tools, prompts and resources, or server-to-client requests sysmcp never makes,
are listed with one reason each in ``conformance-expected-failures.yml``; the suite passes only if
exactly those fail. Skips (with the reason) without Node >= 22.19 or the package.
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
CONFORMANCE_VERSION = "0.2.0-alpha.12"


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


#: Scenarios that must pass in each version (a check that the run was real, beyond the baseline).
MUST_PASS = {
    "2025-11-25": (
        "server-initialize",
        "server-session-lifecycle",
        "ping",
        "logging-set-level",
        "tools-list",
    ),
    "2026-07-28": ("tools-list", "resources-list", "prompts-list", "caching", "sep-2164-resource-not-found"),
}


@pytest.mark.slow
@pytest.mark.parametrize("spec_version", sorted(MUST_PASS))
def test_conformance_suite_passes_every_scenario_that_applies(
    bridge_url: str, tmp_path: Path, spec_version: str
) -> None:
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
            "--suite",
            "all",
            "--spec-version",
            spec_version,
            "--expected-failures",
            str(HERE / "conformance-expected-failures.yml"),
            "--output-dir",
            str(tmp_path / "results"),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "PATH": path},
        stdin=subprocess.DEVNULL,
    )
    summary = done.stdout[done.stdout.find("=== SUMMARY ===") :]
    assert done.returncode == 0, summary + done.stderr[-2000:]
    for scenario in MUST_PASS[spec_version]:
        assert f"✓ {scenario}:" in summary, summary
