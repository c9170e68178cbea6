"""Size runs: records written sorted by several processes merge back by size, largest first, links once."""

from __future__ import annotations

import os
import tempfile
from types import SimpleNamespace
from typing import Any

from sysmcp.engine.duplicates._sizeruns import SizeRuns, merge_by_size, parse, read_records
from sysmcp.engine.walk import RUN_BYTES, Listing


def stat(size: int, ino: int, dev: int = 1) -> Any:
    return SimpleNamespace(st_size=size, st_dev=dev, st_ino=ino, st_blocks=(size + 511) // 512)


def runs_of(
    *listings: list[Listing], run_bytes: int = RUN_BYTES
) -> tuple[list[tuple[int, int, int]], list[Any]]:
    """Each list of listings written by its own ``SizeRuns`` (one process each), flushed."""
    runs, files = [], []
    for listed in listings:
        spill = tempfile.TemporaryFile()  # noqa: SIM115 - closed by the test
        files.append(spill)
        writer = SizeRuns(spill, run_bytes)
        for listing in listed:
            writer.listing(listing)
        for offset, length in writer.summary()["extents"]:
            runs.append((spill.fileno(), offset, length))
    return runs, files


def test_shared_sizes_come_largest_first_one_record_per_inode() -> None:
    first = Listing("a", 1, [("x", stat(10, 1)), ("y", stat(30, 2)), ("u", stat(7, 9))], [])
    second = Listing("b/c", 3, [("z", stat(10, 3)), ("w", stat(30, 4)), ("link", stat(30, 2))], [])
    runs, files = runs_of([first], [second])
    links = [0]
    merged = [(size, [parse(r) for r in records]) for size, records in merge_by_size(runs, links)]
    assert [size for size, _ in merged] == [30, 10]  # 7 is nobody else's size: not passed on
    assert [(r[2], r[4]) for r in merged[0][1]] == [(2, b"a/y"), (4, b"b/c/w")]  # b/c/link: inode 2 again
    assert links == [1]
    assert merged[1][1][0][:4] == (10, 1, 1, 512)
    for spill in files:
        spill.close()


def test_names_with_any_byte_but_nul_survive_and_runs_are_cut_when_full() -> None:
    odd = os.fsdecode(b"new\nline \x00"[:-1] + b"\xff")
    listings = [Listing("", 0, [(f"{odd}{i}", stat(5 + i % 3, 100 + i))], []) for i in range(40)]
    runs, files = runs_of(listings, run_bytes=200)  # several runs from one process
    assert len(runs) > 3
    every = [parse(r) for fd, offset, length in runs for r in read_records(fd, offset, length)]
    assert sorted(name for *_, name in every) == sorted(os.fsencode(f"{odd}{i}") for i in range(40))
    merged = dict(merge_by_size(runs, [0]))
    assert sorted(merged) == [5, 6, 7] and sum(len(group) for group in merged.values()) == 40
    for spill in files:
        spill.close()
