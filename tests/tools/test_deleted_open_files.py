"""deleted_open_files against real processes holding real deleted files."""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from sysmcp import platform
from sysmcp.engine.mounts import Mount, MountTable
from sysmcp.engine.procs import DeletedFile, Holder, Scan, scan_processes
from sysmcp.protocol.failures import ToolError
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.deleted_open_files import (
    INPUT_SCHEMA,
    TOOL,
    DeletedOpenFiles,
    render,
)
from sysmcp.tools.registry import ToolContext, ToolOutput
from sysmcp.tools.typed import to_json
from tests.harness import call_tool, tool_context

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not platform.has_proc_fd(), reason="needs /proc/PID/fd (Linux)"),
]

MB = 1_000_000

HOLDER = textwrap.dedent(
    """
    import os, sys
    handles = []
    for name, size in zip(sys.argv[1::2], sys.argv[2::2]):
        handle = open(name, "wb")
        handle.write(b"x" * int(size))
        handle.flush()
        os.fsync(handle.fileno())
        os.unlink(name)
        handles.append(handle)
    print("ready", flush=True)
    sys.stdin.read()  # hold the files until the test closes our stdin
    """
)


def context() -> ToolContext:
    return tool_context()


@contextmanager
def holding(files: dict[Path, int]) -> Iterator[subprocess.Popen[str]]:
    """A child process that writes these files, deletes them and keeps them open until it ends."""
    argv = [sys.executable, "-c", HOLDER]
    for path, size in files.items():
        argv += [str(path), str(size)]
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        yield child
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)


async def call(**args: Any) -> ToolOutput:
    return await call_tool("deleted_open_files", context(), handler=DeletedOpenFiles(), **args)


