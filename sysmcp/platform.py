"""What this operating system offers sysmcp: the one place that knows, asked at run time.

Why one module: Linux gives sysmcp ``O_PATH``, ``/proc`` and ``/sys``; macOS and the BSDs give none
of them, and native Windows is not POSIX at all. Each tool or filesystem helper asks a question
here (``has_o_path()``, ``has_mountinfo()``, ``fork_is_safe()`` …) and takes its POSIX way when the
answer is no, so nothing fails at import and no ``sys.platform`` check is scattered through the code.

Every question is answered by looking (an attribute of ``os``, a path that can be read), except the
two that cannot be seen from inside a process: whether ``fork`` is safe once threads run, and
whether this is native Windows. Those come from ``sys.platform``, here and nowhere else. Answers are
cheap and are not cached, so a test harness that hides a facility is obeyed wherever it is asked.

This module imports nothing at its top but ``os``, ``sys``, ``contextlib`` and ``functools`` (which
``contextlib`` imports): ``sysmcp.__main__`` asks ``is_native_windows()`` before anything that would
not import on Windows, and every start imports it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable

MOUNTINFO = "/proc/self/mountinfo"  # the mount table with bind-mount roots and device numbers (Linux)
PROC = "/proc"  # where procfs is mounted (tests point the process-reading engines at a fake one)
PROC_SELF_FD = "/proc/self/fd"  # reopen a descriptor by number: how an O_PATH descriptor is read (Linux)
SYS_DEV_BLOCK = "/sys/dev/block"  # major:minor → a block device's sysfs directory (Linux)
CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"  # a container's CPU quota, cgroup v2 (Linux)
SYS_BLOCK = "/sys/block"  # the whole block devices, hardware and virtual (Linux; elsewhere smartctl --scan lists them)
MDSTAT = "/proc/mdstat"  # md RAID arrays (Linux, with the md driver loaded)
SYS_FS_BTRFS = "/sys/fs/btrfs"  # each mounted btrfs by its UUID: its devices and chunk allocation (Linux)
FILE_NR = "/proc/sys/fs/file-nr"  # the system's open files: in use, free, the table's size (Linux)
KMSG = "/dev/kmsg"  # the kernel log, one record per read (Linux; root or dmesg_restrict=0)

WSL_HINT = (
    "sysmcp does not run on native Windows; run it inside WSL instead "
    '(Claude Desktop: {"command": "wsl.exe", "args": ["uvx", "sysmcp"]}), see the README.'
)


def has_o_path() -> bool:
    """``os.O_PATH`` exists: a descriptor that names a file without opening it (no read, no device
    side effects, only search permission on directories). Linux only; elsewhere open ``O_RDONLY``
    with ``O_NONBLOCK`` and check the type on the descriptor before reading."""
    return hasattr(os, "O_PATH")


def _readable(path: str) -> bool:
    try:
        return os.access(path, os.R_OK)
    except (OSError, ValueError):
        return False


def has_mountinfo() -> bool:
    """``/proc/self/mountinfo`` can be read. Without it the mount table comes from psutil
    (``getfsstat`` on macOS and the BSDs), with neither bind-mount roots nor device numbers."""
    return _readable(MOUNTINFO)


def has_proc_fd(proc: str = PROC) -> bool:
    """``/proc/self/fd`` lists this process's descriptors (so an ``O_PATH`` one can be reopened, and the
    open and deleted files of processes can be read); ``proc`` is where procfs is mounted."""
    return os.path.isdir(PROC_SELF_FD if proc == PROC else os.path.join(proc, "self", "fd"))


def descriptors_in_use() -> int | None:
    """How many descriptors this process holds now (``/proc/self/fd``, Linux), or None when they cannot
    be counted: no /proc, or no descriptor left to list it. Not ``/dev/fd``: on FreeBSD without fdescfs
    it shows 0, 1 and 2 whatever is open, and a count too low would read our limit as a file's error."""
    try:
        return len(os.listdir(PROC_SELF_FD)) - 1  # the listing's own descriptor is in it
    except OSError:
        return None


def open_files_in_system() -> tuple[int, int] | None:
    """The system's table of open files: (in use, its size), from ``/proc/sys/fs/file-nr`` (Linux);
    None elsewhere, or when it cannot be read."""
    try:
        with open(FILE_NR, "rb") as handle:
            allocated, _, size = handle.read().split()
        return int(allocated), int(size)
    except (OSError, ValueError):
        return None


