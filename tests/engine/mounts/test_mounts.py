"""The mount table: parsing mountinfo, finding the mount that holds a path, safety, df's de-duplication."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sysmcp.engine.mounts import FilesystemUsage, Mount, MountTable, parse_mountinfo
from sysmcp.engine.mounts._disks import dedupe
from sysmcp.engine.mounts._mounts import MountInfoReader
from tests.profile import needs_proc

MOUNTINFO = textwrap.dedent(
    r"""
    22 27 0:21 / /proc rw,relatime - proc proc rw
    27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
    28 27 0:25 / /mnt/with\040space ro,nosuid master:3 - tmpfs tmp\134fs ro,size=4k
    40 27 254:0 /srv/export /data rw,relatime - ext4 /dev/vda rw
    41 27 0:50 / /mnt/nfs rw,relatime shared:7 - nfs4 server:/export rw,vers=4.2
    42 41 8:17 / /mnt/nfs/local rw - xfs /dev/sdb1 rw
    43 27 0:30 / /dev/shm rw - tmpfs tmpfs rw
    44 43 0:31 / /dev/shm rw - tmpfs tmpfs rw
    this line is not mountinfo
    """
).encode()


def table() -> MountTable:
    return parse_mountinfo(MOUNTINFO)


def test_mountinfo_lines_become_mounts_with_escapes_decoded_and_bad_lines_skipped() -> None:
    mounts = table().mounts
    assert [m.mount_point for m in mounts] == [
        "/proc",
        "/",
        "/mnt/with space",
        "/data",
        "/mnt/nfs",
        "/mnt/nfs/local",
        "/dev/shm",
        "/dev/shm",
    ]
    spaced = mounts[2]
    assert spaced.device == "tmp\\fs" and spaced.fs_type == "tmpfs" and spaced.read_only
    assert spaced.options == ("ro", "nosuid", "size=4k")
    root = mounts[1]
    assert (root.device, root.fs_type, root.dev, root.root) == ("/dev/vda", "ext4", "254:0", "/")
    assert root.options == ("rw", "relatime", "discard") and not root.read_only


def test_a_bind_mount_keeps_the_directory_it_shows() -> None:
    bind = table().mounts[3]
    assert (bind.mount_point, bind.root, bind.device, bind.dev) == (
        "/data",
        "/srv/export",
        "/dev/vda",
        "254:0",
    )


def test_pseudo_filesystems_are_the_kernel_and_memory_ones() -> None:
    assert all(
        Mount("/x", "x", t).pseudo
        for t in ("tmpfs", "devtmpfs", "proc", "sysfs", "cgroup", "cgroup2", "devpts", "autofs")
    )
    assert not any(
        Mount("/x", "x", t).pseudo for t in ("ext4", "xfs", "btrfs", "nfs4", "overlay", "zfs", "fuse.sshfs")
    )


@pytest.mark.parametrize(
    ("path", "mount_point"),
    [
        ("/", "/"),
        ("/etc/passwd", "/"),
        ("/data/a/b", "/data"),
        ("/database", "/"),
        ("/mnt/nfs/local/x", "/mnt/nfs/local"),
        ("/mnt/nfs/localx", "/mnt/nfs"),
        ("/mnt/with space/f", "/mnt/with space"),
    ],
)
def test_the_deepest_mount_point_containing_a_path_holds_it(path: str, mount_point: str) -> None:
    held = table().holding(path)
    assert held is not None and held.mount_point == mount_point


def test_on_a_stacked_mount_point_the_top_one_holds_unless_st_dev_names_another() -> None:
    mounts = table()
    top = mounts.holding("/dev/shm/x")
    assert top is not None and top.dev == "0:31" and mounts.visible(top)
    below = mounts.holding("/dev/shm/x", st_dev=os.makedev(0, 30))
    assert below is not None and below.dev == "0:30" and not mounts.visible(below)


def test_a_table_without_root_holds_nothing_outside_its_mounts() -> None:
    assert MountTable([Mount("/srv", "/dev/sdb", "ext4")]).holding("/etc") is None


def test_network_mounts_and_everything_below_them_are_not_inline_safe() -> None:
    mounts = table()
    assert mounts.inline_safe("/etc") and mounts.inline_safe("/data/x") and mounts.inline_safe("/proc/1")
    assert not mounts.inline_safe("/mnt/nfs/file")
    assert not mounts.inline_safe("/mnt/nfs/local/file")  # reaching xfs walks through the NFS mount


def test_overlay_is_inline_safe_unless_a_layer_is_visibly_on_a_network_mount() -> None:
    local = Mount("/", "/dev/vda", "ext4")
    nfs = Mount("/net", "srv:/x", "nfs")
    good = Mount("/c", "overlay", "overlay", ("rw", "lowerdir=/l1:/l2", "upperdir=/u", "workdir=/w"))
    bad = Mount("/d", "overlay", "overlay", ("rw", "lowerdir=/net/l", "upperdir=/u", "workdir=/w"))
    bare = Mount("/e", "overlay", "overlay", ("rw",))
    mounts = MountTable([local, nfs, good, bad, bare])
    assert mounts.inline_safe("/c/x") and mounts.inline_safe("/e/x")
    assert not mounts.inline_safe("/d/x")
    # A container's root: its layers live in the host's namespace, invisible here.
    container = MountTable(
        [
            Mount(
                "/",
                "overlay",
                "overlay",
                ("rw", "lowerdir=/var/lib/docker/l/A", "upperdir=/var/lib/docker/u"),
            )
        ]
    )
    assert container.inline_safe("/etc/hosts")


def test_an_overlay_layer_reached_through_a_symlink_into_a_network_mount_is_unsafe(tmp_path: Path) -> None:
    (tmp_path / "lowlink").symlink_to("/net/l")  # mountinfo shows the layer as given: this symlink
    local = Mount("/", "/dev/vda", "ext4")
    nfs = Mount("/net", "srv:/x", "nfs")
    sneaky = Mount("/d", "overlay", "overlay", ("rw", f"lowerdir={tmp_path / 'lowlink'}", "upperdir=/u"))
    assert not MountTable([local, nfs, sneaky]).inline_safe("/d/x")
    plain = Mount("/d", "overlay", "overlay", ("rw", f"lowerdir={tmp_path}", "upperdir=/u"))
    assert MountTable([local, nfs, plain]).inline_safe("/d/x")


def test_an_overlay_with_a_relative_layer_cannot_be_judged_and_is_unsafe() -> None:
    local = Mount("/", "/dev/vda", "ext4")
    relative = Mount("/d", "overlay", "overlay", ("rw", "lowerdir=layers/l", "upperdir=/u"))
    assert not MountTable([local, relative]).inline_safe("/d/x")


def test_a_local_filesystem_on_a_network_or_badly_backed_block_device_is_unsafe(tmp_path: Path) -> None:
    """ext4 is local only if its block device is: sysfs says which device and what backs a loop device."""
    devices, by_number = tmp_path / "devices", tmp_path / "dev-block"
    by_number.mkdir()
    for number, name, backing in [
        ("7:0", "loop0", "/net/disk.img"),
        ("7:1", "loop1", "/var/disk.img"),
        ("43:0", "nbd0", None),
        ("8:1", "sda/sda1", None),
    ]:
        node = devices / name
        node.mkdir(parents=True)
        if backing is not None:
            (node / "loop").mkdir()
            (node / "loop" / "backing_file").write_text(backing + "\n")
        (by_number / number).symlink_to(node)
    table = MountTable(
        [
            Mount("/", "/dev/sda1", "ext4", dev="8:1"),
            Mount("/net", "srv:/x", "nfs", dev="0:50"),
            Mount("/a", "/dev/loop0", "ext4", dev="7:0"),
            Mount("/b", "/dev/loop1", "ext4", dev="7:1"),
            Mount("/c", "/dev/nbd0", "xfs", dev="43:0"),
        ],
        sys_dev_block=str(by_number),
    )
    assert table.inline_safe("/x")  # a plain disk partition
    assert not table.inline_safe("/a/x")  # a loop device whose image is on NFS
    assert table.inline_safe("/b/x")  # a loop device whose image is on the local disk
    assert not table.inline_safe("/c/x")  # a network block device


@pytest.mark.parametrize(
    ("first", "second", "kept"),
    [
        # The mount nearer the root wins...
        (Mount("/srv/data", "/dev/sdb1", "ext4"), Mount("/data", "/dev/sdb1", "ext4"), "/data"),
        (Mount("/data", "/dev/sdb1", "ext4"), Mount("/srv/data", "/dev/sdb1", "ext4"), "/data"),
        # ...unless it shows a deeper directory of the filesystem (a bind mount of a subtree).
        (Mount("/srv/data", "/dev/sdb1", "ext4"), Mount("/d", "/dev/sdb1", "ext4", root="/sub"), "/srv/data"),
        # A real device path beats a name.
        (Mount("/a", "rootfs", "ext4"), Mount("/longer/b", "/dev/sda1", "ext4"), "/longer/b"),
        # A later mount on the same mount point hides the earlier one.
        (Mount("/x", "tmpfs", "tmpfs", mount_id=1), Mount("/x", "tmpfs", "tmpfs", mount_id=2), "/x#2"),
    ],
)
def test_one_entry_per_device_is_kept_as_df_chooses(first: Mount, second: Mount, kept: str) -> None:
    survivors = dedupe([FilesystemUsage(first, st_dev=1), FilesystemUsage(second, st_dev=1)])
    assert len(survivors) == 1
    mount = survivors[0].mount
    assert (f"{mount.mount_point}#{mount.mount_id}" if "#" in kept else mount.mount_point) == kept


def test_different_devices_are_all_kept_in_mount_order() -> None:
    entries = [
        FilesystemUsage(Mount("/b", "/dev/sdb", "ext4"), st_dev=2),
        FilesystemUsage(Mount("/", "/dev/sda", "ext4"), st_dev=1),
    ]
    assert dedupe(entries) == entries


def test_the_reader_returns_the_cached_table_until_the_file_is_older_than_max_age(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_bytes(MOUNTINFO)
    reader = MountInfoReader(str(info), max_age=3600)
    first = reader()
    info.write_bytes(MOUNTINFO.replace(b"/mnt/nfs", b"/mnt/other"))
    assert reader() is first  # a regular file never signals a change; only max_age re-reads it
    fresh = MountInfoReader(str(info), max_age=0)
    assert "/mnt/other" in {m.mount_point for m in fresh().mounts}
    reader.close()
    fresh.close()


def _descriptors_on(path: Path) -> int:
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found += os.readlink(f"/proc/self/fd/{fd}") == str(path)
    return found


@needs_proc
def test_a_reader_dropped_without_close_leaves_no_descriptor_open(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_bytes(MOUNTINFO)
    for _ in range(3):
        assert MountInfoReader(str(info))().holding("/mnt/nfs") is not None  # a one-off look, never closed
    gc.collect()
    assert _descriptors_on(info) == 0


@needs_proc
def test_the_real_reader_parses_this_process_mount_table() -> None:
    if not os.path.exists("/proc/self/mountinfo"):
        pytest.skip("no /proc/self/mountinfo on this system")
    reader = MountInfoReader()
    mounts = reader()
    assert mounts.holding("/") is not None
    findmnt = shutil.which("findmnt")
    if findmnt:
        listed = subprocess.run(
            [findmnt, "-rn", "-o", "TARGET"], capture_output=True, text=True, check=True
        ).stdout.split()
        assert {m.mount_point for m in mounts.mounts if " " not in m.mount_point} == {
            line.replace("\\x20", " ") for line in listed
        }
    reader.close()


CHANGE_SCRIPT = """
import os, subprocess, sys, tempfile
from sysmcp.engine.mounts._mounts import MountInfoReader
reader = MountInfoReader(max_age=3600)
before = reader()
assert reader() is before
target = tempfile.mkdtemp()
subprocess.run(["mount", "-t", "tmpfs", "sysmcp-test", target], check=True)
after = reader()
assert after is not before, "mount not noticed"
assert target in {m.mount_point for m in after.mounts}
subprocess.run(["umount", target], check=True)
assert target not in {m.mount_point for m in reader().mounts}, "umount not noticed"
print("ok")
"""


@needs_proc
def test_the_reader_notices_a_mount_at_once_through_the_kernels_change_signal() -> None:
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0 or not os.path.exists("/proc/self/mountinfo"):
        pytest.skip("needs root and unshare to mount in a private namespace")
    probe = subprocess.run([unshare, "-m", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot create a mount namespace here")
    done = subprocess.run(
        [unshare, "-m", "--propagation", "private", sys.executable, "-c", CHANGE_SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_resolving_a_path_never_enters_a_mount_that_could_hang(tmp_path: Path) -> None:
    net = tmp_path / "net"
    (net / "deep").mkdir(parents=True)
    (tmp_path / "local").mkdir()
    (tmp_path / "to_net").symlink_to(net / "deep")
    (tmp_path / "to_local").symlink_to("local")
    mounts = MountTable([Mount("/", "/dev/vda", "ext4"), Mount(str(net), "srv:/x", "nfs4")])
    assert mounts.walk(str(tmp_path / "local" / "f")) == (True, None)
    assert mounts.walk(str(tmp_path / "to_local" / ".." / "local")) == (True, None)
    assert mounts.walk(str(tmp_path / "missing" / "x")) == (True, None)
    assert mounts.walk(str(net / "deep")) == (False, str(net))
    assert mounts.walk(str(tmp_path / "to_net" / "x")) == (False, str(net))
    assert mounts.walk(str(tmp_path / "local" / ".." / "net")) == (False, str(net))
