"""sysmcp.engine.pools on recorded outputs (no device-mapper or ZFS here): lvs JSON, zfs list -Hp,
btrfs's listings; and its command runner against a real missing, hanging and failing command."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sysmcp.engine.commands import BadOutput, CommandFailed, CommandMissing, CommandTimedOut, run_command
from sysmcp.engine.faults import EngineError
from sysmcp.engine.pools import (
    btrfs_cow,
    parse_btrfs_du,
    parse_lvs,
    parse_qgroups,
    parse_subvolume_lines,
    parse_zfs_list,
    thin_pool_of,
    thin_pools,
    verified_subvolumes,
    zfs_cow,
)
from sysmcp.tools.errors import words
from tests.engine.recorded import ZFS_LIST, GiB, lvs_report


def test_a_thin_volume_is_matched_to_its_pool_with_data_metadata_and_overcommitment() -> None:
    volumes = parse_lvs(lvs_report())
    pool = thin_pool_of("/dev/mapper/vg0-thin1", volumes)
    assert pool is not None
    assert (pool.name, pool.volume, pool.size) == ("vg0/pool", "vg0/thin1", 10 * GiB)
    assert (pool.data_percent, pool.metadata_percent) == (97.0, 12.5)
    assert pool.provisioned == 40 * GiB and pool.overcommitted == 30 * GiB
    assert pool.free == round(10 * GiB * 0.03)
    assert pool.fuller_than(40) and not pool.fuller_than(98) and not pool.fuller_than(None)


def test_the_device_may_be_named_by_vg_and_lv_and_dashes_in_names_are_doubled() -> None:
    volumes = parse_lvs(lvs_report("50.00", "", *[]))
    assert thin_pool_of("/dev/vg0/thin2", volumes) is not None
    dashed = parse_lvs(lvs_report().replace('"vg0"', '"vg-a"').replace('"thin1"', '"my-thin"'))
    pool = thin_pool_of("/dev/mapper/vg--a-my--thin", dashed)
    assert pool is not None and pool.volume == "vg-a/my-thin"


def test_a_plain_volume_or_another_device_has_no_pool_and_needs_no_lvs() -> None:
    volumes = parse_lvs(lvs_report())
    assert thin_pool_of("/dev/mapper/sys-root", volumes) is None

    def never(argv: list[str], timeout: float) -> str:
        raise AssertionError("lvs run for a device that cannot be a thin volume")

    assert thin_pools(["/dev/sda1", "/dev/nvme0n1p2", "tmpfs"], 1.0, never) == {}


def test_a_pool_at_100_percent_metadata_is_the_fullest_limit() -> None:
    pool = thin_pool_of("/dev/mapper/vg0-thin1", parse_lvs(lvs_report("20.00", "100.00")))
    assert pool is not None and pool.fullest_percent == 100.0 and pool.fuller_than(99)


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "not json",
        '{"report": []}x',
        '{"report": [{"lv": [{"lv_name": "x"}]}]}',
        "[1, 2]",
        lvs_report("ninety"),
    ],
)
def test_garbage_lvs_output_is_bad_output_never_a_crash(garbage: str) -> None:
    with pytest.raises(BadOutput):
        thin_pools(["/dev/mapper/vg0-thin1"], 1.0, lambda argv, timeout: garbage)
    # an empty but well-formed report is no pool, not an error
    assert thin_pools(["/dev/mapper/vg0-thin1"], 1.0, lambda a, t: '{"report": [{"lv": []}]}') == {}


def test_zfs_list_splits_used_and_gives_each_snapshot_its_own_bytes() -> None:
    datasets, snapshots = parse_zfs_list(ZFS_LIST)
    home = datasets[0]
    assert home.name == "tank/home" and home.used == 5 * GiB
    assert (home.snapshots, home.dataset, home.children, home.refreservation) == (
        GiB,
        3 * GiB,
        768 << 20,
        256 << 20,
    )
    assert home.snapshots + home.dataset + home.children + home.refreservation == home.used
    assert [(s.name, s.exclusive) for s in snapshots] == [
        ("tank/home@monday", 512 << 20),
        ("tank/home@tuesday", 128 << 10),
    ]
    cow = zfs_cow("tank/home", 1.0, lambda argv, timeout: ZFS_LIST)
    assert cow.zfs == home and len(cow.items) == 2 and cow.bytes == (512 << 20) + (128 << 10)


@pytest.mark.parametrize(
    "garbage", ["a\tb\n", ZFS_LIST.replace("5368709120", "5.00G"), "x\tbookmark" + "\t1" * 7]
)
def test_garbage_zfs_output_is_a_fault_in_the_answer(garbage: str) -> None:
    with pytest.raises(BadOutput):
        parse_zfs_list(garbage)
    cow = zfs_cow("tank/home", 1.0, lambda argv, timeout: garbage)
    assert not cow.exact and cow.zfs is None and isinstance(cow.faults[0], BadOutput)


SUBVOLUMES = """ID 256 gen 12 top level 5 path data
ID 257 gen 11 top level 5 path snaps/monday
ID 258 gen 12 top level 5 path snaps/tuesday
"""
SNAPSHOTS = """ID 257 gen 11 cgen 10 top level 5 otime 2026-12-01 10:00:00 path snaps/monday
ID 258 gen 12 cgen 12 top level 5 otime 2026-12-02 10:00:00 path snaps/tuesday
"""
ON_DISK = {"/mnt/data": 256, "/mnt/snaps/monday": 257, "/mnt/snaps/tuesday": 258}.get
QGROUPS = """qgroupid         rfer         excl
--------         ----         ----
0/5             16384        16384
0/256       100663296     67125248
0/257       100663296     33570816
0/258       100663296        16384
"""


def fake_btrfs(qgroups: str | None, du: str | None = None) -> tuple[list[list[str]], object]:
    calls: list[list[str]] = []

    def run(argv: list[str], timeout: float) -> str:
        calls.append(argv)
        if argv[1:3] == ["subvolume", "list"]:
            return SNAPSHOTS if "-s" in argv else SUBVOLUMES
        if argv[1] == "qgroup":
            if qgroups is None:
                raise CommandFailed("btrfs qgroup show failed: quotas not enabled", reason="failed")
            return qgroups
        if du is None:
            raise CommandTimedOut("btrfs filesystem du gave no answer", reason="timeout")
        return du

    return calls, run


def test_with_quotas_on_each_subvolume_has_exclusive_and_shared_bytes() -> None:
    _, run = fake_btrfs(QGROUPS)
    cow = btrfs_cow("/mnt", "data", 1.0, 5.0, run)  # type: ignore[arg-type]
    assert [(i.name, i.is_snapshot, i.exclusive, i.shared) for i in cow.items] == [
        ("snaps/monday", True, 33570816, 100663296 - 33570816),
        ("snaps/tuesday", True, 16384, 100663296 - 16384),
    ]
    assert cow.exact and "qgroup" in cow.source and cow.bytes == 33570816 + 16384
    assert [i.path for i in cow.items] == ["", ""]  # the top level is not mounted: not reachable


def test_without_quotas_btrfs_filesystem_du_sizes_reachable_snapshots_and_never_enables_quotas() -> None:
    du = "     Total   Exclusive  Set shared  Filename\n 100663296    33570816    67092480  /mnt/snaps/monday\n"
    calls, run = fake_btrfs(None, du)
    cow = btrfs_cow("/mnt", "", 1.0, 5.0, run, subvolume_at=ON_DISK)  # type: ignore[arg-type]
    assert [i.name for i in cow.items] == ["data", "snaps/monday", "snaps/tuesday"]
    assert cow.items[1].exclusive == 33570816 and cow.items[1].shared == 67092480
    assert cow.items[1].path == "/mnt/snaps/monday" and "du" in cow.source
    assert not any("quota" in argv for argv in calls) and not any("enable" in argv for argv in calls)


def test_btrfs_filesystem_du_stops_at_its_budget_and_the_rest_are_unknown() -> None:
    now = [0.0]

    def run(argv: list[str], timeout: float) -> str:
        if argv[1] == "filesystem":
            now[0] += 3.0  # each du takes 3 s of the fake clock
            return " 1 2 3 x\n"
        return fake_btrfs(None)[1](argv, timeout)  # type: ignore[operator,no-any-return]

    cow = btrfs_cow("/mnt", "", 1.0, 5.0, run, clock=lambda: now[0], subvolume_at=ON_DISK)
    assert [i.exclusive for i in cow.items] == [2, 2, None] and not cow.exact


def test_a_hung_du_is_a_fault_and_the_snapshot_stays_unknown() -> None:
    _, run = fake_btrfs(None, None)
    cow = btrfs_cow("/mnt", "", 1.0, 5.0, run, subvolume_at=ON_DISK)  # type: ignore[arg-type]
    assert all(i.exclusive is None for i in cow.items) and not cow.exact
    assert all(isinstance(f, CommandTimedOut) for f in cow.faults) and cow.faults


def test_btrfs_parsers_refuse_garbage() -> None:
    with pytest.raises(BadOutput):
        parse_subvolume_lines("ID x gen\n")
    with pytest.raises(BadOutput):
        parse_btrfs_du("Total Exclusive\n")
    assert parse_qgroups("garbage") == {}
    assert [(line.ident, line.path) for line in parse_subvolume_lines(SUBVOLUMES)] == [
        (256, "data"),
        (257, "snaps/monday"),
        (258, "snaps/tuesday"),
    ]


# -- the runner, on real commands -------------------------------------------------------------------


def script(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def test_a_missing_command_is_said_plainly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CommandMissing) as caught:
        thin_pools(["/dev/mapper/vg0-thin1"], 1.0)
    assert words(caught.value).startswith("lvs is not installed (lvm2")


def test_a_command_that_hangs_is_killed_at_its_timeout_with_its_children(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    script(tmp_path, "lvs", "sleep 60 & sleep 60")  # a child holding the pipe open too
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    started = time.monotonic()
    with pytest.raises(CommandTimedOut) as caught:
        thin_pools(["/dev/mapper/vg0-thin1"], 0.3)
    assert time.monotonic() - started < 30  # bounded by the timeout, not by the sleeps
    assert "gave no answer within 0.3 s" in words(caught.value)


def test_a_failing_command_gives_its_first_error_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    script(tmp_path, "zfs", "echo 'cannot open tank/home: dataset does not exist' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    cow = zfs_cow("tank/home", 1.0)
    fault = cow.faults[0]
    assert isinstance(fault, EngineError) and "dataset does not exist" in words(fault)
    assert run_command(["true"], 1.0) == ""


def test_cancelling_stops_before_the_next_snapshots_extent_read() -> None:
    calls, run = fake_btrfs(None, " 1 2 3 x\n")

    class Cancelled(Exception):
        pass

    def check() -> None:
        if any(argv[1] == "filesystem" for argv in calls):
            raise Cancelled

    with pytest.raises(Cancelled):
        btrfs_cow("/mnt", "", 1.0, 5.0, run, cancel=check, subvolume_at=ON_DISK)  # type: ignore[arg-type]
    assert sum(argv[1] == "filesystem" for argv in calls) == 1


def test_a_recent_lvs_reading_of_the_same_devices_is_answered_again_within_its_age() -> None:
    runs: list[list[str]] = []

    def run(argv: list[str], timeout: float) -> str:
        runs.append(argv)
        return lvs_report()

    devices = ["/dev/mapper/vg0-thin1"]
    first = thin_pools(devices, 1.0, run, max_age=3600)
    assert thin_pools(devices, 1.0, run, max_age=3600) == first and len(runs) == 1  # no second lvs
    assert thin_pools(devices, 1.0, run, max_age=0) == first and len(runs) == 2  # a sampling round: afresh
    thin_pools([*devices, "/dev/vg0/thin2"], 1.0, run, max_age=3600)
    assert len(runs) == 3  # other devices: another reading


def test_a_subvolume_name_holding_newlines_is_joined_back_and_forges_no_subvolume() -> None:
    name = "x\nID 999 gen 1 top level 5 path forged\nrest"
    listing = SUBVOLUMES + f"ID 259 gen 13 top level 5 path {name}\n"
    disk = {"/mnt/data": 256, "/mnt/snaps/monday": 257, "/mnt/snaps/tuesday": 258, f"/mnt/{name}": 259}
    found, dropped = verified_subvolumes(
        parse_subvolume_lines(listing), lambda path: f"/mnt/{path}", disk.get
    )
    assert found == {256: "data", 257: "snaps/monday", 258: "snaps/tuesday", 259: name} and dropped == []


def test_a_listed_subvolume_not_on_disk_is_left_out_and_said() -> None:
    found, dropped = verified_subvolumes(
        parse_subvolume_lines(SUBVOLUMES), lambda path: f"/mnt/{path}", {"/mnt/data": 256}.get
    )
    assert found == {256: "data"} and len(dropped) == 2 and "snaps/monday" in dropped[0]
    cow = btrfs_cow("/mnt", "", 1.0, 5.0, fake_btrfs(QGROUPS)[1], subvolume_at={"/mnt/data": 256}.get)  # type: ignore[arg-type]
    assert [i.name for i in cow.items] == ["data"] and not cow.exact and len(cow.faults) == 2
