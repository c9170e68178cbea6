"""dir_usage's times and types: file ages, modified_within / modified_before, the extension tally.

Checked against an independent Python walk, with one walking process and with three sharing the
tree (hard links across their subtrees must still count once).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest

from sysmcp.engine.parallel import Sharing
from sysmcp.engine.usage import extension_of, scan_usage
from sysmcp.engine.walk import WalkOptions
from sysmcp.protocol.failures import ArgumentError
from sysmcp.render import age as age_text
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.dir_usage import (
    INPUT_SCHEMA,
    TOOL,
    answer,
    handle,
    parse_duration,
    request_for,
    time_window,
)
from sysmcp.tools.typed import iso_utc, to_json
from tests.harness import tool_context

pytestmark = pytest.mark.anyio

DAY = 86400
OLD = 30 * DAY


@pytest.fixture(params=[1, 3], ids=["one process", "three processes"])
def processes(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def build(root: Path) -> dict[Path, float]:
    """Files of distinct sizes and many extensions, half of them 30 days old; returns path → mtime."""
    now = time.time()
    names = ["app.log", "APP.LOG", "db.sqlite", "a.tar.gz", ".bashrc", "README", "trailing.", "x.bin"]
    mtimes: dict[Path, float] = {}
    size = 1000
    for top in ("new", "old", "mixed"):
        for sub in ("a", "b"):
            directory = root / top / sub
            directory.mkdir(parents=True)
            for index, name in enumerate(names):
                path = directory / f"{index}{name}" if not name.startswith(".") else directory / name
                size += 4099
                path.write_bytes(b"z" * size)
                age = 0 if top == "new" else OLD if top == "old" else (OLD if index % 2 else 0)
                os.utime(path, (now - age, now - age))
                mtimes[path] = now - age
    os.link(root / "new" / "a" / "0app.log", root / "old" / "b" / "linked.log")  # one inode, two subtrees
    return mtimes


def truth(root: Path, keep: Any = lambda mtime: True) -> tuple[dict[str, list[int]], tuple[int, int, int]]:
    """Extension → [files, apparent, disk] and (files, apparent, disk) of the files ``keep`` accepts,
    each inode once, by an os.walk in sorted order (the first name of an inode wins, as a walk's does
    not have to: the tree's hard link shares its extension)."""
    seen = set()
    table: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    count = apparent = disk = 0
    for directory, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            st = os.lstat(os.path.join(directory, name))
            if (st.st_dev, st.st_ino) in seen or not keep(st.st_mtime):
                continue
            seen.add((st.st_dev, st.st_ino))
            stem, dot, ext = name.rpartition(".")
            key = "." + ext.lower() if dot and stem and ext else "(none)"
            row = table[key]
            row[0] += 1
            row[1] += st.st_size
            row[2] += st.st_blocks * 512
            count, apparent, disk = count + 1, apparent + st.st_size, disk + st.st_blocks * 512
    return dict(table), (count, apparent, disk)


def run(root: Path, processes: int, **overrides: Any) -> tuple[str, dict[str, Any]]:
    args = validate_arguments(INPUT_SCHEMA, {"path": str(root), **overrides})
    now = time.time()
    usage = scan_usage(
        request_for(args, time_window(args, now), os.fsencode(root), WalkOptions()),
        sharing=Sharing(processes, split_after_s=0.0, pieces=1),
    )
    found, text, _ = answer(str(root), usage, args, now)
    structured = to_json(found)
    jsonschema.validate(structured, TOOL.output_schema)
    return text, structured


def du_bytes(root: Path) -> int:
    return int(subprocess.run(["du", "-sxb", root], capture_output=True, check=True).stdout.split()[0])


def test_every_listed_file_carries_its_mtime_and_its_age(tmp_path: Path, processes: int) -> None:
    mtimes = build(tmp_path)
    text, result = run(tmp_path, processes, top_n=50)
    assert result["largest_files"]
    for row in result["largest_files"]:
        mtime = os.lstat(row["path"]).st_mtime
        assert row["modified"] == datetime.fromtimestamp(mtime, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert "(30 d old)" in text and "(0 s old)" in text
    assert len(mtimes) == 48


def test_modified_within_keeps_only_new_files_and_adds_their_totals(tmp_path: Path, processes: int) -> None:
    build(tmp_path)
    cutoff = time.time() - 7 * DAY
    text, result = run(tmp_path, processes, modified_within="7d", top_n=50)
    _, (count, apparent, disk) = truth(tmp_path, lambda mtime: mtime >= cutoff)
    assert result["totals"]["matching"] == {"files": count, "apparent_bytes": apparent, "disk_bytes": disk}
    assert result["totals"]["apparent_bytes"] == du_bytes(tmp_path)  # the tree totals stay du's
    listed = result["largest_files"]
    assert len(listed) + result["files_not_shown"] == count
    assert all(os.lstat(row["path"]).st_mtime >= cutoff for row in listed)
    assert {row["path"] for row in listed} >= {str(tmp_path / "new" / "a" / "1APP.LOG")}
    assert f"Files modified within 7 d: {count:,}," in text
    assert "modified_after" in result and "modified_until" not in result


def test_modified_before_keeps_only_old_files(tmp_path: Path, processes: int) -> None:
    build(tmp_path)
    cutoff = time.time() - 7 * DAY
    _, result = run(tmp_path, processes, modified_before=7 * DAY, top_n=3)
    _, (count, _, disk) = truth(tmp_path, lambda mtime: mtime < cutoff)
    assert (
        result["totals"]["matching"]["files"] == count and result["totals"]["matching"]["disk_bytes"] == disk
    )
    assert len(result["largest_files"]) == 3 and result["files_not_shown"] == count - 3
    assert all(os.lstat(row["path"]).st_mtime < cutoff for row in result["largest_files"])


def test_both_bounds_select_the_files_modified_between_them(tmp_path: Path, processes: int) -> None:
    build(tmp_path)
    now = time.time()
    _, result = run(tmp_path, processes, modified_within="60d", modified_before="1w", top_n=50)
    _, (count, _, _) = truth(tmp_path, lambda mtime: now - 60 * DAY <= mtime < now - 7 * DAY)
    assert result["totals"]["matching"]["files"] == count > 0


def test_extension_totals_equal_a_python_walk(tmp_path: Path, processes: int) -> None:
    build(tmp_path)
    text, result = run(tmp_path, processes, show="extensions", top_n=50)
    expected, _ = truth(tmp_path)
    got = {
        row["extension"]: [row["files"], row["apparent_bytes"], row["disk_bytes"]]
        for row in result["extensions"]
    }
    assert got == expected
    assert [row["extension"] for row in result["extensions"]] == sorted(
        got, key=lambda ext: (-got[ext][2], -got[ext][1], ext)
    )
    assert result["largest_files"] == [] and result["largest_directories"] == []
    assert "(none)" in got and ".log" in got and ".gz" in got and ".LOG" not in got
    assert "Top extensions (by disk usage):" in text


def test_extensions_count_only_matching_files_and_are_bounded(tmp_path: Path, processes: int) -> None:
    build(tmp_path)
    cutoff = time.time() - 7 * DAY
    _, result = run(tmp_path, processes, show="all", modified_before="7d", top_n=2)
    expected, _ = truth(tmp_path, lambda mtime: mtime < cutoff)
    assert len(result["extensions"]) == 2 and result["extensions_not_shown"] == len(expected) - 2
    for row in result["extensions"]:
        assert [row["files"], row["apparent_bytes"], row["disk_bytes"]] == expected[row["extension"]]
    assert result["largest_files"] and result["largest_directories"]  # 'all' keeps the other lists


def test_extensions_cut_from_the_text_are_all_in_the_full_listing(tmp_path: Path) -> None:
    for n in range(4):
        (tmp_path / f"f.e{n}").write_bytes(b"x" * (n + 1) * 5000)
    args = validate_arguments(INPUT_SCHEMA, {"path": str(tmp_path), "show": "extensions", "top_n": 1})
    now = time.time()
    usage = scan_usage(request_for(args, time_window(args, now), os.fsencode(tmp_path), WalkOptions()))
    _found, text, full = answer(str(tmp_path), usage, args, now)
    assert "… and 3 more extensions not shown" in text
    assert full is not None  # was None: the three extensions cut were nowhere to be seen
    rows = full.split("# extensions (4)\n", 1)[1].splitlines()[1:]  # after its header line
    assert [row.split("\t")[3] for row in rows] == [".e3", ".e2", ".e1", ".e0"], full


def test_durations_and_extensions_read_as_documented() -> None:
    assert [parse_duration(v, "x") for v in ("90s", "45m", "6h", "7d", "2w", "3600", " 1.5h ")] == [
        90,
        2700,
        21600,
        604800,
        1209600,
        3600,
        5400,
    ]
    assert parse_duration(120, "x") == 120 and parse_duration(0.5, "x") == 0.5
    assert [extension_of(n) for n in ("a.LOG", "a.tar.gz", ".bashrc", "README", "trailing.", "..")] == [
        ".log",
        ".gz",
        "(none)",
        "(none)",
        "(none)",
        "(none)",
    ]
    assert [age_text(s) for s in (5, 125, 7200, 3 * DAY, 800 * DAY)] == ["5 s", "2 min", "2 h", "3 d", "2 y"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"modified_within": "7x"}, "'modified_within' must be a duration such as '90s'"),
        ({"modified_within": "seven days"}, "'modified_within' must be a duration"),
        ({"modified_before": "-5"}, "'modified_before' must be a duration"),
        ({"modified_before": 0}, "'modified_before' must be more than 0"),
        ({"modified_within": "1000000w"}, "at most 200 years"),
        ({"modified_within": 10**400}, "at most 200 years"),  # an integer no float can hold
        ({"modified_before": -(10**400)}, "'modified_before' must be more than 0"),
        ({"modified_within": "1d", "modified_before": "7d"}, "'modified_before' must be shorter than"),
        ({"modified_within": True}, "'modified_within' must be a string or a number"),
        ({"show": "types"}, "'show' must be one of"),
    ],
)
async def test_bad_inputs_get_clear_errors(tmp_path: Path, args: dict[str, Any], message: str) -> None:
    ctx = tool_context()
    with pytest.raises(ArgumentError, match=message), anyio.fail_after(10):
        await handle(validate_arguments(INPUT_SCHEMA, {"path": str(tmp_path), **args}), ctx)


