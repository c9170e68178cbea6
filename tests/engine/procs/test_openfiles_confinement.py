"""Whether a deleted file's former path names it in this server's view: the holder's mount namespace and
the filesystem mounted at that path, not the text of the link (a /proc tree built by the test, as in
``test_openfiles``: the namespace links lead to real nsfs inodes, the mount table is written here)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysmcp.engine.procs import scan_processes

PID = 4_194_399  # above the largest pid Linux hands out: no real process answers for it

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/ns/mnt"), reason="needs /proc/PID/fd and ns links (Linux)"
)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[int]:
    gone = tmp_path / "gone.log"
    fd = os.open(gone, os.O_RDWR | os.O_CREAT, 0o600)
    os.write(fd, b"x" * 4096)
    gone.unlink()
    try:
        yield fd
    finally:
        os.close(fd)


def mountinfo(dev: int) -> bytes:
    return f"1 0 {os.major(dev)}:{os.minor(dev)} / / rw - ext4 /dev/root rw\n".encode()


@pytest.mark.parametrize(
    ("holder_namespace", "mounted_dev", "confined"),
    [
        ("/proc/self/ns/mnt", "the file's", True),
        ("/proc/self/ns/net", "the file's", False),  # another namespace's inode: not our mount namespace
        (None, "the file's", False),  # a namespace we may not look at counts as another
        ("/proc/self/ns/mnt", "another", False),  # the path here shows another filesystem than the file's
    ],
)
def test_a_former_path_confines_a_file_only_in_our_mount_namespace_on_the_filesystem_mounted_there(
    tmp_path: Path, held: int, holder_namespace: str | None, mounted_dev: str, confined: bool
) -> None:
    proc = tmp_path / "proc"
    (proc / str(PID) / "fd").mkdir(parents=True)
    stand_in = tmp_path / "names" / "app.log (deleted)"
    stand_in.parent.mkdir()
    stand_in.symlink_to(f"/proc/self/fd/{held}")
    (proc / str(PID) / "fd" / "3").symlink_to(stand_in)
    (proc / "self" / "ns").mkdir(parents=True)
    (proc / "self" / "ns" / "mnt").symlink_to("/proc/self/ns/mnt")
    if holder_namespace is not None:
        (proc / str(PID) / "ns").mkdir()
        (proc / str(PID) / "ns" / "mnt").symlink_to(holder_namespace)
    dev = os.fstat(held).st_dev
    (proc / "self" / "mountinfo").write_bytes(mountinfo(dev if mounted_dev == "the file's" else dev + 1))
    [found] = scan_processes(str(proc)).files.values()
    assert found.path == str(tmp_path / "names" / "app.log")
    assert found.confined is confined
