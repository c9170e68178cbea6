"""What can be freed, class by class: where each kind of reclaimable file lives and what removing it costs.

Each finder looks only where its class lives (``RootsLayout``: tests point those places at tmpfs in a
private mount namespace) and returns ``Found`` groups of regular files; ``reclaim.build_plan`` turns them
into plan items, counts each inode once and only when every one of its links goes. The finders never
follow a symlink, never cross into another filesystem below a class root, and never write anything.
The facts beside each class (the vendor's own command, the cost to the user, the safety level) are data
of the plan, read by the tool layer and the generated script alike.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from sysmcp import platform

#: Safety levels, from "delete it without a second thought" to "look first".
REGENERABLE = "regenerable cache"
REVIEW = "review"
RISKY = "risky"

CONTAINER_TIMEOUT = 5.0  # seconds a container engine's read-only query may take


@dataclass(frozen=True, slots=True)
class RootsLayout:
    """Where each class lives. The defaults are the real system's places; tests pass their own."""

    apt: bytes = b"/var/cache/apt"
    dnf: bytes = b"/var/cache/dnf"
    yum: bytes = b"/var/cache/yum"
    pacman: bytes = b"/var/cache/pacman/pkg"
    apk: bytes = b"/var/cache/apk"
    log: bytes = b"/var/log"
    journal: tuple[bytes, ...] = (b"/var/log/journal", b"/run/log/journal")
    coredump: tuple[bytes, ...] = (b"/var/lib/systemd/coredump", b"/var/crash")
    core_dirs: tuple[bytes, ...] = (b"/", b"/tmp")  # where stray core files are looked for (not below)
    homes: tuple[bytes, ...] | None = None  # None: every account's home directory that exists
    proc: bytes = b"/proc"
    container_engines: tuple[str, ...] = ("docker", "podman")

    def home_dirs(self) -> tuple[bytes, ...]:
        if self.homes is not None:
            return self.homes
        found: list[bytes] = []
        try:
            entries = pwd.getpwall()
        except OSError:
            entries = []
        for entry in entries:
            home = os.fsencode(entry.pw_dir)
            if home not in found and home not in (b"/", b"") and os.path.isdir(home):
                found.append(home)
        return tuple(found)


@dataclass(slots=True)
class Found:
    """One group of files a finder proposes, before identities and accounting."""

    klass: str
    key: str  # what makes the item id stable within a plan: class and place
    paths: list[tuple[bytes, os.stat_result]]
    command: str | None
    cost: str
    safety: str
    method: str
    action: str = "delete"  # delete | truncate | command (a vendor command only, nothing sysmcp removes)
    note: str | None = None
    holders: list[dict[str, object]] = field(default_factory=list)  # deleted-open files: who holds them
    figure: int | None = None  # bytes from a vendor's own count (container engines), not from the files


Filter = Callable[[bytes], bool]


def regular_files(
    root: bytes, keep: Filter | None = None, *, recurse: bool = True
) -> Iterator[tuple[bytes, os.stat_result]]:
    """Every regular file under ``root`` (``lstat``: symlinks are never followed), on ``root``'s own
    filesystem only; ``keep(name)`` picks by the file's own name."""
    try:
        top = os.lstat(root)
    except OSError:
        return
    if not stat.S_ISDIR(top.st_mode):
        return
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as entries:
                listed = list(entries)
        except OSError:
            continue
        for entry in sorted(listed, key=lambda e: e.name):
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if recurse and st.st_dev == top.st_dev:
                    stack.append(entry.path)
            elif stat.S_ISREG(st.st_mode) and (keep is None or keep(entry.name)):
                yield entry.path, st


def _group(
    klass: str, key: str, files: Sequence[tuple[bytes, os.stat_result]], **facts: object
) -> list[Found]:
    return [Found(klass, key, list(files), **facts)] if files else []  # type: ignore[arg-type]


