"""The comparison's Reader on a candidate that moves while it is read: how the skip is counted."""

from __future__ import annotations

import os
from pathlib import Path

from sysmcp.engine.duplicates._sieves import Reader
from sysmcp.engine.hashing import CHUNK
from sysmcp.engine.hashing._checksums import GROWTH_ALLOWANCE
from sysmcp.engine.walk import SkipCounter


def test_a_candidate_that_kept_growing_while_hashed_counts_as_changed_not_unreadable(tmp_path: Path) -> None:
    """A live log that grows past what hash_fd will read is a file that changed since the walk, not one
    this process may not read (the answer's unreadable count reads as "permission denied on …")."""
    grower = tmp_path / "log"
    grower.write_bytes(b"x" * (2 * CHUNK))
    st = grower.stat()
    asked = 0

    def cancel() -> None:  # asked at the open and after every chunk: a writer appends after the first
        nonlocal asked
        asked += 1
        if asked == 2:
            os.truncate(grower, st.st_size + 2 * CHUNK + GROWTH_ALLOWANCE)  # sparse: read as zeros, fast

    skipped = SkipCounter()
    reader = Reader(os.fsencode(tmp_path), skipped, cancel)
    try:
        assert reader.full((b"log", st.st_dev, st.st_ino, st.st_blocks), st.st_size) is None
    finally:
        reader.close()
    assert skipped.as_dict() == {"changed": 1}
