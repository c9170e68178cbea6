"""disk_usage on a real btrfs whose devices are all allocated to chunks, its metadata full and its data
chunks half empty (loop image, private mount namespace): ENOSPC while df shows free space, and the
answer leads with that, the chunk figures and the balance that gives room back."""

from __future__ import annotations

from typing import Any

import pytest

from tests.loopfs import in_private_namespace, needs_loop_mounts

MiB = 1 << 20

pytestmark = needs_loop_mounts("mkfs.btrfs")


@pytest.fixture(scope="module")
def answer() -> dict[str, Any]:
    found: dict[str, Any] = in_private_namespace(
        ["-m", "tests.tools.btrfs_chunks_scenario"], "sysmcp-chunks-"
    )
    return found


def chunks(reply: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = reply["structured"]["filesystems"][0]["chunks"]
    return found


def test_the_scenario_reaches_enospc_while_df_shows_free_space(answer: dict[str, Any]) -> None:
    assert answer["fill"]["enospc"] is True
    assert answer["fill"]["df_free"] > 100 * MiB, answer["fill"]


def test_the_chunks_show_every_device_byte_allocated_and_metadata_full(answer: dict[str, Any]) -> None:
    found = chunks(answer["plain"])
    assert found["device_bytes"] == 512 * MiB
    assert found["unallocated_bytes"] < 16 * MiB, found
    kinds = {t["type"]: t for t in found["types"]}
    assert set(kinds) == {"data", "metadata", "system"}
    assert kinds["metadata"]["profile"] == "dup"
    assert kinds["metadata"]["device_bytes"] == 2 * kinds["metadata"]["size_bytes"]
    data = kinds["data"]
    assert data["size_bytes"] - data["used_bytes"] > 100 * MiB, data  # half-empty data chunks
    assert found["metadata_percent"] >= 75 and found["metadata_full"] is True, found


def test_the_answer_leads_with_the_metadata_full_and_the_balance_to_run(answer: dict[str, Any]) -> None:
    for reply in (answer["plain"], answer["explain"]):
        first = reply["text"].splitlines()[0]
        assert "metadata" in first and "ENOSPC" in first and "btrfs balance start -dusage=" in first, first
        assert "btrfs device add" in first and "btrfs device remove" in first, first


def test_the_steps_it_names_give_unallocated_room_back_and_the_warning_goes(answer: dict[str, Any]) -> None:
    steps = answer["balance"]
    assert (
        steps["usage50_alone"] != 0
    )  # the balance alone has no metadata room to work in: as the answer says
    assert steps["add"] == 0 and steps["usage50"] == 0 and steps["remove"] == 0, steps
    after = chunks(answer["after"])
    before = chunks(answer["plain"])
    assert after["unallocated_bytes"] > before["unallocated_bytes"] + 16 * MiB, after
    assert after["metadata_full"] is False, after  # as full as before, but with room to grow into
    assert "ENOSPC" not in answer["after"]["text"]
