"""``sysmcp call`` reads its inventory once and hands its server what it read: a file given as a pipe
(``--inventory <(cmd)``, read once and gone) still configures the server, an ``--inventory-command``
runs once, and the server's copies are gone when the call is."""

from __future__ import annotations

import json
import os
import signal
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


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT])
def test_the_servers_copy_is_gone_when_the_call_is_ended_by_a_signal(scratch: Path, signum: int) -> None:
    """A call hashing for minutes, an inventory given, ended as a closed terminal (or a dropped ssh
    session) ends it, or as kill or Ctrl-C do: the private copy of the inventory goes with it. SIGHUP
    was not taken: Python's default ended the process and left the copy in $TMPDIR."""
    inventory = scratch / "hosts.ini"
    inventory.write_text("[web]\nweb1\n")
    big = scratch / "big.bin"
    with big.open("wb") as handle:
        handle.truncate(64 << 30)  # nothing on disk, minutes to hash: surely still running when ended
    call = subprocess.Popen(
        [sys.executable, "-m", "sysmcp", "call", "--inventory", str(inventory), "file_sha256", f"path={big}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch / "tmp")},
    )
    assert call.stderr is not None
    assert call.stderr.readline().startswith("progress: ")  # running, the copy handed to its server
    assert len(list((scratch / "tmp").iterdir())) == 1
    call.send_signal(signum)
    assert call.wait(timeout=30) == 128 + signum
    assert list((scratch / "tmp").iterdir()) == []