def df_target(path: Path) -> str:
    """The mount point GNU df names for ``path``."""
    done = subprocess.run(["df", "--output=target", str(path)], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()[-1].strip()


async def test_a_deleted_file_held_by_a_child_is_listed_with_its_holder_until_the_child_exits(
    tmp_path: Path,
) -> None:
    doomed = tmp_path / "big.log"
    with holding({doomed: 50 * MB}) as child:
        output = await call(path=str(tmp_path))
        mine = [f for f in output.structured["files"] if f["path"] == str(doomed)]
        assert len(mine) == 1
        found = mine[0]
        assert found["size_bytes"] == 50 * MB
        assert found["disk_bytes"] >= 49 * MB
        assert found["mount_point"] == df_target(tmp_path)
        assert [(h["pid"], h["mode"]) for h in found["holders"]] == [(child.pid, "w")]
        assert found["holders"][0]["command"].startswith("python")
        totals = {fs["mount_point"]: fs for fs in output.structured["filesystems"]}
        assert totals[found["mount_point"]]["disk_bytes"] >= found["disk_bytes"]
        assert f"{doomed} (deleted)" in output.text and f"pid {child.pid}" in output.text
        assert f"/proc/{child.pid}/fd/{found['holders'][0]['fd']}" in output.text  # the advice names it
        assert os.path.getsize(f"/proc/{child.pid}/fd/{found['holders'][0]['fd']}") == 50 * MB  # untouched
    after = await call(path=str(tmp_path))
    assert all(f["path"] != str(doomed) for f in after.structured["files"])


async def test_the_list_is_bounded_largest_first_and_counts_the_rest(tmp_path: Path) -> None:
    sizes = {tmp_path / "a": 3 * MB, tmp_path / "b": 2 * MB, tmp_path / "c": 1 * MB}
    with holding(sizes) as child:
        output = await call(path=str(tmp_path), top_n=2)
    ours = [f for f in output.structured["files"] if f["holders"][0]["pid"] == child.pid]
    assert [f["path"] for f in ours] == [str(tmp_path / "a"), str(tmp_path / "b")][: len(ours)]
    assert len(output.structured["files"]) == 2
    more = output.structured["files_not_shown"]
    assert more >= 1
    noun = "file" if more == 1 else "files"
    assert f"… and {more:,} more deleted {noun} not shown" in output.text  # "1 more … file", "2 more … files"


async def test_path_restricts_to_the_filesystem_holding_it(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev or not os.access(shm, os.W_OK):
        pytest.skip("needs /dev/shm on another filesystem than the temporary directory")
    other = shm / f"sysmcp-test-{os.getpid()}"
    with holding({tmp_path / "here": 2 * MB, other: 1 * MB}):
        here = await call(path=str(tmp_path))
        there = await call(path=str(shm))
    assert str(tmp_path / "here") in {f["path"] for f in here.structured["files"]}
    assert str(other) not in {f["path"] for f in here.structured["files"]}
    assert str(other) in {f["path"] for f in there.structured["files"]}
    assert {fs["mount_point"] for fs in there.structured["filesystems"]} == {df_target(shm)}


async def test_without_proc_the_answer_is_a_plain_note(tmp_path: Path) -> None:
    handler = DeletedOpenFiles(proc=str(tmp_path / "no-proc"))
    output = await handler(validate_arguments(INPUT_SCHEMA, {}), context())
    jsonschema.validate(output.structured, TOOL.output_schema)
    assert output.is_error is False
    assert output.structured["available"] is False and output.structured["files"] == []
    assert "no /proc/PID/fd" in output.text and "lsof +L1" in output.text


async def test_bad_inputs_get_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="No such file"):
        await call(path=str(tmp_path / "absent"))
    with pytest.raises(ToolError, match="'top_n' must be <= 100"):
        validate_arguments(INPUT_SCHEMA, {"top_n": 1000})
    with pytest.raises(ToolError, match="not a known argument"):
        validate_arguments(INPUT_SCHEMA, {"pid": 1})


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_without_privileges_it_counts_the_processes_it_could_not_read() -> None:
    """A forked child turned into 'nobody' scans: root's processes (pid 1 at least) are unreadable."""
    nobody = pwd.getpwnam("nobody")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges, scan, report, and leave without running any cleanup
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            scan = scan_processes()
            os.write(write_end, f"{scan.unreadable} {scan.processes}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        report = reader.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    unreadable, readable = map(int, report.split())
    assert unreadable >= 1 and readable >= 0
    text, answer = render(scan_as(unreadable, readable), MountTable([]), 5, None, None)
    assert answer.processes_unreadable == unreadable
    assert f"Could not read the descriptors of {unreadable:,} of {unreadable + readable:,}" in text


def test_a_file_under_a_root_on_a_bind_mount_is_named_by_that_mount_not_by_its_filesystems_own_elsewhere() -> (
    None
):
    """``/srv/jail/data`` shows ``/mnt/disk/sub``: a deleted file held there is named with the mount it is
    on under the root, never with its filesystem's own mount point outside the roots."""
    dev = os.makedev(8, 17)
    table = MountTable(
        [
            Mount("/", "/dev/sda1", "ext4", dev="8:1", mount_id=1),
            Mount("/mnt/disk", "/dev/sdb1", "ext4", dev="8:17", mount_id=2, parent_id=1),
            Mount("/srv/jail/data", "/dev/sdb1", "ext4", root="/sub", dev="8:17", mount_id=3, parent_id=1),
        ]
    )
    held = DeletedFile("/srv/jail/data/app.log", dev, 7, 4096, 4096, [Holder(42, "app", "root", 3, "w")])
    scan = Scan(files={(dev, 7): held}, processes=1)
    text, answer = render(scan, table, 5, None, None, [Path("/srv/jail")])
    assert "/mnt/disk" not in text + repr(to_json(answer)), text
    assert [fs.mount_point for fs in answer.filesystems] == ["/srv/jail/data"]
    assert "/mnt/disk" in render(scan, table, 5, None, None)[0]  # without roots: its own mount


def scan_as(unreadable: int, readable: int) -> Scan:
    return Scan(processes=readable, unreadable=unreadable)


MEMFD_HOLDER = textwrap.dedent(
    """
    import os, sys
    fd = os.memfd_create("sysmcp-test")
    os.write(fd, b"m" * 3_000_000)
    print("ready", flush=True)
    sys.stdin.read()
    """
)


async def test_empty_deleted_files_hold_no_space_and_are_only_counted(tmp_path: Path) -> None:
    with holding({tmp_path / "empty": 0, tmp_path / "full": 1 * MB}):
        output = await call(path=str(tmp_path))
    paths = {f["path"] for f in output.structured["files"]}
    assert str(tmp_path / "full") in paths and str(tmp_path / "empty") not in paths
    assert output.structured["empty_files_not_listed"] >= 1
    assert "empty deleted file" in output.text and "hold no space)" in output.text


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs memfd_create")
async def test_memory_files_on_no_mounted_filesystem_are_counted_apart_not_listed() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", MEMFD_HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        output = await call()
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    assert all("memfd:" not in f["path"] for f in output.structured["files"])
    apart = output.structured["not_on_a_mounted_filesystem"]
    assert apart["files"] >= 1 and apart["disk_bytes"] >= 2_900_000
    assert "on no filesystem mounted here (memfd" in output.text


MAPPING_HOLDER = textwrap.dedent(
    """
    import ctypes, mmap, os, sys
    name = sys.argv[1]
    with open(name, "wb") as handle:
        handle.write(b"m" * 5_000_000)
        handle.flush()
        os.fsync(handle.fileno())
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    fd = os.open(name, os.O_RDONLY)
    address = libc.mmap(None, 5_000_000, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    if "--keep-fd" not in sys.argv:
        os.close(fd)  # (mmap.mmap would keep a dup of it): only the mapping holds the file now
    os.unlink(name)
    print("ready", ctypes.string_at(address, 1).decode(), flush=True)
    sys.stdin.read()
    """
)


async def test_a_deleted_file_held_only_by_a_memory_mapping_is_listed_with_restart_advice(
    tmp_path: Path,
) -> None:
    """lsof's DEL: no descriptor, so truncating is not the way (it would SIGBUS the process)."""
    doomed = tmp_path / "mapped.db"
    child = subprocess.Popen(
        [sys.executable, "-c", MAPPING_HOLDER, str(doomed)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready m\n"
        assert not doomed.exists() and not [
            link
            for link in os.listdir(f"/proc/{child.pid}/fd")
            if "mapped.db" in os.readlink(f"/proc/{child.pid}/fd/{link}")
        ]
        output = await call(path=str(tmp_path))
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    mine = [f for f in output.structured["files"] if f["path"] == str(doomed)]
    assert len(mine) == 1, output.text
    found = mine[0]
    assert found["size_bytes"] == 5_000_000 and found["disk_bytes"] >= 4_900_000
    assert found["mapped_only"] is True
    assert [(h["pid"], h["fd"], h["mode"]) for h in found["holders"]] == [(child.pid, None, "r")]
    assert f"pid {child.pid} python" in output.text and " mapped r" in output.text
    assert "restart those services" in output.text and "SIGBUS" in output.text
    assert f"/proc/{child.pid}/fd/" not in output.text  # no truncation advice for a file no descriptor holds


async def test_a_file_held_by_a_descriptor_and_a_mapping_names_the_descriptor_once_and_no_truncation(
    tmp_path: Path,
) -> None:
    """A database's way (its file open and mapped): truncating it through the descriptor would kill it at
    its next touch of the mapping (SIGBUS), so the holder is marked mapped and no truncation is advised."""
    doomed = tmp_path / "both"
    child = subprocess.Popen(
        [sys.executable, "-c", MAPPING_HOLDER, str(doomed), "--keep-fd"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready m\n"
        output = await call(path=str(tmp_path))
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    found = [f for f in output.structured["files"] if f["path"] == str(doomed)]
    assert len(found) == 1 and found[0]["mapped_only"] is False, found
    assert [(h["pid"], h["mode"]) for h in found[0]["holders"]] == [(child.pid, "r")]
    assert isinstance(found[0]["holders"][0]["fd"], int) and found[0]["holders"][0]["mapped"] is True
    assert re.search(rf"pid {child.pid} python[^ ]*( \([^)]*\))? fd \d+r and mapped", output.text), (
        output.text
    )
    assert f"/proc/{child.pid}/fd/" not in output.text and "not even through a descriptor" in output.text


async def test_a_file_held_only_in_another_mount_namespace_says_its_path_is_that_namespaces(
    tmp_path: Path,
) -> None:
    """A container's process holding a deleted /var/log/app.log: that path, read on the host, is the host's
    own /var/log/app.log (or nothing). The answer says whose view the name is in, and which process's."""
    from tests.reclaim.test_reclaim import HOLDER as WRITES_DELETES_HOLDS
    from tests.security.test_deleted_open_confinement import MOUNT_THEN_HOLD, needs_root_and_namespaces
    from tests.security.test_deleted_open_confinement import holding as holding_in

    unshare = needs_root_and_namespaces()
    seen_there, lies_here = tmp_path / "ns" / "r", tmp_path / "ns" / "other"
    seen_there.mkdir(parents=True)
    lies_here.mkdir()
    command = [unshare, "-m", "--propagation", "private", "sh", "-c", MOUNT_THEN_HOLD, "sh"]
    argv = [*command, str(lies_here), str(seen_there), sys.executable, WRITES_DELETES_HOLDS]
    with holding_in([*argv, str(seen_there / "app.log"), "3000000"]) as holder:
        output = await call(top_n=100)
    [found] = [f for f in output.structured["files"] if f["path"] == str(seen_there / "app.log")]
    assert found["namespace_pid"] == holder.pid
    assert f"app.log (deleted; its name in pid {holder.pid}'s mount namespace)" in output.text


async def test_an_o_tmpfile_file_is_said_never_to_have_had_a_name(tmp_path: Path) -> None:
    """The kernel names it DIR/#INODE, lsof too: a name nobody ever gave it, nowhere to look for it."""
    script = (
        "import os, sys\n"
        "fd = os.open(sys.argv[1], os.O_TMPFILE | os.O_RDWR, 0o600)\n"
        "os.write(fd, b't' * 1_000_000); os.fsync(fd)\n"
        "print(os.fstat(fd).st_ino, flush=True); sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        inode = int(child.stdout.readline())
        output = await call(path=str(tmp_path), top_n=100)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    [found] = [f for f in output.structured["files"] if f["path"] == f"{tmp_path}/#{inode}"]
    assert found["size_bytes"] == 1_000_000
    assert (
        f"{tmp_path}/#{inode} (deleted; never named: an O_TMPFILE file made in that directory)" in output.text
    )
