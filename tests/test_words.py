"""Words a person reads, as issue 27 (defect 7) found them wrong: each test fails on the words it replaced."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from sysmcp.engine.hashing import ALGORITHMS, TreeHash
from sysmcp.engine.mounts import Mount, MountTable
from sysmcp.engine.procs import DeletedFile, Holder, Scan
from sysmcp.tools import hash_tree
from sysmcp.tools.deleted_open_files import render

SYSMCP = [sys.executable, "-m", "sysmcp"]


def call(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SYSMCP, "call", *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def test_hash_tree_counts_the_symlinks_it_leaves_out(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    for n in range(3):
        (tmp_path / f"link{n}").symlink_to(tmp_path / "a")
    done = call("--json", "hash_tree", f"path={tmp_path}")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["files"] == 1
    assert result["skipped"] == {"symlink": 3}  # was {}: three names silently out of the manifest


def test_every_reason_a_walk_skips_for_and_what_files_read_counts_are_said_in_the_output_schemas(
    tmp_path: Path,
) -> None:
    from tests.harness import tool

    (tmp_path / "a").write_bytes(b"x" * 100_000)  # over 64 KiB: head/tail, then whole
    (tmp_path / "b").write_bytes(b"x" * 100_000)
    (tmp_path / "link").symlink_to(tmp_path / "a")
    hashed = json.loads(call("--json", "hash_tree", f"path={tmp_path}").stdout)
    said = tool("hash_tree").output_schema["properties"]["skipped"]["description"]
    assert hashed["skipped"] and all(reason in said for reason in hashed["skipped"]), said  # was no symlink
    found = json.loads(call("--json", "find_duplicates", f"path={tmp_path}").stdout)
    assert found["files_read"] > found["files_scanned"]  # two sieves opened each file: opens, not files
    assert (
        "once per sieve" in tool("find_duplicates").output_schema["properties"]["files_read"]["description"]
    )


def test_the_help_names_every_finding_that_exits_1_and_mb_is_said_to_state_every_size_in_mib() -> None:
    from sysmcp.cli.call import EXIT_CODES_HELP, exit_status
    from tests.harness import tool

    failing = {"structuredContent": {"devices": [{"verdict": "failing"}]}}
    assert exit_status("disk_health", failing) == 1
    assert "disk_health" in EXIT_CODES_HELP.split("\n  2 ")[0]  # was not named among the 1s
    text = call("disk_usage", "path=/", "unit=mb").stdout
    assert re.search(r"[\d,]+ MiB used, [\d,]+ MiB free of [\d,]+ MiB", text), text
    said = tool("disk_usage").input_schema["properties"]["unit"]["description"]
    assert "'mb': sizes in whole MiB" in said  # was "'mb': free MiB", while used and total are MiB too


def test_the_command_line_prints_no_link_that_dies_with_its_server(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    done = call("hash_tree", f"path={tmp_path}")
    assert done.returncode == 0, done.stderr
    assert "sysmcp://" not in done.stdout
    assert "rerun with -o FILE to save it" in done.stdout


def test_no_progress_line_is_a_bare_number() -> None:
    done = call("disk_io", "sample_s=0.5")  # at least one wait, so at least one worded line
    lines = [line for line in done.stderr.splitlines() if line.startswith("progress:")]
    assert lines, done.stderr
    assert not [line for line in lines if re.fullmatch(r"progress: [\d,.]+", line)], lines


def test_one_deleted_file_and_one_process_are_singular() -> None:
    held = DeletedFile(
        "/gone/x.log", dev=999, ino=1, size=4096, disk=4096, holders=[Holder(1, "d", None, 3, "w")]
    )
    text, _ = render(Scan(files={(999, 1): held}, processes=1), MountTable([]), 5, None, None)
    assert "Not counted: 1 deleted file (4.0 KiB) on no filesystem" in text
    text, _ = render(Scan(processes=1), MountTable([]), 5, None, None)
    assert "by the 1 process read" in text


def test_one_holder_past_the_five_named_is_one_more_descriptor() -> None:
    holders = [Holder(pid, "d", None, 3, "w") for pid in range(1, 7)]
    dev = os.makedev(8, 1)
    held = DeletedFile("/gone/x.log", dev=dev, ino=1, size=4096, disk=4096, holders=holders)
    root = MountTable([Mount("/", "/dev/vda", "ext4", dev="8:1")])
    text, _ = render(Scan(files={(dev, 1): held}, processes=6), root, 5, None, None)
    assert "and 1 more descriptor\n" in text, text  # was "and 1 more descriptors"


def test_one_holder_past_the_three_a_plan_names_is_one_more_holder() -> None:
    from sysmcp.reclaim import Item
    from sysmcp.tools.reclaim_plan import path_lines

    holders = tuple({"file": "/gone/x.log", "command": "d", "pid": pid, "fd": 3} for pid in range(1, 5))
    item = Item(
        "deleted_open-1", "deleted_open", (), 4096, None, "", "review", "", "truncate", holders=holders
    )
    assert path_lines(item, 3, "")[-1] == "… and 1 more holder"  # was "… and 1 more holders"


def test_one_improperly_formatted_line_past_those_kept_is_one_more_line_in_the_full_report() -> None:
    from sysmcp.engine.hashing import Verification
    from sysmcp.tools.verify_checksums import write_report

    text, _size = write_report(Verification(bad_lines=[1], bad_count=2))
    assert text == "line 1: improperly formatted\n… and 1 more improperly formatted line\n"  # was "… lines"


def test_lists_cut_at_one_name_say_one_name(tmp_path: Path) -> None:
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text("".join(f"{'0' * 64}  gone{n}\n" for n in range(2)))
    done = call("verify_checksums", f"manifest={manifest}", "max_listed=1")
    assert "Lists were cut at 1 name; the full report" in done.stdout, done.stdout  # was "1 names"


def test_a_partial_hash_tree_that_hashed_nothing_does_not_say_there_was_nothing_to_hash() -> None:
    class Keeper:
        def keep(self, name: str, text: str, **_: object) -> str:
            return "not kept in this test"

    tree = TreeHash(stopped="time budget of 1 s reached", not_hashed=12, base=b"/srv")
    output = hash_tree.answer({"max_lines": 5}, Keeper(), tree, "/srv", ALGORITHMS["sha256"], "gnu")  # type: ignore[arg-type]
    assert "No regular files to hash" not in output.text
    assert "None of the 12 files listed was hashed before it stopped." in output.text


def test_the_words_checker_finds_a_count_that_disagrees_with_its_noun() -> None:
    from tests.words import slips

    for slip in (
        "delete 1 files",
        "1 files done",
        "Skipped: 28 special file",
        "3 special file",
        "2 other filesystem",
        "1 entries walked",
        "at least 1 characters",
        "The inventory has 1 hosts",
        "# 1 items",
        "(1,234 file)",
        "0 file",
    ):
        assert slips(slip), slip


def test_the_words_checker_reads_no_size_date_name_or_compound_as_a_count() -> None:
    from tests.words import slips

    for fine in (
        "1 file, 2 files, 1,000 files, 1 more group, 3 more groups",
        "1.0 KiB files",
        "web1 files",
        "2026-12-03 1 h ago",
        "v2 file",
        "3 of 12 filesystems",
        "4 file descriptors",
        "wrote 2 host results",
        "1 of the files",
        "12,5 files",
        "0 files",
    ):
        assert slips(fine) == [], fine


def test_the_words_checker_sees_the_texts_the_suite_produces(tmp_path: Path) -> None:
    from tests.words import CORPUS

    before = len(CORPUS)
    (tmp_path / "a").write_text("a")
    call("hash_tree", f"path={tmp_path}")
    assert any(tmp_path.name in text for _, text in CORPUS[before:])


def test_a_progress_line_without_a_message_says_what_the_numbers_are() -> None:
    import io

    from sysmcp.cli.call import ProgressLine

    out = io.StringIO()
    ProgressLine(out, tty=False, clock=lambda: 0.0).update(25, 100, None)
    assert out.getvalue() == "progress: 25 of 100 done  25%\n"  # was "progress: 25  25%"


def test_one_skipped_special_file_and_many_other_filesystems_are_said_in_their_number() -> None:
    from sysmcp.tools.walking import skipped_phrase

    phrase = skipped_phrase({"special_file": 1, "other_filesystem": 2, "symlink": 28, "unreadable": 3})
    assert phrase == "1 special file, 2 other filesystems, 28 symlinks, 3 unreadable"


def test_a_length_bound_is_said_in_its_number() -> None:
    from sysmcp.tools.arguments import validate_arguments

    schema = {"type": "object", "properties": {"tag": {"type": "string", "minLength": 1}}}
    try:
        validate_arguments(schema, {"tag": ""})
    except Exception as exc:
        assert "at least 1 character" in str(exc) and "1 characters" not in str(exc)
    else:
        raise AssertionError("an empty tag was accepted")


def test_a_lower_bound_window_given_as_a_duration_reads_as_one() -> None:
    from sysmcp.tools.what_changed import window

    assert window("2h") == "in the last 2 h"  # was "files modified since 2h"
    assert window("2026-12-03T07:00") == "since 2026-12-03T07:00"


def test_a_script_of_one_item_says_one_item_in_its_header(tmp_path: Path) -> None:
    from sysmcp.reclaim import render_script
    from tests.reclaim.test_reclaim import plan_of

    plan = plan_of(tmp_path, [b"app.log.1", b"app.log.2.gz"])
    assert len(plan.items) == 1
    header = render_script(plan).splitlines()[1]
    assert ": 1 item, " in header, header  # was "1 items"


def test_a_cut_process_list_says_what_it_cut_and_how_to_see_more() -> None:
    from sysmcp.tools.disk_io import DiskIO, Process, render

    reader = Process(7, "cat", "root", 4096, 4096.0)
    answer = DiskIO(1.0, [], [], [], 0, [reader], 1, 9, 0, True)
    assert "  … and 1 more process not shown (a larger top_n, up to 50, lists them)\n" in render(answer)
    full = DiskIO(1.0, [], [], [], 0, [reader] * 50, 3, 60, 0, True)
    assert "  … and 3 more processes not shown\n" in render(full)  # top_n is at its most


def test_a_cut_plan_says_how_many_items_and_where_every_item_is(tmp_path: Path) -> None:
    from dataclasses import replace

    from sysmcp.tools.reclaim_plan import ITEMS_SHOWN, render
    from tests.reclaim.test_reclaim import plan_of

    plan = plan_of(tmp_path, [b"a.1"])
    items = tuple(replace(plan.items[0], id=f"rotated_log-{n}") for n in range(ITEMS_SHOWN + 2))
    text = render(replace(plan, items=items), "")
    assert "  … and 2 more items not shown (every item is in the structured result and in the script)" in text


def _descriptions(schema: object, where: str = "") -> list[tuple[str, str]]:
    """Every (property path, description) of a JSON schema, nested ones included."""
    found: list[tuple[str, str]] = []
    if isinstance(schema, dict):
        if isinstance(schema.get("description"), str):
            found.append((where, schema["description"]))
        for key, value in schema.items():
            if key != "description":
                found += _descriptions(value, f"{where}.{key}" if key != "properties" else where)
    elif isinstance(schema, list):
        for value in schema:
            found += _descriptions(value, where)
    return found


def test_no_output_field_says_only_the_time_budget_stops_what_other_stops_stop_too() -> None:
    """A walk, a hash or a check also stops for want of a file descriptor (and its reason says so):
    'False when the time budget ran out' told the model to give more time, which stops at the same place.
    Only what nothing but a deadline stops (the engine's inspects, comparing two snapshots) may say budget."""
    from sysmcp.tools import TOOL_MODULES
    from tests.harness import tool

    only_a_deadline = {("container_usage", ".logs.not_inspected"), ("what_changed", ".stopped_reason")}
    said = [
        (name, where, text)
        for name, _ in TOOL_MODULES
        for where, text in _descriptions(tool(name).output_schema)
        if re.search(r"\bbudget\b", text)
        and "descriptor" not in text
        and (name, where.replace(".$defs", "").split(".properties")[0]) not in only_a_deadline
    ]
    assert said == [], said


def _manifest_text(max_lines: int, kept: bool, files: int = 5) -> str:
    from sysmcp.results import ResultStore
    from sysmcp.tools.registry import ResourceLink

    class Keeper:
        def keep(self, name: str, text: str, **_: object) -> ResourceLink | str:
            if not kept:
                return "the full result (9 bytes) is too big to keep as a resource"
            return ResultStore().put(name, text, description="")

    lines = [f"{n:064x}  f{n}\n".encode() for n in range(files)]
    tree = TreeHash(files=files, manifest=bytearray(b"".join(lines)), first=lines, base=b"/srv")
    output = hash_tree.answer({"max_lines": max_lines}, Keeper(), tree, "/srv", ALGORITHMS["sha256"], "gnu")  # type: ignore[arg-type]
    return output.text


def test_hash_trees_lines_header_says_what_is_there_and_never_points_at_a_manifest_not_kept() -> None:
    """'First 0 lines:' with max_lines=0, and '… 3 more lines in the full manifest' when the full manifest
    was not kept: each says what the answer holds and where the rest is, or that it is nowhere."""
    text = _manifest_text(2, kept=True)
    assert "First 2 lines:" in text and text.endswith("… 3 more lines in the full manifest"), text
    text = _manifest_text(2, kept=False)
    assert "Full manifest: not kept, " in text and "First 2 lines:" in text, text
    assert text.endswith("… 3 more lines not shown (the full manifest was not kept)"), text
    text = _manifest_text(0, kept=True)
    assert "First 0" not in text and text.endswith(
        "No line shown (max_lines is 0): 5 lines in the full manifest"
    ), text
    text = _manifest_text(0, kept=False)
    assert "First 0" not in text and text.endswith(
        "No line shown (max_lines is 0), and the full manifest was not kept"
    ), text
    text = _manifest_text(5, kept=True)
    assert text.endswith("Manifest:\n" + "\n".join(f"{n:064x}  f{n}" for n in range(5))), text


def test_a_hash_tree_stopped_before_listing_any_file_does_not_say_there_was_nothing_to_hash() -> None:
    """Stopped before the walk listed a file: 'No regular files to hash.' read as an empty tree."""

    class Keeper:
        def keep(self, name: str, text: str, **_: object) -> str:
            return "not kept in this test"

    tree = TreeHash(stopped="time budget of 0.001 s reached", walk_complete=False, base=b"/srv")
    output = hash_tree.answer({"max_lines": 5}, Keeper(), tree, "/srv", ALGORITHMS["sha256"], "gnu")  # type: ignore[arg-type]
    assert output.text.startswith("PARTIAL RESULT"), output.text
    assert "No regular files to hash" not in output.text, output.text
    assert output.text.endswith("No file was hashed before it stopped."), output.text


def test_a_check_that_stopped_early_with_no_list_cut_does_not_say_its_lists_were_cut() -> None:
    """Every entry not checked and no list at all: 'Lists were cut at 50 names' sent the model to look for
    names it was not shown. The report is offered for what it holds: which entries were not checked."""
    from sysmcp.tools.verify_checksums import VerifyChecksums
    from sysmcp.tools.verify_checksums import render as render_check

    answer = VerifyChecksums(
        manifest="/srv/SHA256SUMS",
        base_dir="/srv",
        complete=False,
        stopped_reason="time budget of 1 s reached",
        not_checked=1200,
        all_ok=False,
        entries=1200,
        ok=0,
        failed=0,
        missing=0,
        unreadable=0,
        improperly_formatted=0,
        new=None,
        algorithms={},
        bytes_hashed=0,
        seconds=0.0,
        failed_files=[],
        missing_files=[],
        unreadable_files=[],
        improperly_formatted_lines=[],
        new_files=[],
        truncated=True,
        report_uri="sysmcp://results/1/verify-report.txt",
        walk_skipped={},
    )
    text = render_check(answer, 1.0, 50, None, None)
    assert "Lists were cut" not in text, text
    assert text.endswith(
        "Which entries were not checked: the full report is at sysmcp://results/1/verify-report.txt (resources/read)."
    ), text
    answer = replace(answer, failed=60, failed_files=[f"f{n}" for n in range(50)])
    assert "Lists were cut at 50 names; the full report is at sysmcp://" in render_check(
        answer, 1.0, 50, None, None
    )


def test_the_instructions_say_a_partial_answer_is_said_first_whatever_stopped_it() -> None:
    """They said a call stops at its time budget: one out of descriptors stops too, and more time won't help."""
    from sysmcp.server.methods import INSTRUCTIONS

    assert "stops early (timeout_s, no descriptor left) says PARTIAL first" in INSTRUCTIONS


def stopped_check(entries: int, not_checked: int, **changed: Any) -> str:
    """The text of a verify_checksums answer that stopped on its time budget with nothing found wrong."""
    from sysmcp.tools.verify_checksums import VerifyChecksums
    from sysmcp.tools.verify_checksums import render as render_check

    answer = VerifyChecksums(
        manifest="/srv/SHA256SUMS",
        base_dir="/srv",
        complete=False,
        stopped_reason="time budget of 1 s reached",
        not_checked=not_checked,
        all_ok=False,
        entries=entries,
        ok=entries - not_checked,
        failed=0,
        missing=0,
        unreadable=0,
        improperly_formatted=0,
        new=None,
        algorithms={},
        bytes_hashed=0,
        seconds=0.0,
        failed_files=[],
        missing_files=[],
        unreadable_files=[],
        improperly_formatted_lines=[],
        new_files=[],
        truncated=False,
        report_uri=None,
        walk_skipped={},
    )
    return render_check(replace(answer, **changed), 1.0, 50, None, None)


def test_one_entry_not_checked_is_singular() -> None:
    """'1 of 1 entry were not checked'."""
    link = {"truncated": True, "report_uri": "sysmcp://results/1/verify-report.txt"}
    assert "1 of 1 entry was not checked." in stopped_check(1, 1, **link)
    assert "2 of 3 entries were not checked." in stopped_check(3, 2, **link)


def test_a_check_that_stopped_early_does_not_say_it_checked_the_entries_it_did_not() -> None:
    """'Checked 2,000 entries of SUMS …; 2,000 not checked' when checking stopped before any entry."""
    text = stopped_check(2_000, 2_000)
    assert "\nChecked 0 of 2,000 entries of /srv/SHA256SUMS against /srv: 0 OK," in text, text
    text = stopped_check(2, 1)
    assert "\nChecked 1 of 2 entries of /srv/SHA256SUMS against /srv: 1 OK," in text, text
