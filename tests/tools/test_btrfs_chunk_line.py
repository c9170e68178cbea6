"""The btrfs metadata-full line's words on planted allocations: what it claims must hold at 76 % as at
99 %, and the devices it tells an admin to add must be ones whose contents may go."""

from __future__ import annotations

from sysmcp.engine.pools import Allocation, Chunks
from sysmcp.tools.disk_pools import chunk_line

MiB = 1 << 20
GiB = 1 << 30


def stuck(meta_used: int, meta_size: int = 4 * GiB) -> Allocation:
    data = Chunks("data", "single", 900 * GiB, 500 * GiB, 900 * GiB, 0)
    meta = Chunks("metadata", "dup", meta_size, meta_used, 2 * meta_size, 0)
    return Allocation("x", 908 * GiB, (data, meta), 512 * MiB, (0,))


def test_metadata_three_quarters_full_is_not_said_to_fail_now_and_its_room_left_is_named() -> None:
    line = chunk_line("/data", stuck(2560 * MiB))  # 2.5 GiB used + 0.5 GiB reserve of 4 GiB: 75 %
    assert line is not None
    assert "1.0 GiB left" in line and "once that is used" in line, line
    assert "so creating files fails with ENOSPC although" not in line, line


def test_the_device_to_add_is_named_a_spare_whose_contents_go_and_that_stays_attached() -> None:
    line = chunk_line("/data", stuck(3500 * MiB))
    assert line is not None and "btrfs device add DEVICE /data" in line
    assert "empty spare" in line and "overwrites" in line and "stays attached" in line, line
