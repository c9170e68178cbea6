"""sysmcp.engine.pools on a real btrfs (loop image, private mount namespace): a snapshot's exclusive
bytes, read with quotas off (btrfs filesystem du) and on (qgroups, turned on by this test on its own
scratch filesystem), are what deleting the snapshot gives back; explain names them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.pools_btrfs_scenario import FORGING, OLD, SHARED, TWO_LINES
from tests.loopfs import in_private_namespace, needs_loop_mounts

MiB = 1 << 20

pytestmark = needs_loop_mounts("mkfs.btrfs")


@pytest.fixture(scope="module")
def answer() -> dict[str, Any]:
    result: dict[str, Any] = in_private_namespace(
        ["-m", "tests.engine.pools_btrfs_scenario"], "sysmcp-pools-btrfs-"
    )
    return result


def near(found: int | None, expected: int) -> bool:
    return found is not None and abs(found - expected) <= 4 * MiB + expected // 20


def snapshot(items: list[dict[str, Any]]) -> dict[str, Any]:
    return next(item for item in items if item.get("name") == "snaps/s1")


def test_quotas_off_btrfs_filesystem_du_gives_the_snapshots_exclusive_and_shared_bytes(
    answer: dict[str, Any],
) -> None:
    items = answer["quotas_off"]
    s1 = snapshot(items)
    assert s1["is_snapshot"] is True and s1["path"].endswith("/snaps/s1")
    assert near(s1["exclusive"], OLD), s1
    assert near(s1["shared"], SHARED), s1
    data = next(item for item in items if item.get("name") == "data")
    assert data["is_snapshot"] is False
    assert "du" in items[-1]["source"] and items[-1]["faults"] == []


def test_a_name_across_lines_is_one_subvolume_and_forges_none(answer: dict[str, Any]) -> None:
    for reading in ("quotas_off", "quotas_on"):
        items = answer[reading][:-1]
        assert sorted(item["name"] for item in items) == sorted(["data", "snaps/s1", FORGING, TWO_LINES])
        named = {item["name"]: item for item in items}
        assert named[FORGING]["path"].endswith("/" + FORGING) and named[FORGING]["is_snapshot"] is False
        assert answer[reading][-1]["faults"] == [], reading


def test_quotas_on_the_qgroups_give_the_same_exclusive_bytes(answer: dict[str, Any]) -> None:
    s1 = snapshot(answer["quotas_on"])
    assert "qgroup" in answer["quotas_on"][-1]["source"]
    assert near(s1["exclusive"], OLD) and near(s1["shared"], SHARED), s1


def test_deleting_the_snapshot_gives_back_its_exclusive_bytes(answer: dict[str, Any]) -> None:
    for reading in ("quotas_off", "quotas_on"):
        assert near(answer["freed"], snapshot(answer[reading])["exclusive"]), (answer["freed"], reading)


def test_explain_names_the_snapshots_bytes_as_a_part_of_used(answer: dict[str, Any]) -> None:
    part = answer["explain"]["structured"]["explain"]["snapshots"]
    assert part["kind"] == "btrfs subvolumes" and part["exact"] is True
    named = {row["name"]: row for row in part["items"]}
    assert near(named["snaps/s1"]["bytes"], OLD) and near(named["snaps/s1"]["shared_bytes"], SHARED)
    text = answer["explain"]["text"]
    assert (
        "5. Snapshots and subvolumes:" in text and "Shared with the live files or other snapshots" in text
    ), text
