"""Which deleted files processes still hold open: the engine of deleted_open_files (``lsof +L1``).

A file deleted while a process still holds it keeps its blocks until the last descriptor closes and
the last mapping goes: df counts them, a walk finds no name for them. This reads every process's
``/proc/PID/fd`` links whose target has no name left (link count 0), then the deleted files a process
has only mapped (``/proc/PID/maps``, sized through ``map_files``: lsof's ``DEL``). Facts only; the tool
words them. ``engine.space`` runs the same scan for disk_usage's ``explain``.

A former path is only the text of a ``/proc`` link: a process in another mount namespace (a container
with a host volume) shows the path of its own view, which may name a place under a root while the inode
lives elsewhere. So each file says whether that text names it in this server's view
(``DeletedFile.confined``); one that does not is outside every root, whatever its path says.

btrfs gives each subvolume an anonymous ``st_dev``, not its filesystem's number in the mount table, so
each held file carries the number of the mount it was opened through (fdinfo's ``mnt_id``; a mapping's
line names the filesystem itself): ``DeletedFile.filesystem``.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from typing import Literal

from sysmcp import platform
from sysmcp.engine.calls import Cancel, Progress, never_cancelled, no_progress
from sysmcp.engine.faults import Unavailable
from sysmcp.engine.mounts import Mount, MountTable, parse_mountinfo

PROC = platform.PROC  # where processes are read (tests point the tools at a fake one)
DELETED = " (deleted)"
# (former path, stat, descriptor or None: mapped, mode, the filesystem's number: ``MountView.filesystem``)
_Held = tuple[str, os.stat_result, int | None, str, int]
# A deleted file's identity as a process's maps line gives it: (the filesystem's number, inode)
_Mapping = tuple[int, int]
# What ``mapped_anywhere`` found: a process maps the file, one that may not be looked at might, or none does
MappedNow = Literal["mapped", "unseen"] | None


@dataclass(slots=True)
class Holder:
    """One process's hold on a deleted file: a descriptor, or a memory mapping."""

    pid: int
    command: str
    user: str | None
    fd: int | None  # None: held by a memory mapping, not a descriptor
    mode: str  # "r", "w", "rw" or "" when fdinfo could not be read; a mapping's "r" or "rw"
    # The process has the file mapped into its memory (always, when ``fd`` is None): truncating the file
    # under a mapping kills the process at its next touch of a page past the new end (SIGBUS).
    mapped: bool = False


@dataclass(slots=True)
class DeletedFile:
    """A regular file with no name left, by device and inode, and every holder found."""

    path: str
    dev: int
    ino: int
    size: int
    disk: int
    holders: list[Holder] = field(default_factory=list)
    # The path names this inode in the server's own view (see the module's note): False puts the file
    # outside every root, whatever its path says.
    confined: bool = True
    fs: int | None = None  # its filesystem's number in the mount table where that is not ``dev`` (btrfs)
    # None: ``path`` is as this server's mount namespace names it (a holder is in it); else the pid of a
    # holder in another (a container's), whose view gives ``path``: here that path is another file, or none.
    namespace_pid: int | None = None

    @property
    def filesystem(self) -> int:
        """The number the mount table gives its filesystem (``Mount.dev_matches`` it)."""
        return self.dev if self.fs is None else self.fs

    @property
    def mapped_only(self) -> bool:
        """No descriptor holds it, only mappings: it cannot be truncated safely, only unmapped."""
        return all(holder.fd is None for holder in self.holders)

    @property
    def unnamed(self) -> bool:
        """Made with O_TMPFILE (a runtime's temporary file): it never had a name, and the kernel shows
        ``DIR/#INODE`` for it, the directory it was made in."""
        return os.path.basename(self.path) == f"#{self.ino}"

    @property
    def mapped(self) -> bool:
        """Some holder has it mapped, with a descriptor or without: truncating it, even through a
        descriptor, would kill that holder (SIGBUS); only a restart frees it safely."""
        return any(holder.mapped for holder in self.holders)


