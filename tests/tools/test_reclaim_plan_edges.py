"""reclaim_plan at its edges, through the real command line: nothing to free, a pseudo filesystem, and
saying which classes were looked for and found nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sysmcp.engine.paths import real_root
from sysmcp.protocol.failures import ToolError
from tests.harness import call_tool, tool_context
from tests.profile import needs_proc

SYSMCP = [sys.executable, "-m", "sysmcp", "--no-history", "call", "reclaim_plan"]


def call(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SYSMCP, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def test_an_empty_plan_saved_with_o_is_a_script_that_runs_and_says_there_is_nothing_to_do(
    tmp_path: Path,
) -> None:
    (tmp_path / "empty").mkdir()
    done = call(f"path={tmp_path / 'empty'}", "-o", "plan.sh", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "nothing found to free" in done.stdout
    script = (tmp_path / "plan.sh").read_text()
    assert script.startswith("#!/bin/sh\n") and "Reclaim plan" not in script
    ran = subprocess.run(["sh", str(tmp_path / "plan.sh")], capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0 and ran.stderr == ""
    assert "nothing to do" in ran.stdout


def test_the_answer_names_every_class_it_looked_for_and_found_nothing_in(tmp_path: Path) -> None:
    done = call(f"path={tmp_path}", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    checked = json.loads(done.stdout)["checked"]
    assert {"package_cache", "language_cache", "trash", "deleted_open"} <= set(checked)
    assert "duplicate" not in checked  # not looked for unless asked
    text = call(f"path={tmp_path}", 'classes=["trash","duplicate"]', cwd=tmp_path).stdout
    assert "Checked, nothing found: trash, duplicate." in text, text


@needs_proc
@pytest.mark.parametrize("path", ["/proc", "/proc/self", "/sys"])
def test_a_pseudo_filesystem_is_a_tool_error_not_nothing_to_free(tmp_path: Path, path: str) -> None:
    done = call(f"path={path}", cwd=tmp_path)
    assert done.returncode == 1
    assert "a pseudo filesystem" in done.stderr and "nothing there to free" in done.stderr, done.stderr
    assert "nothing found to free" not in done.stdout + done.stderr


@pytest.mark.anyio
async def test_client_roots_disjoint_from_the_operators_allow_no_plan_and_say_none_are_allowed(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ctx = tool_context([tmp_path / "a"])
    ctx.paths.narrow([real_root(tmp_path / "b")])  # the intersection is empty: nothing is in scope
    with pytest.raises(ToolError, match="Allowed roots: none"):
        await call_tool("reclaim_plan", ctx)


def test_deleted_open_found_nothing_says_so_only_of_the_processes_a_user_without_root_could_read() -> None:
    import os
    import shutil

    from tests.harness import python_as_nobody

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("a second user needs root and setpriv")
    probe = (
        "from sysmcp.reclaim import Plan\n"
        "from sysmcp.tools.reclaim_plan import checked_words\n"
        "print(checked_words(Plan('x', 0.0, (b'/',), ()), ['trash', 'deleted_open']), end='')\n"
    )
    done = python_as_nobody(probe)
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout
        == (  # was "Checked, nothing found: trash, deleted_open." with other users' processes unread
            "Checked, nothing found: trash, deleted_open (among this user's processes: other users' need root).\n"
        )
    )
