"""dir_usage shared between processes: same answer as one walk, no child left behind, no task lost."""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sysmcp import platform
from sysmcp.engine.parallel import MAX_TASKS, FanOut, SharedCounters, Sharing, available_processes
from sysmcp.engine.parallel._fork import cpu_quota
from sysmcp.engine.usage import Usage, UsageRequest, scan_usage
from sysmcp.engine.walk import SkipCounter
from tests.profile import needs_fork

REQUEST = UsageRequest(
    top_files=1000, top_directories=10_000, max_depth=2, by_disk=False, min_size=0, timeout_s=60, root=b""
)


def du(root: Path, flag: str) -> int:
    out = subprocess.run(["du", "-sx", flag, os.fsencode(root)], capture_output=True, check=True)
    return int(out.stdout.split()[0])


def build_linked_tree(root: Path) -> int:
    """12 top directories, each with its own files and a name for each of 20 shared inodes.

    Returns how many distinct regular files (inodes) the tree has.
    """
    (root / "first").write_bytes(b"1")  # the root's listing comes first: the split happens before any link
    shared = root / "shared"
    shared.mkdir()
    for i in range(20):
        (shared / f"s{i}").write_bytes(b"s" * (5000 + 97 * i))
    for top in range(12):
        for sub in range(3):
            directory = root / f"top{top:02d}" / f"sub{sub}"
            directory.mkdir(parents=True)
            for i in range(4):
                (directory / f"f{i}").write_bytes(b"f" * (100 * top + 10 * sub + i + 1))
        for i in range(20):
            os.link(shared / f"s{i}", root / f"top{top:02d}" / f"link{i}")
    return 1 + 20 + 12 * 3 * 4


def shared_scan(root: Path, **overrides: Any) -> tuple[Usage, SkipCounter]:
    settings: dict[str, Any] = {"processes": 3, "split_after_s": 0.0, "pieces": 2, **overrides}
    usage = scan_usage(replace(REQUEST, root=os.fsencode(root)), sharing=Sharing(**settings))
    return usage, usage.skipped


def test_hard_links_seen_by_several_processes_are_counted_once_like_du(tmp_path: Path) -> None:
    distinct = build_linked_tree(tmp_path)
    usage, skipped = shared_scan(tmp_path)
    assert usage.processes == 3
    assert usage.totals is not None and usage.stopped is None
    assert usage.totals.apparent == du(tmp_path, "-b")
    assert usage.totals.disk == du(tmp_path, "-B1")
    assert usage.totals.files == distinct
    assert usage.eligible_files == distinct
    inodes = [os.lstat(tmp_path / relative).st_ino for _, _, relative in usage.files]
    assert len(inodes) == len(set(inodes)) == distinct
    assert skipped.as_dict() == {}


def test_a_shared_scan_gives_the_same_lists_and_counts_as_one_process(tmp_path: Path) -> None:
    build_linked_tree(tmp_path)
    alone, _ = shared_scan(tmp_path, processes=1)
    shared, _ = shared_scan(tmp_path)
    assert (alone.processes, shared.processes) == (1, 3)
    assert shared.totals == alone.totals
    assert shared.entries == alone.entries
    # Which name of a shared inode is listed may differ; the sizes, in order, may not.
    assert [row[:2] for row in shared.files] == [row[:2] for row in alone.files]
    # Which directory a shared inode counts in follows the walk's order (as with du): not top*, nor
    # shared/ itself, whose files processes that give work away to each other may reach first.
    unshared = {row for row in alone.directories if not row[2].startswith(("top", "shared"))}
    assert unshared <= set(shared.directories)
    assert sum(row[0] for row in shared.directories if row[4] == 1) == sum(
        row[0] for row in alone.directories if row[4] == 1
    )
    assert shared.eligible_directories == alone.eligible_directories


