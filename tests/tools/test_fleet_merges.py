"""Fleet views are pure functions of per-host outcomes: fed outcomes here, no ssh needed."""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sysmcp.fleet.schema import fleet_tools, hosts_property
from sysmcp.render import human_bytes, plural
from sysmcp.tools import ALL_TOOLS
from sysmcp.tools.dir_usage import TOOL as DIR_USAGE
from sysmcp.tools.disk_usage import TOOL as DISK_USAGE
from sysmcp.tools.file_sha256 import TOOL as FILE_SHA256
from sysmcp.tools.find_duplicates import TOOL as FIND_DUPLICATES
from sysmcp.tools.merging import (
    HostOutcome,
    bound,
    default_merge,
    failure_groups,
    failure_lines,
    merge_readable,
    tally,
)
from sysmcp.tools.registry import Registry
from tests.profile import needs_proc

A, B = "a" * 64, "b" * 64


def sha(host: str, digest: str) -> HostOutcome:
    return HostOutcome(
        host, "ok", 0.1, {"path": "/etc/x", "sha256": digest, "size_bytes": 1}, f"{digest}  /etc/x"
    )


def failed(host: str, status: str, reason: str) -> HostOutcome:
    return HostOutcome(host, status, 2.0, reason=reason)


def test_identical_files_are_one_verdict() -> None:
    assert FILE_SHA256.merge is not None
    out = FILE_SHA256.merge([sha("w1", A), sha("w2", A)], {"path": "/etc/x"})
    assert out.structured["view"]["verdict"] == "identical"
    assert f"Identical on all 2 hosts that answered: {A}" in out.text and not out.is_error


def test_drift_groups_by_digest_majority_first_and_names_the_hosts_without_the_file() -> None:
    assert FILE_SHA256.merge is not None
    outcomes = [
        sha("w1", B),
        sha("w2", A),
        sha("w3", A),
        HostOutcome("w4", "tool_error", 0.1, text="No such file: /etc/x", reason="No such file: /etc/x"),
        failed("w5", "unreachable", "Connection refused"),
    ]
    out = FILE_SHA256.merge(outcomes, {"path": "/etc/x", "expected": A.upper()})
    view = out.structured["view"]
    assert view["verdict"] == "drift"
    assert [(g["sha256"], g["hosts"], g["match"]) for g in view["digests"]] == [
        (A, ["w2", "w3"], True),
        (B, ["w1"], False),
    ]
    assert view["missing"] == ["w4"]
    assert out.text.splitlines()[0] == "4 of 5 hosts answered, 1 unreachable."
    assert "w5: unreachable — Connection refused" in out.text
    assert [e["status"] for e in out.structured["hosts"]] == ["ok", "ok", "ok", "tool_error", "unreachable"]
    assert out.structured["hosts"][4] == {
        "host": "w5",
        "status": "unreachable",
        "seconds": 2.0,
        "reason": "Connection refused",
    }


def fs(mount: str, percent: int, alerts: list[str] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "mount_point": mount,
        "device": "/dev/x",
        "fs_type": "ext4",
        "fs_root": "/",
        "read_only": False,
        "options": [],
        "status": "ok",
        "total_bytes": 100 << 30,
        "used_bytes": percent << 30,
        "free_bytes": (100 - percent) << 30,
        "reserved_bytes": 0,
        "percent_used": percent,
        "inodes": {"total": 100, "used": 1, "free": 99, "percent_used": 1},
    }
    if alerts:
        entry["alerts"] = alerts
    return entry


def test_disk_usage_is_one_table_fullest_first_across_hosts_with_fleet_alerts() -> None:
    assert DISK_USAGE.merge is not None
    outcomes = [
        HostOutcome("db1", "ok", 0.1, {"filesystems": [fs("/", 40), fs("/var", 97, ["space"])]}),
        HostOutcome("web1", "ok", 0.1, {"filesystems": [fs("/", 93, ["space"]), fs("/srv", 10)]}),
        failed("web2", "timeout", "no answer"),
    ]
    out = DISK_USAGE.merge(outcomes, {})
    rows = out.structured["view"]["filesystems"]
    assert [(r["host"], r["mount_point"]) for r in rows] == [
        ("db1", "/var"),
        ("web1", "/"),
        ("db1", "/"),
        ("web1", "/srv"),
    ]
    assert "2 filesystems on 2 hosts are over 90 %" in out.text
    table = [line for line in out.text.splitlines() if line.startswith(("HOST", "db1", "web1"))]
    assert table[0].split() == ["HOST", "MOUNT", "TYPE", "SIZE", "USED", "AVAIL", "USE%", "IUSE%"]
    assert table[1].split()[:2] == ["db1", "/var"] and "97%" in table[1]


