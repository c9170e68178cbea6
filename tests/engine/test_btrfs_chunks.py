"""sysmcp.engine.pools' btrfs chunk reading on sysfs trees laid out as the kernel lays out
/sys/fs/btrfs/<uuid>/ (the real one is read in tests/tools/test_btrfs_chunks_real.py): a filesystem
with mixed block groups (data and metadata in one type) and a member that is no block device."""

from __future__ import annotations

from pathlib import Path

from sysmcp.engine.pools import Allocation, Chunks, btrfs_allocation, read_allocation

MiB = 1 << 20


def plant(root: Path, kinds: dict[str, tuple[int, int, int]], sectors: int = 2 * 131072) -> Path:
    fs = root / "0f1e2d3c-0000-4000-8000-000000000001"
    block = root / "block" / "loop7"
    block.mkdir(parents=True)
    (block / "size").write_text(f"{sectors}\n")
    (fs / "devices").mkdir(parents=True)
    (fs / "devices" / "loop7").symlink_to(block)
    for kind, (total, used, on_disk) in kinds.items():
        where = fs / "allocation" / kind
        (where / "single").mkdir(parents=True)
        for name, value in (("total_bytes", total), ("bytes_used", used), ("disk_total", on_disk)):
            (where / name).write_text(f"{value}\n")
    (fs / "allocation" / "global_rsv_size").write_text(f"{MiB}\n")
    return fs


def test_mixed_block_groups_are_read_and_never_called_metadata_full(tmp_path: Path) -> None:
    plant(tmp_path, {"mixed": (120 * MiB, 119 * MiB, 120 * MiB), "system": (4 * MiB, 0, 4 * MiB)})
    found = btrfs_allocation("/dev/loop7", str(tmp_path))
    assert found is not None and [c.kind for c in found.chunks] == ["mixed", "system"]
    assert found.device_size == 128 * MiB and found.unallocated == 4 * MiB
    assert found.metadata_percent is None and found.stuck is False


def test_a_device_no_btrfs_lists_and_a_tree_that_is_not_there_give_nothing(tmp_path: Path) -> None:
    plant(tmp_path, {"data": (8 * MiB, 0, 8 * MiB)})
    assert btrfs_allocation("/dev/sdq", str(tmp_path)) is None
    assert btrfs_allocation("/dev/loop7", str(tmp_path / "absent")) is None


def test_each_devices_own_size_and_room_count_where_btrfs_says_them(tmp_path: Path) -> None:
    fs = plant(tmp_path, {"data": (100 * MiB, 50 * MiB, 100 * MiB), "metadata": (8 * MiB, 7 * MiB, 16 * MiB)})
    (fs / "devinfo" / "1").mkdir(parents=True)
    shrunk = read_allocation(str(fs), lambda devid: (120 * MiB, 116 * MiB, "/dev/loop7"))
    assert shrunk is not None and (shrunk.device_size, shrunk.unallocated) == (120 * MiB, 4 * MiB)
    # a device path sysfs does not list: the directory opened is another filesystem's; sysfs alone
    other = read_allocation(str(fs), lambda devid: (120 * MiB, 116 * MiB, "/dev/sdz"))
    assert other is not None and (other.device_size, other.unallocated) == (128 * MiB, 12 * MiB)


def metadata_on(profile: str, on_disk: int, room: tuple[int, ...]) -> Allocation:
    meta = Chunks("metadata", profile, 64 * MiB, 60 * MiB, on_disk, 256 * MiB)
    return Allocation("x", 4096 * MiB, (meta,), 0, room)


def test_a_new_raid1_metadata_chunk_needs_room_on_two_devices_and_dup_twice_on_one() -> None:
    assert metadata_on("raid1", 128 * MiB, (500 * MiB, 0)).stuck is True  # all the room on one device
    assert metadata_on("raid1", 128 * MiB, (8 * MiB, 8 * MiB)).stuck is False
    assert metadata_on("raid1c3", 192 * MiB, (64 * MiB, 64 * MiB, 0)).stuck is True
    assert metadata_on("dup", 128 * MiB, (12 * MiB,)).stuck is True  # both copies on the one device
    assert metadata_on("dup", 128 * MiB, (16 * MiB,)).stuck is False
    assert metadata_on("single", 64 * MiB, (0, 8 * MiB)).stuck is False