def fd_access_mode(proc: str | bytes, pid: int, fd: str | bytes) -> str:
    """A descriptor's access mode from Linux's ``/proc/PID/fdinfo/FD`` octal ``flags`` (lsof's r/w/rw),
    "" where there is no fdinfo to read (macOS, the BSDs, a process gone)."""
    try:
        access = int(_fdinfo(proc, pid, fd, b"flags:"), 8) & os.O_ACCMODE
    except ValueError:
        return ""
    return {os.O_RDONLY: "r", os.O_WRONLY: "w", os.O_RDWR: "rw"}.get(access, "")


def fd_mount_id(proc: str | bytes, pid: int | str, fd: str | bytes) -> int | None:
    """The id of the mount a descriptor's file was opened through (Linux's fdinfo ``mnt_id``, as
    mountinfo numbers its mounts), None where there is none to read."""
    found = _fdinfo(proc, pid, fd, b"mnt_id:")
    return int(found) if found.isdigit() else None


def _fdinfo(proc: str | bytes, pid: int | str, fd: str | bytes, key: bytes) -> bytes:
    """The value of ``key`` in ``/proc/PID/fdinfo/FD``, b"" where it cannot be read."""
    path = os.path.join(os.fsencode(proc), str(pid).encode(), b"fdinfo", os.fsencode(fd))
    try:
        with open(path, "rb") as handle:
            for line in handle:
                if line.startswith(key):
                    return line[len(key) :].strip()
    except OSError:
        pass
    return b""


def has_process_io_counters() -> bool:
    """psutil reads per-process I/O counters here (Linux, Windows, the BSDs; not macOS). psutil is
    imported only when asked, so this module still imports nothing a native Windows start would not."""
    import psutil

    return hasattr(psutil.Process, "io_counters")


def has_sys_dev_block(path: str = SYS_DEV_BLOCK) -> bool:
    """``/sys/dev/block`` (or ``path``, its stand-in in tests) is there, so a mount's block device can
    be checked (network block device? loop device backed by a file on a network mount?). Without it
    those checks are skipped."""
    return os.path.isdir(path)


def has_cgroup_cpu_max() -> bool:
    """A cgroup v2 CPU quota file can be read (how many CPUs a container may really use)."""
    return _readable(CGROUP_CPU_MAX)


def advise_sequential(fd: int) -> None:
    """Tell the kernel ``fd`` will be read once from start to end (a bigger read-ahead), where it
    takes such advice (``posix_fadvise``: Linux, FreeBSD; macOS reads ahead by itself). Advice only:
    failures are ignored."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    with contextlib.suppress(OSError):
        advise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)


def fork_is_safe() -> bool:
    """``os.fork`` in a process that already runs threads is safe for a child that only walks and exits.

    True on Linux only. macOS and the BSDs document fork after threads as unsafe (their system
    libraries keep locks and state that a child of a threaded parent may find inconsistent), and
    Windows has no fork: work that would fork stays in one process there.
    """
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def can_make_mount_namespaces() -> bool:
    """This process may make a private mount namespace and bind-mount in it: Linux, as root (the
    capability CAP_SYS_ADMIN; a user namespace would not see the real filesystem's hidden files)."""
    return sys.platform.startswith("linux") and os.geteuid() == 0


def bind_mount_privately(source: str, target: str) -> None:
    """In a process about to look and exit: leave the mount namespace shared with every other process
    for a private copy (``unshare(CLONE_NEWNS)``, then ``mount --make-rprivate /``), and bind-mount
    ``source`` at ``target`` there, not recursively, so the mounts below ``source`` are not on the
    copy and what they hide shows. Nothing any other process sees changes. Raises OSError."""
    import ctypes
    import ctypes.util

    def check(result: int, what: str) -> None:
        if result != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno), what)

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    check(libc.unshare(0x00020000), "unshare(CLONE_NEWNS)")  # os.CLONE_NEWNS from Python 3.12 on
    ms_bind, ms_rec, ms_private, ms_rdonly, ms_remount = 4096, 16384, 1 << 18, 1, 32
    steps = (
        (b"none", b"/", ms_rec | ms_private),
        (os.fsencode(source), os.fsencode(target), ms_bind),
        (b"none", os.fsencode(target), ms_remount | ms_bind | ms_rdonly),
    )
    for src, dst, flags in steps:
        check(libc.mount(src, dst, None, flags, None), dst.decode(errors="replace"))