def dir_usage_answer(disk: int, top: str) -> dict[str, Any]:
    """A host's dir_usage structured content for /var: ``disk`` bytes, all in its one directory ``top``."""
    notes = {"hard_linked_files": 0, "sparse_bytes": 0, "hidden_files": 0, "hidden_bytes": 0}
    totals = {"files": 3, "directories": 2, "apparent_bytes": disk, "disk_bytes": disk, "entries": 5}
    return {
        "path": "/var",
        "complete": True,
        "stopped_reason": None,
        "elapsed_s": 0.5,
        "sort_by": "disk",
        "totals": {**totals, **notes},
        "skipped": {},
        "largest_files": [],
        "files_not_shown": 0,
        "largest_directories": [
            {"path": top, "disk_bytes": disk, "apparent_bytes": disk, "files": 3, "depth": 1}
        ],
        "directories_not_shown": 0,
    }


def test_dir_usage_gives_totals_side_by_side_then_each_hosts_largest() -> None:
    assert DIR_USAGE.merge is not None

    out = DIR_USAGE.merge(
        [
            HostOutcome("a", "ok", 1, dir_usage_answer(10, "/var/log")),
            HostOutcome("b", "ok", 1, dir_usage_answer(2000, "/var/lib")),
        ],
        {"path": "/var"},
    )
    assert [t["host"] for t in out.structured["view"]["totals"]] == ["b", "a"]
    text = out.text
    assert text.index("b: largest directories") < text.index("a: largest directories") and "/var/lib" in text


def test_fleet_merges_show_lookalike_names_apart_and_a_hosts_own_escapes_once() -> None:
    """A host's JSON name with ESC and one literally named ``esc\\033`` are two lines apart in the
    merged table; a host's own text, whose names it escaped already, is not escaped a second time."""
    assert DIR_USAGE.merge is not None and DISK_USAGE.merge is not None

    out = DIR_USAGE.merge(
        [
            HostOutcome("a", "ok", 1, dir_usage_answer(1, "/var/esc\x1b")),
            HostOutcome("b", "ok", 1, dir_usage_answer(1, "/var/esc\\033")),
        ],
        {"path": "/var"},
    )
    assert "/var/esc\\033" in out.text and "/var/esc\\\\033" in out.text
    tables = DISK_USAGE.merge(
        [
            HostOutcome("a", "ok", 1, {"filesystems": [fs("/mnt/t\tab", 10)]}),
            HostOutcome("b", "ok", 1, {"filesystems": [fs("/mnt/t\\tab", 10)]}),
        ],
        {},
    )
    assert "/mnt/t\\tab" in tables.text and "/mnt/t\\\\tab" in tables.text
    said = default_merge([HostOutcome("x", "ok", 1, None, "4.0 KiB  /srv/back\\\\slash\nESC \x1b")], {})
    assert "/srv/back\\\\slash" in said.text and "/srv/back\\\\\\\\slash" not in said.text
    assert "ESC \\033" in said.text


def test_find_duplicates_says_hosts_are_not_compared_and_default_merge_summarises() -> None:
    assert FIND_DUPLICATES.merge is not None
    out = FIND_DUPLICATES.merge([HostOutcome("a", "ok", 1, {}, "3 groups\nline2")], {})
    assert "not compared across hosts" in out.text and "== a" in out.text
    plain = default_merge([HostOutcome("x", "ok", 1, None, "\n".join(map(str, range(20))))], {})
    assert "… 14 more lines" in plain.text and plain.structured["hosts"][0]["result"] == {
        "text": plain.structured["view"]["summaries"][0]["text"]
    }