def package_caches(layout: RootsLayout) -> list[Found]:
    """Downloaded packages a package manager keeps after installing them."""
    found: list[Found] = []
    apt_archives = layout.apt + b"/archives"
    debs = [f for f in regular_files(apt_archives, lambda n: n.endswith(b".deb"))]
    found += _group(
        "package_cache",
        "apt",
        debs,
        command="apt-get clean",
        cost="apt downloads these packages again the next time they are installed",
        safety=REGENERABLE,
        method="sizes of the .deb files in " + apt_archives.decode(errors="replace"),
    )
    bins = [f for f in regular_files(layout.apt, lambda n: n.endswith(b".bin"), recurse=False)]
    found += _group(
        "package_cache",
        "apt-lists",
        bins,
        command="apt-get clean",
        cost="apt rebuilds its package cache on the next apt command (seconds)",
        safety=REGENERABLE,
        method="sizes of apt's *.bin caches",
    )
    for name, root, command in (
        ("dnf", layout.dnf, "dnf clean packages"),
        ("yum", layout.yum, "yum clean packages"),
    ):
        rpms = [f for f in regular_files(root, lambda n: n.endswith(b".rpm"))]
        found += _group(
            "package_cache",
            name,
            rpms,
            command=command,
            cost=f"{name} downloads these packages again the next time they are installed",
            safety=REGENERABLE,
            method="sizes of the .rpm files in " + root.decode(errors="replace"),
        )
    pkgs = [f for f in regular_files(layout.pacman, lambda n: b".pkg.tar" in n)]
    found += _group(
        "package_cache",
        "pacman",
        pkgs,
        command="paccache -r (or pacman -Sc)",
        cost="pacman downloads these packages again; a downgrade needs them from the network",
        safety=REGENERABLE,
        method="sizes of the package files in " + layout.pacman.decode(errors="replace"),
    )
    apks = [f for f in regular_files(layout.apk, lambda n: n.endswith(b".apk"))]
    found += _group(
        "package_cache",
        "apk",
        apks,
        command="apk cache clean",
        cost="apk downloads these packages again the next time they are installed",
        safety=REGENERABLE,
        method="sizes of the .apk files in " + layout.apk.decode(errors="replace"),
    )
    return found


#: Language caches below a home directory: (name, relative place, vendor command, cost).
LANGUAGE_CACHES: tuple[tuple[str, bytes, str | None, str], ...] = (
    ("pip", b".cache/pip", "pip cache purge", "pip downloads or rebuilds wheels again on the next install"),
    ("uv", b".cache/uv", "uv cache clean", "uv downloads packages again; the next sync is slower"),
    ("npm", b".npm/_cacache", "npm cache clean --force", "npm downloads packages again on the next install"),
    ("yarn", b".cache/yarn", "yarn cache clean", "yarn downloads packages again on the next install"),
    ("yarn-berry", b".yarn/berry/cache", "yarn cache clean --mirror", "yarn downloads packages again"),
    ("cargo-registry", b".cargo/registry/cache", None, "cargo downloads crates again on the next build"),
    ("cargo-src", b".cargo/registry/src", None, "cargo unpacks crates again on the next build"),
    ("go-mod", b"go/pkg/mod", "go clean -modcache", "go downloads modules again on the next build"),
    ("go-build", b".cache/go-build", "go clean -cache", "go rebuilds packages on the next build (slower)"),
)


def language_caches(layout: RootsLayout) -> list[Found]:
    """Package caches of language tools in each home directory."""
    found: list[Found] = []
    for home in layout.home_dirs():
        for name, place, command, cost in LANGUAGE_CACHES:
            root = home + b"/" + place
            files = list(regular_files(root))
            found += _group(
                "language_cache",
                f"{name}:{home.decode(errors='replace')}",
                files,
                command=command,
                cost=cost,
                safety=REGENERABLE,
                method="sizes of the files under " + root.decode(errors="replace"),
            )
    return found


def _archived_journal(name: bytes) -> bool:
    return (name.endswith(b".journal") and b"@" in name) or name.endswith(b".journal~")


def journals(layout: RootsLayout) -> list[Found]:
    """Archived journal files only: the active ones are journald's and stay."""
    found: list[Found] = []
    for root in layout.journal:
        files = list(regular_files(root, _archived_journal))
        found += _group(
            "journal",
            root.decode(errors="replace"),
            files,
            command="journalctl --vacuum-size=100M",
            cost="older log entries are gone from journalctl",
            safety=REVIEW,
            method="sizes of archived journal files (*@*.journal, *.journal~)",
            note="journalctl --vacuum-* removes archived files only: run journalctl --rotate first to archive "
            "the active ones, or vacuuming frees less than the journal uses",
        )
    return found


