"""what_changed against real trees: the first call records and gives a lower bound, a mutated tree is
diffed exactly above the resolution, roots hold for stored snapshots, history off or a full disk
never stops an answer, and the fleet merge ranks hosts by growth. An injected clock throughout."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.parallel import Sharing
from sysmcp.engine.paths import PathPolicy
from sysmcp.engine.usage import UsageRequest, scan_usage
from sysmcp.engine.walk import WalkOptions
from sysmcp.history import state
from sysmcp.history.recording import record_baseline, series_of
from sysmcp.history.snapshots import DirTotals, FileRow, ScanSnapshot
from sysmcp.protocol.failures import ArgumentError, ToolError
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.dir_usage import INPUT_SCHEMA as DU_INPUT
from sysmcp.tools.dir_usage import handle as dir_usage
from sysmcp.tools.merging import HostOutcome
from sysmcp.tools.what_changed import merge
from tests.harness import call_tool, tool_context

pytestmark = pytest.mark.anyio
MiB = 1 << 20
DAY = 86400.0


class Clock:
    def __init__(self) -> None:
        self.now = time.time()  # anchored once: the files' mtimes come from the kernel's clock

    def __call__(self) -> float:
        return self.now


def context(roots: list[Path] | None = None) -> Any:
    return tool_context(roots or None, progress_token="w")


@pytest.fixture
def clock(tmp_path: Path) -> Iterator[Clock]:
    clock = Clock()
    state.configure(tmp_path / "state", clock)
    yield clock
    state.configure(None)


async def call(roots: list[Path] | None = None, **args: Any) -> Any:
    return await call_tool("what_changed", context(roots), **args)


def write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        f.write(os.urandom(size))


def du_all(root: Path) -> dict[bytes, int]:
    """Disk bytes of every directory below root, as du counts them (directories' own blocks too)."""
    sizes: dict[bytes, int] = {}
    seen: set[int] = set()  # hard links once
    for directory, dirs, files in os.walk(root, topdown=False):
        here = os.lstat(directory).st_blocks * 512
        for name in files:
            st = os.lstat(os.path.join(directory, name))
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                here += st.st_blocks * 512
        here += sum(sizes[os.fsencode(os.path.join(directory, d))] for d in dirs)
        sizes[os.fsencode(directory)] = here
    base = os.fsencode(root)
    return {(b"" if p == base else os.path.relpath(p, base)): s for p, s in sizes.items()}


async def test_a_lower_bound_listing_fewer_files_than_it_counts_says_how_many_are_not_shown(
    tmp_path: Path, clock: Clock
) -> None:
    for n in range(4):
        write(tmp_path / "tree" / f"f{n}", 4096)
    first = await call(path=str(tmp_path / "tree"), since="24h", top_n=3)
    assert first.structured["lower_bound"]["files"] == 4
    assert "\n  … and 1 more file not shown" in first.text, first.text


async def test_the_first_call_says_there_is_no_baseline_records_one_and_gives_a_lower_bound(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    write(tree / "logs" / "fresh.log", 3 * MiB)
    first = await call(path=str(tree), since="24h")
    assert "no earlier snapshot" in first.text and "LOWER BOUND" in first.text
    assert first.structured["comparable"] is False
    assert first.structured["lower_bound"]["files"] == 1
    assert f"{tree}/logs/fresh.log" in first.text
    store = state.active()
    assert store is not None and len(store.snapshots("scan")) == 1

    logs_before = du_all(tree)[b"logs"]
    write(tree / "logs" / "more.log", 4 * MiB)
    clock.now += 600
    second = await call(path=str(tree), since="last")
    assert second.structured["comparable"] is True and second.structured["current"]["fresh"] is True
    changes = {c["path"]: c["delta_bytes"] for c in second.structured["changes"]}
    assert changes[f"{tree}/logs"] == du_all(tree)[b"logs"] - logs_before
    assert "more.log" in second.text  # the largest new file


def build(root: Path) -> None:
    """Directories well above the 1 MiB resolution (the tree is 40 MiB: 1 MiB is the threshold)."""
    for name, size in {
        "grow/a": 3,
        "shrink/b": 6,
        "delete/d1/x": 3,
        "delete/d2/y": 2,
        "rename/old/z": 3,
        "from/m/w": 3,
        "from/keep": 2,
        "to/t": 2,
        "steady/s": 8,
        "small/tiny": 0,
    }.items():
        write(root / name, size * MiB + 1000)


def mutate(root: Path) -> None:
    write(root / "grow" / "a", 5 * MiB)  # grow
    os.truncate(root / "shrink" / "b", 2 * MiB)  # shrink
    write(root / "add" / "new" / "n", 4 * MiB)  # add
    shutil.rmtree(root / "delete")  # delete
    os.rename(root / "rename" / "old", root / "rename" / "new")  # rename
    os.rename(root / "from" / "m", root / "to" / "m")  # move across directories
    write(root / "small" / "grew-from-below", 3 * MiB)  # a directory under the threshold before


async def test_every_change_above_twice_the_resolution_is_named_with_its_exact_delta(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    build(tree)
    before = du_all(tree)
    await call(path=str(tree), since="24h")
    mutate(tree)
    after = du_all(tree)
    clock.now += DAY
    result = (await call(path=str(tree), since="2d", top_n=50)).structured
    threshold = result["threshold_bytes"]
    assert threshold == MiB
    reported = {c["path"]: c for c in result["changes"]}
    small = f"{tree}/small"
    for rel in before.keys() | after.keys():
        delta = after.get(rel, 0) - before.get(rel, 0)
        if abs(delta) <= 2 * threshold or rel == b"":
            continue
        name = f"{tree}/{os.fsdecode(rel)}"
        assert name in reported, (name, delta)
        if name == small:  # it was below the threshold before: its whole size is the delta shown
            assert reported[name]["kind"] == "appeared" and reported[name]["was_below_threshold"]
            assert reported[name]["delta_bytes"] == after[rel]
            continue
        assert reported[name]["delta_bytes"] == delta, name
        assert reported[name]["per_day_bytes"] == pytest.approx(delta, abs=1)  # one day apart
    assert result["total_delta_bytes"] == after[b""] - before[b""]
    kinds = {p.removeprefix(f"{tree}/"): c["kind"] for p, c in reported.items()}
    assert kinds["delete"] == "disappeared" and kinds["delete/d1"] == "disappeared"
    assert kinds["rename/new"] == "appeared" and kinds["rename/old"] == "disappeared"
    assert kinds["to/m"] == "appeared" and kinds["from/m"] == "disappeared"
    grown = sum(
        c["delta_bytes"]
        for c in result["changes"]
        if c["delta_bytes"] > 0 and "/" not in c["path"].removeprefix(f"{tree}/")
    )
    assert result["attribution"]["covered_bytes"] >= 0.9 * min(grown, result["total_delta_bytes"] or grown)


async def test_a_directory_that_did_not_grow_but_had_a_file_rewritten_is_named_with_its_newest_change(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    write(tree / "etc" / "app" / "config", 2 * MiB)
    write(tree / "data" / "steady", 2 * MiB)
    os.utime(tree / "etc" / "app" / "config", (clock.now - DAY, clock.now - DAY))
    await call(path=str(tree), since="24h")
    config = tree / "etc" / "app" / "config"
    with config.open("r+b") as f:  # rewritten in place: the same size, a new mtime
        f.write(os.urandom(4096))
    rewritten = clock.now + 3600
    os.utime(config, (rewritten, rewritten))
    write(tree / "small" / "from-below", 3 * MiB)  # a directory that did not exist before
    clock.now += DAY
    output = await call(path=str(tree), since="2d", top_n=50)
    rows = {c["path"].removeprefix(f"{tree}/"): c for c in output.structured["changes"]}
    assert rows["etc/app"]["kind"] == "modified" and rows["etc/app"]["delta_bytes"] == 0
    assert rows["etc/app"]["files_changed"] is True
    assert rows["etc/app"]["newest_modified"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(rewritten))
    assert "etc" not in rows and "data" not in rows  # etc is explained by etc/app; data is untouched
    line = next(line for line in output.text.splitlines() if "etc/app/" in line)
    assert "(same size, files rewritten; newest change " in line and "/day" not in line, output.text
    small = rows["small"]
    assert small["delta_is_upper_bound"] and small["was_below_threshold"]
    assert "the delta is at most this" in output.text


async def test_roots_hold_for_what_a_snapshot_recorded_without_them(tmp_path: Path, clock: Clock) -> None:
    inside = tmp_path / "inside"
    write(inside / "data" / "f", 2 * MiB)
    (tmp_path / "secret-outside").mkdir()
    await call(path=str(inside), since="24h")  # recorded with no roots at all
    store = state.active()
    assert store is not None
    series = series_of(os.fsencode(inside), WalkOptions())
    # A snapshot (a CLI run without roots, or a tampered store) naming a directory out of the roots:
    crafted = ScanSnapshot(
        series,
        clock.now + 1,
        False,
        MiB,
        {b"": DirTotals(9 * MiB, 9 * MiB, 2), b"../secret-outside": DirTotals(7 * MiB, 7 * MiB, 1)},
    )
    assert store.save_scan(crafted).ok
    clock.now += 10
    output = await call(roots=[inside], path=str(inside), since="last", top_n=50)
    everything = output.text + json.dumps(output.structured)
    assert "secret" not in everything
    for text in [output.text, *[c["path"] for c in output.structured["changes"]]]:
        for word in text.split():
            if word.startswith("/"):
                assert word.rstrip("/.,:").startswith(str(inside)), word


async def test_with_history_off_the_answer_still_comes_labelled_a_lower_bound(tmp_path: Path) -> None:
    state.configure(None)
    write(tmp_path / "t" / "f", MiB)
    output = await call(path=str(tmp_path / "t"), since="1h")
    assert output.structured["history"] is False and output.structured["lower_bound"]["files"] == 1
    assert "history is off" in output.text and "LOWER BOUND" in output.text


async def test_an_unwritable_state_directory_leaves_dir_usage_working(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("in the way")
    state.configure(tmp_path / "file" / "state")
    try:
        write(tmp_path / "t" / "f", MiB)
        output = await dir_usage(validate_arguments(DU_INPUT, {"path": str(tmp_path / "t")}), context())
        assert output.structured["totals"]["files"] == 1 and "History" not in output.text
        assert state.active() is None
    finally:
        state.configure(None)


def newest_truth(root: Path) -> dict[str, float]:
    """The newest mtime of a regular file below each directory (0.0: none), the slow obvious way."""
    truth: dict[str, float] = {}
    for directory, _, _ in os.walk(root):
        rel = os.path.relpath(directory, root)
        mtimes = [
            st.st_mtime
            for other, _, more in os.walk(directory)
            for f in more
            if stat.S_ISREG((st := os.lstat(os.path.join(other, f))).st_mode)
        ]
        truth["" if rel == "." else rel] = max(mtimes, default=0.0)
    return truth


def test_newest_mtime_holds_across_parts_one_process_gave_to_others_mid_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sysmcp.engine.parallel import FanOut
    from tests.tools.test_dir_usage_shared import build_lopsided_tree

    build_lopsided_tree(tmp_path)
    deepest = max((p for p in tmp_path.rglob("*") if p.is_file()), key=lambda p: len(p.parts))
    os.utime(deepest, (2_000_000_000, 2_000_000_000))  # the newest file of all, deep in big/
    seen: list[dict[int, Any]] = []
    real = FanOut.given

    def given(fan: FanOut) -> dict[int, Any]:
        seen.append(real(fan))
        return seen[-1]

    monkeypatch.setattr(FanOut, "given", given)
    usage = recording_scan(tmp_path, 3)
    assert seen and seen[0]  # parts of big/ were given away: the directories above them were withheld
    assert usage.recorded is not None and usage.totals is not None
    truth = newest_truth(tmp_path)
    assert {rel: when for rel, _, _, _, when in usage.recorded} == {r: w for r, w in truth.items() if r}
    assert usage.totals.newest == 2_000_000_000


def recording_scan(root: Path, processes: int) -> Any:
    """A scan that records every directory, shared out at once between ``processes``."""
    request = UsageRequest(10, 10, 1, True, 0, 60.0, record_floor=1, root=os.fsencode(root))
    return scan_usage(
        request,
        sharing=Sharing(processes, split_after_s=0.0, pieces=1),
    )


@pytest.mark.parametrize("processes", [1, 3])
def test_recorded_directory_totals_equal_du_at_every_depth(tmp_path: Path, processes: int) -> None:
    for top in range(4):
        for sub in range(3):
            write(tmp_path / f"t{top}" / f"s{sub}" / "deep" / "f", (top * 3 + sub + 1) * 5000)
    os.link(tmp_path / "t1" / "s0" / "deep" / "f", tmp_path / "t1" / "s0" / "deep" / "link")
    usage = recording_scan(tmp_path, processes)
    assert usage.recorded is not None
    recorded = {os.fsencode(rel): disk for rel, disk, _, _, _ in usage.recorded}
    truth = du_all(tmp_path)
    assert recorded == {rel: size for rel, size in truth.items() if rel != b""}


@pytest.mark.parametrize("processes", [1, 3])
def test_recorded_newest_mtime_is_the_newest_file_below_at_every_depth(
    tmp_path: Path, processes: int
) -> None:
    """Through the same child merge as the totals: subtrees walked by other processes, and the
    directories above them, get the newest file of their whole subtree (which process walks what
    varies from run to run: a parallel scan is checked twice)."""
    stamp = 1_700_000_000
    for top in range(6):
        for sub in range(3):
            leaf = tmp_path / f"t{top}" / f"s{sub}" / "deep" / "f"
            write(leaf, 5000)
            when = stamp + (999 if (top, sub) == (2, 1) else 100 * top + 10 * sub)
            os.utime(leaf, (stamp, when))  # the newest deep down: walked by another process, likely
        write(tmp_path / f"t{top}" / "own", 10)
        os.utime(tmp_path / f"t{top}" / "own", (stamp, stamp + 5))
    (tmp_path / "t3" / "empty").mkdir()
    truth = newest_truth(tmp_path)
    for _ in range(2 if processes > 1 else 1):
        usage = recording_scan(tmp_path, processes)
        assert usage.recorded is not None and usage.totals is not None
        newest = {rel: when for rel, _, _, _, when in usage.recorded}
        assert newest == {rel: when for rel, when in truth.items() if rel != ""}
        assert newest["t2"] == stamp + 999 and newest["t3/empty"] == 0.0
        assert usage.totals.newest == truth[""] == stamp + 999


DISK_FULL = textwrap.dedent(
    """
    import json, os, subprocess, sys, anyio
    target, tree = sys.argv[1], sys.argv[2]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", target], check=True)
    from sysmcp.history import state
    from tests.tools.test_what_changed import context
    from sysmcp.tools.arguments import validate_arguments
    from sysmcp.tools.dir_usage import INPUT_SCHEMA, handle
    state.configure(os.path.join(target, "state"))
    assert state.active() is not None
    try:  # fill what is left
        with open(os.path.join(target, "filler"), "wb") as f:
            while True:
                f.write(b"x" * 4096)
                f.flush()
    except OSError:
        pass
    out = anyio.run(handle, validate_arguments(INPUT_SCHEMA, {"path": tree}), context())
    print(json.dumps({"text": out.text, "files": out.structured["totals"]["files"]}))
    """
)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="mounting a tiny tmpfs needs root and unshare(1)",
)
def test_a_full_disk_leaves_the_scan_answer_saying_the_snapshot_was_not_saved(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for i in range(30):
        write(tree / f"d{i:03}" / "f", 2 * MiB if i < 10 else 10)
    (tmp_path / "mnt").mkdir()
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            sys.executable,
            "-c",
            DISK_FULL,
            str(tmp_path / "mnt"),
            str(tree),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip("this sandbox refuses new mount namespaces")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["files"] == 30
    assert "not saved" in report["text"], report["text"]
    assert "History: the disk holding the history store is full" in report["text"], report["text"]


def test_the_fleet_merge_ranks_hosts_by_growth_and_says_where() -> None:
    def result(delta: int, where: str, per_day: float | None) -> dict[str, Any]:
        fill = {
            "mount_point": "/",
            "readings": 9,
            "span_s": DAY,
            "bytes_per_day": per_day,
            "seconds_to_full": 2 * DAY,
        }
        return {
            "path": "/",
            "history": True,
            "comparable": True,
            "complete": True,
            "total_delta_bytes": delta,
            "attribution": {"total_bytes": delta, "covered_bytes": delta, "percent": 100.0, "paths": [where]},
            "changes": [],
            "filesystem": None if per_day is None else fill,
            "notes": [],
        }

    outcomes = [
        HostOutcome("web1", "ok", 0.5, result(2 * MiB, "/var/log", None)),
        HostOutcome("db1", "ok", 0.7, result(900 * MiB, "/var/lib/postgresql", 450 * MiB)),
        HostOutcome("old", "unreachable", 10.0, reason="no route to host"),
    ]
    output = merge(outcomes, {"path": "/"})
    lines = output.text.splitlines()
    assert lines[0].startswith("2 of 3 hosts answered")
    assert lines[2].split()[0] == "db1" and "/var/lib/postgresql" in lines[2] and "+900.0 MiB" in lines[2]
    assert lines[3].split()[0] == "web1"
    assert "old: unreachable" in output.text
    assert [h["host"] for h in output.structured["view"]["hosts"]] == ["db1", "web1"]


async def test_one_integrity_baseline_from_hash_tree_is_checked_against_the_tree_now_as_aide_check_does(
    tmp_path: Path, clock: Clock
) -> None:
    from sysmcp.tools.hash_tree import INPUT_SCHEMA as HASH_INPUT
    from sysmcp.tools.hash_tree import handle as hash_tree

    etc = tmp_path / "etc"
    for name in ("passwd", "shadow", "hosts", "old.conf"):
        write(etc / name, 100)
    os.chmod(etc / "shadow", 0o640)

    async def baseline() -> str:
        args = validate_arguments(HASH_INPUT, {"path": str(etc), "baseline": True})
        return str((await hash_tree(args, context())).text)

    assert "Integrity baseline of 4 files kept" in await baseline()
    write(etc / "passwd", 10)  # content
    os.chmod(etc / "shadow", 0o600)  # metadata only
    (etc / "old.conf").unlink()  # removed
    write(etc / os.fsdecode(b"new-\xff.conf"), 5)  # added, a non-UTF-8 name
    clock.now += 3600
    output = await call(path=str(etc), since="2h")
    assert "one baseline so far" not in output.text
    assert f"metadata changed: {etc}/shadow (mode 0640 → 0600)" in output.text, output.text
    assert f"content changed: {etc}/passwd (size 100 B → 110 B" in output.text, output.text
    result = output.structured["integrity"]
    assert result["comparable"] is True
    assert (result["added"], result["removed"], result["content_changed"], result["metadata_changed"]) == (
        1,
        1,
        1,
        1,
    )
    assert result["examples"]["content_changed"] == [f"{etc}/passwd"]
    assert result["examples"]["metadata_changed"] == [f"{etc}/shadow"]
    assert result["examples"]["removed"] == [f"{etc}/old.conf"]


def test_the_triage_prompt_starts_from_what_changed_only_where_history_is_kept() -> None:
    from sysmcp.server.prompts import PromptEnv, _render_triage

    tools = {"disk_usage", "dir_usage", "what_changed"}
    arguments: dict[str, Collection[str]] = {name: set() for name in tools}
    with_history = _render_triage({"path": "/"}, PromptEnv(tools, arguments, PathPolicy(), history=True))
    without = _render_triage({"path": "/"}, PromptEnv(tools, arguments, PathPolicy(), history=False))
    assert "what_changed with path=/ " in with_history and "what_changed" not in without
    assert (
        with_history.index("disk_usage")
        < with_history.index("what_changed")
        < with_history.index("dir_usage")
    )


async def test_since_and_until_as_iso_times_pick_stored_snapshots_without_a_new_scan(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    store = state.active()
    assert store is not None
    series = series_of(os.fsencode(tree), WalkOptions())
    start = clock.now - 3 * DAY
    for day, size in enumerate([10, 14, 30]):  # MiB of one directory on three days
        dirs = {b"": DirTotals(size * MiB, size * MiB, 1), b"data": DirTotals(size * MiB, size * MiB, 1)}
        assert store.save_scan(ScanSnapshot(series, start + day * DAY, False, MiB, dirs)).ok

    def iso(epoch: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))

    output = await call(path=str(tree), since=iso(start + 60), until=iso(start + DAY + 60))
    result = output.structured
    assert result["current"]["fresh"] is False and result["seconds"] == DAY
    assert result["total_delta_bytes"] == 4 * MiB
    assert [(c["path"], c["delta_bytes"], c["per_day_bytes"]) for c in result["changes"]] == [
        (f"{tree}/data", 4 * MiB, 4 * MiB)
    ]
    assert len(store.snapshots("scan")) == 3  # nothing was scanned
    # The two the other way round (or equal): refused, not the snapshots before since compared.
    for since, until in ((start + DAY + 60, start + 60), (start + 60, start + 60)):
        with pytest.raises(ArgumentError, match=r"'until' .* is not after 'since'"):
            await call(path=str(tree), since=iso(since), until=iso(until))
    # An until not before now is now: the newest snapshot (two days old) is stale, so a scan is made.
    later = await call(path=str(tree), since=iso(start + 60), until=iso(clock.now + DAY))
    assert later.structured["current"]["fresh"] is True, later.text
    assert len(store.snapshots("scan")) == 4


async def test_more_changes_than_the_full_list_keeps_are_cut_to_the_largest_and_the_answer_says_so(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A million changed directories would make a full list too big to keep at all (and cost its rows'
    time and memory): the largest ``FULL_LIST_MAX`` are kept, and the answer says of how many."""
    from sysmcp.tools import what_changed

    monkeypatch.setattr(what_changed, "FULL_LIST_MAX", 50, raising=False)
    tree = tmp_path / "tree"
    tree.mkdir()
    store = state.active()
    assert store is not None
    series = series_of(os.fsencode(tree), WalkOptions())
    start = clock.now - 2 * DAY
    for day in range(2):
        dirs = {b"": DirTotals(400 * MiB, 400 * MiB, 120)}
        dirs |= {b"d%03d" % n: DirTotals((1 + day * (n + 1)) * MiB, MiB, 1) for n in range(120)}
        assert store.save_scan(ScanSnapshot(series, start + day * DAY, False, MiB, dirs)).ok

    def iso(epoch: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))

    ctx = context()
    output = await call_tool(
        "what_changed", ctx, path=str(tree), since=iso(start + 60), until=iso(start + DAY + 60)
    )
    assert output.structured["changes_not_shown"] == 110, output.text
    assert len(output.structured["changes"]) == 10
    assert "… and 110 more directories not shown" in output.text, output.text
    assert "The 50 largest of the 120 changes: sysmcp://" in output.text, output.text
    (link,) = output.links
    kept = ctx.results.get(link.uri)
    assert kept is not None
    rows = kept.text.splitlines()[1:]
    assert len(rows) == 50 and rows[0].endswith(f"{tree}/d119") and rows[-1].endswith(f"{tree}/d070")


async def test_every_disk_usage_reading_is_kept(tmp_path: Path, clock: Clock) -> None:
    from sysmcp.tools.disk_usage import TOOL as DISK_USAGE

    output = await DISK_USAGE.handler(
        validate_arguments(DISK_USAGE.input_schema, {"path": str(tmp_path)}), context()
    )
    (fs,) = output.structured["filesystems"]
    store = state.active()
    assert store is not None
    (reading,) = store.readings(os.fsencode(fs["mount_point"]))
    assert (reading.used, reading.free, reading.taken) == (fs["used_bytes"], fs["free_bytes"], clock.now)


async def test_bad_since_until_and_paths_are_refused_with_the_rule_before_any_scan(
    tmp_path: Path, clock: Clock
) -> None:
    inside = tmp_path / "inside"
    inside.mkdir()
    refused: list[dict[str, Any]] = [{"since": "yesterday"}, {"since": "24h", "until": "soon"}]
    for bad in refused:
        with pytest.raises(ArgumentError, match=r"duration .*ISO 8601"):
            await call(path=str(inside), **bad)
    with pytest.raises(ToolError, match="outside"):
        await call(roots=[inside], path=str(tmp_path), since="24h")
    with pytest.raises(ToolError, match="relative"):
        await call(path="inside", since="24h")
    with pytest.raises(ToolError):  # a lone surrogate names no file (it was an internal error)
        await call(path="/\ud800", since="24h")
    store = state.active()
    assert store is not None and list(store.snapshots("scan", os.fsencode(inside))) == []


async def test_after_a_dir_usage_that_listed_no_file_a_rewritten_file_is_not_called_new_and_the_answer_says_why(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    write(tree / "logs" / "app.log", 100 << 10)
    only_dirs = validate_arguments(DU_INPUT, {"path": str(tree), "show": "directories"})
    await dir_usage(only_dirs, context())  # its snapshot counts the files and lists none
    clock.now += 600
    (tree / "logs" / "app.log").unlink()
    write(tree / "logs" / "app.log", 2 * MiB)  # rewritten since: not new
    output = await call(path=str(tree), since="last")
    assert output.structured["comparable"] is True and output.structured["new_files"] == []
    assert "Largest new files" not in output.text
    assert (
        "kept no list of the tree's largest files" in output.text
        and "no file is named as new, removed or shrunk" in output.text
    )


async def test_a_snapshot_from_a_clock_set_back_since_is_compared_and_the_answer_says_the_clock_went_backwards(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    write(tree / "data" / "a", 2 * MiB)
    store = state.active()
    assert store is not None
    series = series_of(os.fsencode(tree), WalkOptions())
    ahead = {b"": DirTotals(MiB, MiB, 1), b"data": DirTotals(MiB, MiB, 1)}
    assert store.save_scan(
        ScanSnapshot(series, clock.now + 2 * 3600, False, MiB, ahead)
    ).ok  # clock ahead then
    output = await call(path=str(tree), since="last")
    result = output.structured
    assert result["comparable"] is True and result["seconds"] < 0
    assert any("the clock went backwards" in note for note in result["notes"])
    assert "Note: the clock went backwards between the two snapshots: no rates." in output.text


async def test_a_file_list_an_older_version_kept_from_a_filtered_scan_names_no_file_new(
    tmp_path: Path, clock: Clock
) -> None:
    """An older version kept the files a dir_usage with older_than or min_size matched as the
    snapshot's list: two of the tree's three files were counted and not listed."""
    tree = tmp_path / "tree"
    for name, size in (("big", 3 * MiB), ("mid", 2 * MiB), ("small", 64 << 10)):
        write(tree / "logs" / name, size)
    totals = du_all(tree)
    store = state.active()
    assert store is not None
    series = series_of(os.fsencode(tree), WalkOptions())
    dirs = {rel: DirTotals(disk, disk, 3) for rel, disk in totals.items()}
    listed = [FileRow(b"logs/small", 64 << 10, 64 << 10, clock.now - 3600)]
    assert store.save_scan(ScanSnapshot(series, clock.now - 600, False, MiB, dirs, listed)).ok
    output = await call(path=str(tree), since="last")
    assert output.structured["comparable"] is True and output.structured["new_files"] == []
    assert "Largest new files" not in output.text
    assert "kept no list of the tree's largest files" in output.text


async def test_an_integrity_baseline_that_stopped_early_names_no_file_added_and_the_answer_says_why(
    tmp_path: Path, clock: Clock
) -> None:
    etc = tmp_path / "etc"
    for name in ("hosts", "passwd"):
        write(etc / name, 100)
    digest = hashlib.sha256((etc / "hosts").read_bytes()).hexdigest()
    store = state.active()
    kept = record_baseline(
        store, os.fsencode(etc), f"{digest}  hosts\n".encode(), "sha256", WalkOptions(), True
    )
    assert kept.kept  # hash_tree ran out of time before passwd
    clock.now += 3600
    output = await call(path=str(etc), since="2h")
    assert output.structured["integrity"]["added"] == 0 and "added: " not in output.text, output.text
    note = "the baseline stopped early (out of time): a file not in it is not called added"
    assert note in output.structured["notes"] and f"Note: {note}." in output.text


async def test_a_store_another_process_holds_locked_is_said_unread_never_taken_for_no_snapshot_yet(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    write(tree / "data" / "a", 2 * MiB)
    waiting_briefly_for_locks(tmp_path, clock)
    store = state.active()
    assert store is not None
    series = series_of(os.fsencode(tree), WalkOptions())
    kept = {b"": DirTotals(MiB, MiB, 1), b"data": DirTotals(MiB, MiB, 1)}
    assert store.save_scan(ScanSnapshot(series, clock.now - 3600, False, MiB, kept)).ok
    store.close()
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("COMMIT")  # held until it closes, as by a process merging a large WAL as it exits
    try:
        output = await call(path=str(tree), since="last")
    finally:
        holder.close()
    assert "no earlier snapshot" not in output.text and "no snapshot could be read" in output.text, (
        output.text
    )
    assert any("could not be read (database is locked)" in note for note in output.structured["notes"])
    assert output.structured["comparable"] is False and output.structured["lower_bound"]["files"] == 1
    assert len(store.snapshots("scan")) == 1  # nothing recorded over a store it could not read
    again = await call(path=str(tree), since="last")
    assert again.structured["comparable"] is True


def waiting_briefly_for_locks(tmp_path: Path, clock: Clock) -> None:
    """The ``clock`` fixture's store again, waiting 20 ms (not 200) for a lock: the tests that hold one
    hold it through the whole call, so every wait runs to its end."""
    state.configure(tmp_path / "state", clock, busy_ms=20)


@contextlib.contextmanager
def writing_elsewhere(database: Path) -> Iterator[None]:
    """The history database held by another process in the middle of its write."""
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


async def test_a_snapshot_another_writer_kept_from_being_saved_is_one_note_ending_once(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    write(tree / "a", 4096)
    waiting_briefly_for_locks(tmp_path, clock)
    store = state.active()
    assert store is not None
    with writing_elsewhere(store.path):
        output = await call(path=str(tree), since="last")
    note = "the history store was busy (another sysmcp writing): the snapshot not saved"
    assert f"\nNote: {note}.\n" in output.text + "\n" and note in output.structured["notes"], output.text


async def test_a_scan_whose_snapshot_another_writer_kept_from_being_saved_never_says_one_was_recorded(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    write(tree / "a", 4096)
    waiting_briefly_for_locks(tmp_path, clock)
    store = state.active()
    assert store is not None
    assert (await call(path=str(tree))).structured["comparable"] is False  # the first snapshot, saved
    with writing_elsewhere(store.path):
        output = await call(path=str(tree))  # the only snapshot is of now: a fresh scan, not saved
    assert len(store.snapshots("scan")) == 1
    assert "recorded now" not in output.text and "no baseline yet" not in output.text, output.text
    assert output.text.startswith(f"{tree}: nothing compared: the scan made now could not be kept"), (
        output.text
    )


def test_what_a_baseline_could_not_read_is_recorded_so_once_readable_it_is_never_called_added(
    tmp_path: Path,
) -> None:
    """hash_tree as root on a root-squashed export (root without its read-anything capabilities) cannot
    read another user's files: the baseline records them as unreadable (a file with what lstat gave, a
    directory as a prefix). what_changed as root, with them readable, says it cannot tell whether the
    file changed, calls the one lstat shows changed changed, and the file below the unreadable directory
    not comparable: none of them added. A file added after it elsewhere is still called added: one
    unreadable file must not hide every addition."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("root without its read-anything capabilities needs root and setpriv")
    from tests.profile import child_env

    tree = tmp_path / "tree"
    for name in ("open", "locked", "rewritten", "closed/f"):
        write(tree / name, 100)
    for theirs, mode in (("locked", 0o600), ("rewritten", 0o600), ("closed", 0o700)):
        os.chown(tree / theirs, 4321, 4321)
        os.chmod(tree / theirs, mode)
    env = child_env({**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")})
    sysmcp = [sys.executable, "-m", "sysmcp", "call"]
    squashed = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    kept = subprocess.run(
        [*squashed, *sysmcp, "hash_tree", f"path={tree}", "baseline=true"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "Integrity baseline of 1 file kept" in kept.stdout, kept.stdout + kept.stderr
    said = (
        "3 files or directories it could not read are recorded as unreadable: once readable, what_changed "
        "says it cannot tell whether they changed."
    )
    assert said in kept.stdout, kept.stdout
    write(tree / "new", 100)
    write(tree / "rewritten", 1)  # changed while unreadable: its size says so
    now = subprocess.run(
        [*sysmcp, "what_changed", f"path={tree}", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    integrity = json.loads(now.stdout)["integrity"]
    assert (integrity["added"], integrity["content_changed"]) == (1, 1), integrity
    assert (integrity["unreadable_at_baseline"], integrity["not_comparable"]) == (1, 1), integrity
    assert integrity["examples"]["added"] == [f"{tree}/new"]
    assert integrity["examples"]["content_changed"] == [f"{tree}/rewritten"]
    assert integrity["examples"]["unreadable_at_baseline"] == [f"{tree}/locked"]
    assert integrity["examples"]["not_comparable"] == [f"{tree}/closed/f"]
    text = subprocess.run(
        [*sysmcp, "what_changed", f"path={tree}"], env=env, capture_output=True, text=True, timeout=60
    ).stdout
    assert (
        f"  unreadable at the baseline: {tree}/locked (readable now: cannot say whether it changed)" in text
    )
    assert f"  not comparable: {tree}/closed/f (below a directory unreadable at the baseline)" in text
    assert f"  content changed: {tree}/rewritten (unreadable at the baseline; size 100 B → 101 B" in text


def test_the_words_for_what_a_baseline_could_not_read() -> None:
    """Each kind the baseline's unread records give has its own words (never 'added'), a file not read
    now says what lstat shows changed, and the files past the baseline's bound are said to be called added."""
    from sysmcp.history.compare import Findings
    from sysmcp.history.diff import BaselineDiff
    from sysmcp.history.snapshots import BaselineFile
    from sysmcp.tools.what_changed import Integrity, render

    then, now = BaselineFile("", 100, 0.0, 0o600, 4321, 4321), BaselineFile("", 102, 0.0, 0o600, 4321, 4321)
    readable = BaselineFile("ab", 100, 0.0, 0o644, 0, 0)
    diff = BaselineDiff(
        True,
        None,
        added=[b"new"],
        content=[b"rewritten"],
        metadata=[(b"chmodded", ("mode",))],
        files={
            b"rewritten": (then, BaselineFile("cd", 101, 0.0, 0o600, 4321, 4321)),
            b"chmodded": (then, BaselineFile("ef", 100, 0.0, 0o644, 4321, 4321)),
            b"still": (then, now),
            b"taken": (readable, now),
        },
        unreadable=[b"shut/", b"still", b"taken"],
        unread_then=[b"locked"],
        not_comparable=[b"closed/f"],
        unrecorded=2,
    )
    found = Findings(True, integrity=diff, integrity_taken=0.0)
    text, answer, _ = render("/t", found, {"top_n": 10, "since": "24h"})
    assert (
        "1 added (any may have been there: the baseline could not read 2 files or directories it does not "
        "name), 0 removed, 1 content changed, 1 metadata changed, 3 unreadable, "
    ) in text, text
    assert "1 unreadable at the baseline, 1 not comparable\n" in text, text
    for line in (
        "  content changed: /t/rewritten (unreadable at the baseline; size 100 B → 101 B)",
        "  metadata changed: /t/chmodded (unreadable at the baseline, its content not compared; mode 0600 → 0644)",
        "  unreadable: /t/shut/",
        "  unreadable: /t/still (unreadable then and now, but since the baseline: size 100 B → 102 B)",
        "  unreadable: /t/taken (unreadable now, but since the baseline: size 100 B → 102 B, mode 0644 → 0600, "
        "owner 0:0 → 4321:4321)",
        "  unreadable at the baseline: /t/locked (readable now: cannot say whether it changed)",
        "  not comparable: /t/closed/f (below a directory unreadable at the baseline)",
        "  2 more files or directories the baseline could not read past what it records: any of them read now "
        "is called added",
    ):
        assert line + "\n" in text + "\n", (line, text)
    integrity = answer.integrity
    assert isinstance(integrity, Integrity)
    assert (integrity.unreadable_at_baseline, integrity.not_comparable, integrity.unrecorded_at_baseline) == (
        1,
        1,
        2,
    )
    assert integrity.examples == {
        "added": ["/t/new"],
        "removed": [],
        "content_changed": ["/t/rewritten"],
        "metadata_changed": ["/t/chmodded"],
        "unreadable": ["/t/shut/", "/t/still", "/t/taken"],
        "unreadable_at_baseline": ["/t/locked"],
        "not_comparable": ["/t/closed/f"],
    }


async def test_now_is_the_clock_the_snapshots_were_taken_on(tmp_path: Path, clock: Clock) -> None:
    """'Since' and 'fresh' are measured on history's clock, the one the stored times are on: a snapshot
    two minutes old on it is fresh, whatever another clock says."""
    tree = tmp_path / "tree"
    write(tree / "a" / "f", 2 * MiB)
    await call(path=str(tree))
    write(tree / "a" / "g", 2 * MiB)
    clock.now += 600
    second = await call(path=str(tree), since="last")
    assert second.structured["current"]["fresh"] is True and second.structured["comparable"]
    clock.now += 120  # the newest snapshot is two minutes old: compared as it is, no scan made now
    third = await call(path=str(tree), since="last")
    assert third.structured["current"] == second.structured["current"] | {"fresh": False}, third.text
    assert third.structured["total_delta_bytes"] == second.structured["total_delta_bytes"]
    clock.now -= 2 * DAY  # set back: every snapshot is in the future now, and a scan is made
    fourth = await call(path=str(tree), since="1h")
    assert fourth.structured["current"]["fresh"] is True, fourth.text
    assert "the clock went backwards between the two snapshots: no rates" in fourth.structured["notes"], (
        fourth.text
    )


def test_the_words_for_what_cannot_be_read_now_and_the_baseline_never_named() -> None:
    """A new file not readable now is added, saying it was not hashed; a directory not listable now
    that the baseline never recorded is unreadable, saying what it holds cannot be seen; and how many
    more were not read now past the bound, which may be new, is said in the text and the JSON."""
    from sysmcp.history.compare import Findings
    from sysmcp.history.diff import BaselineDiff
    from sysmcp.tools.what_changed import Integrity, render

    diff = BaselineDiff(
        True,
        None,
        added=[b"implant"],
        unreadable=[b"hid/"],
        not_comparable=[b"closed/inner/"],
        unread_now={b"implant", b"hid/", b"closed/inner/"},
        unrecorded_now=1200,
    )
    text, answer, _ = render(
        "/t", Findings(True, integrity=diff, integrity_taken=0.0), {"top_n": 10, "since": "24h"}
    )
    for line in (
        "  added: /t/implant (could not be read now: its content not hashed)",
        "  unreadable: /t/hid/ (could not be listed now, and was not recorded so at the baseline: what it holds "
        "cannot be seen)",
        "  not comparable: /t/closed/inner/ (below a directory unreadable at the baseline, could not be read now "
        "either)",
        "  1,200 more files or directories could not be read now past the number named: any of them may be new, "
        "and none is listed above",
    ):
        assert line + "\n" in text + "\n", (line, text)
    assert isinstance(answer.integrity, Integrity) and answer.integrity.unreadable_now_unnamed == 1200


def rewrite_keeping_size_and_mtime(path: Path) -> None:
    """What an intruder does to hide a rewrite from lstat: new bytes of the same length, then the old
    mtime put back (``touch -r`` from a copy of the file's times). Only ctime is left to tell."""
    keep = path.with_name(path.name + ".times")
    keep.touch()
    subprocess.run(["touch", "-r", str(path), str(keep)], check=True)
    path.write_bytes(os.urandom(path.stat().st_size))
    subprocess.run(["touch", "-r", str(keep), str(path)], check=True)
    keep.unlink()


def test_a_file_unreadable_at_the_baseline_rewritten_with_its_mtime_reset_is_changed_by_its_ctime(
    tmp_path: Path,
) -> None:
    """A baseline taken as root on a root-squashed export (root without its read-anything capabilities)
    could not read another user's 0600 files. Since then one was rewritten at its size with its mtime
    reset (touch -r): lstat's size, mode, owner and mtime are as they were, only ctime moved; another
    was rewritten at its size, its mtime left new. Read now, both may have another content: both are
    content_changed, saying the content was not compared (before, the first was 'cannot say' and the
    second only metadata changed). One left alone is still 'cannot say'."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("root without its read-anything capabilities needs root and setpriv")
    from tests.profile import child_env

    tree = tmp_path / "tree"
    for name in ("open", "forged", "rewritten", "untouched"):
        write(tree / name, 100)
    for theirs in ("forged", "rewritten", "untouched"):
        os.chown(tree / theirs, 4321, 4321)
        os.chmod(tree / theirs, 0o600)
    env = child_env({**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")})
    sysmcp = [sys.executable, "-m", "sysmcp", "call"]
    squashed = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    then = {name: (tree / name).stat() for name in ("forged", "rewritten")}
    kept = subprocess.run(
        [*squashed, *sysmcp, "hash_tree", f"path={tree}", "baseline=true"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "Integrity baseline of 1 file kept" in kept.stdout, kept.stdout + kept.stderr
    rewrite_keeping_size_and_mtime(tree / "forged")
    (tree / "rewritten").write_bytes(os.urandom(100))
    forged = (tree / "forged").stat()
    assert (forged.st_size, forged.st_mtime_ns) == (then["forged"].st_size, then["forged"].st_mtime_ns)
    assert forged.st_ctime_ns != then["forged"].st_ctime_ns  # a baseline's run apart: the clock moved
    assert (tree / "rewritten").stat().st_mtime_ns != then["rewritten"].st_mtime_ns
    now = subprocess.run(
        [*sysmcp, "what_changed", f"path={tree}", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    integrity = json.loads(now.stdout)["integrity"]
    assert integrity["examples"]["content_changed"] == [f"{tree}/forged", f"{tree}/rewritten"], integrity
    assert integrity["examples"]["metadata_changed"] == [], integrity
    assert integrity["examples"]["unreadable_at_baseline"] == [f"{tree}/untouched"], integrity
    text = subprocess.run(
        [*sysmcp, "what_changed", f"path={tree}"], env=env, capture_output=True, text=True, timeout=60
    ).stdout
    assert (
        f"  content changed: {tree}/forged (unreadable at the baseline; changed ({ctimes(then['forged'], forged)}: "
        "metadata or content changed): content not compared, may have changed)"
    ) in text, text
    assert f"  content changed: {tree}/rewritten (unreadable at the baseline; changed (mtime " in text, text
    assert "): content not compared, may have changed)\n" in text.split(f"{tree}/rewritten", 1)[1], text


def ctimes(then: os.stat_result, now: os.stat_result) -> str:
    """How the answer words a file's ctime then and now (to the second)."""
    from sysmcp.tools.typed import iso_utc

    before, after = iso_utc(then.st_ctime), iso_utc(now.st_ctime)
    return f"ctime {before} → {after}" if before != after else f"ctime changed within {after}"


def test_a_file_read_at_the_baseline_rewritten_with_its_mtime_reset_and_unreadable_now_is_named_by_its_ctime(
    tmp_path: Path,
) -> None:
    """A baseline taken as root read another user's 0600 file; what_changed on a root-squashed export
    cannot. The file was rewritten at its size with its mtime reset since: lstat alone saw no change
    (it was only 'unreadable'); its ctime says its inode changed, and the answer says so."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("root without its read-anything capabilities needs root and setpriv")
    from tests.profile import child_env

    tree = tmp_path / "tree"
    for name in ("open", "forged", "untouched"):
        write(tree / name, 100)
    for theirs in ("forged", "untouched"):
        os.chown(tree / theirs, 4321, 4321)
        os.chmod(tree / theirs, 0o600)
    env = child_env({**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")})
    sysmcp = [sys.executable, "-m", "sysmcp", "call"]
    squashed = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    then = (tree / "forged").stat()
    kept = subprocess.run(
        [*sysmcp, "hash_tree", f"path={tree}", "baseline=true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Integrity baseline of 3 files kept" in kept.stdout, kept.stdout + kept.stderr
    rewrite_keeping_size_and_mtime(tree / "forged")
    forged = (tree / "forged").stat()
    assert forged.st_ctime_ns != then.st_ctime_ns and forged.st_mtime_ns == then.st_mtime_ns
    text = subprocess.run(
        [*squashed, *sysmcp, "what_changed", f"path={tree}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert (
        f"  unreadable: {tree}/forged (unreadable now, but since the baseline: {ctimes(then, forged)} "
        "(metadata or content changed; content not compared))\n"
    ) in text, text
    assert f"  unreadable: {tree}/untouched\n" in text, text


async def test_a_readable_file_whose_mode_was_changed_and_changed_back_is_metadata_changed_by_its_ctime(
    tmp_path: Path, clock: Clock
) -> None:
    """As AIDE's 'c': the same content, mode, owner and mtime, but the inode changed since the baseline
    (a chmod undone: so also a hard link made and removed, ACLs or extended attributes set) is metadata
    changed, naming ctime; a file left alone is in no list."""
    from sysmcp.tools.hash_tree import INPUT_SCHEMA as HASH_INPUT
    from sysmcp.tools.hash_tree import handle as hash_tree

    etc = tmp_path / "etc"
    for name in ("sudoers", "hosts"):
        write(etc / name, 100)
    args = validate_arguments(HASH_INPUT, {"path": str(etc), "baseline": True})
    assert "Integrity baseline of 2 files kept" in (await hash_tree(args, context())).text
    before = (etc / "sudoers").stat()
    while (etc / "sudoers").stat().st_ctime_ns == before.st_ctime_ns:  # until the kernel's clock ticks
        os.chmod(etc / "sudoers", 0o666)
        os.chmod(etc / "sudoers", stat.S_IMODE(before.st_mode))
    after = (etc / "sudoers").stat()
    assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)
    clock.now += 3600
    output = await call(path=str(etc), since="2h")
    result = output.structured["integrity"]
    assert (result["content_changed"], result["metadata_changed"]) == (0, 1), output.text
    assert result["examples"]["metadata_changed"] == [f"{etc}/sudoers"]
    assert (
        f"  metadata changed: {etc}/sudoers ({ctimes(before, after)}: the inode changed, its content did not)"
    ) in output.text, output.text


async def test_a_hard_linked_backup_of_the_tree_buries_no_mode_change_under_ctime_alone(
    tmp_path: Path, clock: Clock
) -> None:
    """A backup that hard-links the tree (``cp -al``, rsnapshot) moves every file's ctime, so every file
    is metadata changed. The count says how many moved in ctime alone, and a file made world-writable is
    the first example shown, not one left among those not shown."""
    from sysmcp.tools.hash_tree import INPUT_SCHEMA as HASH_INPUT
    from sysmcp.tools.hash_tree import handle as hash_tree

    etc = tmp_path / "etc"
    for i in range(15):
        write(etc / f"f{i:02}.conf", 100)
    args = validate_arguments(HASH_INPUT, {"path": str(etc), "baseline": True})
    assert "Integrity baseline of 15 files kept" in (await hash_tree(args, context())).text
    before = (etc / "f00.conf").stat()
    backup = tmp_path / "backup"
    while (etc / "f00.conf").stat().st_ctime_ns == before.st_ctime_ns:  # until the kernel's clock ticks
        shutil.rmtree(backup, ignore_errors=True)
        backup.mkdir()
        for i in range(15):
            os.link(etc / f"f{i:02}.conf", backup / f"f{i:02}.conf")
    os.chmod(etc / "f14.conf", 0o666)
    clock.now += 3600
    output = await call(path=str(etc), since="2h", top_n=5)
    result = output.structured["integrity"]
    assert result["metadata_changed"] == 15, output.text
    assert result["examples"]["metadata_changed"][0] == f"{etc}/f14.conf", output.text
    assert "0 content changed, 15 metadata changed (14 in ctime alone)" in output.text, output.text
    assert f"  metadata changed: {etc}/f14.conf (mode 0644 → 0666" in output.text, output.text


def test_the_words_for_a_ctime_that_alone_moved_say_what_it_can_and_cannot_tell() -> None:
    """A ctime alone moved says the inode changed: with the content the same (metadata changed), with
    another digest nothing more (content changed), and where the content was not compared (unreadable
    then, now, or both) that metadata or content changed."""
    from sysmcp.history.compare import Findings
    from sysmcp.history.diff import BaselineDiff
    from sysmcp.history.snapshots import BaselineFile
    from sysmcp.tools.what_changed import render

    def f(digest: str, ctime: float) -> BaselineFile:
        return BaselineFile(digest, 10, 0.0, 0o600, 0, 0, ctime)

    diff = BaselineDiff(
        True,
        None,
        content=[b"forged", b"rewritten"],
        metadata=[(b"linked", ("ctime",))],
        files={
            b"forged": (f("", 0.0), f("ab", 60.0)),
            b"rewritten": (f("ab", 0.0), f("cd", 60.0)),
            b"linked": (f("ab", 0.0), f("ab", 60.0)),
            b"still": (f("", 0.0), f("", 60.0)),
            b"taken": (f("ab", 0.0), f("", 0.5)),
        },
        unreadable=[b"still", b"taken"],
    )
    text, _, _ = render(
        "/t", Findings(True, integrity=diff, integrity_taken=0.0), {"top_n": 10, "since": "24h"}
    )
    minute = "ctime 1970-01-01T00:00:00Z → 1970-01-01T00:01:00Z"
    for line in (
        f"  content changed: /t/forged (unreadable at the baseline; changed ({minute}: metadata or content "
        "changed): content not compared, may have changed)",
        f"  content changed: /t/rewritten ({minute})",
        f"  metadata changed: /t/linked ({minute}: the inode changed, its content did not)",
        f"  unreadable: /t/still (unreadable then and now, but since the baseline: {minute} (metadata or content "
        "changed; content not compared))",
        "  unreadable: /t/taken (unreadable now, but since the baseline: ctime changed within "
        "1970-01-01T00:00:00Z (metadata or content changed; content not compared))",
    ):
        assert line + "\n" in text + "\n", (line, text)
    # the counts say how many of each only may have changed, or moved in ctime alone
    assert "2 content changed (1 not compared: may have), 1 metadata changed (1 in ctime alone)" in text, text


def record_tree_scan(tree: Path, clock: Clock, stopped: str | None = None) -> Any:
    """A dir_usage scan of ``tree`` recorded in the active store at ``clock``'s time; ``stopped``: the
    reason it stopped early, its snapshot then partial."""
    from dataclasses import replace

    from sysmcp.history.recording import record_scan

    store = state.active()
    assert store is not None
    request = UsageRequest(1000, 0, 1, True, 0, 60.0, root=os.fsencode(tree), options=WalkOptions())
    return record_scan(store, request, lambda r: replace(scan_usage(r), stopped=stopped), clock)


async def test_a_first_scan_after_only_a_partial_one_says_that_snapshot_stopped_early_and_was_not_compared(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    write(tree / "logs" / "app.log", 2 * MiB)
    stopped = record_tree_scan(tree, clock, stopped="its time budget ran out")
    assert stopped.snapshot is not None and stopped.snapshot.partial
    clock.now += 600
    output = await call(path=str(tree), since="1h")
    assert output.structured["comparable"] is False
    assert "no earlier snapshot to compare with" not in output.text, output.text
    assert output.text.startswith(
        f"{tree}: no complete earlier snapshot to compare with: the one snapshot before stopped early "
        "(partial: its totals cover part of the tree) and is not compared"
    ), output.text


async def test_a_first_scan_of_a_tree_with_an_integrity_baseline_does_not_say_there_is_no_baseline(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    write(tree / "a", 100)
    record_baseline(
        state.active(), os.fsencode(tree), b"0" * 64 + b"  a\n", "sha256", WalkOptions(), False, clock
    )
    clock.now += 600
    output = await call(path=str(tree), since="1h")
    assert "Integrity against the baseline of" in output.text, output.text
    assert "no baseline yet" not in output.text, output.text
    assert "no earlier scan to compare sizes with (an integrity baseline keeps no directory sizes)" in (
        output.text
    ), output.text


async def test_a_baseline_file_replaced_by_a_symlink_fifo_or_directory_is_a_changed_type_not_removed(
    tmp_path: Path, clock: Clock
) -> None:
    """The baseline records what is not a regular file too: a file replaced by a link, a FIFO or a
    directory is its name's type changed (content changed, both named), as AIDE says it; only the file
    that is gone is removed."""
    from sysmcp.tools.hash_tree import INPUT_SCHEMA as HASH_INPUT
    from sysmcp.tools.hash_tree import handle as hash_tree

    tree = tmp_path / "tree"
    for name in ("link", "fifo", "dir", "gone", "kept"):
        write(tree / name, 100)
    await hash_tree(validate_arguments(HASH_INPUT, {"path": str(tree), "baseline": True}), context())
    for name in ("link", "fifo", "dir", "gone"):
        (tree / name).unlink()
    (tree / "link").symlink_to("kept")
    os.mkfifo(tree / "fifo")
    (tree / "dir").mkdir()
    clock.now += 600
    output = await call(path=str(tree), since="1h")
    result = output.structured["integrity"]
    assert (result["removed"], result["added"], result["content_changed"]) == (1, 0, 3), output.text
    text = output.text + "\n"
    assert f"content changed: {tree}/link (a regular file → a symbolic link to 'kept')\n" in text, text
    assert f"content changed: {tree}/fifo (a regular file → a FIFO)\n" in text, text
    assert f"content changed: {tree}/dir (a regular file → a directory)\n" in text, text
    assert f"removed: {tree}/gone\n" in text, text


def test_the_count_of_files_added_says_any_may_have_been_there_when_the_baseline_left_unreadable_ones_unnamed() -> (
    None
):
    """1,500 files another user keeps 0600 at the baseline, 1,000 of them named: made readable, the 500
    unnamed are added, and the count that is read first says they may have been there all along."""
    from sysmcp.history.compare import Findings
    from sysmcp.history.diff import BaselineDiff
    from sysmcp.tools.what_changed import render

    unnamed = BaselineDiff(True, None, added=[b"u0005", b"u0007"], unrecorded=500)
    text = render(
        "/t", Findings(True, integrity=unnamed, integrity_taken=0.0), {"top_n": 10, "since": "24h"}
    )[0]
    assert (
        ": 2 added (any may have been there: the baseline could not read 500 files or directories it does not "
        "name), 0 removed, "
    ) in text, text
    named = BaselineDiff(True, None, added=[b"new"])
    text = render("/t", Findings(True, integrity=named, integrity_taken=0.0), {"top_n": 10, "since": "24h"})[
        0
    ]
    assert ": 1 added, 0 removed, " in text, text


def test_an_integrity_check_out_of_time_makes_the_answer_partial_and_says_files_added_past_it_are_not_named() -> (
    None
):
    """hash_tree of the tree now stopped at the time budget: 8,582 files of the baseline not hashed, the
    files added where it did not reach never seen. The answer is partial (``sysmcp call`` exits 3), and
    its first line says so, not only a count in the integrity line."""
    from sysmcp.history.compare import Findings
    from sysmcp.history.diff import BaselineDiff
    from sysmcp.tools.what_changed import render

    cut = BaselineDiff(True, None, removed=[b"d6/f0"], not_checked=8582)
    found = Findings(
        True, integrity=cut, integrity_taken=0.0, integrity_stopped="time budget of 0.3 s reached"
    )
    text, answer, _ = render("/t", found, {"top_n": 10, "since": "24h"})
    assert answer.complete is False
    assert text.startswith(
        "PARTIAL RESULT: the integrity check stopped early (in what the scan left of the time budget: time "
        "budget of 0.3 s reached): 8,582 files of the "
        "baseline not hashed, and files added where it did not reach are not named; a larger timeout_s gives "
        "it more time.\n"
    ), text
    assert "(hashed now; 8,582 files not reached in time)" in text, text


async def test_an_until_before_which_every_snapshot_stopped_early_says_so_not_that_there_is_none(
    tmp_path: Path, clock: Clock
) -> None:
    tree = tmp_path / "tree"
    write(tree / "logs" / "app.log", 2 * MiB)
    for _ in range(2):
        record_tree_scan(tree, clock, stopped="its time budget ran out")
        clock.now += 600
    record_tree_scan(tree, clock)  # complete, after until
    clock.now += 600
    output = await call(path=str(tree), since="1h", until="15m")
    assert output.text.startswith(
        f"{tree}: no complete snapshot to compare with: the 2 snapshots before stopped early (partial: their "
        "totals cover part of the tree) and are not compared."
    ), output.text


async def test_integrity_findings_past_top_n_are_kept_whole_as_a_linked_list(
    tmp_path: Path, clock: Clock
) -> None:
    """12 files rewritten, 3 removed, top_n 10: the text names 10 and counts the rest, and every finding
    (kind, name, what changed) is in a linked list, as an auditor needs the whole of it."""
    from sysmcp.tools.hash_tree import INPUT_SCHEMA as HASH_INPUT
    from sysmcp.tools.hash_tree import handle as hash_tree

    tree = tmp_path / "tree"
    for n in range(15):
        write(tree / f"f{n:02d}", 100)
    write(tree / "nl\nname", 100)
    await hash_tree(validate_arguments(HASH_INPUT, {"path": str(tree), "baseline": True}), context())
    for n in range(12):
        write(tree / f"f{n:02d}", 1)
    for n in range(12, 15):
        (tree / f"f{n:02d}").unlink()
    ctx = context()
    output = await call_tool("what_changed", ctx, path=str(tree), since="1h", top_n=10)
    assert "  … and 2 more files not shown" in output.text, output.text
    assert "Every integrity finding: sysmcp://" in output.text, output.text
    (link,) = output.links
    kept = ctx.results.get(link.uri)
    assert kept is not None
    rows = kept.text.splitlines()
    assert rows[0] == "KIND\tPATH\tWHAT CHANGED"
    assert len(rows) == 16 and rows[1:4] == [f"removed\t{tree}/f{n:02d}\t" for n in range(12, 15)], rows
    for n, row in enumerate(rows[4:]):
        assert row.startswith(f"content_changed\t{tree}/f{n:02d}\tsize 100 B → 101 B"), rows


async def test_an_integrity_check_finds_symlinks_planted_or_repointed_special_files_and_directories_made_writable(
    tmp_path: Path, clock: Clock
) -> None:
    """A symlink planted (to /etc/shadow) or re-pointed, a FIFO made, a directory made world-writable:
    each is a finding, in the counts and lists where it fits, and the answer says what it compares."""
    from sysmcp.tools.hash_tree import INPUT_SCHEMA as HASH_INPUT
    from sysmcp.tools.hash_tree import handle as hash_tree

    tree = tmp_path / "tree"
    write(tree / "sub" / "a", 100)
    os.chmod(tree / "sub", 0o755)
    (tree / "old").symlink_to("sub/a")
    await hash_tree(validate_arguments(HASH_INPUT, {"path": str(tree), "baseline": True}), context())
    (tree / "evil").symlink_to("/etc/shadow")
    (tree / "old").unlink()
    (tree / "old").symlink_to("/tmp")
    os.mkfifo(tree / "pipe")
    os.chmod(tree / "pipe", 0o640)
    os.chmod(tree / "sub", 0o777)
    me, link_mode = f"{os.getuid()}:{os.getgid()}", stat.S_IMODE(os.lstat(tree / "evil").st_mode)
    output = await call(path=str(tree), since="1h")
    text = output.text + "\n"
    assert "): 2 added, 0 removed, 1 content changed, 1 metadata changed\n" in text, text
    assert (
        "\n  Compared: regular files (content, size, mode, owner, mtime, ctime), symbolic links (target, owner), "
        "directories (mode, owner) and special files (type, device number, mode, owner).\n"
    ) in text, text
    evil = f"{tree}/evil (a symbolic link to '/etc/shadow', mode {link_mode:04o}, owner {me})"
    assert f"\n  added: {evil}\n" in text, text
    assert f"\n  added: {tree}/pipe (a FIFO, mode 0640, owner {me})\n" in text, text
    assert f"\n  content changed: {tree}/old (target 'sub/a' → '/tmp')\n" in text, text
    assert f"\n  metadata changed: {tree}/sub (directory, mode 0755 → 0777)\n" in text, text
    result = output.structured["integrity"]
    assert result["links_and_directories_compared"] is True
    assert "symlinks_not_compared" not in result and "special_files_not_compared" not in result
    assert result["examples"]["added"] == [f"{tree}/evil", f"{tree}/pipe"]


def test_an_integrity_check_out_of_descriptors_says_so_and_never_that_time_ran_out() -> None:
    """hash_tree of the tree now stopped because the server had no descriptor left: the answer is partial
    with that reason, and nowhere says time ran out or that a larger timeout_s would help."""
    import errno

    from sysmcp.engine.walk import OutOfDescriptors
    from sysmcp.history.compare import Findings
    from sysmcp.history.diff import BaselineDiff
    from sysmcp.tools.what_changed import render

    reason = OutOfDescriptors(OSError(errno.EMFILE, os.strerror(errno.EMFILE))).reason
    cut = BaselineDiff(True, None, removed=[b"d6/f0"], not_checked=8582)
    found = Findings(True, integrity=cut, integrity_taken=0.0, integrity_stopped=reason)
    text, answer, _ = render("/t", found, {"top_n": 10, "since": "24h"})
    assert answer.complete is False
    assert text.startswith(
        f"PARTIAL RESULT: the integrity check stopped early ({reason}): 8,582 files of the "
    ), text
    assert "(hashed now; 8,582 files not reached: out of file descriptors)" in text, text
    assert "timeout_s" not in text and "time budget" not in text and "in time" not in text, text


def test_a_scan_now_out_of_descriptors_says_so_and_never_that_its_time_budget_ran_out(tmp_path: Path) -> None:
    """The scan made now stopped because the server had no descriptor left: the partial answer gives
    that reason, not 'its time budget'."""
    import errno

    from sysmcp.engine.walk import OutOfDescriptors, WalkOptions
    from sysmcp.history.compare import Findings
    from sysmcp.history.recording import series_of
    from sysmcp.history.snapshots import ScanSnapshot
    from sysmcp.tools.what_changed import render

    reason = OutOfDescriptors(OSError(errno.EMFILE, os.strerror(errno.EMFILE))).reason
    now = ScanSnapshot(series_of(os.fsencode(tmp_path), WalkOptions()), 0.0, True, 0, {})
    found = Findings(True, new=now, fresh=True, stopped="scan_stopped", scan_stopped_reason=reason)
    text, answer, _ = render("/t", found, {"top_n": 10, "since": "24h"})
    assert answer.complete is False
    assert text.startswith(f"PARTIAL RESULT: the scan made now stopped early ({reason}): "), text
    assert "time budget" not in text and "timeout_s" not in text, text


async def test_names_read_back_from_history_are_named_exactly_in_the_structured_content(
    tmp_path: Path, clock: Clock
) -> None:
    """Two directories, one named with the byte 0x80 and one with the four characters ``\\x80``, both
    grown since the baseline: the changes history reads back are two names apart in the JSON, each
    undone to its exact bytes (exact_bytes), and apart in the text (``\\200``, ``\\\\x80``)."""
    from tests.security.test_exact_names import undone

    tree = tmp_path / "tree"
    odd, literal = os.fsencode(tree) + b"/dir\x80", os.fsencode(tree) + b"/dir\\x80"
    for name in (odd, literal):
        write(Path(os.fsdecode(name)) / "f", 3 * MiB)
    await call(path=str(tree), since="24h")
    for name in (odd, literal):
        write(Path(os.fsdecode(name)) / "g", 4 * MiB)
    clock.now += DAY
    result = await call(path=str(tree), since="2d", top_n=50)
    changed = {os.fsencode(c["path"]) for c in undone(result.structured)["changes"]}
    assert {odd, literal} <= changed, result.structured
    assert f"{tree}/dir\\200/" in result.text and f"{tree}/dir\\\\x80/" in result.text, result.text
