"""sysmcp.engine.pools' ZFS pool reading on recorded ``zpool list -Hp`` and ``zfs list -Hp`` text (this
kernel has no ZFS): the pools' fill and health, the datasets' quotas and reservations, garbage refused,
and no zpool command meaning nothing to say."""

from __future__ import annotations

import pytest

from sysmcp.engine.commands import BadOutput, CommandMissing
from sysmcp.engine.pools import ZPOOL_FULL_PERCENT, parse_zfs_limits, parse_zpool_list, zfs_pools
from tests.engine.recorded import ZFS_LIMITS, ZPOOL_LIST, GiB


def test_zpool_list_gives_each_pools_fill_fragmentation_and_health() -> None:
    pools = {pool.name: pool for pool in parse_zpool_list(ZPOOL_LIST)}
    tank, backup, old = pools["tank"], pools["backup"], pools["old"]
    assert (tank.size, tank.allocated, tank.free) == (3985729650688, 1674006454272, 2311723196416)
    assert (tank.fragmentation, tank.capacity, tank.health) == (12, 42, "ONLINE")
    assert not tank.full and not tank.unhealthy
    assert backup.capacity == 87 >= ZPOOL_FULL_PERCENT and backup.full and backup.unhealthy
    assert (old.size, old.capacity, old.fragmentation, old.health) == (None, None, None, "UNAVAIL")
    assert old.unhealthy and not old.full


def test_zfs_list_gives_each_datasets_quotas_and_reservations_none_as_null() -> None:
    limits = {limit.name: limit for limit in parse_zfs_limits(ZFS_LIMITS)}
    home = limits["tank/home"]
    assert (home.quota, home.refquota, home.reservation, home.refreservation) == (100 * GiB, None, None, None)
    assert home.available == 544145408
    assert limits["backup/db"].reservation == 10 * GiB and limits["backup/db"].quota is None
    assert home.held_by == "quota" and limits["backup/db"].held_by is None


@pytest.mark.parametrize(
    "garbage",
    [
        "tank\t1\t2\n",  # too few columns
        "tank\tlots\t1\t1\t1\t1\tONLINE\n",  # not a number
        "tank\t1\t1\t1\t1\t1\t\n",  # no health
    ],
)
def test_garbage_zpool_output_is_bad_output(garbage: str) -> None:
    with pytest.raises(BadOutput):
        parse_zpool_list(garbage)


def test_without_zpool_there_is_nothing_to_say_and_no_fault() -> None:
    def missing(argv: list[str], timeout: float) -> str:
        raise CommandMissing(f"{argv[0]} is not installed", reason="missing")

    assert zfs_pools(["tank/home"], 1.0, missing) is None


def test_one_zpool_run_and_one_zfs_run_answer_every_dataset() -> None:
    calls: list[list[str]] = []

    def recorded(argv: list[str], timeout: float) -> str:
        calls.append(argv)
        return ZPOOL_LIST if argv[0] == "zpool" else ZFS_LIMITS

    found = zfs_pools(["tank/home", "backup/db", "tank/home"], 1.0, recorded)
    assert found is not None
    assert [argv[0] for argv in calls] == ["zpool", "zfs"]
    assert calls[0][:3] == ["zpool", "list", "-Hp"] and calls[1][-2:] == ["tank/home", "backup/db"]
    assert found.pools["tank"].capacity == 42 and found.limits["tank/home"].quota == 100 * GiB
    assert found.pool_of("backup/db") is found.pools["backup"]


def test_a_health_word_zpool_may_give_beyond_the_usual_seven_is_read_not_refused() -> None:
    # libzfs' zpool_state_to_name also says SPLIT and UNKNOWN: one such pool must not lose every pool
    text = ZPOOL_LIST + "half\t-\t-\t-\t-\t-\tSPLIT\nodd\t-\t-\t-\t-\t-\tUNKNOWN\n"
    pools = {pool.name: pool for pool in parse_zpool_list(text)}
    assert pools["tank"].capacity == 42 and pools["half"].unhealthy and pools["odd"].health == "UNKNOWN"


@pytest.mark.parametrize("garbage", ["tank\t1\t1\t1\t1\t1\tonline\n", "tank\t²\t1\t1\t1\t1\tONLINE\n"])
def test_a_health_not_in_capitals_or_a_digit_int_cannot_read_is_bad_output(garbage: str) -> None:
    with pytest.raises(BadOutput):
        parse_zpool_list(garbage)
