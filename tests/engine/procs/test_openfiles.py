"""The deleted-open-files engine on a /proc tree built by the test: typed in, typed out, no MCP.

Why a built tree can hold a file with no name: a descriptor link whose target ends in ' (deleted)'
is made to resolve, through one more symlink, to this process's own ``/proc/self/fd/N`` of a file
that was unlinked while open, so ``stat`` through the link sees link count 0 as the kernel's would.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sysmcp.engine.faults import Unavailable
from sysmcp.engine.mounts import Mount, MountTable
from sysmcp.engine.procs import Scan, filesystem_of, mapped_anywhere, scan_processes
from sysmcp.tools.errors import words
from tests.profile import needs_proc

#: Above the largest pid Linux hands out (2**22): no real process answers psutil for it.
PID = 4_194_399
SIZE = 20_000
PR_SET_DUMPABLE = 4  # prctl(2)

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


def as_nobody(work: Callable[[], bytes]) -> tuple[int, Callable[[], bytes]]:
    """``work`` run in a forked child turned into 'nobody': its pid, and what waits for its report (its
    result written to a pipe, then it waits for the pipe back to close before it leaves)."""
    nobody = pwd.getpwnam("nobody")
    report_r, report_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges, work, report, hold, and leave without running any cleanup
        code = 1
        try:
            os.close(report_r)
            os.close(hold_w)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            # A process that changed its user is not dumpable: its /proc entries stay root's. A service
            # started as its user is; so is this child again.
            ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
            os.write(report_w, work() + b"\n")
            os.read(hold_r, 1)
            code = 0
        finally:
            os._exit(code)
    os.close(report_w)
    os.close(hold_r)
    reader = os.fdopen(report_r, "rb")

    def finish() -> bytes:
        os.close(hold_w)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        return b""

    line = reader.readline()
    reader.close()
    return pid, lambda: line + finish()


@needs_real_proc_fd
@needs_proc
@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_a_file_a_process_holds_and_maps_is_marked_mapped_even_where_its_user_cannot_read_map_files() -> None:
    """A database's way: its file open and mapped. Scanned by its own user, who may read its maps but
    not always its map_files (CAP_SYS_ADMIN on some kernels): the descriptor's file is still told mapped,
    which is what forbids truncating it (SIGBUS)."""
    nobody = pwd.getpwnam("nobody")
    place = tempfile.mkdtemp(prefix="sysmcp-mapped-")
    os.chown(place, nobody.pw_uid, nobody.pw_gid)
    name = os.path.join(place, "data.mdb")
    kept: list[object] = []

    def hold() -> bytes:
        handle = open(name, "w+b")  # noqa: SIM115 - held until the process ends
        handle.write(b"d" * 65536)
        handle.flush()
        kept.extend([handle, mmap.mmap(handle.fileno(), 0)])  # mmap keeps a descriptor of its own
        os.unlink(name)
        return b"mapped"

    def scan() -> bytes:
        found = [f for f in scan_processes().files.values() if f.path == name]
        return json.dumps([[(h.pid, h.fd is not None, h.mapped) for h in f.holders] for f in found]).encode()

    try:
        holder, held = as_nobody(hold)
        try:
            _, scanned = as_nobody(scan)
            report = json.loads(scanned())
        finally:
            assert held() == b"mapped\n"
        assert report == [[[holder, True, True], [holder, True, True]]]
    finally:
        os.rmdir(place)


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


@needs_real_proc_fd
@needs_proc
@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_a_mapping_in_a_process_whose_maps_may_not_be_read_is_not_ruled_out(tmp_path: Path) -> None:
    """reclaim's last look before truncating a deleted file, run by a user who may not read another
    user's maps: that process may map the file, so the answer is not 'no process maps it'."""
    name = tmp_path / "data.mdb"
    mapper = subprocess.Popen(
        [sys.executable, "-c", MAPS_AND_WAITS, str(name)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert mapper.stdout is not None and mapper.stdin is not None
        identity = mapper.stdout.readline().split()
        dev, ino = int(identity[0]), int(identity[1])

        def look() -> bytes:
            return json.dumps(mapped_anywhere(f"/proc/{os.getpid()}/fd/0".encode(), dev, ino)).encode()

        _, looked = as_nobody(look)
        as_root = mapped_anywhere(f"/proc/{os.getpid()}/fd/0".encode(), dev, ino)
        assert (json.loads(looked()), as_root) == ("unseen", "mapped")
    finally:
        assert mapper.stdin is not None
        mapper.stdin.close()
        assert mapper.wait(timeout=30) == 0


MAPS_AND_WAITS = """
import mmap, os, sys
handle = open(sys.argv[1], "w+b")
handle.write(b"d" * 65536)
handle.flush()
mapping = mmap.mmap(handle.fileno(), 0)
handle.close()
os.unlink(sys.argv[1])
st = os.stat(f"/proc/self/map_files/{open('/proc/self/maps').read().split(sys.argv[1])[0].splitlines()[-1].split()[0]}")
print(st.st_dev, st.st_ino, flush=True)
sys.stdin.read()
"""


@needs_real_proc_fd
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root and unshare(1) for a PID namespace",
)
def test_a_mapping_outside_this_pid_namespace_is_not_ruled_out(tmp_path: Path) -> None:
    """reclaim's last look run in a PID namespace of its own (a server in a container): the host's
    processes are not in its /proc, and one of them may map the file through a shared volume."""
    name = tmp_path / "data.mdb"
    mapper = subprocess.Popen(
        [sys.executable, "-c", MAPS_AND_WAITS, str(name)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert mapper.stdout is not None and mapper.stdin is not None
        dev, ino = (int(n) for n in mapper.stdout.readline().split())
        look = (
            "import json, sys; from sysmcp.engine.procs import mapped_anywhere; "
            "print(json.dumps(mapped_anywhere(b'/proc/1/fd/0', int(sys.argv[1]), int(sys.argv[2]))))"
        )
        done = subprocess.run(
            ["unshare", "-p", "-f", "-m", "--mount-proc", sys.executable, "-c", look, str(dev), str(ino)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0 and "unshare" in done.stderr:
            pytest.skip(f"no PID namespace here: {done.stderr.strip().splitlines()[-1]}")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == "unseen"
    finally:
        assert mapper.stdin is not None
        mapper.stdin.close()
        assert mapper.wait(timeout=30) == 0


@needs_real_proc_fd
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None,
    reason="needs root, unshare(1) and setpriv(1) to mount a proc with hidepid=2 and look as nobody",
)
def test_a_mapping_in_a_process_proc_hides_is_not_ruled_out(tmp_path: Path) -> None:
    """reclaim's last look run by a user who may not see other users' processes at all (/proc mounted
    hidepid=2): one of them may map the file."""
    name = tmp_path / "data.mdb"
    mapper = subprocess.Popen(
        [sys.executable, "-c", MAPS_AND_WAITS, str(name)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    hiding = tempfile.mkdtemp(prefix="sysmcp-hidepid-")
    try:
        assert mapper.stdout is not None and mapper.stdin is not None
        dev, ino = (int(n) for n in mapper.stdout.readline().split())
        look = (
            "import json, sys; from sysmcp.engine.procs import mapped_anywhere; "
            "print(json.dumps(mapped_anywhere(sys.argv[1].encode() + b'/1/fd/0', int(sys.argv[2]), int(sys.argv[3]))))"
        )
        script = (
            'mount -t proc -o hidepid=2 proc "$1" && '
            'exec setpriv --reuid=65534 --regid=65534 --clear-groups "$2" -c "$3" "$1" "$4" "$5"'
        )
        command = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", hiding]
        done = subprocess.run(
            [*command, sys.executable, look, str(dev), str(ino)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == "unseen"
    finally:
        os.rmdir(hiding)
        assert mapper.stdin is not None
        mapper.stdin.close()
        assert mapper.wait(timeout=30) == 0
