"""dir_usage against the truth: real du for totals, an independent walk for the top lists."""

from __future__ import annotations

import itertools
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.parallel import Sharing
from sysmcp.engine.paths import in_json
from sysmcp.engine.usage import TopN, Usage, UsageRequest, scan_usage
from sysmcp.engine.walk import WalkOptions
from sysmcp.results import ResultStore
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.dir_usage import INPUT_SCHEMA, answer
from sysmcp.tools.typed import to_json


def du(root: Path, *flags: str) -> int:
    out = subprocess.run(["du", "-sx", *flags, os.fsencode(root)], capture_output=True, check=True)
    return int(out.stdout.split()[0])


def du_directories(root: Path, depth: int) -> dict[bytes, int]:
    """``du -x -B1 -d N``: disk bytes of every directory down to that depth, as du counts them."""
    out = subprocess.run(
        ["du", "-x", "-B1", "-0", "-d", str(depth), os.fsencode(root)], capture_output=True, check=True
    ).stdout
    sizes = {}
    for record in out.split(b"\0"):
        if record:
            size, _, path = record.partition(b"\t")
            sizes[path] = int(size)
    return sizes


@pytest.fixture(autouse=True, params=[1, 3], ids=["one process", "three processes"])
def processes(request: pytest.FixtureRequest) -> int:
    """Every test here runs twice: one walking process, and three sharing the tree from the start."""
    return int(request.param)


def scan(root: Path, options: WalkOptions, request: UsageRequest, processes: int) -> Usage:
    usage = scan_usage(
        replace(request, root=os.fsencode(root), options=options),
        sharing=Sharing(processes, split_after_s=0.0, pieces=1),
    )
    assert usage.processes == processes or usage.processes == 1  # 1: too few directories to share
    return usage


def usage_of(root: Path, processes: int, **overrides: Any) -> tuple[str, dict[str, Any], str | None]:
    args = validate_arguments(INPUT_SCHEMA, {"path": str(root), **overrides})
    request = UsageRequest(
        top_files=1000,
        top_directories=10_000,
        max_depth=args["max_depth"],
        by_disk=args["sort_by"] == "disk",
        min_size=args["min_size"],
        timeout_s=args["timeout_s"],
        root=os.fsencode(root),
    )
    options = WalkOptions(one_file_system=args["one_file_system"], exclude=tuple(args["exclude"]))
    found, text, full = answer(str(root), scan(root, options, request, processes), args)
    return text, in_json(to_json(found)), full  # type: ignore[return-value]


def build_tree(root: Path) -> None:
    """Distinct sizes (so the top lists have one right answer), hard links, sparse files, odd names."""
    sizes = itertools.count(1000, 7919)
    for top in ("alpha", "beta", "gamma dir", "new\nline", os.fsdecode(b"bad-\xfe")):
        for sub in ("x", "y"):
            directory = root / top / sub
            directory.mkdir(parents=True)
            for i in range(3):
                (directory / f"f{i}").write_bytes(b"d" * next(sizes))
    with (root / "beta" / "sparse.img").open("wb") as sparse:
        sparse.truncate(300 << 20)
        sparse.write(b"head")
    os.link(root / "alpha" / "x" / "f0", root / "alpha" / "x" / "hardlink")
    (root / "alpha" / "loop").symlink_to("..")


