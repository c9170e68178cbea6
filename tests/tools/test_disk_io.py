"""disk_io against a real process writing a real file with fsync."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from sysmcp import platform
from sysmcp.engine.mounts import Mount, MountTable
from sysmcp.engine.paths import PathPolicy
from sysmcp.engine.procs import device_mount_points, process_deltas, take_reading
from sysmcp.engine.procs._diskio import ProcessIo, ProcessReading, device_name, read_processes
from sysmcp.protocol.context import RequestContext
from sysmcp.protocol.failures import ArgumentError
from sysmcp.results import ResultStore
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.disk_io import INPUT_SCHEMA, handle
from sysmcp.tools.errors import unreadable_reason
from sysmcp.tools.registry import ToolContext, ToolOutput
from tests.harness import RecordingPeer as Recorder
from tests.harness import call_tool, tool_context
from tests.security.test_deleted_open_confinement import needs_root_and_namespaces
from tests.tools.writer import writing

BIND_THEN_RUN = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'

pytestmark = pytest.mark.anyio


def context(peer: Recorder | None = None) -> ToolContext:
    return tool_context(peer=peer, progress_token="io")


async def call(ctx: ToolContext | None = None, **args: Any) -> ToolOutput:
    return await call_tool("disk_io", ctx or context(), **args)


@pytest.mark.skipif(
    not platform.has_process_io_counters(), reason="no per-process I/O counters on this system"
)
async def test_a_writer_with_fsync_is_among_the_top_writers_at_about_its_rate(tmp_path: Path) -> None:
    target = tmp_path / "growing.bin"
    with writing(target) as child:
        before, started = target.stat().st_size, time.monotonic()
        output = await call(sample_s=2, top_n=50)
        truth = (target.stat().st_size - before) / (time.monotonic() - started)
    writers = {row["pid"]: row for row in output.structured["top_writers"]}
    assert child.pid in writers, output.text
    mine = writers[child.pid]
    assert mine["command"].startswith("python")
    assert truth / 2 <= mine["bytes_per_s"] <= truth * 2, (mine, truth)
    assert f"pid {child.pid} python" in output.text
    assert output.structured["seconds"] == pytest.approx(2, abs=0.5)
    if output.structured["devices"]:  # a block device carried it (containers may show none)
        written = sum(row["write_bytes"] for row in output.structured["devices"])
        assert written >= mine["bytes"] / 2
        assert "IOPS" in output.text


async def test_progress_is_reported_while_waiting_and_a_cancelled_call_stops_at_once() -> None:
    """A client that cancels a 60 s window on hearing of its first step (half a second in)."""
    started = time.monotonic()
    with anyio.CancelScope() as scope:

        class Canceller(Recorder):
            async def notify(self, method: str, params: dict[str, Any]) -> None:
                await super().notify(method, params)
                if "measuring disk I/O" in params.get("message", ""):
                    scope.cancel()

        peer = Canceller()
        await handle(validate_arguments(INPUT_SCHEMA, {"sample_s": 60}), context(peer))
    assert scope.cancelled_caught and time.monotonic() - started < 5
    messages = [p["message"] for p in peer.progress if "message" in p]
    assert any("measuring disk I/O" in m for m in messages)
    assert all(p["total"] == 60 for p in peer.progress if "message" in p)


def test_a_process_started_in_the_window_counts_whole_and_one_unreadable_at_the_start_not_at_all() -> None:
    first = ProcessReading({(1, 50.0): ProcessIo(1, 50.0, "old", "root", 10, 1000)}, refused={(3, 20.0)})
    second = ProcessReading(
        {
            (1, 50.0): ProcessIo(1, 50.0, "old", "root", 10, 5000),
            (2, 101.0): ProcessIo(2, 101.0, "new", "root", 0, 700),  # started during the window
            (3, 20.0): ProcessIo(3, 20.0, "hidden", "root", 0, 900),  # unreadable at the start
            (1, 101.5): ProcessIo(1, 101.5, "reused", "root", 0, 300),  # pid 1 reused: another process
        },
    )
    moved = {(m.pid, m.command): m.write_bytes for m in process_deltas(first, second)}
    assert moved == {(1, "old"): 4000, (2, "new"): 700, (1, "reused"): 300}


WRITES_THEN_WAITS = (
    "import os, sys\n"
    "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)\n"
    "os.write(fd, b'w' * 2_000_000); os.fsync(fd)\n"
    "print('written', flush=True); sys.stdin.read()\n"
)


@pytest.mark.skipif(
    not platform.has_process_io_counters(), reason="no per-process I/O counters on this system"
)
def test_a_process_started_just_after_the_first_reading_counts_whole(tmp_path: Path) -> None:
    """psutil's create time reads up to a second early (the boot time it rests on is in whole seconds):
    a process started right after the window opened must not be taken for one older than the window."""
    if not on_a_block_device(tmp_path):
        pytest.skip("the temporary directory is on no block device (tmpfs): writes reach no storage")
    first = take_reading(True)
    child = subprocess.Popen(
        [sys.executable, "-c", WRITES_THEN_WAITS, str(tmp_path / "out")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"written\n"
        second = take_reading(True)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    assert first.processes is not None and second.processes is not None
    moved = [m for m in process_deltas(first.processes, second.processes) if m.pid == child.pid]
    assert [m.write_bytes >= 2_000_000 for m in moved] == [True]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"sample_s": 0}, "'sample_s' must be >= 0.1"),
        ({"sample_s": 61}, "'sample_s' must be <= 60"),
        ({"sample_s": "2s"}, "'sample_s' must be a number"),
        ({"top_n": 0}, "'top_n' must be >= 1"),
        ({"pid": 1}, "not a known argument"),
    ],
)
def test_bad_inputs_get_clear_errors(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        validate_arguments(INPUT_SCHEMA, args)


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
@pytest.mark.skipif(
    not platform.has_process_io_counters(), reason="no per-process I/O counters on this system"
)
def test_without_privileges_it_counts_the_processes_it_could_not_read() -> None:
    nobody = pwd.getpwnam("nobody")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges, read, report, and leave without running any cleanup
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            os.write(write_end, f"{read_processes().unreadable}|{unreadable_reason()}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        count, reason = reader.read().decode().split("|")
        unreadable = int(count)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert unreadable >= 1  # root's processes (this test runner among them)
    assert reason == "other users' processes need root"
    assert "root" in unreadable_reason()  # as root: says that even root was refused


def on_a_block_device(path: Path) -> bool:
    dev = path.stat().st_dev
    return device_name(f"{os.major(dev)}:{os.minor(dev)}") is not None


@pytest.mark.skipif(
    not (platform.has_process_io_counters() and platform.has_proc_fd()),
    reason="needs /proc/PID/fd and I/O counters",
)
async def test_each_top_writer_names_the_files_it_has_open_for_writing_and_their_descriptor(
    tmp_path: Path,
) -> None:
    if not on_a_block_device(tmp_path):
        pytest.skip("the temporary directory is on no block device (tmpfs)")
    target = tmp_path / "growing.bin"
    with writing(target) as child:
        output = await call(sample_s=1, top_n=50)
        fd = next(
            int(n)
            for n in os.listdir(f"/proc/{child.pid}/fd")
            if os.readlink(f"/proc/{child.pid}/fd/{n}") == str(target)
        )
    mine = {row["pid"]: row for row in output.structured["top_writers"]}[child.pid]
    (item,) = [item for item in mine["files"] if item["path"] == str(target)]
    assert item["fd"] == fd and item["deleted"] is False
    assert f"writing {target} on {item['device']} (/proc/{child.pid}/fd/{fd})" in output.text
    carrying = [row for row in output.structured["devices"] if row["device"] == item["device"]]
    assert all(row["mount_points"] for row in carrying)  # the device that carried it, with its mount point


@pytest.mark.skipif(
    not (platform.has_process_io_counters() and platform.has_proc_fd()),
    reason="needs /proc/PID/fd and I/O counters",
)
async def test_a_file_written_outside_the_roots_is_counted_never_named(tmp_path: Path) -> None:
    if not on_a_block_device(tmp_path):
        pytest.skip("the temporary directory is on no block device (tmpfs)")
    (tmp_path / "inside").mkdir()
    target = tmp_path / "outside.bin"
    request = RequestContext(1, "tools/call", Recorder(), progress_token="io")
    ctx = ToolContext(request, PathPolicy([tmp_path / "inside"]), ResultStore())
    with writing(target) as child:
        output = await call(ctx, sample_s=1, top_n=50)
    mine = {row["pid"]: row for row in output.structured["top_writers"]}[child.pid]
    assert mine["files"] == [] and mine["files_outside_roots"] >= 1
    assert str(target) not in output.text and "outside the allowed roots (not named)" in output.text


@pytest.mark.skipif(
    not (platform.has_process_io_counters() and platform.has_proc_fd()),
    reason="needs /proc/PID/fd and I/O counters",
)
async def test_a_file_written_from_another_mount_namespace_under_a_roots_name_is_counted_never_named(
    tmp_path: Path,
) -> None:
    """A writer in a mount namespace of its own (a container with a host volume) shows its own view:
    it binds ``other`` at ``r`` and writes ``r/growing.bin``, whose inode lives in ``other``. Seen from
    here its link reads ``…/r/growing.bin``: a server confined to ``r`` must not name it."""
    unshare = needs_root_and_namespaces()
    if not on_a_block_device(tmp_path):
        pytest.skip("the temporary directory is on no block device (tmpfs)")
    root, other = tmp_path / "r", tmp_path / "other"
    root.mkdir()
    other.mkdir()
    bind = [unshare, "-m", "--propagation", "private", "sh", "-c", BIND_THEN_RUN, "sh", str(other), str(root)]
    request = RequestContext(1, "tools/call", Recorder(), progress_token="io")
    ctx = ToolContext(request, PathPolicy([root]), ResultStore())
    with writing(root / "growing.bin", wrapper=bind) as child:
        links = [os.readlink(f"/proc/{child.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{child.pid}/fd")]
        assert str(root / "growing.bin") in links  # the link's text names a path under the root
        output = await call(ctx, sample_s=1, top_n=50)
    mine = {row["pid"]: row for row in output.structured["top_writers"]}[child.pid]
    assert mine["files"] == [] and mine["files_outside_roots"] >= 1
    assert "growing.bin" not in output.text + repr(output.structured)


def test_each_block_device_is_named_with_its_mount_points(tmp_path: Path) -> None:
    (tmp_path / "block").mkdir()
    os.symlink("../../devices/virtual/block/dm-0", tmp_path / "block" / "253:0")
    os.symlink("../../devices/pci/block/sda/sda1", tmp_path / "block" / "8:1")
    table = MountTable(
        [
            Mount("/", "/dev/mapper/root", "ext4", dev="253:0"),
            Mount("/srv/data", "/dev/sda1", "xfs", dev="8:1"),
            Mount("/mnt/bind", "/dev/sda1", "xfs", root="/sub", dev="8:1"),
            Mount("/run", "tmpfs", "tmpfs", dev="0:25"),
        ],
        sys_dev_block=str(tmp_path / "block"),
    )
    assert device_mount_points(table) == {
        "dm-0": ["/"],
        "sda1": ["/mnt/bind", "/srv/data"],
    }
