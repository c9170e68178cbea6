"""A walk that runs out of file descriptors (the process's limit met for any reason: a low ``ulimit -n``,
other calls holding theirs) stops there with a partial result that says so, never a directory counted
unreadable or gone, nor totals that look complete."""

from __future__ import annotations

import json
import os
from pathlib import Path

from sysmcp.engine.walk import Scanner, SkipCounter, SubtreeTotals, WalkOptions
from tests.deep_trees import nest, put, under_limit

#: Descriptors left to the walk above those the test process holds: fewer than the walk's budget (64).
ROOM = 24


def lowest_free_descriptor() -> int:
    fd = os.dup(0)
    os.close(fd)
    return fd


def test_a_walk_out_of_descriptors_stops_partial_and_names_the_limit(deep_path: Path) -> None:
    levels = nest(deep_path, 200)
    put(deep_path, f"{levels[-1]}/f", b"deepest")
    limit = lowest_free_descriptor() + ROOM

    def walk() -> str:
        skipped = SkipCounter()
        scanner = Scanner(os.fsencode(deep_path), WalkOptions(), skipped)
        root = [e for e in scanner.events() if isinstance(e, SubtreeTotals) and e.relative == ""]
        return json.dumps([scanner.stopped, skipped.as_dict(), len(root), root[0].dirs if root else -1])

    stopped, skipped, roots, dirs = json.loads(under_limit(walk, limit))
    assert stopped is not None and "out of file descriptors" in stopped and f"limit of {limit:,}" in stopped
    assert skipped == {}  # nothing called unreadable or vanished
    assert roots == 1 and 0 < dirs < 200  # the root's totals: what was seen, marked partial by stopped


def test_a_totals_walk_out_of_descriptors_stops_partial_never_calls_a_directory_unreadable(
    deep_path: Path,
) -> None:
    """``walk_totals`` (container_usage's reconciliation) holds a descriptor per level: a tree deeper than
    the limit gave totals that looked complete, less everything below, with one directory 'unreadable'."""
    from sysmcp.engine.walk import walk_totals

    levels = nest(deep_path, 200)
    put(deep_path, f"{levels[-1]}/f", b"deepest")
    limit = lowest_free_descriptor() + ROOM

    def walk() -> str:
        _, _, stopped, skipped = walk_totals(str(deep_path), 60, lambda entries, apparent: None, lambda: None)
        return json.dumps([stopped, skipped.as_dict()])

    stopped, skipped = json.loads(under_limit(walk, limit))
    assert stopped is not None and f"limit of {limit:,}" in stopped
    assert skipped == {}
