"""find_duplicates finds exactly the duplicate sets jdupes finds (hard links aside, which neither counts)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest

from sysmcp.engine.duplicates import DuplicatesRequest, find_duplicates
from sysmcp.engine.parallel import _fork as fanout
from sysmcp.engine.walk import WalkOptions
from tests.wire import result_text, spawn

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("jdupes") is None, reason="jdupes is not installed (CI installs it)"),
]


def build(root: Path, seed: int = 7) -> None:
    """Copies, same-size files that differ only in the middle or only at the end, hard links, empties."""
    rng = random.Random(seed)
    dirs = [root / f"d{i}" for i in range(8)]
    for directory in dirs:
        directory.mkdir()
    originals: list[tuple[Path, bytes]] = []
    for i in range(120):
        where = dirs[i % len(dirs)] / f"f{i:03d}"
        roll = rng.random()
        if originals and roll < 0.25:
            _, data = originals[rng.randrange(len(originals))]
            where.write_bytes(data)  # an exact copy
        elif originals and roll < 0.40:
            _, data = originals[rng.randrange(len(originals))]
            changed = bytearray(data)
            changed[len(data) // 2] ^= 0xFF  # same size, head and tail; another middle
            where.write_bytes(changed)
        elif originals and roll < 0.45:
            os.link(originals[rng.randrange(len(originals))][0], where)
        elif roll < 0.50:
            where.write_bytes(b"")
        else:
            size = rng.choice([1, 7, 4096, 9000, 70_000, 200_000])
            data = rng.randbytes(size)
            where.write_bytes(data)
            originals.append((where, data))
    (root / "link").symlink_to(dirs[0])


def inode_sets(groups: list[list[str]]) -> set[frozenset[int]]:
    """Each group as the set of inodes it names (sysmcp and jdupes may name one inode differently)."""
    out = set()
    for group in groups:
        inodes = frozenset(os.stat(name).st_ino for name in group)
        if len(inodes) > 1:
            out.add(inodes)
    return out


async def test_find_duplicates_reports_the_sets_jdupes_reports(tmp_path: Path) -> None:
    build(tmp_path)
    done = subprocess.run(["jdupes", "-r", "-q", str(tmp_path)], capture_output=True, check=True)
    theirs = [block.splitlines() for block in done.stdout.decode().split("\n\n") if block.strip()]
    async with spawn() as wire:
        await wire.initialize()
        with anyio.fail_after(60):
            reply = await wire.call("find_duplicates", {"path": str(tmp_path), "top_n": 50})
    assert reply["result"]["isError"] is False, result_text(reply)
    result = reply["result"]["structuredContent"]
    assert result["complete"] is True and result["groups_not_shown"] == 0
    assert all(group["paths_not_shown"] == 0 for group in result["groups"])
    ours = [group["paths"] for group in result["groups"]]
    assert len(theirs) > 5  # the tree has duplicates of every kind of size
    assert inode_sets(ours) == inode_sets(theirs)


def test_the_comparison_shared_between_processes_finds_the_same_sets(tmp_path: Path) -> None:
    build(tmp_path)
    done = subprocess.run(["jdupes", "-r", "-q", str(tmp_path)], capture_output=True, check=True)
    theirs = [block.splitlines() for block in done.stdout.decode().split("\n\n") if block.strip()]
    search = find_duplicates(DuplicatesRequest(os.fsencode(tmp_path), WalkOptions(), processes=2))
    assert search.stopped is None
    ours = [[str(tmp_path / c.relative) for c in group.copies] for group in search.groups]
    assert inode_sets(ours) == inode_sets(theirs)


def test_a_walk_shared_with_workers_that_then_compare_finds_the_same_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers forked for the walk list into their own runs, then compare blocks of the merge."""
    build(tmp_path)
    for k in range(80):  # more directories than the walk splits into: some are left for the worker
        (tmp_path / f"x{k:02}").mkdir()
        (tmp_path / f"x{k:02}" / "f").write_bytes(b"copy %d" % (k % 10))
    split = []
    start = fanout.FanOut.start

    def recording_start(fan: fanout.FanOut) -> None:
        start(fan)
        split.append(bool(fan.keep))  # the walk's workers keep the handoff's pipes

    monkeypatch.setattr(fanout.FanOut, "start", recording_start)
    done = subprocess.run(["jdupes", "-r", "-q", str(tmp_path)], capture_output=True, check=True)
    theirs = [block.splitlines() for block in done.stdout.decode().split("\n\n") if block.strip()]
    search = find_duplicates(
        DuplicatesRequest(os.fsencode(tmp_path), WalkOptions(), processes=2, split_after_s=0)
    )
    skipped = search.skipped
    assert search.stopped is None and skipped.as_dict() == {}
    names = [p for p in tmp_path.rglob("*") if not p.is_symlink() and p.is_file() and p.stat().st_size]
    assert search.files_scanned == len({p.stat().st_ino for p in names})
    assert search.files_scanned + search.hard_links == len(names)  # every further name counted once
    assert split == [True]  # one set of workers, forked for the walk, compared too
    ours = [[str(tmp_path / c.relative) for c in group.copies] for group in search.groups]
    assert inode_sets(ours) == inode_sets(theirs)
