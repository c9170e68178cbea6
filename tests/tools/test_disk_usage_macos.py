"""disk_usage on a Mac's mount table: psutil.disk_partitions rows as getfsstat gives them on macOS 14.

No Mac runs these tests; the rows are a Mac's layout (an Apple-silicon Mac with its APFS system
container disk3, the iBoot container disk1, an SMB share and a FAT USB stick) in psutil's shape, and
statvfs answers as APFS gives them: every volume of a container reports the container's size and
free space, and only its own used bytes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import anyio
import jsonschema
import pytest

from sysmcp.engine.mounts import FsStats, apfs_container, container_siblings
from sysmcp.engine.mounts._mounts import INLINE_SAFE_TYPES, is_system_volume, table_from_partitions
from sysmcp.tools.disk_usage import TOOL, DiskUsage
from tests.tools.test_disk_usage import FakeUsage, context

pytestmark = pytest.mark.anyio


class Part(NamedTuple):
    """The fields of psutil's ``sdiskpart`` that sysmcp reads."""

    device: str
    mountpoint: str
    fstype: str
    opts: str


MAC = [
    Part("/dev/disk3s1s1", "/", "apfs", "ro,local,rootfs,dovolfs,journaled,multilabel"),
    Part("devfs", "/dev", "devfs", "rw,local,dovolfs,dontbrowse,multilabel"),
    Part(
        "/dev/disk3s6", "/System/Volumes/VM", "apfs", "rw,noexec,local,dovolfs,dontbrowse,journaled,noatime"
    ),
    Part("/dev/disk3s2", "/System/Volumes/Preboot", "apfs", "rw,local,dovolfs,dontbrowse,journaled"),
    Part("/dev/disk3s4", "/System/Volumes/Update", "apfs", "rw,local,dovolfs,dontbrowse,journaled"),
    Part("/dev/disk1s2", "/System/Volumes/xarts", "apfs", "rw,noexec,local,dovolfs,dontbrowse,journaled"),
    Part("/dev/disk1s1", "/System/Volumes/iSCPreboot", "apfs", "rw,local,dovolfs,dontbrowse,journaled"),
    Part("/dev/disk1s3", "/System/Volumes/Hardware", "apfs", "rw,local,dovolfs,dontbrowse,journaled"),
    Part("/dev/disk3s5", "/System/Volumes/Data", "apfs", "rw,local,dovolfs,dontbrowse,journaled,multilabel"),
    Part("map auto_home", "/System/Volumes/Data/home", "autofs", "rw,dontbrowse,automounted,multilabel"),
    Part("//user@nas/share", "/Volumes/share", "smbfs", "rw,nodev,nosuid,multilabel"),
    Part("/dev/disk4s1", "/Volumes/USB", "msdos", "rw,nodev,nosuid,local,ignore-ownership"),
]

MiB = 1 << 20
CONTAINER_BLOCKS = 460 << 10  # disk3: 460 GiB in 1 MiB blocks, shared by all its volumes
CONTAINER_FREE = 120 << 10


def apfs(used_gib: float, dev: int) -> FsStats:
    """An APFS volume: the container's size and free space, its own used bytes."""
    used = int(used_gib * 1024)
    return FsStats(
        MiB, CONTAINER_BLOCKS, CONTAINER_BLOCKS - used, CONTAINER_FREE, 1 << 31, (1 << 31) - 500_000, dev
    )


ANSWERS: dict[str, FsStats | OSError] = {
    "/": apfs(10, 0x1000011),
    "/dev": FsStats(512, 400, 0, 0, 700, 0, 0x3000000),
    "/System/Volumes/VM": apfs(3, 0x1000012),
    "/System/Volumes/Preboot": apfs(6, 0x1000013),
    "/System/Volumes/Update": apfs(0.1, 0x1000014),
    "/System/Volumes/xarts": FsStats(4096, 128_000, 127_000, 127_000, 1000, 900, 0x1000001),
    "/System/Volumes/iSCPreboot": FsStats(4096, 128_000, 126_000, 126_000, 1000, 900, 0x1000002),
    "/System/Volumes/Hardware": FsStats(4096, 128_000, 127_500, 127_500, 1000, 900, 0x1000003),
    "/System/Volumes/Data": apfs(320, 0x1000015),
    "/System/Volumes/Data/home": FsStats(4096, 0, 0, 0, 0, 0, 0x3000001),
    "/Volumes/share": FsStats(4096, 1 << 28, 1 << 27, 1 << 27, 0, 0, 0x2000001),
    "/Volumes/USB": FsStats(32768, 1_000_000, 600_000, 600_000, 0, 0, 0x1000020),
}


def mac_tool() -> tuple[DiskUsage, FakeUsage]:
    table = table_from_partitions(MAC)
    usage = FakeUsage(ANSWERS)
    return DiskUsage(lambda: table, usage, timeout=2), usage


async def listing(**args: Any) -> tuple[str, dict[str, Any], FakeUsage]:
    handler, usage = mac_tool()
    with anyio.fail_after(10):
        output = await handler({"unit": "percent", "all": False, **args}, context())
    jsonschema.validate(output.structured, TOOL.output_schema)
    return output.text, output.structured, usage


def test_the_table_keeps_getfsstats_rows_and_their_read_only_flag() -> None:
    table = table_from_partitions(MAC)
    assert [m.mount_point for m in table.mounts] == [p.mountpoint for p in MAC]
    root = table.holding("/Applications/Safari.app")
    assert root is not None and root.mount_point == "/" and root.read_only
    assert table.holding("/Volumes/USB/photo.jpg").fs_type == "msdos"  # type: ignore[union-attr]


