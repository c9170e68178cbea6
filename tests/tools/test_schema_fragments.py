"""The shared pieces tools are built from: schema fragments, their descriptions, the kept-listing line,
and the small helpers several modules share (fdinfo modes, version gates, built-on-demand sequences)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from sysmcp import platform
from sysmcp.engine.hashing._verdicts import UNREADABLE_CODE, EntryVerdict, Verdicts
from sysmcp.protocol.lifecycle import Features
from sysmcp.results import ResultStore
from sysmcp.tools import schemas as js
from sysmcp.tools.descriptions import COMMON, described
from sysmcp.tools.dir_usage import TOOL as DIR_USAGE_OUTPUT_TOOL
from sysmcp.tools.reclaim import TOOL as RECLAIM
from sysmcp.tools.reclaim_plan import TOOL as RECLAIM_PLAN
from sysmcp.tools.registry import listing_name, with_link
from sysmcp.tools.verify_checksums import TOOL as VERIFY_OUTPUT_TOOL
from sysmcp.tools.walking import scan_failure
from sysmcp.tools.what_changed import TOOL as WHAT_CHANGED


def test_a_typed_value_keeps_its_keywords_in_order_and_its_description_last() -> None:
    top = js.top_n_argument("How many.", maximum=50, default=5)
    assert list(top.items()) == [
        ("type", "integer"),
        ("minimum", 1),
        ("maximum", 50),
        ("default", 5),
        ("description", "How many."),
    ]
    assert js.string("Who.", null=True) == {"type": ["string", "null"], "description": "Who."}
    assert js.number() == {"type": "number"}  # no description: the common one may be filled in


def test_an_input_schema_with_every_argument_optional_has_no_required_list() -> None:
    schema = js.arguments({"top_n": js.integer()}, required=None)
    assert list(schema) == ["type", "properties", "additionalProperties"]
    assert js.arguments({"path": js.path_argument("Where.")})["required"] == ["path"]


def test_a_fragment_shared_by_two_properties_gets_each_property_its_own_common_description() -> None:
    shared = {"type": "array", "items": {"type": "string"}}
    schema = described({"type": "object", "properties": {"failed_files": shared, "missing_files": shared}})
    words = {name: spec["description"] for name, spec in schema["properties"].items()}
    assert words == {"failed_files": COMMON["failed_files"], "missing_files": COMMON["missing_files"]}
    assert "description" not in shared  # the tool's own dict is never changed


def test_the_tools_shared_size_and_name_fragments_are_described_per_property() -> None:
    verify = described(VERIFY_OUTPUT_TOOL.output_schema)["properties"]
    assert verify["missing_files"]["description"] == COMMON["missing_files"]
    assert verify["new_files"]["description"] == COMMON["new_files"]
    entry = described(DIR_USAGE_OUTPUT_TOOL.output_schema)["properties"]["largest_files"]["items"][
        "properties"
    ]
    assert entry["apparent_bytes"]["description"] == COMMON["apparent_bytes"]
    assert entry["disk_bytes"]["description"] == COMMON["disk_bytes"]


def test_a_kept_listing_is_named_after_its_directory_and_linked_or_explained_in_the_last_line() -> None:
    assert listing_name("dir_usage", "/var/log/", ".tsv") == "dir_usage-log.tsv"
    assert listing_name("dir_usage", "/", ".tsv") == "dir_usage-root.tsv"
    link = ResultStore().put("x.tsv", "the list", description="the list")
    assert with_link("answer", link, "Full list: {}", "Full list: not kept, {}") == (
        "answer\nFull list: sysmcp://results/1/x.tsv",
        (link,),
    )
    assert with_link("answer", "too big {to keep}", "Full list: {}", "Full list: not kept, {}") == (
        "answer\nFull list: not kept, too big {to keep}",  # the reason is put in, never read as a format
        (),
    )


def test_a_walk_the_system_refused_is_worded_by_what_refused_it(tmp_path: Path) -> None:
    denied = scan_failure("/srv", tmp_path, PermissionError(errno.EACCES, "Permission denied"))
    assert denied.message.startswith("Permission denied: cannot read the directory /srv")
    failed = scan_failure("/srv", tmp_path, OSError(errno.EIO, "Input/output error"))
    assert failed.message == "Cannot scan /srv: Input/output error"


@pytest.mark.parametrize(
    ("flags", "mode"),
    [("0100000", "r"), ("0100001", "w"), ("02100002", "rw"), ("garbage", ""), (None, "")],
)
def test_a_descriptors_access_mode_comes_from_the_octal_flags_of_its_fdinfo(
    tmp_path: Path, flags: str | None, mode: str
) -> None:
    (tmp_path / "7" / "fdinfo").mkdir(parents=True)
    fdinfo = tmp_path / "7" / "fdinfo" / "3"
    fdinfo.write_text("pos:\t0\n" + (f"flags:\t{flags}\n" if flags is not None else "") + "mnt_id:\t25\n")
    assert platform.fd_access_mode(str(tmp_path), 7, "3") == mode
    assert platform.fd_access_mode(os.fsencode(tmp_path), 7, b"3") == mode


def test_no_fdinfo_is_an_unknown_mode(tmp_path: Path) -> None:
    assert platform.fd_access_mode(str(tmp_path), 7, "3") == ""


def test_a_version_gate_holds_from_its_first_version_on() -> None:
    assert not Features("2024-11-05").tool_annotations
    assert Features("2025-03-26").tool_annotations and not Features("2025-03-26").structured_output
    assert Features("2025-06-18").structured_output and Features("2025-06-18").titles
    assert not Features("2025-06-18").validation_errors_as_results
    assert Features("2025-11-25").implementation_details
    assert "2025-06-18" in (type(Features("2025-06-18")).titles.__doc__ or "")


def test_verdicts_built_on_demand_index_and_iterate_like_a_list() -> None:
    verdicts = Verdicts()
    verdicts.codes.extend(bytes(3))
    verdicts.put(1, UNREADABLE_CODE, "permission denied")
    assert verdicts[-2] == EntryVerdict("UNREADABLE", "permission denied")
    assert [v.status for v in verdicts] == [verdicts[0].status, "UNREADABLE", verdicts[2].status]
    with pytest.raises(IndexError):
        verdicts[3]
    with pytest.raises(IndexError):
        verdicts[-4]


def test_no_output_property_borrows_a_common_description_meant_for_another_tools_field() -> None:
    """A common description fills in where a field has none: 'what was hashed', 'the manifest' or 'the
    walk' said of what_changed's growth, reclaim_plan's total or reclaim's skipped files is false."""
    changed = described(WHAT_CHANGED.output_schema)["properties"]
    share = changed["attribution"]["properties"]
    plan = described(RECLAIM_PLAN.output_schema)["properties"]
    done = described(RECLAIM.output_schema)["properties"]["items"]["items"]["properties"]
    words = {
        "growth total": share["total_bytes"]["description"],
        "growth paths": share["paths"]["description"],
        "new files": changed["new_files"]["description"],
        "plan total": plan["total_bytes"]["description"],
        "skipped": done["skipped"]["description"],
    }
    borrowed = {COMMON["total_bytes"], COMMON["paths"], COMMON["new_files"], COMMON["skipped"]}
    assert not {name for name, text in words.items() if text in borrowed}, words
