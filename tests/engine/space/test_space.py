"""disk_usage explain without root or loop devices: the engine's parts on a real directory, a walk that
runs out of time, a process that ends between being listed and being read, a pseudo filesystem, and
the words and schema of the answer."""

from __future__ import annotations

import itertools
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import psutil
import pytest

from sysmcp.engine.calls import never_cancelled, no_progress
from sysmcp.engine.faults import WrongKind
from sysmcp.engine.mounts import Figures, FsStats, Mount, MountTable, statvfs_usage
from sysmcp.engine.space import Accounting, HeldOpen, Snapshots, explain
from sysmcp.engine.space._held import snapshots_of
from sysmcp.engine.space._space import (
    DeletedScan,
    ExplainRequest,
    covered_points,
    deleted_provider,
    walk_filesystem,
    walk_starts,
)
from sysmcp.protocol.failures import ArgumentError
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.dir_usage import INPUT_SCHEMA as DU_INPUT
from sysmcp.tools.dir_usage import handle as dir_usage
from sysmcp.tools.disk_explain import answer
from sysmcp.tools.disk_usage import TOOL, DiskUsage
from sysmcp.tools.registry import ToolContext
from sysmcp.tools.typed import iso_utc, to_json
from tests.engine.recorded import GiB, lv, lvs_report
from tests.harness import tool_context
from tests.profile import UNDER_POSIX_PROFILE, needs_fork, needs_proc
from tests.tools.test_what_changed import Clock
from tests.tools.test_what_changed import clock as clock  # the history, on a clock of its own

MiB = 1 << 20


class Peer:
    async def notify(self, method: str, params: dict[str, Any]) -> None:
        pass


def render(acc: Accounting) -> tuple[str, dict[str, Any]]:
    """The explain's text and its part of the structured answer, as JSON."""
    text, part = answer(acc)
    return text, to_json(part)


def children() -> set[int]:
    """This process's children now: a test compares before and after (an earlier test's helper may
    still be ending)."""
    return {child.pid for child in psutil.Process().children()}


def context(roots: list[Path] | None = None) -> ToolContext:
    return tool_context(roots)


def planted(tmp_path: Path) -> Path:
    top = tmp_path / "fs"
    (top / "a").mkdir(parents=True)
    for name, size in (("a/one", 3 * MiB), ("two", MiB)):
        with open(top / name, "wb") as handle:
            handle.write(b"x" * size)
            os.fsync(handle.fileno())
    return top