@functools.cache
def _rename_call() -> Callable[[int, bytes, int, bytes], int] | None:
    """What ``rename_noreplace`` needs from the C library, looked up once (None: not offered here).

    Linux: ``renameat2(…, RENAME_NOREPLACE)`` (glibc 2.28, kernel 3.15); macOS: ``renameatx_np(…,
    RENAME_EXCL)`` (10.12). Either returns 0 or -1 with errno set; elsewhere None."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        noreplace, native = 1, libc.renameat2
    elif sys.platform == "darwin" and hasattr(libc, "renameatx_np"):
        noreplace, native = 4, libc.renameatx_np  # RENAME_EXCL
    else:
        return None
    native.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    native.restype = ctypes.c_int

    def call(src_dir: int, src: bytes, dst_dir: int, dst: bytes) -> int:
        if native(src_dir, src, dst_dir, dst, noreplace) == 0:
            return 0
        return ctypes.get_errno()

    return call


def rename_noreplace(src_dir: int, src: bytes, dst_dir: int, dst: bytes) -> bool:
    """Rename ``src`` (relative to ``src_dir``) to ``dst`` (relative to ``dst_dir``) only if nothing is
    at ``dst``: atomically where the kernel offers it (``renameat2(RENAME_NOREPLACE)`` on Linux,
    ``renameatx_np(RENAME_EXCL)`` on macOS; returns True). Elsewhere returns False having done nothing:
    the caller then checks that ``dst`` is free and renames, a check and an act in two steps.
    Raises OSError (``FileExistsError`` when ``dst`` is taken)."""
    call = _rename_call()
    if call is None:
        return False
    import errno

    error = call(src_dir, src, dst_dir, dst)
    if error in (errno.ENOSYS, errno.EINVAL):  # a kernel or filesystem without the flag
        return False
    if error:
        raise OSError(error, os.strerror(error))
    return True


def rename_exclusive(src_dir: int, src: bytes, dst_dir: int, dst: bytes) -> None:
    """Rename ``src`` (relative to ``src_dir``) to ``dst`` (relative to ``dst_dir``) only if nothing is
    at ``dst``; raises ``FileExistsError`` if something is. Atomic where ``rename_noreplace`` is; elsewhere
    a look (``lstat``: a dangling symlink is something) then a rename, so a name taken between the two is
    replaced. Why one place: the history store's and reclaim's renames aside must never replace a file,
    and both need the same fallback where the kernel cannot refuse for them."""
    if rename_noreplace(src_dir, src, dst_dir, dst):
        return
    import errno

    try:
        os.stat(dst, dir_fd=dst_dir, follow_symlinks=False)
    except FileNotFoundError:
        os.rename(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
        return
    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fsdecode(dst))


def has_waitid() -> bool:
    """``os.waitid`` exists (Linux, the BSDs; macOS from Python 3.13): whether a child has exited can be
    asked without reaping it, so its process group id stays its own until it is killed."""
    return hasattr(os, "waitid")


def is_macos() -> bool:
    """macOS (Darwin): APFS volumes, ``/System/Volumes``, ``getfsstat``."""
    return sys.platform == "darwin"


def is_native_windows() -> bool:
    """Python for Windows itself (not WSL, which is Linux): sysmcp refuses to start there."""
    return sys.platform == "win32"


def missing_facilities() -> list[str]:
    """What this system lacks of what sysmcp would use on Linux, one plain sentence each (empty on
    Linux with /proc and /sys): logged at start-up so an operator knows which checks are skipped."""
    facilities: tuple[tuple[Callable[[], bool], str], ...] = (
        (has_o_path, "no O_PATH: directories are opened for reading on the way (read permission needed)"),
        (has_mountinfo, "no /proc/self/mountinfo: the mount table comes from psutil, re-read on a timer"),
        (has_proc_fd, "no /proc/self/fd: files are reopened by name with identity checks"),
        (has_sys_dev_block, "no /sys/dev/block: block devices are not checked for network or loop backing"),
        (has_cgroup_cpu_max, "no cgroup v2 cpu.max: no container CPU quota is applied"),
        (fork_is_safe, "fork is not safe here: directory walks use one process"),
    )
    return [sentence for present, sentence in facilities if not present()]


def state_directory(environ: dict[str, str] | None = None) -> str:
    """Where sysmcp keeps its history: ``$XDG_STATE_HOME/sysmcp`` (default ``~/.local/state/sysmcp``)
    on Linux and the BSDs, ``~/Library/Application Support/sysmcp`` on macOS."""
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    if is_macos():
        return os.path.join(home, "Library", "Application Support", "sysmcp")
    base = env.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
    return os.path.join(base, "sysmcp")


_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "i686": 289, "armv7l": 314}  # syscall numbers (Linux)


def idle_priority() -> list[str]:
    """Lower this process to idle CPU (nice 19) and, on Linux, idle I/O priority (``ioprio_set`` with
    class IDLE, what ``ionice -c3`` does): a scheduled snapshot never competes with real work. Returns
    what could not be done, one phrase each (advice only: nothing here fails)."""
    missing = []
    try:
        os.nice(19 - os.nice(0))
    except OSError:
        missing.append("nice")
    number = _IOPRIO_SET.get(os.uname().machine) if sys.platform.startswith("linux") else None
    if number is None:
        return [*missing, "idle I/O priority"]
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(number, 1, 0, 3 << 13) != 0:  # IOPRIO_WHO_PROCESS, this process, IDLE class
            missing.append("idle I/O priority")
    except (OSError, AttributeError):
        missing.append("idle I/O priority")
    return missing


def can_compare_xattrs() -> bool:
    """Whether this Python can read a file's extended attributes and ACLs (``os.listxattr``): Linux's can,
    macOS' cannot. Where it cannot, two files' ACLs cannot be shown to match."""
    return hasattr(os, "listxattr")


def fs_ioc_getflags(machine: str, long_size: int) -> int:
    """``FS_IOC_GETFLAGS``, ``_IOR('f', 1, long)``, as the kernel of ``machine`` (``uname -m``) numbers it
    for a process whose ``long`` is ``long_size`` bytes (a 32-bit process on a 64-bit kernel asks with 4).

    Why per machine: ``_IOC`` packs the direction, the size, the type and the number, and not every
    architecture packs them alike. Most (x86, arm, riscv, s390, loongarch: ``asm-generic/ioctl.h``) give
    the size 14 bits from bit 16 and the direction 2 bits from bit 30, reading being 2: 0x80086601 on
    x86_64. Alpha, MIPS, PowerPC and SPARC (and sw_64) give the size 13 bits and the direction 3 bits from
    bit 29, reading being 2 there too: 0x40086601 on ppc64 and mips64, 0x40046601 with a 4-byte long.
    PA-RISC keeps the generic layout but numbers reading 1: 0x40046601. The wrong number is ENOTTY (or
    another ioctl), and no flag would ever be seen."""
    if machine.startswith(("alpha", "mips", "ppc", "powerpc", "sparc", "sw_64")):
        read, direction_shift = 2, 29
    elif machine.startswith("parisc"):
        read, direction_shift = 1, 30
    else:
        read, direction_shift = 2, 30
    return (read << direction_shift) | (long_size << 16) | (ord("f") << 8) | 1


#: ``BTRFS_IOC_INO_LOOKUP``, ``_IOWR(0x94, 18, struct btrfs_ioctl_ino_lookup_args)`` (4,096 bytes): one
#: number on every architecture, for reading and writing is 3 from bit 30 where ``asm-generic/ioctl.h``
#: rules and 6 from bit 29 on Alpha, MIPS, PowerPC and SPARC (see ``fs_ioc_getflags``): the same bits.
BTRFS_IOC_INO_LOOKUP = 0xD0009412


def btrfs_subvolume_id(fd: int) -> int | None:
    """The id of the btrfs subvolume that holds the directory open as ``fd``: the one question
    ``BTRFS_IOC_INO_LOOKUP`` answers without privilege (tree 0, inode 256); None off btrfs."""
    import struct

    try:
        import fcntl
    except ImportError:
        return None
    args = bytearray(4096)
    struct.pack_into("=QQ", args, 0, 0, 256)
    try:
        fcntl.ioctl(fd, BTRFS_IOC_INO_LOOKUP, args, True)
    except OSError:  # ENOTTY: not btrfs
        return None
    tree: int = struct.unpack_from("=Q", args, 0)[0]
    return tree


#: ``BTRFS_IOC_DEV_INFO``, ``_IOWR(0x94, 30, struct btrfs_ioctl_dev_info_args)`` (4,096 bytes): one number on
#: every architecture, as ``BTRFS_IOC_INO_LOOKUP`` is.
BTRFS_IOC_DEV_INFO = 0xD000941E


def btrfs_device_space(fd: int, devid: int) -> tuple[int, int, str] | None:
    """(size, allocated, path) of device ``devid`` of the btrfs whose directory is open as ``fd``: the
    bytes btrfs uses of it (less than its block device after ``btrfs filesystem resize`` shrank it), the
    bytes its chunks take there, and the device's path ('' for a missing one). ``BTRFS_IOC_DEV_INFO``
    asks no privilege. None off btrfs, or for a devid the filesystem has not."""
    import struct

    try:
        import fcntl
    except ImportError:
        return None
    args = bytearray(4096)
    struct.pack_into("=Q", args, 0, devid)  # a zero uuid: the kernel finds the device by its id alone
    try:
        fcntl.ioctl(fd, BTRFS_IOC_DEV_INFO, args, True)
    except OSError:  # ENOTTY: not btrfs; ENODEV: no such device
        return None
    allocated, size = struct.unpack_from("=QQ", args, 24)  # after devid (8) and uuid (16)
    path = bytes(args[3072:]).split(b"\0", 1)[0]  # the last 1,024 bytes
    return size, allocated, os.fsdecode(path)


#: The flags that keep a file from being removed, renamed, emptied or linked to: Linux's ``chattr +i`` /
#: ``+a`` (``FS_IMMUTABLE_FL``, ``FS_APPEND_FL``, which ``statx`` reports as ``STATX_ATTR_IMMUTABLE`` and
#: ``STATX_ATTR_APPEND``: the same bits); the BSDs and macOS give them in ``st_flags`` (``chflags
#: uchg,sappnd`` …).
_LONG = 8 if sys.maxsize > 2**32 else 4  # sizeof(long) in this process, which the ioctl's number carries
_FS_IMMUTABLE_FL, _FS_APPEND_FL = 0x10, 0x20
_ST_IMMUTABLE, _ST_APPEND = 0x2 | 0x20000, 0x4 | 0x40000  # UF_IMMUTABLE|SF_IMMUTABLE, UF_APPEND|SF_APPEND
_AT_FDCWD, _AT_SYMLINK_NOFOLLOW, _AT_EMPTY_PATH = -100, 0x100, 0x1000
_STATX_TYPE, _STATX_INO = 0x1, 0x100
_STATX_SIZE = 256  # sizeof(struct statx), its spare fields included


def _flag(immutable: int, append: int) -> str | None:
    return "immutable" if immutable else "append_only" if append else None


@functools.cache
def _statx_call() -> Callable[[int, bytes, int], tuple[int, int, int, int, int]] | None:
    """Linux's ``statx`` from the C library (glibc 2.28 on), looked up once; None where there is none.

    The call returns ``(st_dev, st_ino, st_mode, stx_attributes, stx_attributes_mask)`` of ``name``
    relative to a directory descriptor (``flags``: ``AT_SYMLINK_NOFOLLOW``, ``AT_EMPTY_PATH``), or
    raises OSError."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    native = getattr(libc, "statx", None)
    if native is None:
        return None
    native.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    native.restype = ctypes.c_int

    def call(dir_fd: int, name: bytes, flags: int) -> tuple[int, int, int, int, int]:
        buffer = ctypes.create_string_buffer(_STATX_SIZE)
        if native(dir_fd, name, flags, _STATX_TYPE | _STATX_INO, buffer) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))
        raw = buffer.raw
        number = functools.partial(int.from_bytes, byteorder=sys.byteorder)
        # struct statx: stx_attributes at 8, stx_mode at 28, stx_ino at 32, stx_attributes_mask at 56,
        # stx_dev_major and stx_dev_minor at 136 and 140
        dev = os.makedev(number(raw[136:140]), number(raw[140:144]))
        return dev, number(raw[32:40]), number(raw[28:30]), number(raw[8:16]), number(raw[56:64])

    return call