def test_subtrees_of_a_child_that_died_are_walked_again_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_linked_tree(tmp_path)
    alone, _ = shared_scan(tmp_path, processes=1)
    monkeypatch.setattr(FanOut, "_child", lambda self, slot, fd: os._exit(1))
    shared, _ = shared_scan(tmp_path)
    assert shared.processes == 1  # no child reported anything
    assert shared.stopped is None
    assert shared.totals == alone.totals
    assert [row[:2] for row in shared.files] == [row[:2] for row in alone.files]


class Cancelled(Exception):
    pass


def test_a_cancelled_shared_scan_kills_and_reaps_every_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_linked_tree(tmp_path)
    forked: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    def cancelled_once_forked() -> None:
        if forked:
            raise Cancelled

    monkeypatch.setattr(os, "fork", fork)
    ticks = itertools.count()
    with pytest.raises(Cancelled):
        scan_usage(
            replace(REQUEST, root=os.fsencode(tmp_path)),
            cancel=cancelled_once_forked,
            clock=lambda: next(ticks) * 0.01,  # every checkpoint asks (they are throttled to 2 ms)
            sharing=Sharing(3, split_after_s=0.0, pieces=2),
        )
    assert len(forked) == 2
    for pid in forked:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # already reaped: no zombie, no orphan still walking


def test_fan_out_gives_every_task_to_exactly_one_process_and_shares_progress() -> None:
    def work(claim: Any, progress: SharedCounters, in_child: bool) -> list[int]:
        claimed = []
        while (task := claim()) is not None:
            claimed.append(task)
        progress.set(len(claimed), 7)
        return claimed

    with FanOut(200, 3, work) as fan:
        fan.start()
        here = fan.run_here()
        children = fan.collect(lambda: None)
        others = fan.progress.others()
    assert len(children) == 2 and all(part is not None for part in children)
    everything = here + [task for part in children if part is not None for task in part]
    assert sorted(everything) == list(range(200))
    assert others == (200 - len(here), 14)


def test_fan_out_reports_a_child_that_crashed_as_none(monkeypatch: pytest.MonkeyPatch) -> None:
    def work(claim: Any, progress: SharedCounters, in_child: bool) -> str:
        if in_child:
            raise RuntimeError("boom")
        while claim() is not None:
            pass
        return "here"

    with FanOut(10, 2, work) as fan:
        fan.start()
        assert fan.run_here() == "here"
        assert fan.collect(lambda: None) == [None]


def test_a_worker_holds_none_of_the_pipes_of_another_scan_running_at_once() -> None:
    def open_pipes(claim: Any, progress: SharedCounters, in_child: bool) -> list[str]:
        while claim() is not None:
            pass
        links = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # the descriptor listdir itself used is gone
                links.append(os.readlink(f"/proc/self/fd/{fd}"))
        return [link for link in links if link.startswith("pipe:")]

    def idle(claim: Any, progress: SharedCounters, in_child: bool) -> str:
        while claim() is not None:
            pass
        return "idle"

    with FanOut(4, 2, idle) as first:
        first.start()  # its child and result pipe stay open until collected
        theirs = {f"pipe:[{os.fstat(fd).st_ino}]" for fd in (first._queue_r, *first._children.values())}
        with FanOut(4, 2, open_pipes) as second:
            second.start()
            second.run_here()
            (seen,) = second.collect(lambda: None)
        first.run_here()
        assert first.collect(lambda: None) == ["idle"]
    assert seen is not None and len(seen) >= 2  # its own queue and result pipe
    assert not theirs & set(seen)


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("max 100000\n", None),
        ("100000 100000\n", 1),
        ("150000 100000\n", 2),
        ("50000 100000\n", 1),
        ("", None),
    ],
)
def test_a_container_cpu_quota_bounds_the_processes(tmp_path: Path, text: str, cpus: int | None) -> None:
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text(text)
    assert cpu_quota(str(cpu_max)) == cpus
    assert cpu_quota(str(tmp_path / "missing")) is None