def independent_files(root: Path) -> list[tuple[int, int, str]]:
    """Every regular file once per inode, (disk, apparent, path), found with os.walk and lstat."""
    seen = set()
    rows = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            st = os.lstat(path)
            if not os.path.isfile(path) or os.path.islink(path) or (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            rows.append(
                (st.st_blocks * 512, st.st_size, os.fsencode(path).decode("utf-8", "backslashreplace"))
            )
    return rows


def test_totals_equal_du_apparent_and_disk(tmp_path: Path, processes: int) -> None:
    build_tree(tmp_path)
    _, result, _ = usage_of(tmp_path, processes)
    assert result["totals"]["apparent_bytes"] == du(tmp_path, "-b")
    assert result["totals"]["disk_bytes"] == du(tmp_path, "-B1")
    assert result["totals"]["files"] == 31  # 30 + sparse; the hard link is the same file
    assert result["complete"] is True and result["stopped_reason"] is None


@pytest.mark.parametrize("sort_by", ["disk", "apparent"])
def test_largest_files_equal_an_independent_walk(tmp_path: Path, processes: int, sort_by: str) -> None:
    build_tree(tmp_path)
    _, result, _ = usage_of(tmp_path, processes, top_n=7, sort_by=sort_by)
    truth = independent_files(tmp_path)
    expected = sorted(truth, key=lambda row: -(row[0] if sort_by == "disk" else row[1]))[:7]
    got = [(r["disk_bytes"], r["apparent_bytes"], r["path"]) for r in result["largest_files"]]
    if sort_by == "disk":  # disk sizes tie at block granularity: compare the sizes
        assert [g[0] for g in got] == [e[0] for e in expected]
    else:
        assert got == expected
    assert result["files_not_shown"] == len(truth) - 7


@pytest.mark.parametrize("sort_by", ["disk", "apparent"])
def test_ties_in_the_chosen_size_go_by_the_other_size_then_by_name(
    tmp_path: Path, processes: int, sort_by: str
) -> None:
    # Six files in the same three 4 KiB blocks (a disk tie), created out of order; three identical ones.
    for name, size in [("f11", 11000), ("f9", 9000), ("f12", 12000), ("f10", 10000), ("f8.5", 8500)]:
        (tmp_path / name).write_bytes(b"x" * size)
    (tmp_path / "f11.5").write_bytes(b"x" * 11500)
    for name in ("same-c", "same-a", "same-b"):
        (tmp_path / name).write_bytes(b"y" * 2000)
    _, result, _ = usage_of(tmp_path, processes, top_n=50, sort_by=sort_by)
    got = [(r["disk_bytes"], r["apparent_bytes"], r["path"]) for r in result["largest_files"]]
    if sort_by == "disk":
        expected = sorted(got, key=lambda row: (-row[0], -row[1], row[2]))
    else:
        expected = sorted(got, key=lambda row: (-row[1], -row[0], row[2]))
    assert got == expected and len(got) == 9
    names = [os.path.basename(row[2]) for row in got]
    assert names[-3:] == ["same-a", "same-b", "same-c"]
    if sort_by == "disk":
        assert names[:6] == ["f12", "f11.5", "f11", "f10", "f9", "f8.5"]


@pytest.mark.parametrize("by_disk", [True, False], ids=["disk", "apparent"])
def test_a_directory_of_many_more_files_than_listed_gives_the_same_top_files(
    tmp_path: Path, processes: int, by_disk: bool
) -> None:
    """The scan keeps at most about twice top_n of one directory's files while reading it."""
    sizes = [(i * 7919) % 100_003 for i in range(400)]  # distinct, in no order
    for i, size in enumerate(sizes):
        (tmp_path / f"f{i:03d}").write_bytes(b"x" * size)
    request = UsageRequest(
        top_files=5, top_directories=10, max_depth=1, by_disk=by_disk, min_size=0, timeout_s=60, root=b""
    )
    usage = scan(tmp_path, WalkOptions(), request, processes)
    truth = independent_files(tmp_path)

    def key(row: tuple[int, int, str]) -> int:
        return row[0] if by_disk else row[1]

    expected = sorted(truth, key=lambda row: -key(row))[:5]
    got = [(disk, size, path) for size, disk, path in usage.files]
    assert [key(row) for row in got] == [key(row) for row in expected]  # disk sizes may tie: compare keys
    if not by_disk:
        assert [os.path.basename(row[2]) for row in got] == [os.path.basename(row[2]) for row in expected]


def test_sparse_file_ranks_by_its_blocks_on_disk_and_by_its_length_apparently(
    tmp_path: Path, processes: int
) -> None:
    build_tree(tmp_path)
    _, by_disk, _ = usage_of(tmp_path, processes, top_n=1, sort_by="disk")
    _, by_length, _ = usage_of(tmp_path, processes, top_n=1, sort_by="apparent")
    assert not by_disk["largest_files"][0]["path"].endswith("sparse.img")
    assert by_length["largest_files"][0]["path"].endswith("sparse.img")
    assert by_length["largest_files"][0]["apparent_bytes"] == 300 << 20


@pytest.mark.parametrize("depth", [1, 2])
def test_largest_directories_equal_du_at_each_depth(tmp_path: Path, processes: int, depth: int) -> None:
    build_tree(tmp_path)
    truth = du_directories(tmp_path, depth)
    truth.pop(os.fsencode(tmp_path))
    _, result, _ = usage_of(tmp_path, processes, top_n=50, max_depth=depth, show="directories")
    expected = {path.decode("utf-8", "backslashreplace"): size for path, size in truth.items()}
    got = {row["path"]: row["disk_bytes"] for row in result["largest_directories"]}
    assert got == expected
    sizes = [row["disk_bytes"] for row in result["largest_directories"]]
    assert sizes == sorted(sizes, reverse=True)
    assert result["directories_not_shown"] == 0


def test_lists_are_cut_to_top_n_and_say_how_many_more(tmp_path: Path, processes: int) -> None:
    build_tree(tmp_path)
    text, result, full = usage_of(tmp_path, processes, top_n=2)
    assert len(result["largest_files"]) == 2 and len(result["largest_directories"]) == 2
    assert result["files_not_shown"] == 29 and result["directories_not_shown"] == 3
    assert "… and 29 more files not shown" in text
    assert "… and 3 more directories not shown" in text
    assert full is not None and full.count("\n") > 30  # the longer lists, for the resource


def test_names_with_newlines_stay_on_one_line_and_invalid_utf8_is_escaped(
    tmp_path: Path, processes: int
) -> None:
    build_tree(tmp_path)
    text, result, _ = usage_of(tmp_path, processes, top_n=50, max_depth=2)
    assert any("new\nline" in r["path"] for r in result["largest_directories"])  # raw in JSON
    assert any("bad-\\xfe" in r["path"] for r in result["largest_directories"])  # display in JSON
    assert "new\\nline" in text and "bad-\\376" in text  # ls -b
    assert not any(line.startswith("line") for line in text.splitlines())  # no name broken in two
    _, _, full = usage_of(tmp_path, processes, top_n=1, max_depth=2)
    assert full is not None and "new\\nline" in full and "bad-\\376" in full
    rows = [line for line in full.splitlines() if not line.startswith("#")]
    assert all(line.count("\t") in (2, 3) for line in rows)


def test_min_size_and_exclude_narrow_the_lists(tmp_path: Path, processes: int) -> None:
    build_tree(tmp_path)
    _, result, _ = usage_of(tmp_path, processes, min_size=200_000, top_n=50)
    assert all(r["apparent_bytes"] >= 200_000 for r in result["largest_files"])
    assert result["files_not_shown"] == 0
    assert len(result["largest_files"]) == sum(
        1 for _, size, _ in independent_files(tmp_path) if size >= 200_000
    )
    _, excluded, _ = usage_of(tmp_path, processes, exclude=["beta", "*/y/f1"])
    assert not any("beta" in r["path"] for r in excluded["largest_directories"])
    assert excluded["skipped"] == {"excluded": 5}  # beta, and y/f1 in the four others
    expected = (
        du(tmp_path, "-b")
        - du(tmp_path / "beta", "-b")
        - sum((p / "y" / "f1").stat().st_size for p in tmp_path.iterdir() if p.name != "beta")
    )
    assert excluded["totals"]["apparent_bytes"] == expected


def test_show_picks_the_lists(tmp_path: Path, processes: int) -> None:
    build_tree(tmp_path)
    text, files_only, _ = usage_of(tmp_path, processes, show="files")
    assert files_only["largest_directories"] == [] and files_only["largest_files"]
    assert "Largest directories" not in text
    text, dirs_only, _ = usage_of(tmp_path, processes, show="directories")
    assert dirs_only["largest_files"] == [] and dirs_only["largest_directories"]
    assert "Largest files" not in text


def test_a_spent_time_budget_gives_a_partial_result_clearly_marked(tmp_path: Path, processes: int) -> None:
    for i in range(50):
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}" / "f").write_bytes(b"x" * (i + 1))
    args = validate_arguments(INPUT_SCHEMA, {"path": str(tmp_path), "timeout_s": 1})
    ticks = itertools.count()
    request = UsageRequest(1000, 10_000, 1, True, 0, 1.0, root=os.fsencode(tmp_path))
    usage = scan_usage(
        request,
        clock=lambda: next(ticks) * 0.1,
        sharing=Sharing(processes, split_after_s=0.0, pieces=1),
    )
    found, text, _ = answer(str(tmp_path), usage, args)
    result = to_json(found)
    assert result["complete"] is False
    assert result["stopped_reason"] == "time budget of 1 s reached"
    assert text.startswith("PARTIAL RESULT")
    assert 0 < result["totals"]["files"] < 50
    assert result["totals"]["apparent_bytes"] > 0