@dataclass(slots=True)
class Scan:
    """One pass over the processes: the deleted files held open, and what could not be read."""

    files: dict[tuple[int, int], DeletedFile] = field(default_factory=dict)
    processes: int = 0
    unreadable: int = 0  # processes whose descriptors we may not look at
    vanished: int = 0  # processes that ended while being read
    mappings_not_sized: int = 0  # deleted mapped files whose map_files entry we may not look at

    def file(self, path: str, st: os.stat_result, fs: int) -> DeletedFile:
        """The deleted file ``st`` is, found now (under its former ``path``, on filesystem ``fs``) or before."""
        key = (st.st_dev, st.st_ino)
        found = self.files.get(key)
        if found is None:
            found = self.files[key] = DeletedFile(
                path, st.st_dev, st.st_ino, st.st_size, st.st_blocks * 512, fs=None if fs == st.st_dev else fs
            )
        return found


def _identity(pid: int) -> tuple[str, str | None]:
    """Command name and user of a process, from psutil (best effort: it may be gone already); imported
    here because disk_usage imports this module on every start, which need not pay for psutil."""
    import psutil

    try:
        process = psutil.Process(pid)
        with process.oneshot():
            name = process.name()
            try:
                user: str | None = process.username()
            except (KeyError, psutil.Error):  # a uid with no name in the user database
                user = None
        return name, user
    except psutil.Error:
        return "?", None


class MountView:
    """This server's view, read once per scan: its mount namespace and mount table.

    ``names(pid, path, dev)``: whether the ``/proc`` link text ``path`` of a file process ``pid`` holds,
    on filesystem ``dev`` (``filesystem``), names that file here: the holder's mount namespace is ours
    and our table mounts that filesystem at ``path``. What cannot be read answers False: never confined
    by guesswork."""

    def __init__(self, proc: str = PROC) -> None:
        self.proc = proc
        self.namespace = _namespace(proc, "self")
        try:
            with open(os.path.join(proc, "self", "mountinfo"), "rb") as handle:
                self.table: MountTable | None = parse_mountinfo(handle.read())
        except OSError:
            self.table = None
        self._ours: dict[int, bool] = {}
        self._by_id = {} if self.table is None else {mount.mount_id: mount for mount in self.table.mounts}
        self._read = {self.namespace}  # the mount namespaces whose mounts are in ``_by_id``

    def filesystem(self, pid: int, fd: int | str, st_dev: int) -> int:
        """The mount table's number for the filesystem of the file ``pid`` holds as descriptor ``fd``:
        its mount's, by fdinfo's ``mnt_id`` (``st_dev`` is not it on btrfs; ``st_dev`` when that mount
        cannot be read). Mount ids are the system's, so another namespace's table (a container's,
        PrivateTmp=) is read once, the first time one of its ids is met."""
        mount_id = platform.fd_mount_id(self.proc, pid, str(fd))
        if mount_id is not None and mount_id not in self._by_id:
            namespace = _namespace(self.proc, str(pid))
            if namespace is not None and namespace not in self._read:
                self._read.add(namespace)
                with contextlib.suppress(OSError):
                    with open(os.path.join(self.proc, str(pid), "mountinfo"), "rb") as handle:
                        theirs = parse_mountinfo(handle.read()).mounts
                    self._by_id.update((m.mount_id, m) for m in theirs if m.mount_id not in self._by_id)
        mount = None if mount_id is None else self._by_id.get(mount_id)
        return st_dev if mount is None else mount.number(st_dev)

    def ours(self, pid: int) -> bool:
        """Process ``pid`` is in this server's mount namespace (False when that cannot be read)."""
        found = self._ours.get(pid)
        if found is None:
            found = self._ours[pid] = (
                self.namespace is not None and _namespace(self.proc, str(pid)) == self.namespace
            )
        return found

    def names(self, pid: int, path: str, dev: int) -> bool:
        if self.namespace is None or self.table is None or not self.ours(pid):
            return False
        mount = self.table.holding(os.path.normpath(path))  # the mount a lookup of the path reaches
        return mount is not None and mount.dev_matches(dev)


