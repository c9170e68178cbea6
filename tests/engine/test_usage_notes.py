"""dir_usage states what its totals leave to be inferred: files with other hard-linked names, the holes
of sparse files, blocks allocated past files' ends (preallocated) and hidden (dot) files, counted once
per inode however many processes walked."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest

from sysmcp.engine.usage import past_end
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.dir_usage import INPUT_SCHEMA, handle
from tests.harness import tool_context
from tests.profile import needs_fork
from tests.tools.test_dir_usage_shared import build_linked_tree, shared_scan


def dir_usage(path: Path) -> tuple[str, dict[str, object]]:
    async def run() -> tuple[str, dict[str, object]]:
        ctx = tool_context()
        output = await handle(validate_arguments(INPUT_SCHEMA, {"path": str(path)}), ctx)
        return output.text, output.structured

    return anyio.run(run)


def test_hard_links_sparse_holes_and_dot_files_are_stated_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    for i in range(3):
        (tmp_path / "a" / f"f{i}").write_bytes(b"x" * 100)
        os.link(tmp_path / "a" / f"f{i}", tmp_path / f"other{i}")
    with open(tmp_path / "disk.img", "wb") as handle:
        handle.truncate(8 << 20)
    (tmp_path / ".env").write_bytes(b"k=v\n")
    (tmp_path / "a" / ".cache").write_bytes(b"c" * 1000)
    hole = (8 << 20) - os.stat(tmp_path / "disk.img").st_blocks * 512
    text, structured = dir_usage(tmp_path)
    totals = structured["totals"]
    assert isinstance(totals, dict)
    assert (totals["hard_linked_files"], totals["sparse_bytes"]) == (3, hole)
    assert (totals["hidden_files"], totals["hidden_bytes"]) == (2, 1004)
    (line,) = [line for line in text.splitlines() if line.startswith("Within these totals:")]
    assert "3 files with other hard-linked names (each counted once)" in line
    assert "8.0 MiB of holes in sparse files" in line and "2 hidden (dot) files (1004 B apparent)" in line


def test_a_plain_tree_gets_no_such_line(tmp_path: Path) -> None:
    (tmp_path / "plain.txt").write_bytes(b"p" * 10)
    text, structured = dir_usage(tmp_path)
    assert "Within these totals" not in text
    totals = structured["totals"]
    assert isinstance(totals, dict) and totals["hard_linked_files"] == totals["hidden_files"] == 0


@needs_fork
def test_an_inode_walked_by_several_processes_is_one_hard_linked_file(tmp_path: Path) -> None:
    build_linked_tree(tmp_path)
    usage, _ = shared_scan(tmp_path)
    assert usage.processes > 1
    assert usage.notes[0] == 20  # the 20 shared inodes, each with 13 names


def keep_size_preallocate(path: Path, length: int) -> None:
    """``length`` bytes allocated to ``path`` from offset 0 without changing its size (fallocate -n)."""
    if shutil.which("fallocate") is None:
        pytest.skip("needs fallocate(1) from util-linux")
    done = subprocess.run(["fallocate", "-n", "-l", str(length), str(path)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"this filesystem does not preallocate: {done.stderr.decode().strip()}")


def test_blocks_allocated_past_files_ends_are_stated_as_preallocated(tmp_path: Path) -> None:
    """``fallocate --keep-size`` (and XFS's speculative preallocation while a file grows) gives a file
    blocks past its end: on disk, not apparent. The totals count them, as du -B1 does; the answer says
    so, as it says the holes of sparse files, instead of leaving "8.0 MiB (apparent 0 B)" unexplained."""
    (tmp_path / "log").write_bytes(b"l" * 10_000)
    keep_size_preallocate(tmp_path / "log", 4 << 20)
    (tmp_path / "reserved").touch()
    keep_size_preallocate(tmp_path / "reserved", 8 << 20)
    (tmp_path / "plain").write_bytes(b"p" * 5000)  # its last block's slack is not past its end
    past = sum(
        st.st_blocks * 512 - -(-st.st_size // st.st_blksize) * st.st_blksize
        for st in (os.stat(tmp_path / name) for name in ("log", "reserved"))
    )
    assert past >= (12 << 20) - (16 << 10)
    text, structured = dir_usage(tmp_path)
    totals = structured["totals"]
    assert isinstance(totals, dict)
    assert totals["preallocated_bytes"] == past
    (line,) = [line for line in text.splitlines() if line.startswith("Within these totals:")]
    assert "allocated past files' ends (preallocated: on disk, not apparent)" in line, line


@needs_fork
def test_a_preallocated_inode_walked_by_several_processes_is_counted_once(tmp_path: Path) -> None:
    build_linked_tree(tmp_path)
    keep_size_preallocate(tmp_path / "shared" / "s0", 1 << 20)  # its 13 names lie in every process's part
    st = os.stat(tmp_path / "shared" / "s0")
    past = st.st_blocks * 512 - -(-st.st_size // st.st_blksize) * st.st_blksize
    usage, _ = shared_scan(tmp_path)
    assert usage.processes > 1
    assert usage.notes[4] == past


def test_the_mapping_blocks_of_a_plain_file_are_not_taken_for_preallocation() -> None:
    """``stat`` of a 64 MiB file written with dd on ext2 (1 KiB blocks), nothing preallocated: its 257 KiB
    past 64 MiB are the indirect blocks mapping it. Of a fragmented 1.6 MB file on ext4 (1 KiB blocks, 7
    extents): 6 KiB of extent tree. Neither is 'allocated past files' ends'."""
    for size, blocks in ((67_108_864, 131_586), (1_638_400, 3_212)):
        st = os.stat_result(
            (0o100644, 12, 1, 1, 0, 0, size, 0, 0, 0), {"st_blocks": blocks, "st_blksize": 1024}
        )
        assert past_end(st) == 0, size
    # 8 MiB kept past a 1 MiB file's end on 4 KiB blocks: at least all but its possible mapping is said
    st = os.stat_result(
        (0o100644, 12, 1, 1, 0, 0, 1 << 20, 0, 0, 0), {"st_blocks": 9 << 11, "st_blksize": 4096}
    )
    assert (8 << 20) - (4 << 12) <= past_end(st) <= 8 << 20
