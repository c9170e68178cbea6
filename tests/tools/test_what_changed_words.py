"""what_changed's words for what an admin acts on: growth and shrinkage apart, one line for a chain
of directories carrying one change, seconds when the snapshots are close, the files removed and
shrunk, the filesystem's growth over a short span, a future 'since' refused, history off said first.
Rendered from plain values (no clock), or through the handler where the refusal is the point."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from sysmcp.history import state
from sysmcp.history.compare import Findings, LowerBound
from sysmcp.history.diff import Growth, diff_scans
from sysmcp.history.snapshots import FILES_KEPT, DirTotals, FileRow, ScanSnapshot, Series
from sysmcp.protocol.failures import ArgumentError
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.typed import to_json
from sysmcp.tools.what_changed import INPUT_SCHEMA, TOOL, render
from tests.tools.test_what_changed import call

pytestmark = pytest.mark.anyio
MiB = 1 << 20
SERIES = Series("h", "8:1/abc", b"/srv", "{}")
THEN = time.mktime((2026, 12, 3, 7, 51, 2, 0, 0, -1))  # a local time, as the answer shows it


def snap(
    taken: float, sizes: dict[bytes, int], files: list[FileRow] | None = None, id: int = 1
) -> ScanSnapshot:
    dirs = {p: DirTotals(s, s, 1) for p, s in sizes.items()}
    return ScanSnapshot(SERIES, taken, False, MiB, dirs, files or [], id)


OLD = {b"": 30 * MiB, b"a": 10 * MiB, b"b": 2 * MiB, b"c": 5 * MiB, b"c/deep": 5 * MiB, b"c/deep/er": 5 * MiB}
NEW = {b"": 40 * MiB, b"a": 22 * MiB, b"b": 5 * MiB, b"c": 0, b"c/deep": 0, b"c/deep/er": 0}


def words(old: ScanSnapshot, new: ScanSnapshot, **facts: Any) -> tuple[str, dict[str, Any]]:
    found = Findings(True, old=old, new=new, diff=diff_scans(old, new), mount_point="/srv", **facts)
    args = validate_arguments(INPUT_SCHEMA, {"path": "/srv", "since": "last"})
    text, answer, _ = render("/srv", found, args)
    structured = to_json(answer)
    jsonschema.validate(structured, TOOL.output_schema)
    return text, structured


def test_a_mixed_change_says_growth_and_shrinkage_apart_never_a_share_above_100_percent() -> None:
    text, structured = words(snap(THEN, OLD), snap(THEN + 38, NEW, id=2))
    assert "+15.0 MiB grew, in these 2 directories: /srv/a, /srv/b" in text, text
    assert "−5.0 MiB shrank, in this directory: /srv/c/deep/er" in text, text
    assert "160 %" not in text and "150 %" not in text
    assert (
        structured["attribution"]["percent"] == 100.0 and structured["shrinkage"]["total_bytes"] == -5 * MiB
    )


def test_a_chain_of_directories_carrying_one_change_is_one_line_naming_its_parents() -> None:
    text, structured = words(snap(THEN, OLD), snap(THEN + 38, NEW, id=2))
    listed = [line.strip() for line in text.splitlines() if "/srv/c" in line and line.startswith("  ")]
    assert listed == ["−5.0 MiB  /srv/c/deep/er/ (the same change as its 2 parents /srv/c/deep/, /srv/c/)"]
    assert [c["path"] for c in structured["changes"]] == ["/srv/a", "/srv/c/deep/er", "/srv/b"]


def test_snapshots_under_an_hour_apart_show_their_seconds_and_never_two_identical_ends() -> None:
    text, _ = words(snap(THEN, OLD), snap(THEN + 38, NEW, id=2))
    assert "[Thu 03 Dec 07:51:02 → 07:51:40;" in text, text
    far, _ = words(snap(THEN, OLD), snap(THEN + 2 * 86400, NEW, id=2))
    assert "[Thu 03 Dec 07:51 → Sat 05 Dec 07:51;" in far, far


def test_removed_and_shrunk_files_are_named_as_new_ones_are() -> None:
    old_files = [
        FileRow(b"c/deep/er/dump", 5 * MiB, 5 * MiB, THEN - 60),
        FileRow(b"a/log", 8 * MiB, 8 * MiB, THEN),
    ]
    new_files = [
        FileRow(b"a/log", 2 * MiB, 2 * MiB, THEN + 30),
        FileRow(b"a/big", 18 * MiB, 18 * MiB, THEN + 30),
    ]
    text, structured = words(snap(THEN, OLD, old_files), snap(THEN + 38, NEW, new_files, id=2))
    assert "Largest files removed:\n     −5.0 MiB  /srv/c/deep/er/dump" in text, text
    assert "Largest files that shrank:\n     −6.0 MiB  /srv/a/log (8.0 MiB → 2.0 MiB)" in text, text
    assert structured["removed_files"] == [{"path": "/srv/c/deep/er/dump", "disk_bytes": 5 * MiB}]
    assert structured["shrunk_files"][0]["old_disk_bytes"] == 8 * MiB


def test_a_listed_file_larger_now_is_named_as_grown_with_its_sizes_not_as_new() -> None:
    old_files = [FileRow(b"a/app.log", 100 << 10, 100 << 10, THEN - 60), FileRow(b"b/same", MiB, MiB, THEN)]
    new_files = [FileRow(b"a/app.log", 3 * MiB, 3 * MiB, THEN + 30), FileRow(b"b/same", MiB, MiB, THEN)]
    text, structured = words(snap(THEN, OLD, old_files), snap(THEN + 38, NEW, new_files, id=2))
    assert "Largest files that grew:\n     +2.9 MiB  /srv/a/app.log (100.0 KiB → 3.0 MiB)" in text, text
    assert "Largest new files" not in text and structured["new_files"] == []
    assert structured["grown_files"] == [
        {"path": "/srv/a/app.log", "old_disk_bytes": 100 << 10, "disk_bytes": 3 * MiB}
    ]
    _, unchanged = words(snap(THEN, OLD, old_files), snap(THEN + 38, NEW, old_files, id=2))
    assert "grown_files" not in unchanged  # left out when none: other answers stay as they were


def test_a_file_new_to_a_full_list_of_the_largest_is_named_with_the_caveat_that_it_may_have_grown_into_it() -> (
    None
):
    """The older snapshot kept its 100 largest files: a log rewritten from small to large since is
    missing from that list, so 'new' is only what the list can tell, and the answer says so."""
    full = [FileRow(f"big{i}".encode(), 20 * MiB, 20 * MiB, THEN - 60) for i in range(FILES_KEPT)]
    rewritten = FileRow(b"a/app.log", 30 * MiB, 30 * MiB, THEN + 30)
    text, structured = words(snap(THEN, OLD, full), snap(THEN + 38, NEW, [rewritten, *full], id=2))
    assert "Largest new files:\n    30.0 MiB  /srv/a/app.log" in text, text
    caveat = f"the older snapshot kept only its {FILES_KEPT} largest files: a file named new may have been there then"
    assert any(note.startswith(caveat) for note in structured["notes"]), structured["notes"]
    text, structured = words(snap(THEN, OLD, full[:3]), snap(THEN + 38, NEW, [rewritten, *full[:3]], id=2))
    assert (
        "Largest new files" in text and "may have been there then" not in text
    )  # a list not full holds every file


def test_the_filesystems_growth_over_seconds_is_said_with_the_part_the_directories_do_not_explain() -> None:
    growth = Growth(5, THEN, THEN + 8, 60 * MiB)  # 50 MiB more than the tree's +10 MiB
    text, structured = words(snap(THEN, OLD), snap(THEN + 8, NEW, id=2), growth=growth, readings_span_s=8.0)
    assert (
        "Filesystem /srv: used +60.0 MiB from 5 disk readings [Thu 03 Dec 07:51:02 → 07:51:10]; the directories "
        "under /srv account for +10.0 MiB, so +50.0 MiB is elsewhere (other directories, deleted files still "
        "open): disk_usage path=/srv explain=true accounts for it." in text
    ), text
    assert structured["filesystem_growth"]["unexplained_bytes"] == 50 * MiB
    assert "+0 B" not in text


def test_the_explain_it_suggests_names_a_mount_point_holding_a_backslash_itself() -> None:
    """The text shows the mount point escaped (``\\\\``), but the call it suggests passes it as a JSON
    string: ``path=/srv/a\\\\b`` would name a directory with two backslashes."""
    growth = Growth(5, THEN, THEN + 8, 60 * MiB)
    old, new = snap(THEN, OLD), snap(THEN + 8, NEW, id=2)
    found = Findings(
        True,
        old=old,
        new=new,
        diff=diff_scans(old, new),
        mount_point="/srv/a\\b",
        growth=growth,
        readings_span_s=8.0,
    )
    args = validate_arguments(INPUT_SCHEMA, {"path": "/srv", "since": "last"})
    text, _, _ = render("/srv", found, args)
    assert "Filesystem /srv/a\\\\b: used +60.0 MiB" in text, text
    assert 'disk_usage path="/srv/a\\\\b" explain=true accounts for it.' in text, text


async def test_a_since_in_the_future_is_refused_before_any_scan(tmp_path: Path) -> None:
    state.configure(tmp_path / "state")
    try:
        with pytest.raises(ArgumentError, match="'since' is in the future"):
            await call(path=str(tmp_path), since="2999-01-01T00:00")
        assert not (tmp_path / "state").exists()
    finally:
        state.configure(None)


async def test_with_history_off_the_answer_says_so_before_its_lower_bound(tmp_path: Path) -> None:
    state.configure(None)
    (tmp_path / "f").write_bytes(b"x")
    text = (await call(path=str(tmp_path))).text
    first = text.splitlines()[0]
    assert first.startswith(f"{tmp_path}: nothing to compare with: history is off on this host")
    assert state.OFF_BECAUSE in first
    assert text.index("history is off") < text.index("LOWER BOUND")


def test_a_lower_bound_whose_walk_stopped_early_says_it_counts_only_what_the_walk_reached() -> None:
    found = Findings(True, lower_bound=LowerBound(3, 5 * MiB, [("a.log", 5 * MiB)], "time budget exhausted"))
    args = validate_arguments(INPUT_SCHEMA, {"path": "/srv", "since": "24h"})
    text, answer, _ = render("/srv", found, args)
    assert answer.complete is False  # was True: sysmcp call exited 0 for it
    assert text.split("\n")[0] == (
        "PARTIAL RESULT: the walk for files modified since stopped early (time budget exhausted): the lower "
        "bound below counts only the files it reached; a larger timeout_s gives it more time."
    ), text


def test_files_of_the_size_at_the_cut_are_counted_not_removed_and_one_rewritten_there_may_have_been_as_large() -> (
    None
):
    """Of just the size of the smallest kept, a file missing from the newer list may have been cut from it
    among equals: counted in a note, in the text and the structured answer alike, never named removed. A
    file rewritten at that size since, new to the newer list, may have been there then just as large:
    the caveat says "no larger", not "smaller"."""
    tied = [FileRow(f"t{i:03}".encode(), MiB, MiB, THEN - 60) for i in range(FILES_KEPT)]
    rewritten = FileRow(b"u", MiB, MiB, THEN + 30)
    text, structured = words(snap(THEN, OLD, tied), snap(THEN + 38, NEW, [*tied[:-1], rewritten], id=2))
    said = (
        "1 file the older snapshot kept, of just the size of the smallest the newer kept (1.0 MiB), is not in"
    )
    assert "Largest files removed" not in text and structured.get("removed_files") in (None, [])
    assert said in text and any(note.startswith(said) for note in structured["notes"]), structured["notes"]
    caveat = "a file named new may have been there then, no larger than the smallest of those"
    assert caveat in text and any(caveat in note for note in structured["notes"])