_ROTATED = re.compile(
    rb".*(\.[0-9]+|\.[0-9]+\.(gz|xz|bz2|zst)|\.(gz|xz|bz2|zst|old)|-[0-9]{8}(\.(gz|xz|bz2|zst))?)$", re.DOTALL
)


def rotated_logs(layout: RootsLayout) -> list[Found]:
    """Logs logrotate already set aside (``syslog.1``, ``syslog.2.gz``, ``messages-20260101``)."""
    journal = tuple(j + b"/" for j in layout.journal)
    files = [
        (path, st)
        for path, st in regular_files(layout.log, lambda n: _ROTATED.fullmatch(n) is not None)
        if not path.startswith(journal)
    ]
    return _group(
        "rotated_log",
        layout.log.decode(errors="replace"),
        files,
        command=None,
        cost="these old logs are gone (keep them if an audit or an investigation needs them)",
        safety=REVIEW,
        method="sizes of rotated and compressed logs (*.N, *.gz, *-YYYYMMDD) under "
        + layout.log.decode(errors="replace"),
    )


_CORE = re.compile(rb"core(\.[0-9]+)?")


def core_dumps(layout: RootsLayout) -> list[Found]:
    """Crash dumps: systemd-coredump's and apport's stores, and stray ``core``/``core.N`` files."""
    found: list[Found] = []
    for root in layout.coredump:
        files = list(regular_files(root))
        found += _group(
            "core_dump",
            root.decode(errors="replace"),
            files,
            command="coredumpctl list (to see them first)",
            cost="the crashes can no longer be debugged from these dumps",
            safety=REVIEW,
            method="sizes of the dumps under " + root.decode(errors="replace"),
        )
    places = [*layout.core_dirs, *layout.home_dirs()]
    stray = [
        f
        for place in places
        for f in regular_files(place, lambda n: _CORE.fullmatch(n) is not None, recurse=False)
    ]
    found += _group(
        "core_dump",
        "stray",
        stray,
        command=None,
        cost="the crashes can no longer be debugged from these dumps",
        safety=REVIEW,
        method="sizes of core / core.N files at the top of /, /tmp and home directories",
    )
    return found


def trash(layout: RootsLayout) -> list[Found]:
    """Desktop trash: files moved there free nothing until the trash is emptied."""
    found: list[Found] = []
    for home in layout.home_dirs():
        base = home + b"/.local/share/Trash"
        files = [*regular_files(base + b"/files"), *regular_files(base + b"/info")]
        found += _group(
            "trash",
            home.decode(errors="replace"),
            files,
            command="gio trash --empty",
            cost="the trashed files cannot be restored any more",
            safety=REVIEW,
            method="sizes of the files in " + base.decode(errors="replace") + "/files and /info",
            note="files in the trash still use their space until the trash is emptied",
        )
    return found


_SIZE = re.compile(r"([0-9.]+)\s*([kKMGTP]?)i?B")
_SCALE = {"": 1, "k": 1000, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4, "P": 1000**5}


def _vendor_size(text: str) -> int | None:
    """``1.2GB (50%)`` → 1200000000: the container engines' own decimal figure."""
    match = _SIZE.match(text.strip())
    if match is None:
        return None
    return int(float(match.group(1)) * _SCALE[match.group(2)])


