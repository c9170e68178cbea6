"""A walk that runs out of file descriptors (the process's limit met for any reason: a low ``ulimit -n``,
other calls holding theirs) stops there with a partial result that says so, never a directory counted
unreadable or gone, nor totals that look complete."""

from __future__ import annotations

import json
import os
from pathlib import Path

from sysmcp.engine.walk import Scanner, SkipCounter, SubtreeTotals, WalkOptions
from tests.deep_trees import nest, put, under_limit
from tests.profile import needs_proc

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


def test_a_split_walk_reads_a_chain_deeper_than_its_descriptors_in_full(deep_path: Path) -> None:
    """Where the walk is split (``Sharing.split_after_s`` passed, here at once), the split reads the waiting
    chain one directory at a time from the root, holding two or three descriptors: a tree the unsplit walk
    runs out of descriptors in is counted in full, the better answer, never a partial one. (The servers the
    wire tests start under a lowered limit walk in one process, so theirs run out every time.)"""
    from sysmcp.engine.parallel import Sharing
    from sysmcp.engine.usage import UsageRequest, scan_usage

    levels = nest(deep_path, 200)
    put(deep_path, f"{levels[-1]}/f", b"deepest")
    limit = lowest_free_descriptor() + ROOM

    def walk(sharing: Sharing) -> str:
        request = UsageRequest(0, 0, 1, True, 0, 60.0, root=os.fsencode(deep_path))
        usage = scan_usage(request, sharing=sharing)
        return json.dumps([usage.stopped, usage.totals.files if usage.totals is not None else -1])

    split = json.loads(under_limit(lambda: walk(Sharing(processes=2, split_after_s=0.0)), limit))
    assert split == [None, 1]
    stopped, files = json.loads(under_limit(lambda: walk(Sharing(processes=1)), limit))
    assert stopped is not None and f"limit of {limit:,}" in stopped and files == 0


@needs_proc
def test_descriptors_other_threads_close_before_the_count_do_not_make_our_emfile_the_filesystem_s(
    tmp_path: Path,
) -> None:
    """The walk's limit is met listing the root; before the count is taken, other threads close many
    descriptors (the hook on the count does it, as they would): the count then shows room, which read
    the walk's own EMFILE as the filesystem's refusal (the root a ``filesystem_error``, nothing below
    seen). Opening once more tells: it succeeds, and the walk goes on."""
    from sysmcp import platform

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x")
    (tmp_path / "g").write_bytes(b"y")
    limit = 256

    def walk() -> str:
        fillers = []
        try:
            while True:
                fillers.append(os.dup(0))
        except OSError:
            pass
        os.close(fillers.pop())  # one left: the root's; listing it takes one more
        real = platform.descriptors_in_use

        def other_threads_close_theirs_first() -> int | None:
            while len(fillers) > limit // 2:
                os.close(fillers.pop())
            return real()

        platform.descriptors_in_use = other_threads_close_theirs_first
        skipped = SkipCounter()
        scanner = Scanner(os.fsencode(tmp_path), WalkOptions(), skipped, mounts=[])
        root = [e for e in scanner.events() if isinstance(e, SubtreeTotals) and e.relative == ""]
        platform.descriptors_in_use = real
        return json.dumps([scanner.stopped, skipped.as_dict(), root[0].files])

    stopped, skipped, files = json.loads(under_limit(walk, limit))
    assert stopped is None
    assert skipped == {}
    assert files == 2