def test_apfs_volumes_are_grouped_by_container() -> None:
    table = table_from_partitions(MAC)
    data = table.holding("/System/Volumes/Data")
    assert data is not None and apfs_container(data) == "disk3"
    assert {m.mount_point for m in container_siblings(data, table)} == {
        "/",
        "/System/Volumes/VM",
        "/System/Volumes/Preboot",
        "/System/Volumes/Update",
    }
    usb = table.holding("/Volumes/USB")
    assert usb is not None and apfs_container(usb) is None and container_siblings(usb, table) == []


def test_macos_system_volumes_are_recognised_and_data_is_not() -> None:
    table = table_from_partitions(MAC)
    system = {m.mount_point for m in table.mounts if is_system_volume(m, table)}
    assert system == {
        "/",  # the sealed read-only snapshot: Data of the same container stands for it
        "/System/Volumes/VM",
        "/System/Volumes/Preboot",
        "/System/Volumes/Update",
        "/System/Volumes/xarts",
        "/System/Volumes/iSCPreboot",
        "/System/Volumes/Hardware",
    }


def test_a_mac_without_a_data_volume_keeps_its_root() -> None:
    table = table_from_partitions([Part("/dev/disk1s1", "/", "apfs", "rw,local,rootfs,journaled")])
    assert not is_system_volume(table.mounts[0], table)


async def test_the_default_view_is_data_the_share_and_the_usb_disk_with_a_container_note() -> None:
    text, structured, _ = await listing()
    shown = [fs["mount_point"] for fs in structured["filesystems"]]
    assert sorted(shown) == ["/System/Volumes/Data", "/Volumes/USB", "/Volumes/share"]
    assert structured["notes"] == [
        "APFS: /, /System/Volumes/Data, /System/Volumes/Preboot, /System/Volumes/Update, "
        "/System/Volumes/VM are volumes of one container, disk3: they share its free space (120.0 GiB "
        "free), so their free figures are one pool, never to be added up; used is each volume's own."
    ]
    assert structured["notes"][0] in text
    data = {fs["mount_point"]: fs for fs in structured["filesystems"]}["/System/Volumes/Data"]
    assert data["free_bytes"] == 120 << 30 and data["used_bytes"] == 320 << 30


async def test_all_brings_back_devfs_autofs_and_the_system_volumes() -> None:
    _, structured, _ = await listing(all=True)
    assert sorted(fs["mount_point"] for fs in structured["filesystems"]) == sorted(p.mountpoint for p in MAC)
    assert len(structured["notes"]) == 2  # disk3 and the iBoot container disk1


async def test_the_smb_share_is_probed_in_a_thread_the_local_disks_inline() -> None:
    table = table_from_partitions(MAC)
    assert not table.inline_safe("/Volumes/share")  # smbfs
    assert table.inline_safe("/Volumes/USB") and table.inline_safe("/System/Volumes/Data")
    _, _, usage = await listing()
    assert usage.threads["/Volumes/share"] is not usage.threads["/Volumes/USB"]


#: Filesystems whose lookups wait on a server or a user-space daemon: a dead one hangs statvfs, lstat,
#: anything that touches it (FUSE's user-space daemons included, whatever follows "fuse.").
NETWORK_TYPES = [
    "9p",
    "acfs",
    "afpfs",
    "afs",
    "ceph",
    "cifs",
    "fuse",
    "fuse.sshfs",
    "fuse.rclone",
    "fuseblk",
    "gfs2",
    "glusterfs",
    "lustre",
    "macfuse",
    "ncpfs",
    "nfs",
    "nfs4",
    "ocfs2",
    "osxfuse",
    "smb3",
    "smbfs",
    "sshfs",
    "webdav",
]


@pytest.mark.parametrize("fs_type", NETWORK_TYPES)
def test_network_filesystems_are_never_looked_at_on_the_event_loop(fs_type: str) -> None:
    table = table_from_partitions(
        [Part("/dev/disk3s5", "/", "apfs", "rw"), Part("x", "/mnt/x", fs_type, "rw")]
    )
    assert not table.inline_safe("/mnt/x/file") and table.inline_safe("/etc")


def test_no_fuse_type_is_taken_for_a_local_one() -> None:
    assert not [fs_type for fs_type in INLINE_SAFE_TYPES if fs_type.startswith("fuse")]


async def test_a_path_on_an_apfs_volume_carries_the_container_note() -> None:
    handler, _ = mac_tool()
    ctx = context()
    ctx.paths.resolve_str = lambda raw: raw  # type: ignore[method-assign]  # no Mac paths here to resolve
    output = await handler({"path": "/System/Volumes/Data"}, ctx)
    jsonschema.validate(output.structured, TOOL.output_schema)
    assert output.structured["filesystems"][0]["mount_point"] == "/System/Volumes/Data"
    assert "disk3" in output.structured["notes"][0]


async def test_a_path_behind_a_firmlink_is_reported_on_the_data_volume_it_is_on() -> None:
    """/Users is a firmlink from the system snapshot at / into the Data volume: no mount point on the
    way, but the path's device number is Data's."""
    handler, usage = mac_tool()
    usage.answers["/Users/me"] = apfs(320, 0x1000015)  # statvfs and stat of the path: Data's
    ctx = context()
    ctx.paths.resolve_str = lambda raw: raw  # type: ignore[method-assign]  # no Mac paths here to resolve
    output = await handler({"path": "/Users/me"}, ctx)
    entry = output.structured["filesystems"][0]
    assert entry["mount_point"] == "/System/Volumes/Data" and entry["used_bytes"] == 320 << 30
    usage.answers["/Library/x"] = apfs(10, 0x1000011)  # really on the snapshot: stays /
    output = await handler({"path": "/Library/x"}, ctx)
    assert output.structured["filesystems"][0]["mount_point"] == "/"