def test_top_n_heap_keeps_the_largest_and_breaks_ties_by_arrival() -> None:
    top = TopN(3)
    for key, item in [(5, "a"), (1, "b"), (9, "c"), (5, "d"), (7, "e"), (9, "f")]:
        top.offer(key, item)
    assert top.largest() == ["c", "f", "e"]
    assert top.floor == 7
    empty = TopN(0)
    empty.offer(1, "x")
    assert empty.largest() == [] and not empty.full


def test_the_result_store_evicts_the_oldest_beyond_its_cap_and_encodes_names() -> None:
    store = ResultStore(cap_bytes=1000)
    first = store.put("dir_usage-my dir#1.tsv", "a" * 400, description="one")
    second = store.put("b", "é" * 200, description="two")  # 400 bytes of UTF-8
    assert first.uri.endswith("/dir_usage-my%20dir%231.tsv") and second.size == 400
    third = store.put("c", "c" * 400, description="three")
    assert store.get(first.uri) is None  # over 1000 bytes: the oldest went
    assert [item.uri for item in store.list()] == [second.uri, third.uri]
    huge = store.put("d", "d" * 5000, description="bigger than the cap")
    assert [item.uri for item in store.list()] == [huge.uri]  # the newest always stays readable


def test_the_typed_result_names_the_root_device_and_each_listed_directory(
    tmp_path: Path, processes: int
) -> None:
    """What a caller keeping scans reads (history): the root's st_dev, rows by name, no re-walk."""
    for top in ("a", "b", "c", "d"):
        (tmp_path / top / "sub").mkdir(parents=True)
        (tmp_path / top / "sub" / "f").write_bytes(b"x" * (1000 * len(top) + ord(top)))
    request = UsageRequest(
        top_files=10, top_directories=10, max_depth=2, by_disk=False, min_size=0, timeout_s=60, root=b""
    )
    usage = scan(tmp_path, WalkOptions(), request, processes)
    assert usage.root_dev == os.stat(tmp_path).st_dev
    by_name = {row.relative: row for row in usage.directories}
    assert set(by_name) == {"a", "b", "c", "d", "a/sub", "b/sub", "c/sub", "d/sub"}
    assert by_name["d"].files == 1 and by_name["d/sub"].depth == 2
    assert (
        by_name["d"].apparent
        == os.lstat(tmp_path / "d").st_size + os.lstat(tmp_path / "d/sub").st_size + 1100
    )
    assert usage.files[0].relative == "d/sub/f"
    assert usage.modified["d/sub/f"] == os.lstat(tmp_path / "d/sub/f").st_mtime
