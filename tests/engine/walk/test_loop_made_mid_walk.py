"""A bind mount of a directory above it, made after the walk read the mount table (so not skipped by
name): the walk meets a directory it is inside of already. Walked, its tree was counted twice (du counts
it once and warns of the cycle)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.profile import UNDER_POSIX_PROFILE

WALK_WHILE_A_LOOP_IS_MADE = """
import json, os, subprocess, sys
from sysmcp.engine.walk import Scanner, ScanConfig, SkipCounter, SubtreeTotals, WalkOptions

root = sys.argv[1]
os.makedirs(os.path.join(root, "a", "loop"))
open(os.path.join(root, "a", "trigger"), "wb").write(b"x" * 1000)
made = []

def on_file(name, st):
    # Called while "a" is read, before its subdirectory "loop" is entered: the loop appears mid-walk.
    if name == "trigger" and not made:
        subprocess.run(["mount", "--bind", root, os.path.join(root, "a", "loop")], check=True)
        made.append(True)
    return True

steps = []
def cancel():
    steps.append(1)
    if len(steps) > 5000:  # the walk's budget: a loop walked is one that never ends
        from sysmcp.engine.walk import ScanStopped
        raise ScanStopped("budget")

skipped = SkipCounter()
scanner = Scanner(root.encode(), WalkOptions(one_file_system=False), skipped, cancel,
                  config=ScanConfig(on_file=on_file))
events = list(scanner.events())
top = [e for e in events if isinstance(e, SubtreeTotals) and e.relative == ""][0]
print(json.dumps([scanner.stopped, skipped.as_dict(), top.files, top.dirs]))
"""


@pytest.mark.skipif(UNDER_POSIX_PROFILE, reason="bind mounts in a private mount namespace: Linux only")
def test_a_directory_loop_made_mid_walk_is_skipped_not_counted_twice(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare")
    if subprocess.run([unshare, "-m", "--propagation", "private", "true"], capture_output=True).returncode:
        pytest.skip("cannot create a private mount namespace here")
    done = subprocess.run(
        [
            unshare,
            "-m",
            "--propagation",
            "private",
            sys.executable,
            "-c",
            WALK_WHILE_A_LOOP_IS_MADE,
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[3],
    )
    assert done.returncode == 0, done.stderr
    stopped, skipped, files, dirs = json.loads(done.stdout)
    assert (stopped, skipped) == (None, {"directory_loop": 1})
    assert (files, dirs) == (1, 2)  # a/trigger; the root and a