@needs_fork
def test_the_environment_sets_the_number_of_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYSMCP_SCAN_PROCESSES", "1")
    assert available_processes() == 1
    monkeypatch.setenv("SYSMCP_SCAN_PROCESSES", "3")
    assert available_processes() == 3
    monkeypatch.setenv("SYSMCP_SCAN_PROCESSES", "many")  # ignored: the usable CPUs decide
    assert 1 <= available_processes() <= 4


def test_where_fork_is_not_safe_a_walk_uses_one_process_whatever_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SYSMCP_SCAN_PROCESSES", "3")
    assert available_processes() == (3 if platform.fork_is_safe() else 1)
    monkeypatch.setattr(platform, "fork_is_safe", lambda: False)  # macOS, as platform.py answers there
    assert available_processes() == 1


def test_a_child_stuck_past_the_give_up_time_is_killed_and_reported_as_none() -> None:
    never_written, keep_open = os.pipe()

    def stuck(claim: Any, progress: SharedCounters, in_child: bool) -> str:
        while claim() is not None:
            pass
        if in_child:
            os.read(never_written, 1)  # blocks: nobody ever writes (as a call stuck in the kernel)
        return "here"

    try:
        with FanOut(4, 2, stuck) as fan:
            fan.start()
            assert fan.run_here() == "here"
            assert fan.collect(lambda: None, give_up_at=time.monotonic()) == [None]
    finally:
        os.close(never_written)
        os.close(keep_open)


def test_more_waiting_directories_than_tasks_are_walked_here_with_the_same_result(tmp_path: Path) -> None:
    (tmp_path / "first").write_bytes(b"1")
    for i in range(MAX_TASKS + 300):
        (tmp_path / f"d{i:05d}").mkdir()
        (tmp_path / f"d{i:05d}" / "f").write_bytes(b"x" * (i % 50))
    alone, _ = shared_scan(tmp_path, processes=1)
    shared, _ = shared_scan(tmp_path, processes=2, pieces=1)
    assert shared.processes == 2
    assert shared.totals == alone.totals
    assert shared.totals is not None and shared.totals.apparent == du(tmp_path, "-b")
    assert shared.eligible_directories == alone.eligible_directories == MAX_TASKS + 300


def test_a_directory_split_at_the_fan_out_with_more_subdirectories_than_tasks_loses_none(
    tmp_path: Path,
) -> None:
    # The split reads the one waiting directory to cut it finer: its subdirectories past the task
    # queue's bound are walked all the same, none counted as vanished.
    (tmp_path / "first").write_bytes(b"1")
    for i in range(MAX_TASKS + 300):
        (tmp_path / "wide" / f"d{i:05d}").mkdir(parents=True)
        (tmp_path / "wide" / f"d{i:05d}" / "f").write_bytes(b"x" * (i % 50 + 1))
    alone, _ = shared_scan(tmp_path, processes=1)
    shared, skipped = shared_scan(tmp_path, processes=2, pieces=64)
    assert shared.processes == 2 and shared.stopped is None
    assert skipped.as_dict() == {}
    assert shared.totals == alone.totals
    assert shared.totals is not None and shared.totals.apparent == du(tmp_path, "-b")
    assert shared.directories == alone.directories
    assert shared.eligible_directories == alone.eligible_directories


def test_a_task_queue_longer_than_a_pipe_page_is_refused() -> None:
    with pytest.raises(ValueError, match="at most"):
        FanOut(MAX_TASKS + 1, 2, lambda claim, progress, in_child: None)