def _namespace(proc: str, pid: str) -> tuple[int, int] | None:
    """The identity of a process's mount namespace (its nsfs inode), None if it cannot be read."""
    try:
        st = os.stat(os.path.join(proc, pid, "ns", "mnt"))
    except OSError:
        return None
    return st.st_dev, st.st_ino


def link_confined(link: bytes, dev: int) -> bool:
    """Whether ``/proc/PID/fd/N`` (``link``, a file whose st_dev is ``dev``) is held in this server's view
    under the name its text gives (``MountView.names``): what reclaim asks again right before truncating."""
    base = os.path.dirname(os.path.dirname(os.fsdecode(link)))  # /proc/PID of /proc/PID/fd/N
    pid = os.path.basename(base)
    try:
        target = os.readlink(link)
    except OSError:
        return False
    if not pid.isdigit() or not target.endswith(os.fsencode(DELETED)):
        return False
    path = os.fsdecode(target[: -len(DELETED)])
    view = MountView(os.path.dirname(base))
    return view.names(int(pid), path, view.filesystem(int(pid), os.path.basename(os.fsdecode(link)), dev))


def mapped_anywhere(link: bytes, dev: int, ino: int) -> MappedNow:
    """Whether any process has the deleted file ``(dev, ino)`` mapped now (the /proc tree is the one
    ``link``, a ``/proc/PID/fd/N``, is in): what reclaim asks right before truncating it, which would
    kill such a process (SIGBUS). ``"mapped"``: one has (or has a mapping of that inode number whose
    ``map_files`` may not be looked at); ``"unseen"``: none that could be read has, but some process's
    maps may not be read (another user's, where this server is not root), or some are not listed (this
    server's PID namespace is a container's, or /proc hides other users' processes: ``hidepid=2``), and
    one of those may; None: no process has. Never truncated on a guess.

    Every process's maps are read for each file, since any of them may map it by the moment of acting:
    the kernel writes them out, at about 0.1 ms a process."""
    proc = os.path.dirname(os.path.dirname(os.path.dirname(os.fsdecode(link))))
    if _inner_pid_namespace(proc) or _processes_hidden(proc):
        return "unseen"  # processes not listed (the host's, or other users'), and they may map the file
    try:
        pids = [name for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return "unseen"
    number = str(ino).encode()
    needle = b" " + number + b" "
    unseen = False
    for pid in pids:
        base = os.path.join(proc, pid)
        try:
            with open(os.path.join(base, "maps"), "rb") as handle:
                text = handle.read()
        except PermissionError:
            unseen = True  # another user's: the plan's scan could not look either, nor can this
            continue
        except OSError:
            continue  # gone
        if needle not in text:
            continue  # the common process: no line to look at
        spans = [
            fields[0]
            for line in text.splitlines(keepends=True)
            if line.endswith(b" (deleted)\n")
            and len(fields := line.split(maxsplit=5)) == 6
            and fields[4] == number
        ]
        for span in spans:
            try:
                st = os.stat(os.path.join(base, "map_files", os.fsdecode(span)))
            except PermissionError:
                return "mapped"
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == (dev, ino):
                return "mapped"
    return "unseen" if unseen else None


#: The initial PID namespace's inode number, fixed by the kernel (PROC_PID_INIT_INO): the one whose
#: /proc lists every process on the host.
INITIAL_PID_NAMESPACE = 0xEFFFFFFC


def _inner_pid_namespace(proc: str) -> bool:
    """Whether this process is in a PID namespace of its own (a container's): the processes of the
    namespaces above it (the host's) are not in its /proc. False where that cannot be read."""
    try:
        return os.stat(os.path.join(proc, "self", "ns", "pid")).st_ino != INITIAL_PID_NAMESPACE
    except OSError:
        return False


#: proc's options that leave other users' processes out of its listing (``hidepid=2`` and ``=4``)
HIDING = frozenset({"hidepid=2", "hidepid=invisible", "hidepid=4", "hidepid=ptraceable"})


def _processes_hidden(proc: str) -> bool:
    """Whether ``proc`` leaves out of its listing processes this server may not look at: mounted with
    ``hidepid=invisible`` (or ``ptraceable``), this server not root nor in the group its ``gid=`` names."""
    if os.geteuid() == 0:
        return False
    try:
        with open(os.path.join(proc, "self", "mountinfo"), "rb") as handle:
            mount = parse_mountinfo(handle.read()).holding(proc)
    except OSError:
        return False
    if mount is None or mount.fs_type != "proc" or not HIDING.intersection(mount.options):
        return False
    gid = next((option[4:] for option in mount.options if option.startswith("gid=")), "")
    return not gid.isdigit() or int(gid) not in {os.getegid(), *os.getgroups()}


def scan_processes(
    proc: str = PROC, progress: Progress = no_progress, cancel: Cancel = never_cancelled
) -> Scan:
    """Every descriptor of every readable process under ``proc`` that points at a regular file with no
    name left, and the deleted files each maps; ``progress`` counts the processes looked at.
    ``Unavailable`` when ``proc`` itself cannot be listed."""
    scan = Scan()
    try:
        pids = sorted(int(name) for name in os.listdir(proc) if name.isdigit())
    except OSError as exc:
        raise Unavailable(f"Cannot list processes in {proc}: {exc.strerror or exc}") from None
    me = os.getpid()
    view = MountView(proc)
    for done, pid in enumerate(pids, 1):
        cancel()
        progress(done, None)
        try:
            links = fd_links(proc, pid)
        except PermissionError:
            scan.unreadable += 1
            continue
        except OSError:  # gone
            scan.vanished += 1
            continue
        scan.processes += 1
        if pid == me:
            continue  # our own descriptors and mappings are never what fills a disk
        held: list[_Held] = []
        for fd, link, target in links:
            if not target.endswith(DELETED):
                continue  # files that still have a name
            try:
                st = os.stat(link)  # follows the link to the open file itself
            except OSError:
                continue
            if st.st_nlink == 0 and stat.S_ISREG(st.st_mode):  # not a file renamed over but linked elsewhere
                mode, fs = platform.fd_access_mode(proc, pid, fd), view.filesystem(pid, fd, st.st_dev)
                held.append((target[: -len(DELETED)], st, int(fd), mode, fs))
        identity: tuple[str, str | None] | None = None
        mapped, also_mapped = _mapped(proc, pid, scan, held)
        for path, st, fd_number, mode, fs in [*held, *mapped]:
            found = scan.file(path, st, fs)
            if fd_number is None and any(holder.pid == pid for holder in found.holders):
                continue  # mapped, and held by a descriptor too: that one is named (and marked mapped)
            ours = view.ours(pid)
            if not found.holders:
                found.namespace_pid = None if ours else pid
            elif ours and found.namespace_pid is not None:  # named first from a container's view:
                found.path, found.namespace_pid = path, None  # this server's name for it instead
            found.confined = found.confined and view.names(pid, path, found.filesystem)
            identity = identity or _identity(pid)
            is_mapped = fd_number is None or (st.st_dev, st.st_ino) in also_mapped
            found.holders.append(Holder(pid, identity[0], identity[1], fd_number, mode, is_mapped))
    return scan


def fd_links(proc: str, pid: int) -> list[tuple[str, str, str]]:
    """``(fd, link, target)`` of each descriptor of process ``pid`` that names a path (pipes, sockets
    and anonymous inodes left out), in descriptor order; ``OSError`` when its descriptors cannot be
    listed (``PermissionError``: another user's process)."""
    fd_dir = os.path.join(proc, str(pid), "fd")
    found = []
    for fd in sorted(os.listdir(fd_dir), key=lambda name: int(name) if name.isdigit() else -1):
        link = os.path.join(fd_dir, fd)
        try:
            target = os.readlink(link)
        except OSError:
            continue
        if target.startswith("/"):
            found.append((fd, link, target))
    return found


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A regular file a process holds open for writing: where it is (or was, when deleted)."""

    path: str
    fd: int
    dev: int  # its filesystem's number in the mount table (``MountView.filesystem``)
    deleted: bool
    device: str = ""  # the kernel's name of its block device ("sda1"), once ``files_written`` named it
    # The path names this file in the server's own view (``MountView.names``, as ``DeletedFile``'s):
    # False puts it outside every root, whatever its path says.
    confined: bool = True


def open_for_writing(proc: str, pid: int, view: MountView) -> list[WrittenFile]:
    """The regular files process ``pid`` has open for writing (per fdinfo), in descriptor order; [] when
    they cannot be read (gone, another user's). ``view``: read once for many processes."""
    try:
        links = fd_links(proc, pid)
    except OSError:
        return []
    written = []
    for fd, link, target in links:
        if "w" not in platform.fd_access_mode(proc, pid, fd):
            continue
        try:
            st = os.stat(link)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            deleted = target.endswith(DELETED) and st.st_nlink == 0
            path = target[: -len(DELETED)] if deleted else target
            fs = view.filesystem(pid, fd, st.st_dev)
            written.append(WrittenFile(path, int(fd), fs, deleted, confined=view.names(pid, path, fs)))
    return written


def _mapped(proc: str, pid: int, scan: Scan, held: list[_Held]) -> tuple[list[_Held], set[_Mapping]]:
    """The deleted files process ``pid`` has mapped, each once, with no descriptor, and which of the
    files it holds by a descriptor (``held``) it has mapped too, by ``(st_dev, st_ino)``. A mapping is
    known by what ``map_files`` reaches; where that needs more privilege than the process's own user has,
    by its maps line's filesystem and inode, which on btrfs can be another subvolume's file of the same
    inode number: then a held file is taken as mapped (no truncation advised, the safe side), and a mapped
    file no descriptor reaches is counted in ``scan`` as not sized."""
    base = os.path.join(proc, str(pid))
    try:
        with open(os.path.join(base, "maps"), "rb") as handle:
            lines = [line for line in handle if line.endswith(b" (deleted)\n")]
    except OSError:
        return [], set()  # gone, or another user's: its descriptors were already counted as unreadable
    by_line: dict[_Mapping, set[_Mapping]] = {}  # (filesystem, inode) as maps gives it: the held files
    for _, st, _, _, fs in held:
        by_line.setdefault((fs, st.st_ino), set()).add((st.st_dev, st.st_ino))
    seen: set[_Mapping] = set()  # files met, by stat
    unsized: set[_Mapping] = set()  # files not reached, by maps line
    found: list[_Held] = []
    also: set[_Mapping] = set()
    for line in lines:
        fields = line.rstrip(b"\n").split(maxsplit=5)
        if len(fields) < 6 or fields[4] == b"0" or not fields[5].startswith(b"/"):
            continue  # anonymous memory, or not a file
        span, perms, _, device, inode, name = fields
        major, _, minor = device.partition(b":")  # in hex: the filesystem's number, not st_dev on btrfs
        try:
            fs, number = os.makedev(int(major, 16), int(minor, 16)), int(inode)
        except ValueError:
            continue  # not a maps line
        try:
            st = os.stat(os.path.join(base, "map_files", os.fsdecode(span)))
        except PermissionError:  # map_files wants CAP_SYS_ADMIN on some kernels
            if (fs, number) in by_line:
                also.update(by_line[(fs, number)])  # sized, and named, through its descriptor
            elif (fs, number) not in unsized:
                unsized.add((fs, number))
                scan.mappings_not_sized += 1
            continue
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            continue  # one mapping per segment: the same file several times
        seen.add(key)
        if any(key in files for files in by_line.values()):
            also.add(key)  # sized, and named, through its descriptor
        elif st.st_nlink == 0 and stat.S_ISREG(st.st_mode):
            mode = "rw" if perms[1:2] == b"w" and perms[3:4] == b"s" else "r"
            found.append((os.fsdecode(name[: -len(DELETED)]), st, None, mode, fs))
    return found, also


def filesystem_of(table: MountTable, dev: int) -> Mount | None:
    """The mount showing the filesystem the mount table numbers ``dev`` (``DeletedFile.filesystem``): its
    whole-filesystem mount (not a bind mount of a subtree) nearest the root, else any (None: not
    mounted in this namespace)."""
    matches = [m for m in table.mounts if m.dev_matches(dev) and table.visible(m)]
    if not matches:
        return None
    return min(matches, key=lambda m: (m.root != "/", len(m.mount_point), m.mount_point))