def request_for(
    top: Path,
    used: int,
    deleted: Callable[[Callable[[], None]], DeletedScan] = lambda check: DeletedScan(),
    clock: Callable[[], float] | None = None,
    roots: list[Path] | None = None,
) -> ExplainRequest:
    mount = Mount(str(top), "/dev/fake", "ext4", dev="7:0")
    table = MountTable([Mount("/", "/dev/sda1", "ext4", dev="8:1"), mount])
    fig = Figures.from_stats(
        FsStats(4096, 1 << 20, (1 << 20) - used // 4096, (1 << 20) - used // 4096, 10, 5)
    )
    dev = os.stat(top).st_dev
    extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
    return ExplainRequest(mount, fig, dev, table, deleted, 60.0, roots, **extra)


def test_the_parts_add_up_to_used_and_the_remainder_is_what_is_left(tmp_path: Path) -> None:
    top = planted(tmp_path)
    dev = os.stat(top).st_dev
    held = DeletedScan(
        (
            HeldOpen(str(top / "gone.log"), dev, 2 * MiB, ((812, "nginx"),)),
            HeldOpen("/elsewhere", dev + 1, 5 * MiB, ((9, "other"),)),
        ),
        vanished=1,
    )
    acc = explain(request_for(top, 8 * MiB, lambda check: held), no_progress, never_cancelled)
    walked = acc.walked
    assert 4 * MiB <= walked.disk <= 4 * MiB + 64 * 1024 and walked.files == 2 and walked.stopped is None
    assert acc.deleted.disk == 2 * MiB and [f.path for f in acc.deleted.files] == [str(top / "gone.log")]
    assert acc.remainder == 8 * MiB - walked.disk - 2 * MiB
    text, data = render(acc)
    assert text.startswith(f"Of 8.0 MiB used on {top} (ext4 /dev/fake), 4.0")
    assert "2.0 MiB are 1 deleted file held open by nginx (pid 812)" in text
    assert "(1 process ended while being read)" in text
    assert data["remainder"]["bytes"] == acc.remainder and data["deleted_open"]["processes_vanished"] == 1


def test_a_walk_that_runs_out_of_time_is_partial_and_the_rest_is_not_walked(tmp_path: Path) -> None:
    top = planted(tmp_path)
    ticks = iter(range(0, 10**9, 1000))  # each look at the clock is 1000 s later: the budget is gone at once
    acc = explain(request_for(top, 8 * MiB, clock=lambda: float(next(ticks))), no_progress, never_cancelled)
    assert acc.walked.stopped is not None and "time budget" in acc.walked.stopped
    text, data = render(acc)
    assert text.startswith("PARTIAL RESULT: the walk stopped (time budget of 60 s reached)")
    assert "is not walked" not in text and "not walked" in text.splitlines()[1]
    assert data["partial"] is True and data["remainder"]["not_walked"] is True
    assert "larger timeout_s" in data["remainder"]["next_step"]


def test_a_walk_stopped_within_a_second_says_how_long_it_ran_and_the_largest_timeout_s_to_give(
    tmp_path: Path,
) -> None:
    from sysmcp.tools.explain_budget import EXPLAIN_TIMEOUT

    top = planted(tmp_path)
    ticks = itertools.count(0.0, 0.1)  # each look at the clock is 0.1 s later: a 0.05 s budget goes at once
    request = replace(request_for(top, 8 * MiB, clock=lambda: next(ticks)), timeout_s=0.05)
    acc = explain(request, no_progress, never_cancelled)
    assert acc.walked.stopped is not None and 0 < acc.walked.elapsed < 1, acc.walked
    step = render(acc)[1]["remainder"]["next_step"]
    assert step == (
        f"call again with a larger timeout_s (at most {EXPLAIN_TIMEOUT.maximum:g}; "
        f"the walk stopped after {acc.walked.elapsed:.2f} s)"
    ), step


def test_outside_the_roots_a_held_file_is_counted_but_not_named(tmp_path: Path) -> None:
    top = planted(tmp_path)
    dev = os.stat(top).st_dev
    held = DeletedScan((HeldOpen(str(top / "a" / "secret.log"), dev, MiB, ((1, "daemon"),)),))
    acc = explain(
        request_for(top, 8 * MiB, lambda check: held, roots=[top / "two"]), no_progress, never_cancelled
    )
    assert acc.deleted.disk == MiB and acc.deleted.files == [] and acc.deleted.not_named == 1
    text, _ = render(acc)
    assert "secret.log" not in text and "daemon" not in text and "outside your roots" in text


def test_under_roots_only_the_roots_are_walked_and_the_rest_is_not_looked_at(tmp_path: Path) -> None:
    """The walk of part 1 never leaves the roots: a directory outside them on the same filesystem is
    neither walked nor counted, and its bytes are the remainder, which says so."""
    top = planted(tmp_path)
    acc = explain(request_for(top, 8 * MiB, roots=[top / "a"]), no_progress, never_cancelled)
    assert acc.walked.files == 1 and 3 * MiB <= acc.walked.disk < 4 * MiB  # a/one only, not two
    assert acc.walked.roots_walked == [str(top / "a")]
    text, data = render(acc)
    assert "1. Files reached by a walk of your roots (du -x)" in text
    assert f"dir_usage path={top / 'a'}" in text and f"dir_usage path={top} " not in text
    assert "outside your roots or unexplained" in text
    assert data["files"]["roots_walked"] == [str(top / "a")]


def linked_roots(tmp_path: Path) -> Path:
    """``planted``, with a root ``b`` beside ``a`` holding a second name of ``a/one`` (3 MiB)."""
    top = planted(tmp_path)
    (top / "b").mkdir()
    os.link(top / "a" / "one", top / "b" / "one")
    return top


def du_of(*roots: Path) -> tuple[int, int]:
    """(bytes on disk, regular files) that ``du -x`` over all of ``roots`` counts: each inode once."""
    out = subprocess.run(["du", "-sxc", "-B1", *map(os.fsencode, roots)], capture_output=True, check=True)
    inodes = {
        (st.st_dev, st.st_ino)
        for root in roots
        for st in map(os.lstat, root.rglob("*"))
        if stat.S_ISREG(st.st_mode)
    }
    return int(out.stdout.splitlines()[-1].split()[0]), len(inodes)


def test_a_file_hard_linked_under_two_roots_is_counted_once_as_du_counts_it(tmp_path: Path) -> None:
    """The roots are walked as ``du -x a b`` walks them, one set of multiply-linked inodes over all:
    the one 3 MiB inode under ``a`` and ``b`` is 3 MiB in 1 file, not 6 MiB in 2, and the remainder
    (outside the roots or unexplained) is not understated by the second name's bytes."""
    top = linked_roots(tmp_path)
    acc = explain(request_for(top, 8 * MiB, roots=[top / "a", top / "b"]), no_progress, never_cancelled)
    assert acc.walked.roots_walked == [str(top / "a"), str(top / "b")]
    assert acc.walked.files == 1 and 3 * MiB <= acc.walked.disk < 4 * MiB
    text, _ = render(acc)
    assert "1. Files reached by a walk of your roots (du -x): 3.0 MiB in 1 file." in text
    assert "on its own" not in text


def test_under_roots_a_walk_out_of_time_leaves_a_remainder_outside_them_too(tmp_path: Path) -> None:
    """The remainder of a walk of the roots that stopped holds the rest of the filesystem as well as
    what the walk did not reach: it is not all 'not walked' (no larger timeout_s would walk it)."""
    top = planted(tmp_path)
    ticks = iter(range(0, 10**9, 1000))  # each look at the clock is 1000 s later: the budget is gone at once
    request = request_for(top, 8 * MiB, clock=lambda: float(next(ticks)), roots=[top / "a"])
    acc = explain(request, no_progress, never_cancelled)
    assert acc.walked.stopped is not None and acc.walked.roots_walked == [str(top / "a")]
    text, data = render(acc)
    assert "outside your roots or not walked" in text.splitlines()[1]
    assert "7. Outside your roots or not walked:" in text
    assert data["remainder"]["not_walked"] is True


def test_a_pseudo_filesystem_has_nothing_to_account_for(tmp_path: Path) -> None:
    proc = Mount("/proc", "proc", "proc")
    fig = Figures.from_stats(FsStats(4096, 0, 0, 0, 0, 0))
    request = ExplainRequest(proc, fig, 0, MountTable([proc]), lambda check: DeletedScan())
    with pytest.raises(WrongKind, match="pseudo filesystem"):
        explain(request, no_progress, never_cancelled)


def test_mount_points_over_the_filesystem_are_found_and_nested_ones_left_to_their_own() -> None:
    root = Mount("/", "/dev/sda1", "ext4")
    data = Mount("/data", "/dev/sdb1", "xfs")
    table = MountTable([root, data, Mount("/data/cache", "tmpfs", "tmpfs"), Mount("/run", "tmpfs", "tmpfs")])
    assert covered_points(root, table) == ["data", "run"]
    assert covered_points(data, table) == ["cache"]


@pytest.mark.anyio
async def test_explain_through_the_tool_reads_a_process_that_ended_meanwhile(tmp_path: Path) -> None:
    top = planted(tmp_path)
    proc = tmp_path / "proc"
    (proc / "self" / "fd").mkdir(parents=True)
    (proc / "4242").mkdir()  # listed, then gone before its descriptors are read: no fd directory
    mount = Mount(str(top), "/dev/fake", "ext4")
    handler = DiskUsage(
        lambda: MountTable([Mount("/", "/dev/sda1", "ext4"), mount]), statvfs_usage, proc=str(proc)
    )
    args = {"path": str(top), "explain": True, "unit": "percent", "all": False}
    with anyio.fail_after(60):
        output = await handler(args, context())
    jsonschema.validate(output.structured, TOOL.output_schema)
    data = output.structured["explain"]
    assert data["deleted_open"]["processes_vanished"] == 1 and data["deleted_open"]["bytes"] == 0
    assert data["files"]["files"] == 2 and output.text.startswith("Of ")
    assert "1 process ended while being read" in output.text
    assert handler.answers_at_once(args) is False


@pytest.mark.anyio
async def test_explain_needs_a_path() -> None:
    handler = DiskUsage(lambda: MountTable([Mount("/", "/dev/sda1", "ext4")]))
    with pytest.raises(ArgumentError, match="explain needs a path"):
        await handler({"explain": True, "unit": "percent", "all": False}, context())


def deep_tree(top: Path, directories: int = 100, files: int = 2) -> int:
    """One directory at the top, everything below it, so the walk must hand out pieces below the top to split at all.
    (More directories below it than a split cuts pieces for: some are left to hand out.)"""
    for d in range(directories):
        sub = top / "only" / f"d{d:02d}"
        sub.mkdir(parents=True)
        for f in range(files):
            (sub / f"f{f}").write_bytes(b"x" * 100)
    return directories * files


@needs_fork
def test_a_totals_only_walk_is_shared_out_even_when_it_lists_no_file(tmp_path: Path) -> None:
    # Regression: explain's walk lists no file (totals only), so the walk gave the driver no event
    # before the single top directory was finished: too late to share anything, one process walked.
    files = deep_tree(tmp_path)
    request = request_for(tmp_path, 0)
    walked = walk_filesystem(replace(request, processes=2, split_after_s=0.0))
    assert walked.processes == 2 and walked.files == files and walked.stopped is None
    alone = walk_filesystem(replace(request, processes=1))
    assert (alone.disk, alone.files, alone.processes) == (walked.disk, walked.files, 1)


@needs_fork
def test_inodes_linked_across_roots_are_counted_once_however_each_roots_walk_is_shared_out(
    tmp_path: Path,
) -> None:
    """Each root's walk is shared out at once: an inode a child counted goes into the one set when the
    child's part is merged, so the next root's walk (here, and in the children it forks with a copy of
    the set) does not count it again; within a root, one process's inodes are taken out of another's."""
    top = tmp_path / "fs"
    deep_tree(top / "a")
    deep_tree(top / "b")
    for d in range(0, 100, 3):
        os.link(top / "a" / "only" / f"d{d:02d}" / "f0", top / "b" / "only" / f"d{99 - d:02d}" / "shared")
        os.link(top / "a" / "only" / f"d{d:02d}" / "f1", top / "a" / "only" / f"d{99 - d:02d}" / "again")
    roots = [top / "a", top / "b"]
    request = replace(request_for(top, 0, roots=roots), split_after_s=0.0)
    walked = walk_filesystem(replace(request, processes=2))
    assert walked.processes == 2 and walked.stopped is None
    assert (walked.disk, walked.files) == du_of(*roots) and walked.files == 400
    alone = walk_filesystem(replace(request, processes=1))
    assert (alone.disk, alone.files, alone.processes) == (walked.disk, walked.files, 1)


def test_a_root_inside_another_is_walked_once_as_part_of_the_outer_one(tmp_path: Path) -> None:
    top = planted(tmp_path)
    (top / "a" / "in").mkdir()
    (top / "a" / "in" / "small").write_bytes(b"z" * 8192)
    roots = [top / "a" / "in", top / "a"]  # the inner one first: still walked only within ``a``
    acc = explain(request_for(top, 8 * MiB, roots=roots), no_progress, never_cancelled)
    assert acc.walked.roots_walked == [str(top / "a")]
    assert (acc.walked.disk, acc.walked.files) == du_of(top / "a") and acc.walked.files == 2


class Cancelled(Exception):
    pass


def test_a_cancelled_explain_stops_within_a_few_directories_and_leaves_no_child(tmp_path: Path) -> None:
    deep_tree(tmp_path / "fs", directories=200, files=2)
    seen: list[int] = []
    asked = []

    def progress(done: float, total: float | None) -> None:
        seen.append(int(done))

    def cancel() -> None:
        asked.append(1)
        if len(asked) >= 5:
            raise Cancelled

    ticks = itertools.count()  # each look at the clock 1 ms later: the cancellation question every 2 ms
    request = replace(
        request_for(tmp_path / "fs", 8 * MiB, clock=lambda: next(ticks) / 1000), processes=1
    )  # one walking process: what it reached when asked is then the same on any machine
    before = children()
    with pytest.raises(Cancelled):
        explain(request, progress, cancel)
    assert max(seen, default=0) < 300  # of about 600 entries: it stopped early, not at the end
    assert children() - before == set()  # the side child: killed and reaped


@needs_fork
def test_the_side_parts_run_in_a_child_and_one_that_died_is_done_here(tmp_path: Path) -> None:
    top = planted(tmp_path)
    dev = os.stat(top).st_dev
    parent = os.getpid()
    pids: list[int] = []

    def dies_in_the_child(check: Callable[[], None]) -> DeletedScan:
        if os.getpid() != parent:
            os._exit(3)  # the side child dies in the deleted-files scan
        pids.append(os.getpid())
        return DeletedScan((HeldOpen(str(top / "gone"), dev, MiB, ((7, "app"),)),))

    before = children()
    acc = explain(request_for(top, 8 * MiB, dies_in_the_child), no_progress, never_cancelled)
    assert pids == [parent] and acc.deleted.disk == MiB and acc.deleted.files[0].holders == ((7, "app"),)
    assert children() - before == set()


def test_the_servers_own_deleted_files_are_left_out_wherever_the_scan_runs(tmp_path: Path) -> None:
    gone = tmp_path / "spill"
    with open(gone, "wb") as mine:
        mine.write(b"x" * 8192)
        os.fsync(mine.fileno())
        gone.unlink()
        holder = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL, pass_fds=())
        try:
            scan = deleted_provider()(lambda: None)
        finally:
            holder.kill()
            holder.wait()
    if not scan.available:
        pytest.skip("no /proc/PID/fd on this system: nothing is scanned")
    assert all(os.getpid() not in [pid for pid, _ in f.holders] for f in scan.files)
    assert not any(f.path.startswith(str(gone)) for f in scan.files)


