"""reclaim at the moment of acting, as a hostile second user and a careless plan would have it (issue 32):
each scenario in a private mount namespace on a fresh tmpfs, the second user (nobody) acting through setpriv."""

from __future__ import annotations

import os
import time

import pytest

from sysmcp import platform
from tests.profile import needs_xattrs
from tests.security.reclaim_namespace import in_namespace, why_not

pytestmark = pytest.mark.skipif(why_not() is not None, reason=str(why_not()))


@needs_xattrs
def test_a_link_never_hands_roots_file_to_another_user_and_the_plan_shows_owners() -> None:
    found = in_namespace("link_across_owners")
    (view,) = found["views"]  # nobody's copy is nobody's set: never kept for root's files, never an extra
    assert view["kept_copy"].endswith("/bin/run.sh") and view["kept_owner"] == "root"
    assert view["owners"] == ["root"] and [p.rsplit("/", 2)[-2] for p in view["paths"]] == ["sbin"]
    assert found["bin"]["uid"] == 0 and found["bin"]["mode"] == oct(0o100755)
    assert found["sbin"]["ino"] == found["bin"]["ino"] and found["bin"]["nlink"] == 2
    assert found["nobody"]["uid"] == 65534 and found["nobody"]["nlink"] == 1


def test_link_is_offered_only_when_owner_group_mode_and_extended_attributes_match() -> None:
    found = in_namespace("link_needs_matching_attributes")
    views = found["views"]
    if platform.can_compare_xattrs():
        assert "link_id" in views["same"] and views["same"]["no_link"] is None
    else:  # macOS: ACLs cannot be shown to match, so no copy becomes a hard link
        assert "cannot be compared on this platform" in views["same"]["no_link"]
    assert "another mode" in views["mode"]["no_link"] and "link_id" not in views["mode"]
    assert "another owner or group" in views["group"]["no_link"]
    assert "extended attributes" in views["xattr"]["no_link"]
    refused = 3 if platform.can_compare_xattrs() else 4
    assert len(found["refused"]) == refused and all(
        "cannot be replaced by hard links" in r for r in found["refused"]
    )


def test_a_file_replaced_after_its_bytes_were_hashed_is_not_removed() -> None:
    found = in_namespace("replaced_after_hashing")
    assert found["reasons"] == {"r/b": "changed"}
    assert found["b"] == "the user's new work"


def test_an_extra_whose_bytes_are_not_the_kept_copys_when_acting_stays() -> None:
    found = in_namespace("bytes_differ_at_acting")
    assert found == {"reasons": {"r/b": "differs"}, "b": True}


def test_extras_stay_when_their_kept_copy_is_gone_replaced_or_changed() -> None:
    found = in_namespace("kept_copy_gone_or_changed")
    assert found["reasons"] == {
        "gone/extra": "keep_gone",
        "replaced/extra": "keep_changed",
        "grown/extra": "keep_changed",
    }
    assert found["left"] == ["extra", "extra", "extra"]


def test_a_confined_server_refuses_whole_a_plan_whose_kept_copy_lies_outside_its_roots() -> None:
    found = in_namespace("kept_copy_outside_the_roots")
    assert found["kept"].endswith("/out/k")
    assert found["refusal"] is not None and "outside the roots" in found["refusal"]
    assert found["x"] is True and found["reasons"] == {}


@needs_xattrs
def test_a_file_renamed_over_the_planned_name_after_the_look_is_neither_removed_nor_replaced() -> None:
    found = in_namespace("renamed_over_after_the_look")
    for way in ("delete", "link"):
        assert found[way]["reasons"] == {f"{way}/b": "changed"}, found
        assert found[way]["b"] == "nobody's only copy of this"  # the swapped-in file is still at the name
        assert found[way]["names"] == ["a", "b"]  # and nothing was left aside


def test_a_file_mounted_over_after_the_look_is_left_alone_and_said_to_be_mounted() -> None:
    found = in_namespace("mounted_over_after_the_look")
    assert found == {"reasons": {"r/b": "mounted"}, "b": True}


def test_the_bytes_freed_are_the_files_own_not_what_another_process_freed_meanwhile() -> None:
    found = in_namespace("freed_by_another_during_the_comparison")
    assert found["theirs"] is False and found["freed"] == found["planned"] > 0


def test_a_log_the_full_disk_of_the_history_store_cut_says_how_many_actions_are_on_stderr_only() -> None:
    found = in_namespace("log_on_a_full_disk")
    assert (found["in_store"], found["unsaved"]) == (200, 250)
    assert found["words"] == (
        "Each action is logged on stderr; 200 of the 450 actions are in the history store (sysmcp history "
        "--reclaim), the other 250 only on stderr (the disk holding the history store is full: the reclaim "
        "log not saved)."
    )


def test_no_run_loses_a_content_touches_outside_or_changes_an_owner_whatever_is_swapped_in() -> None:
    """The invariant over seeded cases (issue 32): SYSMCP_RECLAIM_CASES=N runs N (SYSMCP_RECLAIM_SEED: the first)."""
    count = int(os.environ.get("SYSMCP_RECLAIM_CASES", "400"))
    first = int(os.environ.get("SYSMCP_RECLAIM_SEED", "0"))
    started = time.monotonic()
    found = in_namespace("property_cases", str(first), str(count), timeout=max(300, count))
    assert found["broken"] == [], found["broken"][:20]
    assert found["cases"] == count
    print(f"{count} cases from seed {first} in {time.monotonic() - started:.1f} s: {found['tally']}")