def test_the_call_is_an_error_only_when_no_host_answered() -> None:
    out = default_merge(
        [failed("a", "auth_failed", "Permission denied"), failed("b", "no_sysmcp", "not found")], {}
    )
    assert out.is_error and "a: auth_failed — Permission denied" in out.text
    tool_error_only = default_merge([HostOutcome("a", "tool_error", 1, reason="No such file")], {})
    assert not tool_error_only.is_error
    assert tally([failed("a", "timeout", "")]) == "0 of 1 host answered, 1 timeout"


def test_a_hosts_own_words_that_read_as_a_bastion_failure_stay_that_hosts_line() -> None:
    """Only the pool marks a host's failure as its bastion's (``bastion``); a tool error, a failed
    remote start or an unreachable host's ssh words are the host's own text, and must not lead a line
    as the bastion's failure."""
    said = "bastion jump1 (10.0.0.5) refused: Permission denied"
    down = replace(failed("web1", "unreachable", said), bastion="jump1")
    for status in ("tool_error", "remote_error", "unreachable", "auth_failed"):
        out = default_merge([down, failed("evil", status, said)], {})
        assert f"  {said}; 1 host behind it unreachable: web1" in out.text.splitlines()
        assert f"  evil: {status} — {said}" in out.text.splitlines()


def test_long_text_is_cut_to_the_line_budget_and_the_full_text_returned_for_keeping() -> None:
    out = default_merge([HostOutcome(f"h{i}", "ok", 1, None, f"x{i}\ny") for i in range(60)], {})
    cut, full = bound(out, budget=20)  # one line left for where the whole text went (or its link)
    assert len(cut.text.splitlines()) == 19 and cut.text.endswith("163 more lines not shown.")
    assert full == out.text
    assert bound(cut, budget=50) == (cut, None)


def test_a_cut_text_names_the_hosts_without_a_result_before_healthy_hosts_and_counts_those_that_do_not_fit() -> (
    None
):
    """The failures came last and were cut first: past the bounds, as many as fit are named, before any
    healthy host's lines, and the hosts left unnamed are counted (a line naming 12 counts 12)."""
    healthy = [HostOutcome(f"ok{i:02}", "ok", 1, None, f"ok{i:02} says\nmore") for i in range(30)]
    down = [failed(f"down{i:02}", "unreachable", f"10.0.0.{i}: Connection refused") for i in range(20)]
    slow = [failed(f"slow{i:02}", "timeout", "no answer within 30 s") for i in range(12)]
    outcomes = [*healthy, *down, *slow]
    out = default_merge(outcomes, {})
    cut, full = bound(out, budget=20, failures=failure_groups(outcomes))
    lines = cut.text.split("\n")
    assert full == out.text and len(lines) == 19, cut.text
    assert lines[0] == "30 of 62 hosts answered, 20 unreachable, 12 timeout.", cut.text
    assert lines[1] == "Hosts without a result:", cut.text
    assert lines[2:17] == [f"  down{i:02}: unreachable — 10.0.0.{i}: Connection refused" for i in range(15)]
    assert lines[17:] == [
        "  … 17 more hosts without a result, named in the full text",
        f"… {plural(30 * 3 + 6, 'more line')} not shown.",
    ], cut.text
    by_chars, _ = bound(out, chars=1_000, failures=failure_groups(outcomes))
    shown = by_chars.text.split("\n")  # the line counting what was left out is past the characters
    assert (
        len("\n".join(shown[:-1])) < 1_000 and "  down00: unreachable — 10.0.0.0: Connection refused" in shown
    )
    assert shown[-2].startswith("  … ") and shown[-2].endswith(
        "more hosts without a result, named in the full text"
    )
    roomy, _ = bound(out, budget=60, failures=failure_groups(outcomes))  # every failure, and healthy hosts
    every = failure_lines(outcomes)
    assert roomy.text.split("\n")[-len(every) - 1 : -1] == every and "== ok00 (1.00 s)" in roomy.text


