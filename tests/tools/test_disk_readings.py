"""disk_usage keeps at most one reading per filesystem a minute (more when used bytes moved
materially), and answers the other calls at once with no write: an injected clock throughout."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysmcp.engine.mounts import MountTable
from sysmcp.history import state
from sysmcp.history.diff import Growth, fill_rate, growth_between
from sysmcp.history.recording import ReadingGate
from sysmcp.history.snapshots import DiskReading
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.disk_usage import INPUT_SCHEMA, DiskUsage
from tests.tools.test_disk_usage import ROOT, TMP, FakeUsage, context, stats

pytestmark = pytest.mark.anyio
GiB = 1 << 30


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def reading(used: int, total: int = 100 * GiB, fs_id: str = "/dev/sda1|ext4") -> DiskReading:
    return DiskReading("host", b"/", fs_id, 0.0, total, used, total - used)


def test_a_reading_seconds_after_the_last_of_a_filesystem_is_not_due() -> None:
    clock = Clock()
    gate = ReadingGate(60.0, clock)
    assert gate.due([reading(10 * GiB)]) == [reading(10 * GiB)]  # never read: due
    gate.kept([reading(10 * GiB)])
    clock.now += 5
    assert gate.due([reading(10 * GiB + 1)]) == []
    clock.now += 60
    assert gate.due([reading(10 * GiB + 1)]) == [reading(10 * GiB + 1)]  # the interval is over


def test_used_bytes_that_moved_materially_or_another_filesystem_or_a_clock_set_back_make_a_reading_due() -> (
    None
):
    clock = Clock()
    gate = ReadingGate(60.0, clock)
    gate.kept([reading(10 * GiB)])
    clock.now += 1
    moved = reading(10 * GiB + 20 * (1 << 20))  # 20 MiB on 100 GiB: more than its 10 MiB resolution
    assert gate.due([moved]) == [moved]
    assert gate.due([reading(10 * GiB + (1 << 20))]) == []  # 1 MiB: not material
    other = reading(10 * GiB, fs_id="/dev/sdb1|xfs")  # a filesystem mounted there since
    assert gate.due([other]) == [other]
    clock.now -= 30  # the clock went back: the last reading's age is unknown
    assert gate.due([reading(10 * GiB)]) == [reading(10 * GiB)]


@pytest.fixture
def history(tmp_path: Path) -> Iterator[Clock]:
    wall = Clock(1_700_000_000.0)
    state.configure(tmp_path / "state", wall)
    yield wall
    state.configure(None)


async def test_calls_within_a_minute_are_answered_at_once_and_keep_one_reading(history: Clock) -> None:
    monotonic = Clock()
    usage = FakeUsage({"/": stats(used_gib=10)})
    handler = DiskUsage(lambda: MountTable([ROOT]), usage, readings=ReadingGate(60.0, monotonic))
    args = validate_arguments(INPUT_SCHEMA, {"path": "/"})
    assert handler.answers_at_once(args) is False  # the first reading is due: a worker writes it
    await handler(args, context())
    for _ in range(5):
        monotonic.now += 2
        history.now += 2
        assert handler.answers_at_once(args) is True
        await handler(args, context())
    store = state.active()
    assert store is not None
    assert [r.taken for r in store.readings(b"/")] == [1_700_000_000.0]
    monotonic.now += 60
    history.now += 60
    assert handler.answers_at_once(args) is False
    await handler(args, context())
    assert len(store.readings(b"/")) == 2


async def test_a_material_change_within_the_minute_is_kept(history: Clock) -> None:
    monotonic = Clock()
    usage = FakeUsage({"/": stats(used_gib=10)})
    handler = DiskUsage(lambda: MountTable([ROOT]), usage, readings=ReadingGate(60.0, monotonic))
    args = validate_arguments(INPUT_SCHEMA, {"path": "/"})
    await handler(args, context())
    monotonic.now += 8
    history.now += 8
    usage.answers["/"] = stats(used_gib=11)  # 1 GiB written in 8 s
    await handler(args, context())
    store = state.active()
    assert store is not None
    assert [r.used >> 30 for r in store.readings(b"/")] == [10, 11]


async def test_history_moved_to_another_directory_gets_its_own_first_reading(tmp_path: Path) -> None:
    monotonic = Clock()
    gate = ReadingGate(60.0, monotonic)
    handler = DiskUsage(lambda: MountTable([ROOT]), FakeUsage({"/": stats()}), readings=gate)
    args = validate_arguments(INPUT_SCHEMA, {"path": "/"})
    try:
        for name in ("one", "two"):
            state.configure(tmp_path / name, Clock())
            await handler(args, context())
            store = state.active()
            assert store is not None and len(store.readings(os.fsencode("/"))) == 1
    finally:
        state.configure(None)


async def test_a_filesystem_mounted_anew_at_a_mount_point_is_not_fitted_with_the_one_before(
    history: Clock,
) -> None:
    """A tmpfs mounted again, or a device made anew by mkfs, has the same source and type as the one
    before: only the kernel's identity (device number, statvfs' fsid) tells the readings apart, so the
    new filesystem's few used bytes are not a fall of the old one's."""
    monotonic = Clock()
    tmp = MountTable([ROOT, TMP])
    old = stats(total_gib=8, used_gib=6)._replace(st_dev=os.makedev(0, 30), fsid=0xAAAA)
    usage = FakeUsage({"/tmp": old})
    handler = DiskUsage(lambda: tmp, usage, readings=ReadingGate(60.0, monotonic))
    args = validate_arguments(INPUT_SCHEMA, {"path": "/tmp"})
    for hour in range(3):
        monotonic.now = history.now = 1_700_000_000.0 + hour * 3600
        await handler(args, context())
    usage.answers["/tmp"] = stats(total_gib=8, used_gib=1)._replace(st_dev=os.makedev(0, 30), fsid=0xBBBB)
    for hour in range(3, 6):
        monotonic.now = history.now = 1_700_000_000.0 + hour * 3600
        await handler(args, context())
    store = state.active()
    assert store is not None
    readings = store.readings(b"/tmp")
    assert len(readings) == 6 and readings[0].fs_id != readings[-1].fs_id
    fill = fill_rate(readings)
    assert fill is not None and (fill.readings, fill.growth) == (3, 0), fill
    assert "another filesystem" in " ".join(fill.notes)
    assert growth_between(readings, None, None) == Growth(3, history.now - 7200, history.now, 0)


def test_readings_kept_before_they_carried_the_kernels_identity_still_count_for_their_filesystem() -> None:
    """Readings older versions kept name the source and type only: fitted with the newer ones of that
    source and type, never with another's."""
    older = [
        DiskReading("h", b"/", "/dev/sda1|ext4", t, 9000, 10 + int(t), 8990 - int(t)) for t in (0.0, 600.0)
    ]
    newer = [
        DiskReading("h", b"/", "/dev/sda1|ext4|8:1/1f2e", t, 9000, 10 + int(t), 8990 - int(t))
        for t in (1200.0, 1800.0)
    ]
    other = [DiskReading("h", b"/", "/dev/sdb1|xfs", 300.0, 9000, 8999, 1)]
    fill = fill_rate([*older, *other, *newer])
    assert fill is not None and fill.readings == 4 and fill.growth == 1800
