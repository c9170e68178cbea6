"""``sysmcp call`` reads its inventory once and hands its server what it read: a file given as a pipe
(``--inventory <(cmd)``, read once and gone) still configures the server, an ``--inventory-command``
runs once, and the server's copies are gone when the call is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.profile import UNDER_POSIX_PROFILE

pytestmark = pytest.mark.skipif(UNDER_POSIX_PROFILE, reason="process substitution is bash's, on Linux")


def run(argv: list[str], scratch: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(scratch)}  # where the call's private copies go
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, env=env
    )


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "a").write_text("a")
    return tmp_path


def test_an_inventory_given_as_a_pipe_configures_the_server_too(scratch: Path) -> None:
    script = 'exec "$0" -m sysmcp call --inventory <(printf "[web]\\nweb1\\nweb2\\n") "$@"'
    tree = scratch / "tree"
    done = run(
        ["bash", "-c", script, sys.executable, "--root", str(tree), "disk_usage", f"path={tree}"],
        scratch / "tmp",
    )
    assert done.returncode == 0, done.stderr
    assert list((scratch / "tmp").iterdir()) == []  # the server's copy went with the call


def test_an_inventory_command_runs_once(scratch: Path) -> None:
    runs = scratch / "runs"
    listing = json.dumps({"web": {"hosts": ["web1", "web2"]}})
    command = scratch / "cloud.py"
    command.write_text(
        f"import sys\nwith open({str(runs)!r}, 'a') as f:\n    f.write('ran\\n')\nprint({listing!r})\n"
    )
    tree = scratch / "tree"
    done = run(
        [
            sys.executable,
            "-m",
            "sysmcp",
            "call",
            "--inventory-command",
            f"{sys.executable} {command}",
            "--root",
            str(tree),
            "disk_usage",
            f"path={tree}",
        ],
        scratch / "tmp",
    )
    assert done.returncode == 0, done.stderr
    assert runs.read_text() == "ran\n"
    assert list((scratch / "tmp").iterdir()) == []