def protection_at(dir_fd: int | None, name: bytes, expect: os.stat_result) -> str | None:
    """``"immutable"`` or ``"append_only"`` when ``name`` (relative to ``dir_fd``, or a path; ``b""``:
    ``dir_fd`` itself), still the regular file or directory ``expect`` (its device and inode), carries
    that flag (lsattr's ``i`` or ``a``; chflags' ``uchg``/``schg``, ``uappnd``/``sappnd``), else None;
    None too when it is anything else now, or where the filesystem keeps no such flags. Someone set it on
    purpose: a file so marked is never removed, emptied or replaced, and the kernel would refuse it
    (EPERM) part way anyway.

    Why never an open where it can be helped: an open of a name swapped for a device or a FIFO after the
    look has side effects (a tape rewinds, a writer waiting on the FIFO goes on), and an open of the file
    itself breaks a lease (Samba's oplocks). The BSDs and macOS give the flags in ``st_flags``; Linux's
    ``statx`` gives them in ``stx_attributes`` where the filesystem says it reports them
    (``stx_attributes_mask``). Only where neither can tell is the file opened, for ``FS_IOC_GETFLAGS``:
    pinned first with ``O_PATH`` (nothing opened) and reopened through ``/proc/self/fd`` once it is the
    expected regular file or directory, or, without ``O_PATH``, opened ``O_NONBLOCK|O_NOCTTY`` and
    looked at on the descriptor before the ioctl."""
    import stat

    if not (stat.S_ISREG(expect.st_mode) or stat.S_ISDIR(expect.st_mode)):
        return None
    expected = (expect.st_dev, expect.st_ino)
    flags = getattr(expect, "st_flags", None)
    if flags is not None:  # the BSDs and macOS: a look, no open
        try:
            now: os.stat_result = (
                os.fstat(dir_fd)
                if not name and dir_fd is not None
                else os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            )
        except OSError:
            return None
        now_flags: int = getattr(now, "st_flags", 0)
        if (now.st_dev, now.st_ino) != expected:
            return None
        return _flag(now_flags & _ST_IMMUTABLE, now_flags & _ST_APPEND)
    looked = _statx_at(dir_fd, name)
    if looked is not None:
        dev, ino, mode, attributes, supported = looked
        if (dev, ino) != expected or stat.S_IFMT(mode) != stat.S_IFMT(expect.st_mode):
            return None
        if supported & (_FS_IMMUTABLE_FL | _FS_APPEND_FL) == _FS_IMMUTABLE_FL | _FS_APPEND_FL:
            return _flag(attributes & _FS_IMMUTABLE_FL, attributes & _FS_APPEND_FL)
    return _ioctl_flags(dir_fd, name, expect)