def build_linked_tree(root: Path) -> int:
    """12 top directories, each with 300 files of its own and a name for each of 20 shared inodes
    one level down (so the processes walking them each meet the shared ones); returns the inodes."""
    (root / "first").write_bytes(b"1")  # the root's listing comes first: the split happens before any link
    shared = root / "shared"
    shared.mkdir()
    for i in range(20):
        (shared / f"s{i}.dat").write_bytes(b"s" * (5000 + 97 * i))
    for top in range(12):
        deep = root / f"top{top:02d}" / "deep"
        deep.mkdir(parents=True)
        for i in range(300):
            (deep / f"f{i}.txt").write_bytes(b"f" * (i + 1))
        for i in range(20):
            os.link(shared / f"s{i}.dat", deep / f"link{i}.dat")
    return 1 + 20 + 12 * 300


def test_hard_links_seen_by_several_processes_count_once_in_matching_and_extension_totals(
    tmp_path: Path,
) -> None:
    distinct = build_linked_tree(tmp_path)  # 20 inodes with a name in each of 12 top directories
    args = validate_arguments(INPUT_SCHEMA, {"path": str(tmp_path), "show": "all", "modified_within": "1h"})
    now = time.time()
    request = request_for(args, time_window(args, now), os.fsencode(tmp_path), WalkOptions())
    usage = scan_usage(request, sharing=Sharing(3, split_after_s=0.0, pieces=2))
    assert usage.processes == 3
    expected, (count, apparent, disk) = truth(tmp_path)
    assert usage.matching == (count, apparent, disk) and count == distinct
    assert usage.eligible_files == distinct
    assert {ext: [n, a, d] for ext, n, a, d in usage.extensions} == expected
    os.utime(tmp_path / "first", (now - OLD, now - OLD))  # the one old file: listed in the root's listing
    old_only = validate_arguments(INPUT_SCHEMA, {"path": str(tmp_path), "modified_before": "1h"})
    none = scan_usage(
        request_for(old_only, time_window(old_only, now), os.fsencode(tmp_path), WalkOptions()),
        sharing=Sharing(3, split_after_s=0.0, pieces=2),
    )
    assert none.processes == 3
    assert none.matching is not None and none.matching[:2] == (1, 1)
    assert none.eligible_files == 1 and [row[2] for row in none.files] == ["first"]


def test_iso_utc_prints_what_datetime_prints_or_none_out_of_its_range() -> None:
    def reference(mtime: float) -> str | None:
        try:
            return datetime.fromtimestamp(mtime, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        except (OverflowError, OSError, ValueError):
            return None

    edges = [0.0, -0.0, 1e-7, 0.9999994, 0.9999995, 1.9999999, 2.5e-6, -0.5, -5e-7, -4e-7, -1.0000005]
    edges += [253_402_300_799.9999, 253_402_300_799.9999996, 253_402_300_800.0, -62_135_596_800.0]
    edges += [-62_135_596_800.5, -62_135_596_801.0, 1e20, -1e20, float("inf"), float("-inf"), float("nan")]
    now = time.time()
    near_halves = [round(now) + k / 1e6 + d for k in range(0, 1_000_000, 997) for d in (-5e-7, 5e-7, 0.0)]
    spread = [k * 7_919.123_456_7 for k in range(-10_000, 40_000)]
    for mtime in edges + near_halves + spread:
        assert iso_utc(mtime) == reference(mtime), mtime