def build_lopsided_tree(root: Path) -> None:
    """One subtree holds almost everything (as /work may on a whole disk), with hard links: two names in
    one directory everywhere, and names in big/a0 of files in shared (which name counts depends on the
    order of the walk, as with du)."""
    (root / "first").write_bytes(b"1")
    shared = root / "shared"
    shared.mkdir()
    for i in range(5):
        (shared / f"s{i}").write_bytes(b"s" * (3000 + i))
    for a in range(4):
        for b in range(15):
            directory = root / "big" / f"a{a}" / f"b{b:02d}"
            directory.mkdir(parents=True)
            for i in range(20):
                (directory / f"f{i}").write_bytes(b"x" * (a * 1000 + b * 10 + i))
            os.link(directory / "f0", directory / "twin")
            if a == 0:
                os.link(shared / f"s{b % 5}", directory / "link")
    (root / "small").mkdir()
    (root / "small" / "f").write_bytes(b"y" * 10)


@pytest.mark.parametrize("max_depth", [1, 3])
def test_a_walk_left_with_one_big_subtree_gives_parts_of_it_away_with_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_depth: int
) -> None:
    build_lopsided_tree(tmp_path)
    given: list[int] = []
    real_given = FanOut.given

    def count_given(fan: FanOut) -> dict[int, Any]:
        found = real_given(fan)
        given.append(len(found))
        return found

    monkeypatch.setattr(FanOut, "given", count_given)
    request = replace(REQUEST, max_depth=max_depth, root=os.fsencode(tmp_path))

    def scan(processes: int) -> Usage:
        return scan_usage(
            request,
            sharing=Sharing(processes, split_after_s=0.0, pieces=1),
        )

    alone, shared = scan(1), scan(3)
    assert given and given[0] > 0  # whoever walked big/ gave some of it to the others
    assert shared.processes == 3 and shared.stopped is None
    assert shared.totals == alone.totals
    assert shared.totals is not None and shared.totals.apparent == du(tmp_path, "-b")
    assert shared.totals.disk == du(tmp_path, "-B1")
    assert shared.entries == alone.entries

    def order_free(usage: Usage) -> list[tuple[int, int, str, int, int]]:
        rows = usage.directories
        return sorted(row for row in rows if row[2] != "big" and not row[2].startswith(("big/a0", "shared")))

    assert order_free(shared) == order_free(alone)
    assert sum(row[0] for row in shared.directories if row[4] == 1) == sum(
        row[0] for row in alone.directories if row[4] == 1
    )
    assert shared.eligible_directories == alone.eligible_directories
    assert [row[:2] for row in shared.files] == [row[:2] for row in alone.files]
    assert shared.eligible_files == alone.eligible_files


def test_tasks_given_while_the_work_runs_are_claimed_once_each() -> None:
    def work(claim: Any, progress: SharedCounters, in_child: bool) -> list[Any]:
        got = []
        while (task := claim()) is not None:
            if task < 4:
                assert fan.give([[task, n, "x" * n] for n in range(3)]) == 3
                got.append(task)
            else:
                got.append(fan.record(task))
        return got

    with FanOut(4, 2, work) as fan:
        fan.start()
        here = fan.run_here()
        children = fan.collect(lambda: None)
        records = fan.given()
    assert children[0] is not None
    everything = here + children[0]
    assert sorted(t for t in everything if isinstance(t, int)) == [0, 1, 2, 3]
    claimed = sorted(tuple(t) for t in everything if not isinstance(t, int))
    assert claimed == sorted((task, n, "x" * n) for task in range(4) for n in range(3))
    assert sorted(tuple(r) for r in records.values()) == claimed


