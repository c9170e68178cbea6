"""disk_health: the parsers on recorded-format inputs (tests/tools/health_data, written by hand from
smartctl's and the kernel's documented formats), the real smartctl on this machine's disks, btrfs
counters on a real btrfs loop filesystem, the kernel log, and smartctl missing, hanging, vanishing or
talking nonsense."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest

from sysmcp import platform
from sysmcp.engine.faults import Unavailable
from sysmcp.engine.health import Health, HealthRequest, _kernel, _mdstat, _smart, run
from sysmcp.tools.disk_health import (
    DeviceRow,
    DiskHealth,
    merge,
    render,
    result_of,
)
from sysmcp.tools.merging import HostOutcome
from sysmcp.tools.registry import ToolOutput
from sysmcp.tools.typed import to_json
from tests.harness import call_tool, tool_context
from tests.loopfs import in_private_namespace, needs_loop_mounts
from tests.profile import UNDER_POSIX_PROFILE

DATA = Path(__file__).parent / "health_data"
ROOT = Path(__file__).resolve().parents[2]
needs_linux_root = pytest.mark.skipif(
    UNDER_POSIX_PROFILE or not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="needs root on Linux (/dev/kmsg, loop devices, mounts)",
)


def recorded(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())  # type: ignore[no-any-return]


async def call(roots: list[str] | None = None, **args: Any) -> ToolOutput:
    return await call_tool("disk_health", tool_context(roots or None, progress_token="h"), **args)


def fake_smartctl(tmp_path: Path, body: str) -> str:
    script = tmp_path / "smartctl"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


# -- SMART on recorded-format documents -------------------------------------------------------------


def test_a_healthy_ata_drive_reads_ok_with_its_counters_at_zero() -> None:
    smart = _smart.parse(recorded("smartctl-ata-healthy.json"))
    assert (smart.status, smart.passed, smart.protocol) == ("read", True, "ATA")
    assert smart.attributes == {
        "reallocated sectors": 0,
        "reported uncorrectable errors": 0,
        "pending sectors": 0,
        "offline-uncorrectable sectors": 0,
        "UDMA CRC errors": 0,
    }
    assert (smart.power_on_hours, smart.temperature_c, smart.failing, smart.watch) == (28734, 34, [], [])


def test_an_ata_drive_with_pending_and_reallocated_sectors_is_failing_and_says_back_up() -> None:
    smart = _smart.parse(recorded("smartctl-ata-failing.json"))
    failing = " | ".join(smart.failing)
    assert "self-assessment is FAILED" in failing
    assert "24 pending sectors" in failing and "24 offline-uncorrectable sectors" in failing
    assert "attribute 5 (Reallocated_Sector_Ct) is below its failure threshold now" in failing
    watch = " | ".join(smart.watch)
    assert "1,016 reallocated sectors" in watch and "3 UDMA CRC errors: a cable" in watch
    assert "back up now" in failing


def test_a_healthy_nvme_drive_reads_ok_with_spare_wear_and_shutdowns() -> None:
    smart = _smart.parse(recorded("smartctl-nvme-healthy.json"))
    assert (smart.status, smart.protocol, smart.failing, smart.watch) == ("read", "NVMe", [], [])
    assert smart.attributes == {
        "media_errors": 0,
        "percentage_used": 3,
        "available_spare": 100,
        "available_spare_threshold": 10,
        "unsafe_shutdowns": 27,
        "error_log_entries": 0,
    }
    assert (smart.power_on_hours, smart.temperature_c) == (9876, 41)


def test_an_nvme_critical_warning_names_its_bits_and_media_errors_wear_and_heat_are_watched() -> None:
    smart = _smart.parse(recorded("smartctl-nvme-failing.json"))
    assert smart.failing == [
        "the drive's own SMART self-assessment is FAILED: replace it",
        "NVMe critical warning 0x05: available spare below its threshold, reliability degraded by media "
        "or internal errors; back up now",
    ]
    watch = " | ".join(smart.watch)
    assert "17 media errors" in watch and "96% of its rated endurance used" in watch and "71 °C" in watch


def test_an_nvme_drive_whose_last_self_test_failed_is_failing_with_the_test_its_hour_and_lba() -> None:
    smart = _smart.parse(recorded("smartctl-nvme-selftest-failed.json"))
    assert smart.passed is True and smart.attributes["media_errors"] == 0
    assert len(smart.failing) == 1, smart.failing
    reason = smart.failing[0]
    assert "most recent self-test" in reason and "Extended" in reason and "failed segments" in reason
    assert "9,870 h" in reason and "LBA 123456789" in reason and "back up now" in reason
    assert smart.self_test == "Extended: Completed: failed segments, at 9,870 h"
    assert (
        smart.attributes["error_log_entries"] == 3
    )  # counted, not judged: hosts' bad commands land there too


def test_an_older_failed_nvme_self_test_under_a_newer_passed_one_is_no_alarm() -> None:
    doc = recorded("smartctl-nvme-selftest-failed.json")
    table = doc["nvme_self_test_log"]["table"]
    table.reverse()  # the newest first: the short test that passed
    smart = _smart.parse(doc)
    assert smart.failing == [] and smart.self_test == "Short: Completed without error, at 9,700 h"


def test_an_aborted_nvme_self_test_is_no_failure_and_one_running_is_said() -> None:
    doc = recorded("smartctl-nvme-selftest-failed.json")
    doc["nvme_self_test_log"]["table"][0]["self_test_result"] = {
        "value": 2,
        "string": "Aborted: Controller Reset",
    }
    assert _smart.parse(doc).failing == []
    doc["nvme_self_test_log"]["current_self_test_operation"] = {
        "value": 2,
        "string": "Extended self-test in progress",
    }
    doc["nvme_self_test_log"]["current_self_test_completion_percent"] = 40
    assert (
        _smart.parse(doc).self_test
        == "Extended self-test in progress, 40% done; last: Extended: Aborted: Controller Reset, at 9,870 h"
    )


def test_every_nvme_critical_warning_bit_is_spelled_out_the_persistent_memory_one_too() -> None:
    doc = recorded("smartctl-nvme-healthy.json")
    doc["nvme_smart_health_information_log"]["critical_warning"] = 0x3F
    (reason,) = _smart.parse(doc).failing
    for words in (
        "available spare",
        "temperature",
        "reliability degraded",
        "read-only",
        "volatile memory backup",
        "persistent memory region",
    ):
        assert words in reason, (words, reason)


def test_an_nvme_drive_past_its_rated_endurance_says_so() -> None:
    doc = recorded("smartctl-nvme-healthy.json")
    doc["nvme_smart_health_information_log"]["percentage_used"] = 112
    (reason,) = _smart.parse(doc).watch
    assert "112%" in reason and "past its rated endurance" in reason


def _health_of(device: str, smart: _smart.Smart) -> Any:
    from sysmcp.engine.health import Health, _judge

    return Health([_judge(device, smart, [])], [], [], [], True, True, True)


def test_the_self_test_line_is_in_the_device_row_and_the_text() -> None:
    health = _health_of("/dev/nvme1", _smart.parse(recorded("smartctl-nvme-selftest-failed.json")))
    answer = result_of(health, None)
    assert answer.devices[0].self_test == "Extended: Completed: failed segments, at 9,870 h"
    text = render(answer)
    assert "/dev/nvme1: FAILING" in text and "self-test Extended: Completed: failed segments" in text, text


def test_a_document_without_health_data_is_no_smart_with_smartctls_own_words() -> None:
    doc = {
        "smartctl": {"messages": [{"string": "/dev/vda: Unable to detect device type", "severity": "error"}]}
    }
    assert _smart.parse(doc).status == "no_smart"
    assert _smart.parse(doc).note == "/dev/vda: Unable to detect device type"


def _ata_row(ident: int, name: str, *, prefailure: bool, when_failed: str) -> dict[str, Any]:
    return {
        "id": ident,
        "name": name,
        "value": 40,
        "worst": 30,
        "thresh": 45,
        "when_failed": when_failed,
        "flags": {"value": 0x33 if prefailure else 0x22, "prefailure": prefailure},
        "raw": {"value": 55, "string": "55"},
    }


def test_an_old_age_attribute_below_its_threshold_is_marginal_as_smartctl_says_not_failing() -> None:
    # smartctl (ataprint.cpp): only a pre-failure attribute at or below its threshold now fails the
    # drive; an old-age one now, or any one in the past, is "marginal" (exit status bit 5)
    doc = recorded("smartctl-ata-healthy.json")
    doc["ata_smart_attributes"]["table"] += [
        _ata_row(190, "Airflow_Temperature_Cel", prefailure=False, when_failed="now"),
        _ata_row(3, "Spin_Up_Time", prefailure=True, when_failed="past"),
    ]
    smart = _smart.parse(doc)
    assert smart.failing == []
    assert smart.watch == [
        "attribute 190 (Airflow_Temperature_Cel) is an old-age attribute below its threshold now: "
        "smartctl calls it marginal; watch it",
        "attribute 3 (Spin_Up_Time) is below its threshold in the past: smartctl calls it marginal; watch it",
    ]
    doc["ata_smart_attributes"]["table"].append(
        _ata_row(10, "Spin_Retry_Count", prefailure=True, when_failed="now")
    )
    assert _smart.parse(doc).failing == ["attribute 10 (Spin_Retry_Count) is below its failure threshold now"]


def test_an_ata_drive_whose_last_self_test_failed_is_failing_though_its_status_passes() -> None:
    # smartctl's exit status bit 7 (ataprint.cpp: ata_smart_data.self_test.status.passed false)
    doc = recorded("smartctl-ata-healthy.json")
    doc["ata_smart_data"] = {
        "self_test": {
            "status": {"value": 0x79, "string": "completed with error (read test element)", "passed": False}
        }
    }
    assert _smart.parse(doc).failing == [
        "its most recent self-test completed with error (read test element): back up now and replace the drive"
    ]
    doc["ata_smart_data"]["self_test"]["status"] = {"value": 0x10, "string": "was aborted by the host"}
    assert _smart.parse(doc).failing == []  # aborted: smartctl gives no verdict either


def test_a_sas_drive_with_grown_defects_and_uncorrected_reads_is_watched_though_it_passes() -> None:
    smart = _smart.parse(recorded("smartctl-scsi-worn.json"))
    assert (smart.status, smart.protocol, smart.passed, smart.failing) == ("read", "SCSI", True, [])
    assert smart.attributes == {
        "grown defects": 312,
        "uncorrected read errors": 7,
        "uncorrected write errors": 0,
    }
    watch = " | ".join(smart.watch)
    assert "312 grown defects (remapped sectors)" in watch and "7 uncorrected read errors" in watch
    assert (smart.temperature_c, "hot" in watch) == (38, False)


def test_heat_is_judged_against_the_drives_own_limit_where_it_gives_one() -> None:
    doc = recorded("smartctl-nvme-healthy.json")
    doc["temperature"] = {"current": 66, "op_limit_max": 80, "critical_limit_max": 85}
    assert _smart.parse(doc).watch == []  # 66 °C is within what this NVMe drive is rated for
    doc["temperature"]["current"] = 81
    assert _smart.parse(doc).watch == [
        "running hot at 81 °C (at or above its own limit 80 °C): check its cooling"
    ]
    del doc["temperature"]["op_limit_max"]
    doc["temperature"]["current"] = 60
    assert _smart.parse(doc).watch == ["running hot at 60 °C (at or above 60 °C): check its cooling"]


def test_a_device_smartctl_could_not_open_is_unopened_not_a_device_without_smart() -> None:
    # smartctl 7.3 here, as root, ``smartctl --json -a -d sat /dev/vda`` on a virtio disk: exit status 2
    doc = {
        "smartctl": {
            "version": [7, 3],
            "messages": [
                {
                    "string": "Smartctl open device: /dev/sda [SAT] failed: Permission denied",
                    "severity": "error",
                }
            ],
            "exit_status": 2,
        }
    }
    smart = _smart.parse(doc)
    assert (smart.status, smart.note) == (
        "unopened",
        "Smartctl open device: /dev/sda [SAT] failed: Permission denied",
    )


def test_an_nvme_drive_smartctls_scan_names_by_its_controller_is_read_once(tmp_path: Path) -> None:
    sys_block = tmp_path / "block"
    sys_block.mkdir()
    (sys_block / "nvme0n1").mkdir()  # a hardware disk: not under /devices/virtual/
    scan = json.dumps(
        {
            "smartctl": {"exit_status": 0},
            "devices": [
                {"name": "/dev/nvme0", "info_name": "/dev/nvme0", "type": "nvme", "protocol": "NVMe"},
                {"name": "/dev/bus/0", "info_name": "/dev/bus/0 [megaraid_disk_00]", "type": "megaraid,0"},
            ],
        }
    )
    doc = json.dumps(recorded("smartctl-nvme-healthy.json"))
    smartctl = fake_smartctl(
        tmp_path, f"if [ \"$1\" = --scan-open ]; then echo '{scan}'; else cat <<'EOF'\n{doc}\nEOF\nfi"
    )
    health = run(HealthRequest(smartctl=smartctl, sys_block=str(sys_block), kmsg=str(tmp_path / "none")))
    assert sorted(d.device for d in health.devices) == ["/dev/bus/0", "/dev/nvme0n1"]


# -- md RAID on recorded /proc/mdstat texts ---------------------------------------------------------


def test_a_clean_raid1_has_both_members_up() -> None:
    (array,) = _mdstat.parse((DATA / "mdstat-raid1-clean.txt").read_text())
    assert (array.name, array.level, array.slots, array.members, array.degraded) == (
        "md0",
        "raid1",
        "UU",
        ["sdb1", "sda1"],
        False,
    )
    assert array.operation is None


def test_a_degraded_raid1_names_its_failed_member() -> None:
    (array,) = _mdstat.parse((DATA / "mdstat-raid1-degraded.txt").read_text())
    assert (array.slots, array.failed, array.degraded) == ("U_", ["sdb1"], True)


def test_a_recovering_raid1_gives_its_progress_speed_and_finish_estimate() -> None:
    (array,) = _mdstat.parse((DATA / "mdstat-raid1-recovering.txt").read_text())
    assert (array.operation, array.progress_percent, array.speed, array.finish) == (
        "recovery",
        23.4,
        "200042K/sec",
        "62.3min",
    )


def test_a_degraded_array_is_failing_and_one_rebuilding_is_watched_with_its_progress(tmp_path: Path) -> None:
    words = []
    for name in ("clean", "degraded", "recovering"):
        health = run(HealthRequest(devices=(), mdstat=str(DATA / f"mdstat-raid1-{name}.txt")))
        words.append(render(result_of(health, None)))
    assert "md md0: OK — raid1 [UU]" in words[0]
    assert "md md0: FAILING — raid1 [U_], failed: sdb1 — degraded: replace" in words[1]
    assert (
        "md md0: WATCH — raid1 [U_], recovery 23.4% (speed 200042K/sec, finish in 62.3min) — rebuilding: "
        "no redundancy until it ends" in words[2]
    )


def test_inactive_arrays_fail_a_check_is_no_alarm_and_a_whole_array_with_a_failed_member_is_watched() -> None:
    health = run(HealthRequest(devices=(), mdstat=str(DATA / "mdstat-mixed.txt")))
    answer = result_of(health, None)
    assert {a.name: (a.verdict, a.degraded) for a in answer.arrays} == {
        "md5": ("watch", True),  # recovering
        "md6": ("failing", True),  # a slot empty, nothing rebuilding
        "md10": ("ok", False),  # a scheduled check: mdadm calls it clean, checking
        "md1": ("watch", False),  # resyncing
        "md2": ("watch", False),  # [UU]: a spare took the failed member's place
        "md127": ("failing", False),  # not running at all
        "md3": ("watch", False),  # resync pending
    }
    text = render(answer)
    assert "md md127: FAILING — inactive — not running: its data cannot be reached; assemble it" in text
    assert "md md2: WATCH — raid1 [UU], failed: sdt1 — a failed member is still listed: remove it" in text
    assert "md md10: OK — raid10 [UUUU], check 12.5%" in text
    assert (
        "md md5: WATCH — raid5 [UUU_], recovery 0.4% (speed 137752K/sec, finish in 235.3min) — rebuilding: no redundancy until it ends"
        in text
    )


def test_a_rebuilding_array_that_keeps_some_redundancy_does_not_say_it_has_none() -> None:
    from sysmcp.engine.health import Health

    text = """Personalities : [raid6] [raid1] [raid10]
