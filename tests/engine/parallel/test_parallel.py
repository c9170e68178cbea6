"""The one parallel walk driver with the smallest engine: count the files each process lists."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.parallel import ParallelWalk, SharedCounters, Sharing, run_shared
from sysmcp.engine.parallel import _fork as fanout
from sysmcp.engine.walk import Budget, Listing, Scanner, ScanStopped, SkipCounter, SubtreeTotals, WalkOptions
from tests.profile import needs_fork

FILES = 30 * 4


def build(root: Path) -> None:
    for top in range(6):
        for sub in range(5):
            directory = root / f"d{top}" / f"s{sub}"
            directory.mkdir(parents=True)
            for i in range(4):
                (directory / f"f{i}").write_bytes(b"x")


def count_files(root: Path, sharing: Sharing, *, die_in_child: bool = False) -> tuple[int, int, list[Any]]:
    """(files listed here and by the children, subtrees handed out, the children's parts)."""
    budget = Budget(60)
    scanner = Scanner(os.fsencode(root), WalkOptions(), SkipCounter(), budget)
    seen = [0]
    rewalking = False

    def consume(event: Listing | SubtreeTotals, _: Scanner) -> None:
        if type(event) is Listing:
            seen[0] += len(event.files)

    def work(claim: Callable[[], int | None], progress: SharedCounters, in_child: bool) -> dict[str, Any]:
        files, done = 0, []
        if die_in_child and not in_child and not rewalking:
            return {"files": 0, "done": []}  # leaves every subtree to the child, which dies with one
        while (index := claim()) is not None:
            if in_child and die_in_child:
                os._exit(3)  # dies holding a subtree it never reports
            sub = scanner.spawn(parallel.subtrees[index], SkipCounter(), budget, None)
            for event in sub.events():
                if type(event) is Listing:
                    files += len(event.files)
            done.append(index)
        return {"files": files, "done": done}

    parallel = ParallelWalk(scanner, budget, sharing, work)
    with parallel:
        assert parallel.walk(consume) is None
        if parallel.fan is None:
            return seen[0], 0, []
        here = parallel.here()
        parts = parallel.children()
        total = seen[0] + here["files"] + sum(part["files"] for part in parts if part is not None)
        reported = set(here["done"]).union(*(part["done"] for part in parts if part is not None))
        lost = [i for i in range(len(parallel.subtrees)) if i not in reported]
        if lost:
            rewalking = True
            total += parallel.again(lost)["files"]
        return total, len(parallel.subtrees), parts


def test_one_process_walks_everything_itself_and_forks_nothing(tmp_path: Path) -> None:
    build(tmp_path)
    assert count_files(tmp_path, Sharing(processes=1, split_after_s=0)) == (FILES, 0, [])


@needs_fork
def test_a_shared_walk_sees_every_file_once(tmp_path: Path) -> None:
    build(tmp_path)
    total, handed_out, parts = count_files(tmp_path, Sharing(processes=2, split_after_s=0, pieces=4))
    assert handed_out > 1 and len(parts) == 1 and parts[0] is not None
    assert total == FILES


@needs_fork
def test_the_subtrees_of_a_child_that_died_are_walked_again_here(tmp_path: Path) -> None:
    build(tmp_path)
    total, handed_out, parts = count_files(
        tmp_path, Sharing(processes=2, split_after_s=0, pieces=4), die_in_child=True
    )
    assert handed_out > 1 and parts == [None]
    assert total == FILES  # every subtree the child took or never reached was walked here instead


def test_a_walk_that_never_runs_long_never_splits(tmp_path: Path) -> None:
    build(tmp_path)
    assert count_files(tmp_path, Sharing(processes=4, split_after_s=3600)) == (FILES, 0, [])


@pytest.mark.parametrize("processes", [None, 2])
def test_the_sharing_knobs_default_to_the_tuned_values(processes: int | None) -> None:
    sharing = Sharing(processes=processes)
    assert (sharing.split_after_s, sharing.pieces, sharing.waits_for_gifts) == (0.01, 32, False)


def shared_walk(root: Path, sharing: Sharing) -> tuple[int, int, int]:
    """(files listed in all, subtrees walked through ``walk_claimed``, subtrees handed out)."""
    budget = Budget(60)
    scanner = Scanner(os.fsencode(root), WalkOptions(), SkipCounter(), budget)
    seen = [0]

    def consume(event: Listing | SubtreeTotals, _: Scanner) -> None:
        if type(event) is Listing:
            seen[0] += len(event.files)

    def work(claim: Callable[[], int | None], progress: SharedCounters, in_child: bool) -> list[Any]:
        seen[0] = 0  # a child counts its own files from here (the parent's count is in its copy)
        part = parallel.walk_claimed(claim, SkipCounter(), budget, consume, in_child)
        assert ("skipped" in part) is in_child  # a child's skips come back with its part
        return [seen[0], part["subtrees"], part["stopped"]]

    parallel = ParallelWalk(scanner, budget, sharing, work)
    with parallel:
        assert parallel.walk(consume) is None
        walked_before = seen[0]
        if parallel.fan is None:
            return walked_before, 0, 0
        here = parallel.here()
        parts = [here, *parallel.children()]
    assert all(part is not None and part[2] is None for part in parts)
    return (
        walked_before + sum(part[0] for part in parts),
        sum(part[1] for part in parts),
        len(parallel.subtrees),
    )


@needs_fork
def test_walk_claimed_walks_every_claimed_subtree_once_in_every_process(tmp_path: Path) -> None:
    build(tmp_path)
    files, walked, handed_out = shared_walk(tmp_path, Sharing(processes=2, split_after_s=0, pieces=4))
    assert handed_out > 1 and walked == handed_out
    assert files == FILES


@needs_fork
def test_walk_claimed_stops_at_the_subtree_whose_consumer_stopped_the_walk(tmp_path: Path) -> None:
    build(tmp_path)
    budget = Budget(60)
    scanner = Scanner(os.fsencode(tmp_path), WalkOptions(), SkipCounter(), budget)

    def enough(event: Listing | SubtreeTotals, _: Scanner) -> None:
        raise ScanStopped("enough")

    def work(claim: Callable[[], int | None], progress: SharedCounters, in_child: bool) -> Any:
        if in_child:
            return None  # claims nothing: every subtree is this process's to claim
        return parallel.walk_claimed(claim, SkipCounter(), budget, enough)

    parallel = ParallelWalk(scanner, budget, Sharing(processes=2, split_after_s=0, pieces=4), work)
    with parallel:
        parallel.walk(lambda event, _: None)
        assert parallel.fan is not None and len(parallel.subtrees) > 1
        here = parallel.here()
        assert here == {"stopped": "enough", "subtrees": 1}  # the first subtree claimed, then no other
        assert parallel.children() == [None]
        died = "a counting process ended unexpectedly"
        assert parallel.stopped_early([here, None], died, SkipCounter()) == "enough"
        assert parallel.stopped_early([{"stopped": None, "subtrees": 1}, None], died, SkipCounter()) == died
        unclaimed = [{"stopped": None, "subtrees": 1}]  # the other subtrees: walked by nobody
        assert parallel.stopped_early(unclaimed, died, SkipCounter()) == budget.reason


def squares(claim: Callable[[], int | None], progress: SharedCounters, in_child: bool) -> list[Any]:
    done = []
    while (task := claim()) is not None:
        done.append([task, task * task, in_child])
    return done


@pytest.mark.parametrize("processes", [1, pytest.param(3, marks=needs_fork)])
def test_run_shared_does_every_task_once_this_process_first(processes: int) -> None:
    parts = run_shared(40, processes, squares, Budget(60))
    assert len(parts) == processes
    assert all(in_child is False for _, _, in_child in parts[0])
    assert all(in_child is True for part in parts[1:] for _, _, in_child in part)
    done = sorted((task, square) for part in parts for task, square, _ in part)
    assert done == [(task, task * task) for task in range(40)]


@needs_fork
def test_run_shared_gives_none_for_a_child_that_died() -> None:
    def dies_in_child(claim: Callable[[], int | None], progress: SharedCounters, in_child: bool) -> list[Any]:
        if in_child:
            os._exit(3)
        return squares(claim, progress, in_child)

    parts = run_shared(8, 2, dies_in_child, Budget(60))
    assert parts[1] is None
    assert parts[0] is not None and {task for task, _, _ in parts[0]} <= set(range(8))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_forked_is_false_in_this_process_and_true_in_any_forked_child() -> None:
    assert fanout.forked() is False
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if fanout.forked() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert fanout.forked() is False
