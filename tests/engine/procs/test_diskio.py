"""The disk I/O engine: typed readings in, typed rows out, with counters the test makes up."""

from __future__ import annotations

from typing import NamedTuple

from sysmcp.engine.procs import Reading, device_deltas, take_reading
from sysmcp.engine.procs._diskio import DeviceIo, ProcessReading


class Counters(NamedTuple):
    """The fields of psutil's ``sdiskio`` the engine reads (busy_time only where Linux gives it)."""

    read_bytes: int
    write_bytes: int
    read_count: int
    write_count: int
    busy_time: int


class NoBusy(NamedTuple):
    read_bytes: int
    write_bytes: int
    read_count: int
    write_count: int


def test_each_device_in_both_readings_gets_its_rates_busiest_first() -> None:
    first = {
        "sda": Counters(0, 0, 0, 0, 0),
        "sdb": Counters(1000, 1000, 10, 10, 100),
        "nvme0n1": NoBusy(0, 0, 0, 0),
        "loop0": Counters(0, 0, 0, 0, 0),
    }
    second = {
        "sda": Counters(2000, 6000, 20, 40, 1500),
        "sdb": Counters(1000, 1000, 10, 10, 100),
        "nvme0n1": NoBusy(4000, 0, 8, 0),
        "new0": Counters(9, 9, 9, 9, 9),  # not in the first reading: left out
        "loop0": Counters(0, 0, 0, 0, 0),
    }
    rows = device_deltas(first, second, 2.0)
    assert [row.device for row in rows] == ["sda", "nvme0n1", "loop0", "sdb"]
    assert rows[0] == DeviceIo("sda", 2000, 6000, 1000.0, 3000.0, 10.0, 20.0, 75.0)
    assert rows[1].busy_percent is None and rows[1].busy
    assert not rows[2].busy and not rows[3].busy


def test_busy_time_beyond_the_window_is_capped_at_a_hundred_percent() -> None:
    [row] = device_deltas({"sda": Counters(0, 0, 0, 0, 0)}, {"sda": Counters(0, 0, 0, 0, 5000)}, 1.0)
    assert row.busy_percent == 100.0 and row.busy


def test_a_reading_without_processes_reads_the_devices_only() -> None:
    reading = take_reading(False)
    assert isinstance(reading, Reading) and reading.processes is None
    assert isinstance(reading.devices, dict)


def test_a_reading_with_processes_checks_in_before_each() -> None:
    seen: list[int] = []
    reading = take_reading(True, cancel=lambda: seen.append(1))
    assert isinstance(reading.processes, ProcessReading)
    assert len(seen) >= len(reading.processes.processes) + reading.processes.unreadable