def containers(layout: RootsLayout, timeout: float = CONTAINER_TIMEOUT) -> list[Found]:
    """Build caches and dangling images, from the engine's own read-only ``system df`` (with a timeout)."""
    found: list[Found] = []
    for engine in layout.container_engines:
        binary = shutil.which(engine)
        if binary is None:
            continue
        try:
            done = subprocess.run(
                [binary, "system", "df", "--format", "{{json .}}"],
                capture_output=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode != 0:
            continue
        for line in done.stdout.decode(errors="replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            kind = str(row.get("Type", ""))
            size = _vendor_size(str(row.get("Reclaimable", "")))
            if not size:
                continue
            if kind.lower().startswith("build"):
                command, cost = f"{engine} builder prune", "the next image build starts from scratch (slower)"
            elif kind.lower() == "images":
                command, cost = f"{engine} image prune", "unused images are pulled or built again when needed"
            else:
                continue
            found.append(
                Found(
                    "container",
                    f"{engine}:{kind}",
                    [],
                    command=command,
                    cost=cost,
                    safety=REGENERABLE,
                    method=f"`{engine} system df` (its own decimal figure, rounded)",
                    action="command",
                    figure=size,
                )
            )
    return found


def deleted_open(layout: RootsLayout) -> list[Found]:
    """Deleted files a process still holds open: truncating through ``/proc/PID/fd/N`` frees them now."""
    found: list[Found] = []
    if not platform.has_proc_fd(os.fsdecode(layout.proc)):
        return found  # macOS and the BSDs: no /proc/PID/fd to find them, or to truncate through
    try:
        pids = sorted(int(n) for n in os.listdir(layout.proc) if n.isdigit())
    except OSError:
        return found
    me = os.getpid()
    seen: dict[tuple[int, int], Found] = {}
    for pid in pids:
        if pid == me:
            continue
        fd_dir = layout.proc + b"/" + str(pid).encode() + b"/fd"
        try:
            fds = sorted(os.listdir(fd_dir), key=lambda n: int(n) if n.isdigit() else 0)
        except OSError:
            continue
        for fd in fds:
            link = fd_dir + b"/" + fd
            try:
                target = os.readlink(link)
                if not target.endswith(b" (deleted)") or not target.startswith(b"/"):
                    continue
                st = os.stat(link)
            except OSError:
                continue
            if st.st_nlink != 0 or not stat.S_ISREG(st.st_mode) or st.st_blocks == 0:
                continue
            command = _command_of(layout.proc, pid)
            mode = _fd_mode(layout.proc, pid, fd)
            key = (st.st_dev, st.st_ino)
            holder: dict[str, object] = {"pid": pid, "fd": int(fd), "command": command, "mode": mode}
            if key in seen:
                seen[key].holders.append(holder)
                continue
            writing = "w" in mode
            seen[key] = item = Found(
                "deleted_open",
                f"{st.st_dev}:{st.st_ino}",
                [(link, st)],
                command=None,
                cost="the holder loses the file's content; one still writing goes on at its old offset "
                "(a sparse file)",
                safety=RISKY if writing else REVIEW,
                method="blocks of the open file, through /proc/PID/fd (it has no name left)",
                action="truncate",
                note=(
                    f"restarting {command} (pid {pid}) is the better fix: it reopens its log and the space "
                    "comes back for good"
                )
                if writing
                else f"or restart {command} (pid {pid}), which closes it",
                holders=[holder],
            )
            item.paths = [(link, st)]
            found.append(item)
    return found


def _command_of(proc: bytes, pid: int) -> str:
    try:
        with open(proc + b"/" + str(pid).encode() + b"/comm", "rb") as handle:
            return handle.read().strip().decode(errors="replace")
    except OSError:
        return "?"


def _fd_mode(proc: bytes, pid: int, fd: bytes) -> str:
    try:
        with open(proc + b"/" + str(pid).encode() + b"/fdinfo/" + fd, "rb") as handle:
            for line in handle:
                if line.startswith(b"flags:"):
                    access = int(line.split()[1], 8) & os.O_ACCMODE
                    return {os.O_RDONLY: "r", os.O_WRONLY: "w", os.O_RDWR: "rw"}.get(access, "")
    except (OSError, ValueError, IndexError):
        pass
    return ""


def duplicates(groups: Sequence[Sequence[bytes]]) -> list[Found]:
    """Extra copies of identical files (found by ``find_duplicates``): the first of each group stays."""
    found: list[Found] = []
    for group in groups:
        if len(group) < 2:
            continue
        keep, extras = group[0], group[1:]
        files: list[tuple[bytes, os.stat_result]] = []
        for path in extras:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                files.append((path, st))
        found += _group(
            "duplicate",
            keep.decode(errors="replace"),
            files,
            command=None,
            cost="the extra copies are gone; whoever used them by name must use the kept copy",
            safety=REVIEW,
            method="blocks of the extra copies (identical content, confirmed by find_duplicates)",
            note="or hard-link each extra to " + keep.decode(errors="replace") + " (ln -f) to keep the names",
        )
    return found


CLASSES: dict[str, Callable[[RootsLayout], list[Found]]] = {
    "package_cache": package_caches,
    "language_cache": language_caches,
    "journal": journals,
    "rotated_log": rotated_logs,
    "core_dump": core_dumps,
    "trash": trash,
    "container": containers,
    "deleted_open": deleted_open,
}
"""Every class found by looking in its own places (``duplicate`` and ``grew`` come from elsewhere)."""
