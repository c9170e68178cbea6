"""verify_checksums holds nothing per entry where it forks: the checking processes parse their own ranges.

Measured with ``tracemalloc`` in this process (the server's part of the check): what is allocated when the
checking processes are forked (every page of it is counted again in each of them) and the peak over the
whole check, for a manifest of 10,000 and then 100,000 lines. Parsing the whole manifest before the fork,
as verify_checksums once did, held about 75 bytes an entry at the fork (0.9 MB, then 7.6 MB) and peaked at
67 MB (the manifest read whole, into a buffer of its 64 MiB cap); now 5 kB at the fork and a 2 MB peak.
"""

from __future__ import annotations

import hashlib
import os
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.calls import never_cancelled, no_progress
from sysmcp.engine.hashing import Source, Verification
from sysmcp.engine.hashing import verify as check_manifest
from sysmcp.engine.hashing._verify_request import Tuning
from sysmcp.engine.parallel import _fork as fanout
from sysmcp.engine.paths import PathPolicy
from sysmcp.tools import verify_checksums


def verified(*args: Any, **kwargs: Any) -> Verification:
    """The engine's check of a tool's request built from these arguments, in ranges shared by two
    processes as long manifests are (even a short one), outside any call."""
    request = verify_checksums.verify_request(*args, **kwargs)
    tuning = Tuning(parallel_from=0, processes=2)
    return check_manifest(replace(request, tuning=tuning), no_progress, never_cancelled)


FILES = 1000  # each listed many times: the entries are many, the files to create few
HELD_AT_FORK_GROWTH = 1 << 20  # bytes the 90,000 more entries may add to what exists at the fork
PEAK_CEILING = 8 << 20  # the whole check's peak at 100,000 entries: a byte a verdict, 1 MiB ranges (2 MB)


def measure(tree: Path, manifest: Path, entries: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    digests = [hashlib.sha256(b"%d" % i).hexdigest() for i in range(FILES)]
    with manifest.open("w") as out:
        for i in range(entries):
            out.write(f"{digests[i % FILES]}  d{i % FILES // 100}/f{i % FILES:04d}\n")
    held: list[int] = []
    start = fanout.FanOut.start

    def start_and_note(fan: fanout.FanOut) -> None:
        held.append(tracemalloc.get_traced_memory()[0])
        start(fan)

    monkeypatch.setattr(fanout.FanOut, "start", start_and_note)
    args = {"algorithm": "auto", "report_new": False, "exclude": [], "one_file_system": True}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = verified(
            Source(str(manifest), path=os.fsencode(manifest)),
            os.fsencode(tree),
            args,
            PathPolicy(),
            1,
        )
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert result.stopped is None and {c.status for c in result.checked} == {"OK"}
    assert len(result.checked) == entries and len(held) == 1
    return held[0] - before, peak


@pytest.mark.slow  # a 100,000-line manifest checked under tracemalloc
def test_memory_at_the_fork_and_at_its_peak_barely_grows_from_ten_thousand_to_a_hundred_thousand_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "tree"
    for i in range(FILES):
        directory = tree / f"d{i // 100}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{i:04d}").write_bytes(b"%d" % i)
    held_small, peak_small = measure(tree, tmp_path / "small.SHA256SUMS", 10_000, monkeypatch)
    held_big, peak_big = measure(tree, tmp_path / "big.SHA256SUMS", 100_000, monkeypatch)
    assert held_big - held_small < HELD_AT_FORK_GROWTH, f"at the fork: {held_small:,} -> {held_big:,} bytes"
    assert peak_big < PEAK_CEILING, f"peak: {peak_small:,} -> {peak_big:,} bytes"
