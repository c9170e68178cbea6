"""disk_usage's btrfs chunk figures and metadata-full warning on real loop filesystems where the
block devices alone mislead: a filesystem shrunk inside its device, and a RAID1 whose new metadata
chunk needs room on two devices (tests/tools/btrfs_profiles_scenario.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.loopfs import in_private_namespace, needs_loop_mounts

MiB = 1 << 20

pytestmark = needs_loop_mounts("mkfs.btrfs")


@pytest.fixture(scope="module")
def answer() -> dict[str, Any]:
    found: dict[str, Any] = in_private_namespace(
        ["-m", "tests.tools.btrfs_profiles_scenario"], "sysmcp-prof-"
    )
    return found


def chunks(reply: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = reply["structured"]["filesystems"][0]["chunks"]
    return found


def test_a_shrunk_filesystem_counts_the_size_btrfs_uses_not_its_block_device(answer: dict[str, Any]) -> None:
    shrunk = answer["shrunk"]
    assert shrunk["usage"]["Device slack"] == 400 * MiB, shrunk["usage"]
    found = chunks(shrunk["reply"])
    assert found["device_bytes"] == shrunk["usage"]["Device size"], (found, shrunk["usage"])
    assert found["unallocated_bytes"] == shrunk["usage"]["Device unallocated"], (found, shrunk["usage"])


def test_a_raid1_with_full_metadata_is_told_to_add_two_devices(answer: dict[str, Any]) -> None:
    raid1 = answer["raid1"]
    assert raid1["fill"]["enospc"] is True, raid1["fill"]
    assert chunks(raid1["full"])["metadata_full"] is True
    first = raid1["full"]["text"].splitlines()[0]
    assert "ENOSPC" in first and "two devices" in first, first


def test_one_device_added_to_that_raid1_leaves_it_stuck_and_still_said(answer: dict[str, Any]) -> None:
    raid1 = answer["raid1"]
    assert raid1["add_one"] == 0 and raid1["balance_one"] != 0, raid1  # the balance still finds no room
    assert chunks(raid1["one_added"])["metadata_full"] is True, chunks(raid1["one_added"])
    assert "ENOSPC" in raid1["one_added"]["text"].splitlines()[0]


def test_the_two_devices_the_answer_names_let_the_balance_run(answer: dict[str, Any]) -> None:
    raid1 = answer["raid1"]
    assert (raid1["add_two"], raid1["balance_two"], raid1["remove"]) == (0, 0, 0), raid1
    after = chunks(raid1["after"])
    assert after["metadata_full"] is False and after["metadata_percent"] < 75, after  # metadata chunks grew
    assert "ENOSPC" not in raid1["after"]["text"]