@needs_proc
def test_a_deleted_file_its_holder_has_mapped_gives_no_descriptor_to_truncate_through(tmp_path: Path) -> None:
    """explain's next step runs `: > /proc/PID/fd/N` on the descriptor given: through a mapped file's, that
    kills the holder at its next touch of the mapping (SIGBUS)."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc/PID/fd on this system: nothing is scanned")
    database = tmp_path / "data.mdb"
    script = (
        "import mmap, os, sys\n"
        "handle = open(sys.argv[1], 'w+b'); handle.write(b'd' * 65536); handle.flush()\n"
        "pages = mmap.mmap(handle.fileno(), 0); os.unlink(sys.argv[1])\n"
        "print('mapped', flush=True); sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(database)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"mapped\n"
        scan = deleted_provider()(lambda: None)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    [found] = [f for f in scan.files if f.path == str(database)]
    assert {pid for pid, _ in found.holders} == {holder.pid} and found.descriptor is None


async def explain_tool(
    top: Path, path: Path | None = None, roots: list[Path] | None = None
) -> dict[str, Any]:
    """disk_usage explain of ``path`` (default ``top``) through the tool, ``top`` its filesystem's mount."""
    mount = Mount(str(top), "/dev/fake", "ext4")
    handler = DiskUsage(lambda: MountTable([Mount("/", "/dev/sda1", "ext4"), mount]), statvfs_usage)
    args = {"path": str(path or top), "explain": True, "unit": "percent", "all": False}
    with anyio.fail_after(60):
        output = await handler(args, context(roots))
    jsonschema.validate(output.structured, TOOL.output_schema)
    return {"text": output.text, **output.structured["explain"]}