md6 : active raid6 sdj1[5] sdh1[3] sdg1[2] sdf1[1] sde1[0]
      7813533696 blocks super 1.2 level 6, 512k chunk, algorithm 2 [5/4] [UUUU_]
      [==>..................]  recovery = 10.0% (1/10) finish=10.0min speed=100K/sec

md1 : active raid1 sdc1[3] sdb1[1] sda1[0]
      488253440 blocks super 1.2 [3/2] [UU_]
      [==>..................]  recovery = 10.0% (1/10) finish=10.0min speed=100K/sec

md10 : active raid10 sdn1[4] sdm1[2] sdl1[1] sdk1[0]
      1953260544 blocks super 1.2 512K chunks 2 near-copies [4/3] [UUU_]
      [==>..................]  recovery = 10.0% (1/10) finish=10.0min speed=100K/sec
"""
    words = render(result_of(Health([], _mdstat.parse(text), [], [], True, True, True), None))
    assert "md md6: WATCH — raid6 [UUUU_]" in words
    assert "rebuilding: it survives 1 more failed member, no more, until it ends" in words
    assert words.count("it survives 1 more failed member") == 2  # md6 and the three-way md1
    assert (
        "md md10: WATCH — raid10 [UUU_], recovery 10% (speed 100K/sec, finish in 10.0min) — rebuilding: less redundancy until it ends"
        in words
    )
    assert "no redundancy" not in words


# -- the real smartctl here -------------------------------------------------------------------------


@pytest.mark.skipif(
    shutil.which("smartctl") is None, reason="smartctl is not installed (.ci/run installs it)"
)
@pytest.mark.skipif(UNDER_POSIX_PROFILE, reason="/sys/block is Linux's")
def test_the_real_smartctl_answers_for_every_disk_here_and_a_disk_without_smart_says_so() -> None:
    output = anyio.run(call)
    devices = output.structured["devices"]
    assert devices, output.text
    assert {d["smart"] for d in devices} <= {"read", "no_smart"}, output.text
    for device in devices:
        if (
            device["smart"] == "no_smart"
        ):  # this VM's virtio disks: smartctl's own reason, and the verdict unknown, not ok
            assert device["note"] and device["verdict"] == "unknown"
            assert f"{device['device']}: UNKNOWN — SMART not read: {device['note']}" in output.text
            if os.path.realpath(f"/sys/block/{os.path.basename(device['device'])}").count("/virtio"):
                assert "a virtual disk (virtio)" in device["reasons"][0], device


def test_without_smartctl_every_device_says_smartctl_is_not_installed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    if UNDER_POSIX_PROFILE:  # as on macOS: no /sys/block, so without smartctl no device list at all
        with pytest.raises(Unavailable, match="none in /sys/block; smartctl is not installed"):
            anyio.run(call)
        return
    output = anyio.run(call)
    assert {d["smart"] for d in output.structured["devices"]} == {"absent"}
    assert "smartctl is not installed (Debian: apt install smartmontools)" in output.text


def test_a_hanging_smartctl_is_killed_at_the_per_device_timeout(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    smartctl = fake_smartctl(tmp_path, f"echo $$ > {pidfile}\nexec sleep 600")
    device = tmp_path / "sdx"
    device.touch()
    health = run(HealthRequest(timeout_s=0.3, smartctl=smartctl, devices=(str(device),)))
    (row,) = health.devices
    assert (row.smart.status, row.verdict) == ("timeout", "watch")
    assert "did not answer within 0.3 s" in row.reasons[0]
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left sleeping
        os.kill(int(pidfile.read_text()), 0)


@pytest.mark.skipif(UNDER_POSIX_PROFILE, reason="/sys/block is Linux's")
def test_a_smartctl_that_never_answers_bounds_the_whole_call_scan_included(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_smartctl(tmp_path, "exec sleep 600")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    started = time.monotonic()
    health = run(HealthRequest(timeout_s=0.5))
    assert health.devices and {d.smart.status for d in health.devices} == {"timeout"}
    assert time.monotonic() - started < 60  # bounded by the timeout, not by the script's 600 s sleep


def test_cancelling_kills_the_smartctl_still_running(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    smartctl = fake_smartctl(tmp_path, f"echo $$ > {pidfile}\nexec sleep 600")
    device = tmp_path / "sdx"
    device.touch()

    class Cancelled(Exception):
        pass

    def cancel() -> None:
        if pidfile.exists() and pidfile.read_text().strip():
            raise Cancelled

    with pytest.raises(Cancelled):
        run(HealthRequest(timeout_s=600, smartctl=smartctl, devices=(str(device),)), cancel=cancel)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)


def test_a_device_that_vanishes_while_smartctl_reads_it_is_gone(tmp_path: Path) -> None:
    device = tmp_path / "sdx"
    device.touch()
    doc = json.dumps(recorded("smartctl-ata-healthy.json"))
    smartctl = fake_smartctl(tmp_path, f"rm -f {device}\ncat <<'EOF'\n{doc}\nEOF")
    (row,) = run(HealthRequest(smartctl=smartctl, devices=(str(device),))).devices
    assert (row.smart.status, row.verdict) == ("gone", "watch")
    assert f"{device} is no longer present" in row.reasons[0]


@pytest.mark.skipif(
    shutil.which("smartctl") is None, reason="smartctl is not installed (.ci/run installs it)"
)
def test_the_real_smartctl_on_a_device_node_that_is_not_there_says_gone() -> None:
    (row,) = run(HealthRequest(devices=("/dev/sysmcp-no-such-disk",))).devices
    assert row.smart.status == "gone"


def test_output_that_is_not_smartctls_json_is_garbage_not_a_crash(tmp_path: Path) -> None:
    device = tmp_path / "sdx"
    device.touch()
    smartctl = fake_smartctl(tmp_path, "echo '{\"smartctl\": {'")
    (row,) = run(HealthRequest(smartctl=smartctl, devices=(str(device),))).devices
    assert (row.smart.status, row.verdict) == ("garbage", "unknown")
    assert "not its JSON" in row.smart.note


def test_json_in_shapes_smartctl_never_writes_is_garbage_not_a_crash(tmp_path: Path) -> None:
    device = tmp_path / "sdx"
    device.touch()
    doc = json.dumps(
        {"smartctl": {}, "smart_status": {"passed": True}, "power_on_time": 7, "temperature": []}
    )
    smartctl = fake_smartctl(tmp_path, f"cat <<'EOF'\n{doc}\nEOF")
    (row,) = run(HealthRequest(smartctl=smartctl, devices=(str(device),))).devices
    assert (row.smart.status, row.smart.note) == (
        "garbage",
        "smartctl's JSON is not in the documented format",
    )


def test_smartctl_runs_in_parallel_with_progress_per_device(tmp_path: Path) -> None:
    devices = []
    for index in range(6):
        (tmp_path / f"sd{index}").touch()
        devices.append(str(tmp_path / f"sd{index}"))
    doc = json.dumps(recorded("smartctl-nvme-healthy.json"))
    smartctl = fake_smartctl(tmp_path, f"cat <<'EOF'\n{doc}\nEOF")
    seen: list[tuple[float, float | None]] = []
    health = run(HealthRequest(smartctl=smartctl, devices=tuple(devices)), lambda d, t: seen.append((d, t)))
    assert [d.smart.status for d in health.devices] == ["read"] * 6
    assert seen[-1] == (6, 6)


# -- the kernel's I/O errors ------------------------------------------------------------------------


def test_kernel_io_errors_are_kept_per_device_bounded_to_the_most_recent() -> None:
    records = [
        "3,1001,5000000,-;blk_update_request: I/O error, dev sdb, sector 2048 op 0x0:(READ) flags 0x0",
        "3,1002,6000000,-;I/O error, dev sdb, sector 4096 op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 2",
        "3,1003,7000000,-;Buffer I/O error on dev sdb1, logical block 512, async page read",
        "6,1004,8000000,-;EXT4-fs (sda1): mounted filesystem",
        "3,1005,9000000,-;critical medium error, dev sdc, sector 77 op 0x0:(READ)",
    ]
    found = _kernel.parse(records, keep=2)
    assert found["sdb"] == [
        "[5.0 s] blk_update_request: I/O error, dev sdb, sector 2048 op 0x0:(READ) flags 0x0",
        "[6.0 s] I/O error, dev sdb, sector 4096 op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 2",
    ]
    assert _kernel.parse(records, keep=1)["sdb"] == [found["sdb"][1]]  # bounded: the most recent kept
    assert found["sdb1"] == ["[7.0 s] Buffer I/O error on dev sdb1, logical block 512, async page read"]
    assert list(found) == ["sdb", "sdb1", "sdc"]


@needs_linux_root
def test_an_io_error_in_the_real_kernel_log_is_found() -> None:
    with open(platform.KMSG, "w") as kmsg:  # a record of our own in the real ring buffer
        kmsg.write("sysmcp test: blk_update_request: I/O error, dev sysmcptest9, sector 8 op 0x0:(READ)\n")
    records = _kernel.read_records(platform.KMSG)
    assert records is not None
    assert any("sector 8" in line for line in _kernel.parse(records, keep=3)["sysmcptest9"])


# -- btrfs on a real loop filesystem ------------------------------------------------------------------

_BTRFS_CHILD = """
import json, sys
from pathlib import Path
from sysmcp.engine.health import HealthRequest, run
from tests.loopfs import loop_mount
mnt = Path(sys.argv[1]) / "mnt"
loop_mount(mnt.with_name("btrfs.img"), mnt, 256 << 20, ["mkfs.btrfs", "-q", "-f"])
health = run(HealthRequest(devices=()))
print(json.dumps([[b.device, b.mount_point, b.errors, str(mnt)] for b in health.btrfs if b.mount_point == str(mnt)]))
"""


@needs_loop_mounts("mkfs.btrfs")
def test_a_mounted_btrfs_gives_its_device_error_counters() -> None:
    ((device, mount_point, errors, mnt),) = in_private_namespace(["-c", _BTRFS_CHILD], "sysmcp-health-", 120)
    assert device.startswith("/dev/loop") and mount_point == mnt
    assert errors == {
        "write_io_errs": 0,
        "read_io_errs": 0,
        "flush_io_errs": 0,
        "corruption_errs": 0,
        "generation_errs": 0,
    }


_DEGRADED_CHILD = """
import json, subprocess, sys
from pathlib import Path
from sysmcp.engine.health import HealthRequest, run
from sysmcp.tools.disk_health import render, result_of
work = Path(sys.argv[1])
images = [work / "a.img", work / "b.img"]
loops = []
for image in images:
    with open(image, "wb") as handle:
        handle.truncate(256 << 20)
    loops.append(subprocess.run(["losetup", "-f", "--show", str(image)], check=True, capture_output=True, text=True).stdout.strip())
