"""sysmcp.engine.pools' btrfs chunk reading on sysfs trees laid out as the kernel lays out
/sys/fs/btrfs/<uuid>/ (the real one is read in tests/tools/test_btrfs_chunks_real.py): a filesystem
with mixed block groups (data and metadata in one type) and a member that is no block device."""

from __future__ import annotations

from pathlib import Path

from sysmcp.engine.pools import btrfs_allocation

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