def test_a_root_the_mount_table_shows_as_a_bind_of_a_directory_inside_another_is_not_walked_again(
    tmp_path: Path,
) -> None:
    """Which root holds which is judged in the filesystem's own tree (``Mount.root``), not by path: ``b``,
    by the table a bind mount of ``a/in``, shows what ``a``'s walk counts (the real bind mount:
    tests/tools/test_explain_overlapping_roots.py)."""
    top = planted(tmp_path)
    (top / "a" / "in").mkdir()
    (top / "b").mkdir()
    request = request_for(top, 8 * MiB, roots=[top / "b", top / "a"])
    bind = Mount(str(top / "b"), "/dev/fake", "ext4", root="/a/in", dev="7:0")
    request = replace(request, table=MountTable([*request.table.mounts, bind]))
    assert walk_starts(request) == [str(top / "a")]
    assert walk_starts(replace(request, roots=[top / "b"])) == [str(top / "b")]


@pytest.mark.anyio
async def test_through_the_tool_a_file_linked_under_two_roots_is_counted_once(tmp_path: Path) -> None:
    top = linked_roots(tmp_path)
    roots = [top / "a", top / "b"]
    data = await explain_tool(top, top / "b", roots)
    assert data["files"]["roots_walked"] == [str(root) for root in roots]
    assert (data["files"]["bytes"], data["files"]["files"]) == du_of(*roots) == (data["files"]["bytes"], 1)
    assert "1. Files reached by a walk of your roots (du -x): 3.0 MiB in 1 file." in data["text"]


