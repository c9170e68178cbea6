"""The mount table: what is mounted where, which filesystems are pseudo, which mount holds a path.

Read from ``/proc/self/mountinfo`` rather than ``/proc/mounts`` because only mountinfo says which
directory of a filesystem a bind mount shows (``root``), which mount sits on top of which, and the
device number the kernel uses (a bind mount and its source are one filesystem). The reader re-parses
only when the kernel signals a change; the rest are lookups on an immutable table.

Without mountinfo (macOS, the BSDs) the table comes from psutil (``getfsstat``), re-read on a timer;
it has no bind-mount roots nor device numbers, so lookups fall back to mount points alone.
"""

from __future__ import annotations

import os
import re
import select
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sysmcp import platform

MOUNTINFO = platform.MOUNTINFO

# Kernel interfaces: no data of their own, sizes that are fiction, trees that can be endless. Walks
# skip them wherever they are met.
KERNEL_TYPES = frozenset(
    {
        "autofs",
        "binfmt_misc",
        "bpf",
        "cgroup",
        "cgroup2",
        "configfs",
        "debugfs",
        "devfs",  # macOS, the BSDs: /dev
        "devpts",
        "devtmpfs",
        "efivarfs",
        "fdescfs",  # the BSDs: /dev/fd
        "fusectl",
        "hugetlbfs",
        "mqueue",
        "nsfs",
        "proc",
        "procfs",  # the BSDs
        "pstore",
        "rpc_pipefs",
        "securityfs",
        "selinuxfs",
        "sysfs",
        "tracefs",
    }
)

# Filesystems that hold no user data on a storage device: kernel interfaces and memory-backed or
# virtual filesystems. Left out of the default listing (``all`` brings them back, as ``df -a`` does).
PSEUDO_TYPES = KERNEL_TYPES | frozenset(
    {
        "fuse.gvfsd-fuse",
        "fuse.lxcfs",
        "fuse.portal",
        "ignore",
        "kernfs",
        "none",
        "nfsd",
        "nullfs",  # the BSDs and macOS: another directory shown again, as df hides it
        "ramfs",
        "subfs",
        "tmpfs",
    }
)

# Types whose statfs is answered from in-memory counters and whose lookups never wait on a network
# or a user-space daemon: safe to query on the event loop. Everything else (NFS, CIFS, SMB, FUSE,
# autofs, unknown types: lookups that wait on a server or a daemon) is probed in a worker thread with
# a timeout; the tests check that no network type is ever listed here.
INLINE_SAFE_TYPES = frozenset(
    {
        "apfs",  # macOS
        "cd9660",  # macOS, the BSDs: CD/DVD
        "bcachefs",
        "btrfs",
        "cgroup",
        "cgroup2",
        "configfs",
        "debugfs",
        "devfs",
        "devpts",
        "devtmpfs",
        "erofs",
        "exfat",
        "ext2",
        "ext3",
        "ext4",
        "f2fs",
        "hfs",
        "hfsplus",
        "hugetlbfs",
        "iso9660",
        "jfs",
        "mqueue",
        "msdos",
        "nilfs2",
        "nsfs",
        "ntfs",
        "ntfs3",
        "proc",
        "pstore",
        "ramfs",
        "reiserfs",
        "securityfs",
        "selinuxfs",
        "squashfs",
        "sysfs",
        "tmpfs",
        "tracefs",
        "udf",
        "ufs",  # the BSDs
        "vfat",
        "xfs",
    }
)

# Block devices whose I/O goes over a network: a "local" filesystem on them can hang like NFS.
_NETWORK_BLOCK_DEVICES = ("nbd", "rbd", "drbd")
_OVERLAY_DIR_OPTIONS = frozenset({"upperdir", "lowerdir", "lowerdir+", "datadir+", "workdir"})
_ESCAPE = re.compile(rb"\\([0-7]{3})")