def until(condition: Any, seconds: float = 30.0) -> bool:
    """Spin until ``condition()`` holds (True) or ``seconds`` pass (False): waits on state, not on time."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        os.sched_yield()
    return True


def test_a_process_that_runs_out_of_tasks_walks_what_one_still_walking_gives_away() -> None:
    # Task 0 is the big one: its walker waits until the other process has found the queue empty,
    # then gives part of its work away. That part must go to the idle process, not back to the giver
    # once it is done (which is what happens when an idle process leaves at once).
    def work(claim: Any, progress: SharedCounters, in_child: bool) -> list[Any]:
        got: list[Any] = []
        while (task := claim()) is not None:
            if task == 0:
                assert until(lambda: fan.walking() == 1), "the other process never ran out"
                assert fan.give([["part"]]) == 1
                assert until(lambda: fan.waiting() == 0), "nobody took the gift"
            got.append(task if task < 2 else fan.record(task))
        return got

    with FanOut(2, 2, work, waits_for_gifts=True) as fan:
        fan.start()
        here = fan.run_here(lambda: True)
        (child,) = fan.collect(lambda: None)
    assert child is not None
    giver, taker = (here, child) if 0 in here else (child, here)
    assert sorted(t for t in giver + taker if isinstance(t, int)) == [0, 1]
    assert ["part"] in taker and ["part"] not in giver


def test_a_process_that_stops_without_claiming_again_does_not_keep_the_others_waiting() -> None:
    # As a walk does at its deadline: the parent stops while the child waits for its gifts. The child
    # must then hand its result in, not wait until it is given up and killed (its counts lost).
    def work(claim: Any, progress: SharedCounters, in_child: bool) -> str:
        assert claim() is not None
        if in_child:
            # Not before the parent holds the other task: a child that claimed both (a parent slow to
            # start, on a loaded machine) would leave the parent nothing to stop with.
            assert until(lambda: fan.waiting() == 0), "the parent never claimed its task"
            while claim() is not None:
                pass
            return "child"
        assert until(lambda: fan.walking() == 1), "the child never ran out"
        return "here"  # stopped: no claim() again

    with FanOut(2, 2, work, waits_for_gifts=True) as fan:
        fan.start()
        assert fan.run_here(lambda: True) == "here"
        assert fan.collect(lambda: None, give_up_at=time.monotonic() + 30) == ["child"]


def test_a_child_that_dies_walking_does_not_keep_the_parent_waiting_for_its_gifts() -> None:
    gave_up: list[bool] = []

    def work(claim: Any, progress: SharedCounters, in_child: bool) -> str:
        task = claim()
        if in_child:
            os._exit(3)  # dies with its task unfinished: it will never give anything
        assert task is not None and until(lambda: fan.waiting() == 0), "the child never claimed"
        while claim() is not None:
            pass
        return "here"

    def keep_waiting() -> bool:
        if time.monotonic() > started + 30:
            gave_up.append(True)
            return False
        return True

    with FanOut(2, 2, work, waits_for_gifts=True) as fan:
        started = time.monotonic()
        fan.start()
        assert fan.run_here(keep_waiting) == "here"
        assert fan.collect(lambda: None) == [None]
    assert not gave_up  # it saw the child had died, instead of waiting until it was told to stop


def test_a_shared_scan_that_gives_work_away_and_runs_out_of_time_is_partial_and_never_overcounts(
    tmp_path: Path,
) -> None:
    build_lopsided_tree(tmp_path)
    request = replace(REQUEST, max_depth=3, timeout_s=1.0, root=os.fsencode(tmp_path))
    whole = scan_usage(request, sharing=Sharing(1))
    assert whole.totals is not None
    for budget_ticks in (40, 120, 400):
        ticks = itertools.count()

        def clock(ticks: Iterator[int] = ticks, step: float = 1.0 / budget_ticks) -> float:
            return next(ticks) * step  # each process counts its own ticks

        usage = scan_usage(
            request,
            clock=clock,
            sharing=Sharing(3, split_after_s=0.0, pieces=1),
        )
        assert usage.totals is not None
        if usage.stopped is not None:
            assert usage.totals.partial
        assert usage.totals.apparent <= whole.totals.apparent
        assert usage.totals.files <= whole.totals.files
        assert usage.totals.dirs <= whole.totals.dirs
        full = {row[2]: row for row in whole.directories}
        for row in usage.directories:
            assert row[0] <= full[row[2]][0] + 5 * 3004  # a shared inode may count here, not in shared/
