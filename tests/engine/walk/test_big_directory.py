"""A directory of very many files holds a part of its listing in memory, not all of it: ``walk_files``
(verify_checksums' report_new) and find_duplicates' walk held every file's name and stat result of the
directory being read, about 700 bytes a file (207 MiB for 300,000 files), until it was read to the end.
Measured with ``tracemalloc``: 20,000 files peaked at about 14 MB; now at about 3 MB (a part of ``PART``
 files), and so do 300,000 (207 MiB before)."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from sysmcp.engine.walk import PART, ScanConfig, Scanner, SkipCounter, SubtreeTotals, WalkOptions, walk_files
from sysmcp.engine.walk._types import Listing

FILES = 20_000


@pytest.fixture(scope="module")
def big_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("big")
    (root / "d").mkdir()
    for i in range(FILES):
        (root / "d" / f"file-{i:06d}").write_bytes(b"x" if i % 2 else b"")
    (root / "d" / "sub").mkdir()
    (root / "d" / "sub" / "after").write_bytes(b"y")
    (root / "top").write_bytes(b"z")
    return root


def test_walk_files_holds_a_part_of_a_big_directory_not_all_of_it(big_directory: Path) -> None:
    assert os.stat(big_directory / "d").st_size > ScanConfig().list_at_once  # streamed, not listed at once
    tracemalloc.start()
    try:
        names = sum(
            1 for _ in walk_files(os.fsencode(big_directory), WalkOptions(), SkipCounter(), lambda: None)
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert names == FILES + 2
    assert peak < 6 << 20, peak  # about 2.9 MB (14 MB before)


def test_a_big_directory_in_parts_gives_every_file_once_and_the_same_totals(big_directory: Path) -> None:
    def walk(parts: int) -> tuple[list[str], list[SubtreeTotals], int]:
        scanner = Scanner(
            os.fsencode(big_directory), WalkOptions(), SkipCounter(), config=ScanConfig(listing_parts=parts)
        )
        events = list(scanner.events())
        files = [f"{e.relative}/{name}" for e in events if isinstance(e, Listing) for name, _ in e.files]
        return files, [e for e in events if isinstance(e, SubtreeTotals)], scanner.entries

    whole, in_parts = walk(0), walk(PART)
    assert sorted(in_parts[0]) == sorted(whole[0]) and len(set(in_parts[0])) == FILES + 2
    assert in_parts[1:] == whole[1:]


def test_a_consumer_that_stops_inside_a_big_directory_leaves_nothing_open(big_directory: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    files = walk_files(os.fsencode(big_directory), WalkOptions(), SkipCounter(), lambda: None)
    for _ in range(PART + 10):
        next(files)
    files.close()
    assert len(os.listdir("/proc/self/fd")) == before
