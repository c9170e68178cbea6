"""find_duplicates keeps what it learns while walking compactly: no Python object per listed file."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

from sysmcp.fs.walk import Scanner, SkipCounter, WalkOptions
from sysmcp.tools.find_duplicates import Search, index_by_size

FILES = 20_000
BYTES_PER_FILE = 100  # names here are about 10 bytes; one object per file (the old way) took over 200


def test_the_size_index_costs_a_few_words_per_file(tmp_path: Path) -> None:
    for d in range(20):
        directory = tmp_path / f"d{d:02}"
        directory.mkdir()
        for f in range(FILES // 20):
            (directory / f"f{f:04}").write_bytes(b"x" * (1 + (d * 1000 + f) % 50))  # every size shared
    scanner = Scanner(os.fsencode(tmp_path), WalkOptions(), SkipCounter(), lambda: None)
    scanner.file_floor, scanner.block_floor = 1, 1 << 62
    scanner.empty_listings = False
    scanner.finished_depth = -1
    search = Search()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        index = index_by_size(scanner, search)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        scanner.close()
    assert search.files_scanned == FILES
    assert sum(len(numbers) for numbers in index.shared.values()) == FILES
    assert held < FILES * BYTES_PER_FILE, f"{held / FILES:.0f} bytes held per file"
    first = index.candidate(index.shared[1][0])
    assert (tmp_path / first.relative).read_bytes() == b"x"
    assert (first.dev, first.ino) == (
        os.lstat(tmp_path / first.relative).st_dev,
        os.lstat(tmp_path / first.relative).st_ino,
    )
