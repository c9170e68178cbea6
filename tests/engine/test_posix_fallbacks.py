"""The POSIX ways taken where Linux's facilities are missing keep the same guarantees.

These run on Linux with the fallback chosen explicitly; the whole suite also runs under the portable
profile (tests/posix_profile), where the fallbacks are chosen by platform.py itself.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sysmcp import platform
from sysmcp.engine.mounts import Mount, MountTable, psutil_partitions
from sysmcp.engine.mounts._mounts import PartitionsReader
from sysmcp.engine.opens import NotRegularFile, open_parent, open_path
from sysmcp.engine.opens import _safeopen as safeopen
from sysmcp.engine.walk._mountpoints import UNKNOWN_DEV, mount_points_below, mount_table
from sysmcp.engine.walk._types import WalkOptions

WITHOUT_O_PATH = os.O_RDONLY | os.O_NONBLOCK | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@pytest.fixture(params=["as configured", "without O_PATH"])
def step_flags(request: pytest.FixtureRequest) -> int:
    """The safe opener's flags for a directory on the way as this system has them, and as they are
    where there is no O_PATH (macOS)."""
    return WITHOUT_O_PATH if request.param == "without O_PATH" else safeopen._STEP


def bounded(action: Callable[[], Any], seconds: float = 5) -> str:
    outcome: list[str] = []

    def run() -> None:
        try:
            action()
            outcome.append("returned")
        except Exception as exc:
            outcome.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, "the open blocked"
    return outcome[0]


def test_a_fifo_on_the_way_or_at_the_end_never_blocks(tmp_path: Path, step_flags: int) -> None:
    os.mkfifo(tmp_path / "pipe")
    assert "FIFO" in bounded(lambda: open_path(tmp_path / "pipe", regular=True, step=step_flags))
    # a FIFO where a directory should be: refused, not opened (which would wait for a writer)
    assert "Not a directory" in bounded(lambda: open_parent(tmp_path / "pipe" / "x", step_flags))
    assert "Not a directory" in bounded(lambda: open_path(tmp_path / "pipe", directory=True, step=step_flags))


def test_a_directory_swapped_for_a_symlink_is_not_followed(tmp_path: Path, step_flags: int) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret").write_text("x")
    (tmp_path / "dir").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError) as raised:
        open_path(tmp_path / "dir" / "secret", regular=True, step=step_flags)
    assert raised.value.errno == errno.ELOOP and "symbolic link" in str(raised.value)


def test_a_device_is_refused_before_it_is_opened(step_flags: int) -> None:
    with pytest.raises(NotRegularFile):
        open_path("/dev/null", regular=True, step=step_flags)
    # a device where a directory should be is refused by O_DIRECTORY, never opened
    assert "Not a directory" in bounded(lambda: open_parent("/dev/null/x", step_flags))


def test_a_regular_file_is_read_through_either_opener(tmp_path: Path, step_flags: int) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"content")
    fd = open_path(tmp_path / "a" / "f", regular=True, step=step_flags)
    try:
        assert os.read(fd, 100) == b"content"
    finally:
        os.close(fd)


class Counted:
    """A mount table source that counts its reads (what psutil.disk_partitions would return)."""

    def __init__(self, mounts: list[Mount]) -> None:
        self.mounts = mounts
        self.reads = 0

    def __call__(self) -> MountTable:
        self.reads += 1
        return MountTable(self.mounts)


def test_without_mountinfo_the_table_is_re_read_on_a_timer_and_kept_when_unchanged() -> None:
    source = Counted([Mount("/", "/dev/disk3s1s1", "apfs")])
    cached = PartitionsReader(max_age=3600, read=source)
    first = cached()
    assert cached() is first and source.reads == 1  # within max_age: not read again
    ticking = PartitionsReader(max_age=0, read=source)
    same = ticking()
    assert ticking() is same and source.reads == 3  # read again, the same mounts: the same table
    source.mounts = [*source.mounts, Mount("/Volumes/USB", "/dev/disk4s1", "msdos")]
    changed = ticking()
    assert changed is not same and "/Volumes/USB" in {m.mount_point for m in changed.mounts}


def test_the_psutil_table_holds_the_real_mounts() -> None:
    table = psutil_partitions()
    root = table.holding("/")
    assert root is not None and root.mount_point == "/"


def test_walks_know_the_mount_points_without_mountinfo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "has_mountinfo", lambda: False)  # as on macOS
    mounts = mount_table()
    assert {m.point for m in mounts} == {os.fsencode(m.mount_point) for m in psutil_partitions().mounts}
    assert {m.dev for m in mounts} == {UNKNOWN_DEV}
    # a mount below the walk's root is known beforehand and never entered
    skip = mount_points_below(b"/", WalkOptions(), mounts)
    below = [m for m in mounts if m.point.count(b"/") == 1 and m.point != b"/"]
    for mount in below:
        assert os.fsdecode(mount.point[1:]) in skip.get("", {})