def test_the_registry_adds_hosts_to_every_schema_only_with_a_fleet() -> None:
    plain = Registry(ALL_TOOLS)
    assert [t.input_schema for t in plain] == [t.input_schema for t in ALL_TOOLS]
    fleet = Registry(fleet_tools(ALL_TOOLS, hosts_property(12)))
    for tool, original in zip(fleet, ALL_TOOLS, strict=True):
        hosts = tool.input_schema["properties"]["hosts"]
        # the groups are named once, in the instructions, not in every tool's schema
        assert hosts["type"] == "array" and "'all' (12 hosts)" in hosts["description"]
        assert "web" not in hosts["description"]
        assert tool.output_schema["anyOf"][0] == original.output_schema
        assert "hosts" not in original.input_schema["properties"]


def test_many_hosts_with_the_same_answer_are_one_group_after_the_outliers() -> None:
    same = [
        HostOutcome(f"web{i:03}", "ok", 0.2, None, f"hashed 3 files in 0.{i % 9}2 s\nsame digest")
        for i in range(187)
    ]
    odd = HostOutcome("web999", "ok", 0.2, None, "hashed 2 files in 0.12 s\nother digest")
    out = default_merge([*same[:100], odd, *same[100:]], {})
    lines = out.text.splitlines()
    assert lines[1] == "== web999 (0.20 s)"  # the outlier first
    assert (
        lines[4]
        == "== 187 hosts, same answer: web000, web001, web002, web003, web004, web005, web006, web007 … and 179 more (as web000 says it)"
    )
    assert [g["count"] for g in out.structured["view"]["groups"]] == [1, 187]
    assert len(lines) < 12


def test_hosts_failing_for_one_reason_are_one_line() -> None:
    down = [failed(f"h{i}", "unreachable", "bastion b1: Connection refused") for i in range(40)]
    out = default_merge([*down, failed("x", "timeout", "no answer")], {})
    assert "  x: timeout — no answer" in out.text
    assert (
        "  40 hosts unreachable — bastion b1: Connection refused: h0, h1, h2, h3, h4, h5, h6, h7 … and 32 more"
        in out.text
    )
    assert out.is_error and len(out.text.splitlines()) == 4


def test_file_sha256_drift_lists_the_outliers_first_and_bounds_the_host_lists() -> None:
    assert FILE_SHA256.merge is not None
    out = FILE_SHA256.merge([sha(f"w{i}", A) for i in range(50)] + [sha("odd", B)], {"path": "/etc/x"})
    body = [line for line in out.text.splitlines() if line.startswith("  ")]
    assert body[0].split()[:3] == ["1", "host", B] and body[0].endswith("odd")
    assert body[1].endswith("w7 … and 42 more") and body[1].split()[:2] == ["50", "hosts"]


@needs_proc  # explain's deleted-but-open part reads /proc
@pytest.mark.anyio
async def test_disk_usage_explain_on_a_fleet_shows_each_hosts_parts_not_only_the_df_table(
    tmp_path: Path,
) -> None:
    from tests.tools.explain_scenario import explain

    (tmp_path / "seen").write_bytes(b"s" * 65536)
    (tmp_path / "gone").write_bytes(b"d" * 1_048_576)
    with open(tmp_path / "gone", "rb") as gone:  # another process holds it deleted: part 2
        holder = subprocess.Popen(["sleep", "60"], stdin=gone)
    os.unlink(tmp_path / "gone")
    # The deleted-open part is scanned whole whatever the walk's budget, and only it is asserted on: the
    # walk of the filesystem holding tmp_path (often the machine's root) is cut short at once.
    try:
        with_deleted = await explain(str(tmp_path), [tmp_path], timeout_s=0.01)
    finally:
        holder.kill()
        holder.wait()
    without = await explain(str(tmp_path), [tmp_path], timeout_s=0.01)
    outcomes = [
        HostOutcome(host, "ok", 0.5, answer["structured"], answer["text"])
        for host, answer in (("web1", with_deleted), ("web2", without))
    ]
    assert DISK_USAGE.merge is not None
    out = DISK_USAGE.merge(outcomes, {"path": str(tmp_path), "explain": True})
    parts = {e["host"]: e["result"]["explain"] for e in out.structured["hosts"]}  # each host's whole result
    # Other processes on a shared machine hold deleted files in the same /tmp: only ours is asserted on.
    held = {host: {f["path"] for f in part["deleted_open"]["files"]} for host, part in parts.items()}
    assert str(tmp_path / "gone") in held["web1"] and str(tmp_path / "gone") not in held["web2"]
    assert parts["web1"]["deleted_open"]["bytes"] >= 1_048_576
    lines = out.text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("HOST") and "DELETED" in line)
    rows = {line.split()[0]: line for line in lines[header + 1 : header + 3]}
    for host in ("web1", "web2"):  # each row shows its own host's deleted-open bytes
        assert human_bytes(parts[host]["deleted_open"]["bytes"]) in rows[host]
    plain = DISK_USAGE.merge(outcomes, {"path": str(tmp_path)})
    assert "DELETED" not in plain.text