async def scan_with_dir_usage(top: Path, **args: Any) -> None:
    with anyio.fail_after(60):
        await dir_usage(validate_arguments(DU_INPUT, {"path": str(top), **args}), context())


@pytest.mark.anyio
async def test_a_fresh_complete_scan_of_the_root_stands_in_for_the_walk(tmp_path: Path, clock: Clock) -> None:
    top = planted(tmp_path)
    await scan_with_dir_usage(top, one_file_system=True)
    scanned_at = clock.now
    (top / "three").write_bytes(b"y" * 8192)  # written after the scan: a walk would count it
    clock.now += 3 * 60 + 5
    data = await explain_tool(top)
    hhmm = time.strftime("%H:%M", time.localtime(scanned_at))
    assert data["files"]["files"] == 2 and data["files"]["scanned_at"] == iso_utc(scanned_at)
    assert f"1. Files reached by a walk (du -x): from the scan of {hhmm}, 3 min ago: 4.0" in data["text"]
    assert f"(2 files, from the scan of {hhmm}, 3 min ago)" in data["text"].splitlines()[0]
    assert "4. Unreadable directories: not counted" in data["text"]
    clock.now += 5 * 60  # now eight minutes old: walked afresh
    data = await explain_tool(top)
    assert data["files"]["files"] == 3 and data["files"]["scanned_at"] is None
    assert "from the scan of" not in data["text"]


