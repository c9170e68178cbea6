"""disk_usage on ZFS, on recorded ``zpool list -Hp`` and ``zfs list -Hp`` text (this kernel has no ZFS):
the pool under each dataset with its fill, fragmentation and health, a pool at 80 % or more or not
ONLINE leading the answer, a dataset full at its quota while its pool has room, and no zpool command
meaning nothing said at all."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from sysmcp.engine.commands import CommandFailed, CommandMissing
from sysmcp.engine.mounts import Mount, MountTable
from sysmcp.engine.pools import ZfsPools, zfs_pools
from sysmcp.tools.disk_usage import DiskUsage
from tests.engine.recorded import ZFS_LIMITS, ZPOOL_LIST
from tests.tools.test_disk_usage import ROOT, FakeUsage, by_point, call, stats

pytestmark = pytest.mark.anyio

HOME = Mount("/home", "tank/home", "zfs", ("rw", "xattr"), dev="0:51")
DB = Mount("/srv/db", "backup/db", "zfs", ("rw",), dev="0:52")


def recorded(argv: list[str], timeout: float) -> str:
    return ZPOOL_LIST if argv[0] == "zpool" else ZFS_LIMITS


def handler(usage: FakeUsage, mounts: list[Mount], run: object = recorded) -> DiskUsage:
    table = MountTable(mounts)

    def reader(datasets: Sequence[str]) -> ZfsPools | None:
        return zfs_pools(datasets, 1.0, run)  # type: ignore[arg-type]

    return DiskUsage(lambda: table, usage, zfs=reader)


USAGE = FakeUsage({"/": stats(100, 10), "/home": stats(100, 99, 1), "/srv/db": stats(740, 500)})


async def test_each_zfs_dataset_gets_its_pool_and_limits() -> None:
    _, structured = await call(handler(USAGE, [ROOT, HOME, DB]))
    home = by_point(structured)["/home"]["zfs"]
    assert home["pool"] == "tank" and home["capacity_percent"] == 42 and home["health"] == "ONLINE"
    assert home["size_bytes"] == 3985729650688 and home["free_bytes"] == 2311723196416
    assert home["fragmentation_percent"] == 12 and home["quota_bytes"] == 100 << 30
    assert home["refquota_bytes"] is None and home["pool_full"] is False
    db = by_point(structured)["/srv/db"]["zfs"]
    assert db["pool"] == "backup" and db["pool_full"] is True and db["health"] == "DEGRADED"
    assert db["reservation_bytes"] == 10 << 30
    assert "zfs" not in by_point(structured)["/"]


async def test_a_degraded_pool_at_87_percent_leads_the_answer() -> None:
    text, _ = await call(handler(USAGE, [ROOT, HOME, DB]))
    first = text.splitlines()[0]
    assert first.startswith("⚠ ZFS pool backup"), text
    assert "DEGRADED" in first and "zpool status -x backup" in first
    assert "87 %" in first and "80 %" in first
    assert text.count("ZFS pool backup") == 1 and "⚠ ZFS pool tank" not in text


async def test_a_dataset_full_at_its_quota_while_its_pool_has_room_says_the_quota_is_the_limit() -> None:
    text, _ = await call(handler(USAGE, [ROOT, HOME]), path="/home")
    assert "⚠ /home (ZFS tank/home) is full at its quota of 100.0 GiB" in text, text
    assert "its pool tank has 2.1 TiB free" in text and "zfs set quota=" in text


async def test_without_zpool_nothing_is_said_and_nothing_fails() -> None:
    def missing(argv: list[str], timeout: float) -> str:
        raise CommandMissing(f"{argv[0]} is not installed", reason="missing")

    text, structured = await call(handler(USAGE, [ROOT, HOME, DB], missing))
    assert "zfs" not in by_point(structured)["/home"] and "ZFS" not in text and "zpool" not in text


async def test_a_zpool_that_fails_is_one_line_and_the_rest_stands() -> None:
    def failing(argv: list[str], timeout: float) -> str:
        raise CommandFailed("zpool list -Hp failed: no pools available", reason="failed", argv=argv)

    text, structured = await call(handler(USAGE, [ROOT, HOME], failing))
    assert "ZFS pools not read: zpool list -Hp failed" in text, text
    assert by_point(structured)["/home"]["used_bytes"] == 99 << 30


def test_a_system_with_a_zfs_mount_answers_through_a_task_never_inline() -> None:
    # zpool and zfs are commands: never run on the event loop
    assert handler(USAGE, [ROOT, HOME]).answers_at_once({"path": "/"}) is False
    assert handler(USAGE, [ROOT]).answers_at_once({"path": "/"}) is True


async def test_an_explain_of_a_dataset_leads_with_its_pools_warning_too(tmp_path: Path) -> None:
    point = str(tmp_path)
    home = Mount(point, "backup/db", "zfs", ("rw",), dev="0:53")
    usage = FakeUsage({point: stats(740, 500)})
    text, structured = await call(handler(usage, [ROOT, home]), path=point, explain=True, timeout_s=10)
    assert text.splitlines()[0].startswith("⚠ ZFS pool backup is DEGRADED"), text
    assert structured["filesystems"][0]["zfs"]["pool"] == "backup" and "explain" in structured


async def test_a_dataset_held_by_its_parents_quota_is_never_told_to_raise_its_own() -> None:
    # tank/home/alice: a 500 GiB quota of its own, 50 GiB used; its parent's 100 GiB quota leaves it 1 GiB
    alice = "tank/home/alice\t53687091200\t1073741824\t53687091200\t536870912000\t0\t0\t0\n"

    def nested(argv: list[str], timeout: float) -> str:
        return ZPOOL_LIST if argv[0] == "zpool" else alice

    mount = Mount("/home/alice", "tank/home/alice", "zfs", ("rw",), dev="0:54")
    usage = FakeUsage({"/": stats(100, 10), "/home/alice": stats(51, 50, 1)})
    text, structured = await call(handler(usage, [ROOT, mount], nested), path="/home/alice")
    assert "space" in by_point(structured)["/home/alice"]["alerts"]
    assert "zfs set quota=" not in text and "full at its quota" not in text, text
    assert by_point(structured)["/home/alice"]["zfs"]["quota_bytes"] == 500 << 30


async def test_a_refquota_reached_is_named_as_the_limit() -> None:
    # tank/vm: 40 GiB referenced of a 40 GiB refquota (less its last 64 MiB), 60 GiB used with snapshots
    vm = "tank/vm\t64424509440\t67108864\t42882564096\t0\t42949672960\t0\t0\n"

    def refquota(argv: list[str], timeout: float) -> str:
        return ZPOOL_LIST if argv[0] == "zpool" else vm

    mount = Mount("/vm", "tank/vm", "zfs", ("rw",), dev="0:55")
    usage = FakeUsage({"/": stats(100, 10), "/vm": stats(40, 40, 0)})
    text, _ = await call(handler(usage, [ROOT, mount], refquota), path="/vm")
    assert "is full at its refquota of 40.0 GiB" in text and "zfs set refquota=SIZE tank/vm" in text, text


async def test_a_zfs_list_that_fails_still_leaves_the_pools_health_leading_the_answer() -> None:
    # zfs list exits 1 when one dataset it is named is gone (destroyed, renamed since the mount table
    # was read): the pools zpool did read still speak, and the failure is named once
    def vanished(argv: list[str], timeout: float) -> str:
        if argv[0] == "zpool":
            return ZPOOL_LIST
        raise CommandFailed(
            "zfs list -Hp failed: cannot open 'backup/db': dataset does not exist", reason="failed", argv=argv
        )

    text, structured = await call(handler(USAGE, [ROOT, HOME, DB], vanished))
    assert text.splitlines()[0].startswith("⚠ ZFS pool backup is DEGRADED"), text
    assert by_point(structured)["/srv/db"]["zfs"]["pool"] == "backup"
    assert by_point(structured)["/srv/db"]["zfs"]["quota_bytes"] is None
    assert text.count("dataset does not exist") == 1 and "ZFS pools not read" not in text, text


async def test_a_full_pool_is_never_told_to_add_a_bare_vdev_that_would_lose_its_redundancy() -> None:
    # a single disk added to a raidz or mirror pool is a top-level vdev without redundancy: when it
    # dies the whole pool is lost, and zpool add refuses it only until -f is given
    text, _ = await call(handler(USAGE, [ROOT, HOME, DB]))
    first = text.splitlines()[0]
    assert "add a vdev" in first and "same redundancy" in first and "never -f" in first, first