def _statx_at(dir_fd: int | None, name: bytes) -> tuple[int, int, int, int, int] | None:
    """``_statx_call`` of ``name`` never following a symlink; None where ``statx`` cannot be asked (none
    in the C library, ENOSYS from a kernel before 4.11, EPERM from a seccomp filter that does not know
    it) or ``name`` cannot be looked at (then the open cannot either)."""
    call = _statx_call()
    if call is None:
        return None
    flags = _AT_SYMLINK_NOFOLLOW | (_AT_EMPTY_PATH if not name else 0)
    try:
        return call(_AT_FDCWD if dir_fd is None else dir_fd, name, flags)
    except OSError:
        return None


def _ioctl_flags(dir_fd: int | None, name: bytes, expect: os.stat_result) -> str | None:
    """``FS_IOC_GETFLAGS`` of ``name`` (as ``protection_at``), read on a descriptor that is the expected
    regular file or directory before anything is asked of it; None where it cannot be read."""
    import stat

    try:
        import fcntl
    except ImportError:
        return None
    safe = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    pin = has_o_path() and has_proc_fd()
    try:
        if not name and dir_fd is not None:
            fd = os.dup(dir_fd)
        else:
            fd = os.open(name, (os.O_PATH | os.O_CLOEXEC if pin else safe) | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        now = os.fstat(fd)
        if not (stat.S_ISREG(now.st_mode) or stat.S_ISDIR(now.st_mode)):
            return None
        if (now.st_dev, now.st_ino) != (expect.st_dev, expect.st_ino):
            return None
        if pin:  # the pinned inode itself, opened: a name swapped since cannot be it
            pinned, fd = fd, os.open(f"{PROC_SELF_FD}/{fd}", safe)
            os.close(pinned)
        number = fs_ioc_getflags(os.uname().machine, _LONG)
        got = fcntl.ioctl(fd, number, bytes(_LONG))
    except OSError:  # ENOTTY, EOPNOTSUPP: a filesystem without such flags
        return None
    finally:
        os.close(fd)
    value = int.from_bytes(got[:4], sys.byteorder)  # the kernel reads and writes an int
    return _flag(value & _FS_IMMUTABLE_FL, value & _FS_APPEND_FL)