@pytest.mark.anyio
async def test_a_scan_that_crossed_filesystems_or_of_a_subdirectory_is_not_used(
    tmp_path: Path, clock: Clock
) -> None:
    top = planted(tmp_path)
    await scan_with_dir_usage(
        top, one_file_system=False
    )  # another series: its totals may hold other filesystems
    await scan_with_dir_usage(top / "a", one_file_system=True)  # not the root
    (top / "three").write_bytes(b"y" * 8192)
    clock.now += 60
    data = await explain_tool(top)
    assert data["files"]["files"] == 3 and data["files"]["scanned_at"] is None


@pytest.mark.skipif(UNDER_POSIX_PROFILE, reason="LVM is Linux's: the portable profile, like macOS, has none")
def test_a_volume_on_lvm_names_its_thin_snapshots_from_lvs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lv = {
        "vg_name": "vg0",
        "lv_attr": "Vwi-a-tz--",
        "pool_lv": "pool",
        "lv_size": "1000",
        "metadata_percent": "",
    }
    rows = [
        {**lv, "lv_name": "root", "origin": "", "data_percent": ""},
        {**lv, "lv_name": "snap1", "origin": "root", "data_percent": "5.00"},
        {**lv, "lv_name": "snap2", "origin": "home", "data_percent": "1.00"},
    ]
    lvs = tmp_path / "lvs"  # lvs --reportformat json: its report, whatever else it is asked
    lvs.write_text(f"#!/bin/sh\necho '{json.dumps({'report': [{'lv': rows}]})}'\n")
    lvs.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    snaps = snapshots_of(Mount("/", "/dev/mapper/vg0-root", "ext4"))
    assert snaps.kind == "lvm thin snapshots" and [s.name for s in snaps.items] == ["snap1"]
    assert not snaps.exact and snaps.items[0].exclusive is None and "thin pool" in snaps.note
    assert snapshots_of(Mount("/srv", "/dev/mapper/vg0-srv", "ext4")) == Snapshots()
    lvs.unlink()  # lvs not installed: nothing to say
    assert snapshots_of(Mount("/", "/dev/mapper/vg0-root", "ext4")) == Snapshots()


