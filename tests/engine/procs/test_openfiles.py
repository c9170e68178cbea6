"""The deleted-open-files engine on a /proc tree built by the test: typed in, typed out, no MCP.

Why a built tree can hold a file with no name: a descriptor link whose target ends in ' (deleted)'
is made to resolve, through one more symlink, to this process's own ``/proc/self/fd/N`` of a file
that was unlinked while open, so ``stat`` through the link sees link count 0 as the kernel's would.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysmcp.engine.faults import Unavailable
from sysmcp.engine.mounts import Mount, MountTable
from sysmcp.engine.procs import Scan, filesystem_of, scan_processes
from sysmcp.tools.errors import words

#: Above the largest pid Linux hands out (2**22): no real process answers psutil for it.
PID = 4_194_399
SIZE = 20_000

needs_real_proc_fd = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="the held file is reached through /proc/self/fd (Linux)"
)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[int]:
    """A file written, then unlinked while this process keeps it open: its descriptor."""
    gone = tmp_path / "gone.log"
    fd = os.open(gone, os.O_RDWR | os.O_CREAT, 0o600)
    os.write(fd, b"x" * SIZE)
    os.fsync(fd)
    gone.unlink()
    try:
        yield fd
    finally:
        os.close(fd)


def deleted_name(tmp_path: Path, fd: int, name: str) -> str:
    """A path ending in ' (deleted)' that leads to the unlinked file held by ``fd``."""
    stand_in = tmp_path / "names" / f"{name} (deleted)"
    stand_in.parent.mkdir(exist_ok=True)
    stand_in.symlink_to(f"/proc/self/fd/{fd}")
    return str(stand_in)


def process(proc: Path, pid: int) -> Path:
    base = proc / str(pid)
    (base / "fd").mkdir(parents=True)
    return base


@needs_real_proc_fd
def test_a_descriptor_on_a_file_with_no_name_is_found_with_its_holder(tmp_path: Path, held: int) -> None:
    proc = tmp_path / "proc"
    base = process(proc, PID)
    (base / "fd" / "0").symlink_to("pipe:[1234]")  # not a file: never looked at
    (base / "fd" / "7").symlink_to(deleted_name(tmp_path, held, "app.log"))
    (proc / "self").mkdir()  # not a pid: not a process
    checked: list[int] = []
    scan = scan_processes(str(proc), cancel=lambda: checked.append(1))
    assert isinstance(scan, Scan)
    assert (scan.processes, scan.unreadable, scan.vanished, len(checked)) == (1, 0, 0, 1)
    [found] = scan.files.values()
    assert found.path == str(tmp_path / "names" / "app.log") and found.size == SIZE
    assert found.disk > 0 and not found.mapped_only
    [holder] = found.holders
    assert (holder.pid, holder.fd, holder.command, holder.user, holder.mode) == (PID, 7, "?", None, "")


@needs_real_proc_fd
def test_a_file_only_mapped_is_held_by_a_mapping_and_a_process_gone_is_counted(
    tmp_path: Path, held: int
) -> None:
    proc = tmp_path / "proc"
    base = process(proc, PID)
    name = deleted_name(tmp_path, held, "lib.so")
    (base / "maps").write_text(
        f"7f00-7f10 r--p 00000000 fd:01 99 {name}\n"
        f"7f10-7f20 r-xp 00010000 fd:01 99 {name}\n"  # the same file again: one holder
        "7f20-7f30 rw-p 00000000 00:00 0 \n"
    )
    (base / "map_files").mkdir()
    (base / "map_files" / "7f00-7f10").symlink_to(name)
    (proc / "4194398").mkdir()  # listed, then gone before its descriptors were read
    scan = scan_processes(str(proc))
    assert (scan.processes, scan.vanished) == (1, 1)
    [found] = scan.files.values()
    assert found.mapped_only and [(h.pid, h.fd, h.mode) for h in found.holders] == [(PID, None, "r")]


def test_a_proc_that_cannot_be_listed_is_an_engine_error_naming_the_cause(tmp_path: Path) -> None:
    absent = tmp_path / "no-proc"
    with pytest.raises(Unavailable) as refused:
        scan_processes(str(absent))
    assert words(refused.value) == f"Cannot list processes in {absent}: No such file or directory"


def test_the_filesystem_of_a_device_is_its_whole_mount_nearest_the_root() -> None:
    dev = os.makedev(8, 1)
    bind = Mount("/srv/data", "/dev/sda1", "ext4", root="/data", dev="8:1")
    whole = Mount("/mnt/disk", "/dev/sda1", "ext4", dev="8:1")
    table = MountTable([Mount("/", "/dev/sdb1", "xfs", dev="8:17"), bind, whole])
    assert filesystem_of(table, dev) is whole
    assert filesystem_of(MountTable([bind]), dev) is bind
    assert filesystem_of(table, os.makedev(9, 9)) is None