MiB = 1 << 20


def explained(
    host: str, *, unreadable: int = 0, deleted_listed: bool = True, rest: int = 2 * MiB
) -> HostOutcome:
    """A host's disk_usage explain answer: 10 MiB used = 6 files + 1 deleted + 1 overhead + ``rest``
    (``unreadable`` directories the walk could not read, which the remainder bounds)."""
    from sysmcp.tools import disk_explain as ex
    from sysmcp.tools.disk_usage import DiskUsageResult
    from sysmcp.tools.typed import ABSENT, to_json

    part = ex.Explain(
        mount_point="/srv",
        used_bytes=8 * MiB + rest,
        reserved_bytes=ABSENT,
        partial=False,
        files=ex.Files(bytes=6 * MiB, files=9, stopped=None, scanned_at=None, next_step="."),
        deleted_open=ex.DeletedOpen(MiB if deleted_listed else 0, [], 0, 0, 0, deleted_listed, "."),
        hidden_under_mounts=ex.HiddenUnderMounts(0, True, "", 0, [], 0, 0, "."),
        unreadable_directories=ex.UnreadableDirectories(
            unreadable, [], max(rest, 0) if unreadable else 0, "."
        ),
        snapshots=ex.SnapshotsPart(0, "", True, "", [], "."),
        overhead=ex.OverheadPart(bytes=MiB, source="ext4"),
        remainder=ex.Remainder(bytes=rest, percent=20.0, not_walked=False, next_step="."),
        seconds=0.5,
    )
    result = DiskUsageResult("/srv", [], 90, 5.0, explain=part)
    return HostOutcome(host, "ok", 0.5, to_json(result), "explained")