subprocess.run(["mkfs.btrfs", "-q", "-f", "-d", "raid1", "-m", "raid1", *loops], check=True, capture_output=True)
subprocess.run(["losetup", "-d", loops[1]], check=True)  # the second disk is gone
(work / "mnt").mkdir()
subprocess.run(["mount", "-o", "degraded", loops[0], str(work / "mnt")], check=True, capture_output=True)
subprocess.run(["losetup", "-d", loops[0]], check=True)  # detached when unmounted, with the namespace
answer = result_of(run(HealthRequest(devices=())), None)
ours = [b for b in answer.btrfs if b.mount_point == str(work / "mnt")]
print(json.dumps([[[b.device, b.verdict] for b in ours], render(answer)]))
"""


@needs_loop_mounts("mkfs.btrfs")
def test_a_btrfs_mounted_degraded_without_a_device_is_failing_and_says_replace_it() -> None:
    rows, text = in_private_namespace(["-c", _DEGRADED_CHILD], "sysmcp-health-", 120)
    assert rows[1] == ["<missing disk>", "failing"] and rows[0][1] == "ok"
    assert "btrfs <missing disk> on" in text
    assert "FAILING — no errors — missing: the filesystem runs degraded without it; replace it" in text


def test_a_btrfs_mount_point_outside_the_roots_is_not_named() -> None:
    from sysmcp.engine.health import BtrfsDevice, Health

    health = Health([], [], [BtrfsDevice("/dev/sdd", "/srv/data", {"read_io_errs": 2})], [], True, True, True)
    inside, outside = result_of(health, [Path("/srv")]), result_of(health, [Path("/home")])
    assert inside.btrfs[0].mount_point == "/srv/data" and inside.btrfs[0].verdict == "watch"
    assert outside.btrfs[0].mount_point is None
    assert "/srv/data" not in render(outside) and "read_io_errs 2" in render(outside)


# -- the fleet ---------------------------------------------------------------------------------------


def test_the_fleet_view_names_the_hosts_with_a_failing_device_and_groups_the_healthy() -> None:
    def host(verdict: Literal["ok", "failing"], reasons: list[str]) -> dict[str, Any]:
        row = DeviceRow("/dev/sda", verdict, reasons, "read", "", None, "ATA", True, 1, 30, {}, [])
        return to_json(DiskHealth([row], 0, [], [], []))  # type: ignore[no-any-return]

    bad, good = host("failing", ["24 pending sectors"]), host("ok", [])
    outcomes = [
        HostOutcome("web1", "ok", 0.1, good, "…"),
        HostOutcome("db1", "ok", 0.1, bad, "…"),
        HostOutcome("web2", "ok", 0.1, good, "…"),
    ]
    output = merge(outcomes, {})
    assert "  db1: /dev/sda failing (24 pending sectors)" in output.text
    assert "2 hosts with every device ok: web1, web2" in output.text
    assert output.structured["view"] == {"hosts_with_problems": ["db1"]}


def test_sysmcp_call_exits_1_when_a_device_or_array_is_failing_and_0_when_only_watched() -> None:
    from sysmcp.cli.call import exit_status

    def answer(verdict: str) -> dict[str, Any]:
        return {
            "structuredContent": {"devices": [], "arrays": [{"name": "md0", "verdict": verdict}], "btrfs": []}
        }

    assert [exit_status("disk_health", answer(v)) for v in ("failing", "watch", "ok")] == [1, 0, 0]


def test_a_failed_nvme_self_test_still_fails_the_drive_while_a_new_test_runs() -> None:
    doc = recorded("smartctl-nvme-selftest-failed.json")
    doc["nvme_self_test_log"]["current_self_test_operation"] = {
        "value": 1,
        "string": "Short self-test in progress",
    }
    doc["nvme_self_test_log"]["current_self_test_completion_percent"] = 10
    smart = _smart.parse(doc)  # the failed test stays the most recent finished one until this one ends
    assert len(smart.failing) == 1 and "failed segments" in smart.failing[0], smart.failing
    assert smart.self_test is not None and smart.self_test.startswith("Short self-test in progress, 10% done")
    assert "Extended: Completed: failed segments" in smart.self_test, smart.self_test


# -- SMART not read: the verdict is unknown, with why and what to do ---------------------------------


def _judged(
    tmp_path: Path, doc: dict[str, Any], *, sysfs_path: str = "pci0000:00/0000:00:1f.2/ata1/host0/block"
) -> Any:
    """The one device a fake smartctl answering ``doc`` for is judged as, its sysfs entry under ``sysfs_path``."""
    name = "sdz"
    device = tmp_path / name
    device.touch()
    sys_block = tmp_path / "sys-block"
    sys_block.mkdir()
    target = tmp_path / "devices" / sysfs_path / name
    target.mkdir(parents=True)
    (sys_block / name).symlink_to(target)
    (tmp_path / "doc.json").write_text(json.dumps(doc))
    smartctl = fake_smartctl(tmp_path, f"cat {tmp_path / 'doc.json'}\nexit {doc['smartctl']['exit_status']}")
    (row,) = run(HealthRequest(smartctl=smartctl, devices=(str(device),), sys_block=str(sys_block))).devices
    return row


@pytest.mark.parametrize(
    ("name", "status", "step"),
    [
        ("smartctl-permission-denied.json", "unopened", "run as root"),
        ("smartctl-usb-bridge-unknown.json", "no_smart", "smartctl -d sat"),
        ("smartctl-smart-unavailable.json", "no_smart", "smartctl -d sat"),
    ],
)
def test_a_device_whose_smart_could_not_be_read_is_unknown_with_why_and_the_step_to_take(
    tmp_path: Path, name: str, status: str, step: str
) -> None:
    doc = recorded(name)
    row = _judged(tmp_path, doc)
    assert (row.smart.status, row.verdict) == (status, "unknown"), row
    assert row.smart.note.startswith(doc["smartctl"]["messages"][0]["string"])
    assert len(row.reasons) == 1 and step in row.reasons[0], row.reasons
    text = render(result_of(Health([row], [], [], [], True, True, True), None))
    assert "OK" not in text and "UNKNOWN" in text and step in text, text


def test_a_virtual_disk_without_smart_is_unknown_and_says_there_is_nothing_to_do(tmp_path: Path) -> None:
    row = _judged(
        tmp_path, recorded("smartctl-virtio.json"), sysfs_path="pci0000:00/0000:00:02.0/virtio1/block"
    )
    assert row.verdict == "unknown"
    assert row.reasons == [
        "a virtual disk (virtio): no SMART of its own (the disks under it are the host's to check); "
        "nothing to do here"
    ]


def test_without_smartctl_a_device_is_unknown_and_says_install_smartmontools(tmp_path: Path) -> None:
    device = tmp_path / "sdz"
    device.touch()
    (row,) = run(HealthRequest(smartctl=str(tmp_path / "no-smartctl"), devices=(str(device),))).devices
    assert (row.smart.status, row.verdict) == ("absent", "unknown")
    assert any("install smartmontools" in reason for reason in row.reasons), row.reasons


def test_a_smart_command_that_failed_leaves_a_clean_looking_drive_unknown_not_ok() -> None:
    doc = recorded("smartctl-ata-healthy.json")
    doc["smartctl"]["exit_status"] = 4  # bit 2: a SMART command failed or its data's checksum was wrong
    doc["smartctl"]["messages"] = [
        {
            "string": "Warning! SMART Attribute Data Structure error: invalid SMART checksum.",
            "severity": "warning",
        }
    ]
    row = _health_of("/dev/sda", _smart.parse(doc)).devices[0]
    assert row.verdict == "unknown" and "SMART command failed" in row.reasons[0], row.reasons


@pytest.mark.parametrize(("bit", "verdict"), [(3, "failing"), (4, "failing"), (7, "failing"), (5, "watch")])
def test_smartctls_exit_status_bits_stand_where_its_json_names_no_reason(bit: int, verdict: str) -> None:
    doc = recorded("smartctl-ata-healthy.json")
    doc["smartctl"]["exit_status"] = 1 << bit
    del doc["smart_status"]  # smartctl said so in its exit status only
    doc.get("ata_smart_data", {}).pop(
        "self_test", None
    )  # a self-test log read is judged by its newest test instead
    row = _health_of("/dev/sda", _smart.parse(doc)).devices[0]
    assert row.verdict == verdict and f"exit status bit {bit}" in row.reasons[0], row.reasons


def test_the_fleet_view_names_a_host_whose_disk_is_unknown_without_calling_it_a_problem() -> None:
    def host(verdict: Literal["ok", "unknown"], reasons: list[str]) -> dict[str, Any]:
        row = DeviceRow("/dev/vda", verdict, reasons, "no_smart", "", None, None, None, None, None, {}, [])
        return to_json(DiskHealth([row], 0, [], [], []))  # type: ignore[no-any-return]

    vm, good = host("unknown", ["a virtual disk (virtio): nothing to do here"]), host("ok", [])
    output = merge([HostOutcome("vm1", "ok", 0.1, vm, "…"), HostOutcome("db1", "ok", 0.1, good, "…")], {})
    assert "  vm1: /dev/vda unknown (a virtual disk (virtio): nothing to do here)" in output.text, output.text
    assert "1 host with every device ok: db1" in output.text
    assert output.structured["view"] == {"hosts_with_problems": []}
