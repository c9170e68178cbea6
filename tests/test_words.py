"""Words a person reads, as issue 27 (defect 7) found them wrong: each test fails on the words it replaced."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from sysmcp.fs.checksums import ALGORITHMS
from sysmcp.fs.mounts import MountTable
from sysmcp.fs.openfiles import DeletedFile, Holder, Scan
from sysmcp.fs.treehash import TreeHash
from sysmcp.fs.walk import SkipCounter
from sysmcp.tools import hash_tree
from sysmcp.tools.deleted_open_files import render

SYSMCP = [sys.executable, "-m", "sysmcp"]


def call(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SYSMCP, "call", *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def test_hash_tree_counts_the_symlinks_it_leaves_out(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    for n in range(3):
        (tmp_path / f"link{n}").symlink_to(tmp_path / "a")
    done = call("--json", "hash_tree", f"path={tmp_path}")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["files"] == 1
    assert result["skipped"] == {"symlink": 3}  # was {}: three names silently out of the manifest


def test_the_command_line_prints_no_link_that_dies_with_its_server(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    done = call("hash_tree", f"path={tmp_path}")
    assert done.returncode == 0, done.stderr
    assert "sysmcp://" not in done.stdout
    assert "rerun with -o FILE to save it" in done.stdout


def test_no_progress_line_is_a_bare_number() -> None:
    done = call("disk_io", "sample_s=0.5")  # at least one wait, so at least one worded line
    lines = [line for line in done.stderr.splitlines() if line.startswith("progress:")]
    assert lines, done.stderr
    assert not [line for line in lines if re.fullmatch(r"progress: [\d,.]+", line)], lines


def test_one_deleted_file_and_one_process_are_singular() -> None:
    held = DeletedFile(
        "/gone/x.log", dev=999, ino=1, size=4096, disk=4096, holders=[Holder(1, "d", None, 3, "w")]
    )
    text, _ = render(Scan(files={(999, 1): held}, processes=1), MountTable([]), 5, None, None)
    assert "Not counted: 1 deleted file (4.0 KiB) on no filesystem" in text
    text, _ = render(Scan(processes=1), MountTable([]), 5, None, None)
    assert "by the 1 process read" in text


def test_a_partial_hash_tree_that_hashed_nothing_does_not_say_there_was_nothing_to_hash() -> None:
    class Keeper:
        def keep(self, name: str, text: str, **_: object) -> str:
            return "not kept in this test"

    tree = TreeHash(stopped="time budget of 1 s reached", not_hashed=12, base=b"/srv")
    output = hash_tree.render(
        {"max_lines": 5},
        Keeper(),  # type: ignore[arg-type]
        tree,
        "/srv",
        ALGORITHMS["sha256"],
        "gnu",
        SkipCounter(),
    )
    assert "No regular files to hash" not in output.text
    assert "None of the 12 files listed was hashed before it stopped." in output.text