def explain_rows(text: str) -> dict[str, dict[str, str]]:
    """The explain table's rows by host, each a dict of its cells by column name."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("HOST") and "DELETED" in line)
    names = lines[start].split()
    rows = {}
    for line in lines[start + 1 :]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) != len(names):
            break
        rows[cells[0]] = dict(zip(names, cells, strict=True))
    return rows


def size_of(cell: str) -> int:
    number, unit = cell.split()
    return round(float(number) * {"B": 1, "KiB": 1 << 10, "MiB": MiB, "GiB": 1 << 30}[unit])


def test_disk_usage_explain_on_a_fleet_adds_up_to_each_hosts_used_bytes_with_unreadable_directories_counted_once() -> (
    None
):
    assert DISK_USAGE.merge is not None
    out = DISK_USAGE.merge([explained("web1", unreadable=3)], {"path": "/srv", "explain": True})
    row = explain_rows(out.text)["web1"]
    sizes = [
        size_of(cell)
        for name, cell in row.items()
        if name not in ("HOST", "MOUNT", "USED") and cell.endswith("B")
    ]
    assert sum(sizes) == size_of(row["USED"]) == 10 * MiB  # what the unreadable directories hold is REST's
    assert row["REST"] == "2.0 MiB" and row["UNREADABLE"] == "3 dirs"


def test_disk_usage_explain_on_a_fleet_shows_deleted_open_files_not_listed_as_unknown_not_as_none() -> None:
    assert DISK_USAGE.merge is not None
    outcomes = [explained("mac1", deleted_listed=False), explained("web1")]
    rows = explain_rows(DISK_USAGE.merge(outcomes, {"path": "/srv", "explain": True}).text)
    assert (rows["mac1"]["DELETED"], rows["web1"]["DELETED"]) == ("?", "1.0 MiB")


def test_disk_usage_explain_on_a_fleet_names_the_hosts_that_answered_without_parts() -> None:
    from sysmcp.tools.disk_usage import DiskUsageResult, Filesystem
    from sysmcp.tools.typed import to_json

    silent = Filesystem(
        "/srv", "server:/srv", "nfs", "/", False, [], "no_answer", "statvfs did not answer in 5 s"
    )
    plain = HostOutcome("web2", "ok", 5.1, to_json(DiskUsageResult("/srv", [silent], 90, 5.0)), "no answer")
    assert DISK_USAGE.merge is not None
    out = DISK_USAGE.merge([explained("web1"), plain], {"path": "/srv", "explain": True})
    assert list(explain_rows(out.text)) == ["web1"]
    assert "No parts from web2: its filesystem gave no figures to split (see the table above)." in out.text


TYPED_MERGES = [
    tool
    for tool in ALL_TOOLS
    if tool.name in ("dir_usage", "disk_health", "disk_usage", "file_sha256", "what_changed")
]


@pytest.mark.parametrize("tool", TYPED_MERGES, ids=lambda tool: tool.name)
@pytest.mark.parametrize("result", [None, {}], ids=["no structured content", "none of its fields"])
def test_a_host_whose_answer_a_merge_cannot_read_is_named_with_its_text_never_left_out_silently(
    tool: Any, result: dict[str, Any] | None
) -> None:
    """An MCP server on a protocol version before structured content answers with text only; another
    version may name its fields otherwise: the host answered, so it is in the text, by its own words."""
    outcomes = [
        HostOutcome("old1", "ok", 0.1, result, "what old1 says"),
        failed("web2", "unreachable", "Connection refused"),
    ]
    out = merge_readable(tool.merge, outcomes, {"path": "/etc/x"})
    assert out.text.splitlines()[0] == "1 of 2 hosts answered, 1 unreachable."
    assert "not in the view above: old1. Its own text:" in out.text
    assert "    what old1 says" in out.text and not out.is_error


def test_a_hosts_own_text_is_shown_with_its_control_characters_escaped() -> None:
    """The per-host summary quotes each host's text: an ESC or BEL in it reaches no terminal."""
    out = default_merge([HostOutcome("w1", "ok", 0.1, {}, "fine\x1b]0;owned\x07\nnext")], {})
    assert "    fine\\033]0;owned\\a" in out.text.splitlines()
    assert all(line.isprintable() for line in out.text.splitlines())


def test_a_hosts_long_run_of_digits_is_grouped_in_linear_time() -> None:
    """The same-answer grouping tried a rate from every digit of a run: 20,000 digits took 40 s of
    the gateway's one event loop, every host and call waiting. Now milliseconds. The bound is CPU time
    (5 s), which a loaded machine does not stretch as it does the wall clock."""
    digits = "1" * 20_000
    started = time.process_time()
    out = default_merge(
        [HostOutcome("w1", "ok", 0.1, {}, digits), HostOutcome("w2", "ok", 0.1, {}, digits)], {}
    )
    assert time.process_time() - started < 5
    assert "== 2 hosts, same answer: w1, w2 (as w1 says it)" in out.text


@pytest.mark.parametrize(
    "text", ["", "a", "a\n", "a\nb", "a\r\nb\r\n", "a\rb\x0bc\u2028d\x85", "\n\n", "\r\n\r"]
)
def test_a_hosts_lines_are_counted_as_splitlines_counts_them(text: str) -> None:
    from sysmcp.tools.merging import line_count

    assert line_count(text) == len(text.splitlines())


def test_a_hosts_text_larger_than_any_sysmcp_writes_is_summed_up_without_splitting_it_all() -> None:
    """27 MB of short lines (as much as the hosts' share lets through): the merge split all of them,
    and ran the timings' pattern over all of it, on the gateway's event loop (5.5 s, 640 MiB)."""
    text = "ab\n" * 9_000_000
    outcomes = [HostOutcome("h1", "ok", 1.0, None, text), HostOutcome("h2", "ok", 1.0, None, "small")]
    started = time.process_time()
    out = default_merge(outcomes, {})
    assert time.process_time() - started < 1.0
    assert "    … 8,999,994 more lines (in this host's result)" in out.text.splitlines()
