"""An integrity baseline of a tree nested deeper than the descriptors a process may hold: every file
hashed is recorded, and one still there is not called removed (the common soft limit of 1,024)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sysmcp.engine.opens import Parents
from sysmcp.engine.walk import WalkOptions
from sysmcp.history.compare import _there_now
from sysmcp.history.recording import baseline_of, series_of
from tests.deep_trees import DEPTH, nest, put, under_limit

DIGEST = "0" * 64


def test_a_file_deeper_than_the_descriptor_limit_is_in_the_baseline_and_still_there(deep_path: Path) -> None:
    levels = nest(deep_path, DEPTH)
    deepest = f"{levels[-1]}/f"
    put(deep_path, deepest, b"deepest")
    base = os.fsencode(deep_path)
    manifest = f"{DIGEST}  {levels[0]}/g\n{DIGEST}  {deepest}\n".encode()
    put(deep_path, f"{levels[0]}/g", b"shallow")

    def recorded() -> list[str]:
        baseline = baseline_of(series_of(base, WalkOptions()), base, manifest, "sha256", False, 1.0)
        return sorted(name.decode()[-3:] for name in baseline.files)

    def still_there() -> bool:
        with Parents() as parents:
            return _there_now(parents, base, deepest.encode()) == stat.S_IFREG

    assert under_limit(recorded) == str(["d/f", "d/g"])
    assert under_limit(still_there) == "True"


def test_a_file_no_descriptor_was_left_to_reach_is_not_called_gone(deep_path: Path) -> None:
    """Out of descriptors on the way to a baseline's file tells nothing of it: not removed."""
    levels = nest(deep_path, 40)
    put(deep_path, f"{levels[-1]}/f", b"deepest")
    spare = os.dup(0)
    os.close(spare)

    def still_there() -> bool:
        with Parents() as parents:
            return _there_now(parents, os.fsencode(deep_path), f"{levels[-1]}/f".encode()) == stat.S_IFREG

    assert under_limit(still_there, spare + 2) == "True"