def layer_directories(option: str) -> list[str]:
    """The directories an overlay mount option names (``lowerdir=/a:/b``: /a and /b); none for another."""
    key, _, value = option.partition("=")
    return value.split(":") if key in _OVERLAY_DIR_OPTIONS else []


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of the mount table."""

    mount_point: str
    device: str
    fs_type: str
    options: tuple[str, ...] = ()
    read_only: bool = False
    root: str = "/"  # the directory of the filesystem shown here: "/" unless a bind mount of a subtree
    dev: str = ""  # "major:minor" of the filesystem, as mountinfo gives it ("" when unknown)
    mount_id: int = 0
    parent_id: int = 0

    @property
    def pseudo(self) -> bool:
        """True for kernel-interface and memory filesystems (tmpfs, devtmpfs, proc, cgroup, …)."""
        return self.fs_type in PSEUDO_TYPES

    def dev_matches(self, st_dev: int | None) -> bool:
        return st_dev is not None and self.dev == f"{os.major(st_dev)}:{os.minor(st_dev)}"

    def number(self, st_dev: int) -> int:
        """The filesystem's device number (``dev`` as stat gives one) for a file of it whose ``st_dev``
        is given: they differ on btrfs, whose files carry their subvolume's anonymous number, never the
        one the mount table gives; ``st_dev`` itself when the table gives none."""
        major, _, minor = self.dev.partition(":")
        return os.makedev(int(major), int(minor)) if major.isdigit() and minor.isdigit() else st_dev


def parent_dir(path: str) -> str:
    """'/a/b' → '/a', '/a' → '/' (paths here are normalised and absolute)."""
    return path.rpartition("/")[0] or "/"


class MountTable:
    """An immutable mount table with the indexes that make per-call lookups cheap."""

    def __init__(self, mounts: Iterable[Mount], sys_dev_block: str = platform.SYS_DEV_BLOCK) -> None:
        self.mounts = tuple(mounts)
        self.sys_dev_block = sys_dev_block  # major:minor → the block device's sysfs directory
        stacks: dict[str, list[Mount]] = {}
        for mount in self.mounts:
            stacks.setdefault(mount.mount_point, []).append(mount)
        self._stacks = {point: tuple(stack) for point, stack in stacks.items()}
        self._tops = {point: _top_of(stack) for point, stack in self._stacks.items()}
        self._safe: dict[str, bool] = {}

    def visible(self, mount: Mount) -> bool:
        """False for a mount hidden under a later mount on the same mount point."""
        return self._tops.get(mount.mount_point) is mount

    def mount_point_of(self, path: str) -> str | None:
        """The deepest mount point that is ``path`` or one of its ancestors (``path`` normalised, absolute)."""
        current = path
        while current not in self._tops:
            if current == "/":
                return None
            current = parent_dir(current)
        return current

    def holding(self, path: str, st_dev: int | None = None) -> Mount | None:
        """The mount that holds ``path``: at the deepest mount point containing it, the one whose device
        number matches ``st_dev`` (the path's own) if several are stacked there, else the topmost."""
        point = self.mount_point_of(path)
        if point is None:
            return None
        if st_dev is not None and len(self._stacks[point]) > 1:
            for mount in reversed(self._stacks[point]):
                if mount.dev_matches(st_dev):
                    return mount
        return self._tops[point]

    def inline_safe(self, path: str, visiting: frozenset[str] = frozenset()) -> bool:
        """True if looking at ``path`` only touches local or in-memory filesystems (cannot hang on a network)."""
        point = self.mount_point_of(path)
        return point is not None and self._point_safe(point, visiting)

    def _point_safe(self, point: str, visiting: frozenset[str]) -> bool:
        known = self._safe.get(point)
        if known is not None:
            return known
        if point in visiting:
            return False
        visiting = visiting | {point}
        mount = self._tops[point]
        safe = self._type_safe(mount, visiting)
        if safe and point != "/":
            # Reaching the mount point walks through the mounts above it.
            parent = self.mount_point_of(parent_dir(point))
            safe = parent is not None and self._point_safe(parent, visiting)
        self._safe[point] = safe
        return safe

    def _type_safe(self, mount: Mount, visiting: frozenset[str]) -> bool:
        if mount.fs_type in INLINE_SAFE_TYPES:
            return self._device_safe(mount, visiting)
        if mount.fs_type != "overlay":
            return False
        # overlayfs looks things up in its layers. It is safe unless reaching a layer (following any
        # symlink on the way, as the kernel did when mounting) touches an unsafe mount; layers outside
        # this namespace (a container's view of its own root) cannot be judged and are taken to be the
        # host's local disk. A relative layer path (relative to the mounter's directory) cannot be judged
        # at all: unsafe.
        for option in mount.options:
            for directory in layer_directories(option):
                if not directory.startswith("/"):
                    return False
                layer = os.path.normpath(directory)
                point = self.mount_point_of(layer)
                if point is None or self._tops[point].fs_type == "overlay":
                    continue  # not reachable from here (the host's path seen from inside a container)
                if not self.walk(layer, visiting)[0]:
                    return False
        return True

    def _device_safe(self, mount: Mount, visiting: frozenset[str]) -> bool:
        """A local filesystem type is only as safe as its block device: a network block device, or a
        loop device whose backing file is on an unsafe mount, can hang any lookup."""
        if not mount.dev or mount.dev.startswith("0:"):
            return True  # no block device (tmpfs, proc, btrfs' anonymous numbers): nothing below it
        if not platform.has_sys_dev_block(self.sys_dev_block):
            return True  # no /sys to ask (not Linux): the check is skipped, as missing_facilities() says
        node = os.path.realpath(os.path.join(self.sys_dev_block, mount.dev))
        if os.path.basename(node).startswith(_NETWORK_BLOCK_DEVICES):
            return False
        for device in (node, os.path.dirname(node)):  # a partition's loop settings are on its disk
            try:
                with open(os.path.join(device, "loop", "backing_file"), "rb") as handle:
                    backing = os.fsdecode(handle.read().strip())
            except OSError:
                continue
            backing = backing.removesuffix(" (deleted)")
            return not backing.startswith("/") or self.walk(os.path.normpath(backing), visiting)[0]
        return True

    def walk(
        self, path: str, visiting: frozenset[str] = frozenset(), max_links: int = 40
    ) -> tuple[bool, str | None]:
        """Walk ``path`` the way ``os.path.realpath`` will, with lstat/readlink on proven-safe mounts only:
        (True, None) if resolving it only looks at local or in-memory filesystems, else (False, mount
        point of the first unsafe mount it would enter)."""
        pending = path.split("/")[::-1]
        current = "/"
        links = 0
        if not self.inline_safe("/", visiting):
            return False, "/"
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                current = parent_dir(current)
                continue
            candidate = current.rstrip("/") + "/" + name
            if not self.inline_safe(candidate, visiting):
                return False, self.mount_point_of(candidate)
            try:
                mode = os.lstat(candidate).st_mode
            except ValueError:
                return True, None  # not a usable file name: resolving it fails at once, touching nothing
            except OSError:
                current = candidate  # realpath carries on past a missing component the same way
                continue
            if not stat.S_ISLNK(mode):
                current = candidate
                continue
            links += 1
            if links > max_links:
                return True, None  # a loop: realpath gives up on it quickly
            try:
                target = os.readlink(candidate)
            except OSError:
                current = candidate
                continue
            if target.startswith("/"):
                current = "/"
            pending.extend(target.split("/")[::-1])
        return True, None


def _top_of(stack: Sequence[Mount]) -> Mount:
    """The mount a lookup reaches among several on one mount point: the one no other sits on."""
    parents = {mount.parent_id for mount in stack}
    uncovered = [mount for mount in stack if mount.mount_id not in parents]
    return uncovered[-1] if len(uncovered) == 1 else stack[-1]


def _unescape(field: bytes) -> str:
    """mountinfo writes space, tab, newline and backslash as \\ooo octal escapes."""
    if b"\\" in field:
        field = _ESCAPE.sub(lambda m: bytes([int(m.group(1), 8)]), field)
    return os.fsdecode(field)


def parse_mountinfo(data: bytes) -> MountTable:
    """Parse the text of ``/proc/<pid>/mountinfo`` (see proc(5)); malformed lines are skipped."""
    mounts: list[Mount] = []
    for line in data.splitlines():
        fields = line.split(b" ")
        try:
            separator = fields.index(b"-", 6)
            mount_id, parent_id = int(fields[0]), int(fields[1])
            fs_type, source, super_options = fields[separator + 1 : separator + 4]
        except ValueError:
            continue
        mount_options = fields[5].decode("ascii", "replace").split(",")
        fs_options = _unescape(super_options).split(",")
        options = tuple(dict.fromkeys([*mount_options, *(o for o in fs_options if o not in ("rw", "ro"))]))
        mounts.append(
            Mount(
                mount_point=_unescape(fields[4]),
                device=_unescape(source),
                fs_type=_unescape(fs_type),
                options=options,
                read_only="ro" in mount_options or "ro" in fs_options,
                root=_unescape(fields[3]),
                dev=fields[2].decode("ascii", "replace"),
                mount_id=mount_id,
                parent_id=parent_id,
            )
        )
    return MountTable(mounts)


class MountInfoReader:
    """The current mount table, re-read only when it changed: the kernel marks an open mountinfo with
    POLLPRI|POLLERR after any mount or unmount (proc(5)), so a call costs one zero-timeout poll; in case
    a kernel or sandbox does not signal, also when older than ``max_age`` seconds."""

    def __init__(self, path: str = MOUNTINFO, max_age: float = 2.0) -> None:
        self._path = path
        self._max_age = max_age
        self._lock = threading.Lock()
        self._table: MountTable | None = None
        self._read_at = 0.0
        self._poller: select.poll | None = None
        self._closer: weakref.finalize[[int], MountInfoReader] | None = None  # closes the open file

    def __call__(self) -> MountTable:
        with self._lock:
            if self._table is None or self._changed():
                self._table = self._read()
            return self._table

    def _changed(self) -> bool:
        if time.monotonic() - self._read_at > self._max_age or self._poller is None:
            return True
        return any(events & (select.POLLPRI | select.POLLERR) for _, events in self._poller.poll(0))

    def _read(self) -> MountTable:
        if self._poller is None:
            # Opened before the first read, so a change during that read is still signalled.
            fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
            self._closer = weakref.finalize(self, os.close, fd)  # also when dropped without close()
            poller = select.poll()
            poller.register(fd, select.POLLPRI | select.POLLERR)
            self._poller = poller
        else:
            self._poller.poll(0)  # consume a pending change signal: the read below sees the change
        self._read_at = time.monotonic()
        with open(self._path, "rb") as handle:
            return parse_mountinfo(handle.read())

    def close(self) -> None:
        with self._lock:
            if self._closer is not None:
                self._closer()
            self._closer = self._poller = self._table = None


def psutil_partitions() -> MountTable:
    """The mount table from psutil, for systems without /proc/self/mountinfo (no bind-mount roots there)."""
    import psutil

    return table_from_partitions(psutil.disk_partitions(all=True))


def table_from_partitions(partitions: Iterable[object]) -> MountTable:
    """A table from ``psutil.disk_partitions`` rows (device, mountpoint, fstype, opts): getfsstat's view."""
    mounts = []
    for part in partitions:
        opts = str(getattr(part, "opts", "") or "")
        options = tuple(opts.split(",")) if opts else ()
        mounts.append(
            Mount(
                mount_point=str(getattr(part, "mountpoint", "")),
                device=str(getattr(part, "device", "")),
                fs_type=str(getattr(part, "fstype", "")),
                options=options,
                read_only="ro" in options,
            )
        )
    return MountTable(mounts)


class PartitionsReader:
    """The mount table from psutil, re-read when older than ``max_age`` seconds (nothing signals a
    change outside mountinfo); the same mounts keep the old table object, so caches on it stay warm."""

    def __init__(self, max_age: float = 2.0, read: Callable[[], MountTable] = psutil_partitions) -> None:
        self._max_age = max_age
        self._read = read
        self._lock = threading.Lock()
        self._table: MountTable | None = None
        self._read_at = 0.0

    def __call__(self) -> MountTable:
        with self._lock:
            now = time.monotonic()
            if self._table is None or now - self._read_at > self._max_age:
                fresh = self._read()
                if self._table is None or fresh.mounts != self._table.mounts:
                    self._table = fresh
                self._read_at = now
            return self._table


def default_partitions() -> Callable[[], MountTable]:
    """The best mount-table provider for this system: mountinfo where it can be read, else psutil."""
    return MountInfoReader() if platform.has_mountinfo() else PartitionsReader()


# -- macOS: APFS ------------------------------------------------------------------------------

MACOS_SYSTEM_VOLUMES = "/System/Volumes"  # where macOS mounts the APFS volumes it keeps for itself
MACOS_DATA_VOLUME = "/System/Volumes/Data"  # the one of them that holds the user's files
_APFS_DEVICE = re.compile(r"/dev/(disk[0-9]+)s[0-9]+")  # /dev/disk3s1s1 → container disk3


def apfs_container(mount: Mount) -> str | None:
    """The APFS container a volume lives in ('disk3' for /dev/disk3s5), None for anything else. Its
    volumes share one pool: each reports the container's size and free space, so they do not add up."""
    if mount.fs_type != "apfs":
        return None
    match = _APFS_DEVICE.match(mount.device)
    return match.group(1) if match else None


def is_system_volume(mount: Mount, table: MountTable) -> bool:
    """An APFS volume macOS keeps for itself, left out of the default listing (``all`` shows it).

    The volumes mounted directly under /System/Volumes (VM, Preboot, Update, xarts, iSCPreboot,
    Hardware …) except Data; and the read-only system snapshot at / when the Data volume of its
    container is mounted, since Data holds the user's files and its used share says how full the
    container is (the snapshot's few GiB would hide a full disk).
    """
    container = apfs_container(mount)
    if container is None:
        return False
    if parent_dir(mount.mount_point) == MACOS_SYSTEM_VOLUMES:
        return mount.mount_point != MACOS_DATA_VOLUME
    if mount.mount_point == "/" and mount.read_only:
        return any(
            m.mount_point == MACOS_DATA_VOLUME and apfs_container(m) == container for m in table.mounts
        )
    return False


def container_siblings(mount: Mount, table: MountTable) -> list[Mount]:
    """The other mounted volumes of ``mount``'s APFS container (empty when it is not APFS)."""
    container = apfs_container(mount)
    if container is None:
        return []
    return [m for m in table.mounts if m is not mount and apfs_container(m) == container]