@pytest.mark.skipif(UNDER_POSIX_PROFILE, reason="LVM is Linux's: the portable profile, like macOS, has none")
def test_lvm_snapshots_are_the_mounted_volumes_whatever_dashes_its_name_holds_and_of_its_group_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    volumes = [  # (name, group, origin): vg0/my-lv is /dev/mapper/vg0-my--lv; vg1 has a root of its own
        ("my-lv", "vg0", ""),
        ("snap1", "vg0", "my-lv"),
        ("lv", "vg0", ""),
        ("snap2", "vg0", "lv"),
        ("root", "vg0", ""),
        ("other", "vg1", "root"),
    ]
    fields = {"lv_attr": "Vwi-a-tz--", "pool_lv": "pool", "data_percent": "5.00", "metadata_percent": ""}
    rows = [{"lv_name": n, "vg_name": g, "origin": o, "lv_size": "1000", **fields} for n, g, o in volumes]
    (tmp_path / "report.json").write_text(json.dumps({"report": [{"lv": rows}]}))
    (tmp_path / "report.txt").write_text("".join(f"  {n} {o} 1000 5.00\n" for n, _, o in volumes))
    lvs = tmp_path / "lvs"  # its JSON report when asked for it, else the plain columns
    lvs.write_text(
        f'#!/bin/sh\ncase "$*" in *json*) cat {tmp_path}/report.json;; *) cat {tmp_path}/report.txt;; esac\n'
    )
    lvs.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert [s.name for s in snapshots_of(Mount("/", "/dev/mapper/vg0-my--lv", "ext4")).items] == ["snap1"]
    assert snapshots_of(Mount("/", "/dev/mapper/vg0-root", "ext4")) == Snapshots()


@pytest.mark.skipif(UNDER_POSIX_PROFILE, reason="LVM is Linux's: the portable profile, like macOS, has none")
def test_a_classic_lvm_snapshot_is_not_said_to_be_in_a_thin_pool(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``lvcreate -s -L 2G vg0/root``: a classic snapshot of a plain volume, its copy-on-write blocks a
    volume of their own in the group; there is no thin pool. It was named among "lvm thin snapshots",
    "their blocks are in the thin pool", its next step an lvremove freeing pool space."""
    report = lvs_report(  # with lvm's sys/root, a plain volume
        "97.00",
        "12.50",
        {**lv("root-before-upgrade", "swi-a-s---", 2 * GiB, data="0.52", vg="sys"), "origin": "root"},
    )
    (tmp_path / "report.json").write_text(report)
    lvs = tmp_path / "lvs"
    lvs.write_text(f"#!/bin/sh\ncat {tmp_path}/report.json\n")
    lvs.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    snaps = snapshots_of(Mount("/", "/dev/mapper/sys-root", "ext4"))
    assert [s.name for s in snaps.items] == ["root-before-upgrade"]
    assert snaps.kind == "lvm snapshots" and "thin" not in snaps.note and "volume group" in snaps.note
