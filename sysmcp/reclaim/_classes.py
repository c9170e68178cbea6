"""What can be freed, class by class: where each kind of reclaimable file lives and what removing it costs.

Each finder looks only where its class lives (``RootsLayout``: tests point those places at tmpfs in a
private mount namespace) and returns ``Proposal`` groups of regular files; ``reclaim.build_plan`` turns them
into plan items, counts each inode once and only when every one of its links goes. The finders never
follow a symlink, never cross into another filesystem below a class root, and never write anything.
The facts beside each class (the vendor's own command, the cost to the user, the safety level) are data
of the plan, read by the tool layer and the generated script alike.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import re
import stat
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field

from sysmcp import platform
from sysmcp.engine.containers import ContainersRequest, survey
from sysmcp.engine.faults import EngineError, Unavailable
from sysmcp.engine.opens import extended_attributes, open_path
from sysmcp.engine.paths import escaped, shell_word
from sysmcp.engine.procs import scan_processes

#: Safety levels, from "delete it without a second thought" to "look first".
REGENERABLE = "regenerable cache"
REVIEW = "review"
RISKY = "risky"

#: The class whose files have no name left: reached (and scoped) through their holders' descriptors.
HELD = "deleted_open"

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
    homes: tuple[bytes, ...] | None = None  # None: every home directory found (``home_dirs``)
    #: Where home directories live whether or not an account lists them (sssd does not enumerate network
    #: accounts; a restored home may have no passwd entry): each directory directly below is looked in.
    home_parents: tuple[bytes, ...] = (b"/home", b"/Users")
    proc: bytes = b"/proc"
    container_engines: tuple[str, ...] = ("docker", "podman")  # the commands asked where no socket is
    container_socket: str | None = None  # None: the engine's socket where it usually is
    #: The plan's scope (real paths; None: everything): a place outside it is neither listed nor looked
    #: into, and one holding a root of it is walked from that root down (``starts``).
    scope: tuple[bytes, ...] | None = None

    def __post_init__(self) -> None:
        """The system places by their real paths, as homes are (macOS: /var -> /private/var): below
        them, ``regular_files`` follows no symlink, and acting follows none on the way."""
        for name in ("apt", "dnf", "yum", "pacman", "apk", "log"):
            object.__setattr__(self, name, os.path.realpath(getattr(self, name)))
        for name in ("journal", "coredump", "core_dirs"):
            object.__setattr__(self, name, tuple(os.path.realpath(p) for p in getattr(self, name)))

    def starts(self, place: bytes, *, recurse: bool = True) -> list[bytes]:
        """Where a look at ``place`` may start: the place itself inside the scope; below it, when the
        look goes down (``recurse``), each root of the scope inside the place; else nowhere."""
        if self.scope is None or within_scope(place, self.scope):
            return [place]
        below = place.rstrip(b"/") + b"/"
        return [root for root in self.scope if recurse and root.startswith(below)]

    def files(
        self,
        places: Iterable[bytes],
        keep: Filter | None = None,
        *,
        recurse: bool = True,
        skip: tuple[bytes, ...] = (),
    ) -> list[tuple[bytes, os.stat_result]]:
        """``regular_files`` of the places, as far as they lie inside the scope (``starts``)."""
        starts = [start for place in places for start in self.starts(place, recurse=recurse)]
        return regular_files(starts, keep, recurse=recurse, skip=skip)

    def _toward_scope(self, parent: bytes) -> list[bytes]:
        """The directories directly below ``parent`` that lead down to a root of the scope, known from
        the scope's names alone (``parent`` itself is not listed)."""
        below = parent.rstrip(b"/") + b"/"
        return [
            below + root[len(below) :].split(b"/")[0] for root in self.scope or () if root.startswith(below)
        ]

    def home_dirs(self) -> tuple[bytes, ...]:
        """The passwd homes that exist, and every directory directly below ``home_parents`` and below the
        parents of people's homes (never ``/``; a service's home such as /var/lib/postgresql makes no
        parent): each directory once."""
        if self.homes is not None:
            return self.homes
        try:
            accounts = pwd.getpwall()
        except OSError:
            accounts = []
        homes = [os.fsencode(a.pw_dir) for a in accounts if a.pw_dir not in ("", "/")]
        parents = [*self.home_parents]
        parents += [os.path.dirname(os.fsencode(a.pw_dir)) for a in accounts if _person(a)]
        for parent in dict.fromkeys(p for p in parents if p not in (b"/", b"")):
            if self.scope is not None and not within_scope(
                parent, self.scope
            ):  # listed only inside the scope:
                homes += self._toward_scope(parent)  # else the directories on the way down to a root
                continue
            with contextlib.suppress(OSError), os.scandir(parent) as entries:
                homes += sorted(e.path for e in entries if e.is_dir(follow_symlinks=False))
        found: dict[tuple[int, int], bytes] = {}  # by identity: /home may be a symlink to /usr/home
        for home in (h for h in homes if self.starts(h)):  # never looked at outside the scope
            try:
                st = os.stat(home)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):  # by its real path: below it, ``regular_files`` follows no symlink
                found.setdefault((st.st_dev, st.st_ino), os.path.realpath(home))
        return tuple(found.values())


FIRST_PERSON_UID = 1000  # login.defs' UID_MIN on Linux; macOS starts at 501, under /Users anyway
_NOT_SHELLS = frozenset({"nologin", "false", "true", "sync", "shutdown", "halt"})


def _person(account: pwd.struct_passwd) -> bool:
    """A person's account, not a service's: a user id past the system range and a shell to log in with."""
    shell = os.path.basename(account.pw_shell)
    return account.pw_uid >= FIRST_PERSON_UID and bool(shell) and shell not in _NOT_SHELLS


@dataclass(slots=True)
class Proposal:
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
    keep: tuple[bytes, os.stat_result] | None = None  # duplicates: the copy that stays
    no_link: str | None = None  # duplicates: why the extras cannot become hard links to it (None: they can)

    @property
    def held(self) -> bool:
        """A deleted file held open: truncated through its holder's ``/proc/PID/fd/N``, it has no name."""
        return self.klass == HELD


Filter = Callable[[bytes], bool]


def within_scope(path: bytes, scope: Sequence[bytes]) -> bool:
    """Whether ``path`` is one of the plan's scope roots or below one (whole components compared)."""
    return any(root == b"/" or path == root or path.startswith(root.rstrip(b"/") + b"/") for root in scope)


def regular_files(
    roots: Iterable[bytes], keep: Filter | None = None, *, recurse: bool = True, skip: tuple[bytes, ...] = ()
) -> list[tuple[bytes, os.stat_result]]:
    """Every regular file under each of ``roots`` (``lstat``: symlinks are never followed), on that
    root's own filesystem only, but below ``skip`` (another class's places); ``keep(name)`` picks by the
    file's own name."""
    return [
        (path, st) for root in roots for path, st in _below(root, keep, recurse) if not path.startswith(skip)
    ]


#: How a directory is opened to be listed: only a directory, never through a symlink.
_LIST = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: The most directory descriptors one walk holds at once, however deep the tree: a walk deeper than this
#: closes its outer directories' and reaches each again through its child's '..' (``_Level.reopen``).
WALK_DESCRIPTORS = 64


@dataclass
class _Level:
    """A directory being walked: its path, its descriptor (None while a deeper walk has it closed), the
    subdirectories still to go into (popped in name order), and what it is (device, inode)."""

    path: bytes
    fd: int | None
    pending: list[tuple[bytes, os.stat_result]]
    dev: int
    ino: int

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def reopen(self, child: _Level) -> None:
        """This directory again through ``child``'s '..', only if it is still the inode it was; else its
        subdirectories still to go are left (moved away during the walk: where they are now is unknown)."""
        try:
            fd = os.open("..", _LIST, dir_fd=child.fd) if child.fd is not None else None
        except OSError:
            fd = None
        if fd is not None:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) == (self.dev, self.ino):
                self.fd = fd
                return
            os.close(fd)
        self.pending.clear()


def _below(
    root: bytes, keep: Filter | None, recurse: bool
) -> Generator[tuple[bytes, os.stat_result], None, None]:
    """The regular files under ``root``, depth first. Why descriptors: a user who owns a place a class walks
    (their caches, their trash) could swap a directory for a symlink after it was looked at and before it
    was listed, and a walk by name would list wherever that leads, naming files outside the scope. ``root``
    is reached from ``/`` without following a symlink (one on its way: never followed, as a home's
    ``~/.cache`` pointing elsewhere), and each directory below is opened relative to its parent's
    descriptor with ``O_NOFOLLOW`` and must be the directory its parent's listing showed. Why a budget of
    descriptors: the user who owns the place decides how deep it goes, and one descriptor a level would
    let them spend all the server's."""
    try:
        fd = open_path(os.fsdecode(root), directory=True)
    except (OSError, ValueError):
        return
    top = os.fstat(fd)
    chain: list[_Level] = []  # the directories being walked, outermost first
    current: tuple[bytes, int, os.stat_result] | None = (root, fd, top)
    try:
        while True:
            if current is not None:
                path, here_fd, here = current
                pending: list[tuple[bytes, os.stat_result]] = []
                chain.append(_Level(path, here_fd, pending, here.st_dev, here.st_ino))
                current = None
                if len(chain) > WALK_DESCRIPTORS:
                    chain[-WALK_DESCRIPTORS - 1].close()
                for name, st in _listed(here_fd):
                    if stat.S_ISDIR(st.st_mode):
                        if recurse and st.st_dev == top.st_dev:
                            pending.append((name, st))
                    elif stat.S_ISREG(st.st_mode) and (keep is None or keep(name)):
                        yield os.path.join(path, name), st
                pending.reverse()  # popped in name order
            if not chain:
                return
            level = chain[-1]
            if not level.pending or level.fd is None:
                chain.pop()
                if chain and chain[-1].fd is None:
                    chain[-1].reopen(level)
                level.close()
                continue
            name, st = level.pending.pop()
            try:
                child = os.open(name, _LIST, dir_fd=level.fd)
            except OSError:  # gone, or a symlink now (ELOOP)
                continue
            now = os.fstat(child)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):  # another directory swapped in
                os.close(child)
                continue
            current = (os.path.join(level.path, name), child, now)
    finally:
        if current is not None:
            os.close(current[1])
        for level in chain:
            level.close()


def _listed(fd: int) -> list[tuple[bytes, os.stat_result]]:
    """The entries of the open directory ``fd`` by name (bytes order), each with its ``lstat``."""
    try:
        with os.scandir(fd) as entries:
            listed = list(entries)
    except OSError:
        return []
    found = []
    for entry in listed:
        try:
            found.append((os.fsencode(entry.name), entry.stat(follow_symlinks=False)))
        except OSError:
            continue
    return sorted(found, key=lambda named: named[0])


def _shown(path: bytes) -> str:
    return path.decode(errors="replace")


def _suffix(*endings: bytes) -> Filter:
    return lambda name: name.endswith(endings)


def package_caches(layout: RootsLayout) -> list[Proposal]:
    """Downloaded packages a package manager keeps after installing them."""

    def packages(name: str, root: bytes, command: str, keep: Filter, again: str = "") -> Proposal:
        cost = f"{name} downloads these packages again the next time they are installed{again}"
        method = f"sizes of the package files in {_shown(root)}"
        return Proposal("package_cache", name, layout.files([root], keep), command, cost, REGENERABLE, method)

    return [
        packages("apt", layout.apt + b"/archives", "apt-get clean", _suffix(b".deb")),
        Proposal(
            "package_cache",
            "apt-lists",
            layout.files([layout.apt], _suffix(b".bin"), recurse=False),
            "apt-get clean",
            "apt rebuilds its package cache on the next apt command (seconds)",
            REGENERABLE,
            "sizes of apt's *.bin caches",
        ),
        packages("dnf", layout.dnf, "dnf clean packages", _suffix(b".rpm")),
        packages("yum", layout.yum, "yum clean packages", _suffix(b".rpm")),
        packages(
            "pacman",
            layout.pacman,
            "paccache -r (or pacman -Sc)",
            lambda n: b".pkg.tar" in n,
            "; a downgrade needs them from the network",
        ),
        packages("apk", layout.apk, "apk cache clean", _suffix(b".apk")),
    ]


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


def taken(layout: RootsLayout) -> Callable[[bytes], bool]:
    """Whether a class takes the file at a path: one below the directories the classes take files from
    (a duplicate's copy there goes with its class's item, or with the tool that empties the place:
    logrotate, ``pip cache purge``, emptying the trash), or a stray ``core`` file at the top of a core
    directory or a home (the next plan's core dumps): never a copy kept for the others."""
    homes = layout.home_dirs()
    found = [layout.apt, layout.dnf, layout.yum, layout.pacman, layout.apk, layout.log, *layout.journal]
    found += [*layout.coredump, *(home + b"/.local/share/Trash" for home in homes)]
    found += [home + b"/" + place for home in homes for _name, place, _command, _cost in LANGUAGE_CACHES]
    places = tuple(place.rstrip(b"/") + b"/" for place in found)
    tops = frozenset(top.rstrip(b"/") for top in (*layout.core_dirs, *homes))

    def takes(path: bytes) -> bool:
        parent, _, name = path.rpartition(b"/")
        return path.startswith(places) or (parent in tops and _CORE.fullmatch(name) is not None)

    return takes


def language_caches(layout: RootsLayout) -> list[Proposal]:
    """Package caches of language tools in each home directory."""
    return [
        Proposal(
            "language_cache",
            f"{name}:{_shown(home)}",
            layout.files([home + b"/" + place]),
            command,
            cost,
            REGENERABLE,
            "sizes of the files under " + _shown(home + b"/" + place),
        )
        for home in layout.home_dirs()
        for name, place, command, cost in LANGUAGE_CACHES
    ]


def journals(layout: RootsLayout) -> list[Proposal]:
    """Archived journal files only: the active ones are journald's and stay."""
    return [
        Proposal(
            "journal",
            _shown(root),
            layout.files(
                [root], lambda n: (n.endswith(b".journal") and b"@" in n) or n.endswith(b".journal~")
            ),
            "journalctl --vacuum-size=100M",
            "older log entries are gone from journalctl",
            REVIEW,
            "sizes of archived journal files (*@*.journal, *.journal~)",
            note="journalctl --vacuum-* removes archived files only: run journalctl --rotate first to archive "
            "the active ones, or vacuuming frees less than the journal uses",
        )
        for root in layout.journal
    ]


_ROTATED = re.compile(
    rb".*(\.[0-9]+|\.[0-9]+\.(gz|xz|bz2|zst)|\.(gz|xz|bz2|zst|old)|-[0-9]{8}(\.(gz|xz|bz2|zst))?)$", re.DOTALL
)


def rotated_logs(layout: RootsLayout) -> list[Proposal]:
    """Logs logrotate already set aside (``syslog.1``, ``syslog.2.gz``, ``messages-20260101``)."""
    rotated = layout.files(
        [layout.log],
        lambda n: _ROTATED.fullmatch(n) is not None,
        skip=tuple(j + b"/" for j in layout.journal),
    )
    return [
        Proposal(
            "rotated_log",
            _shown(layout.log),
            rotated,
            None,
            "these old logs are gone (keep them if an audit or an investigation needs them)",
            REVIEW,
            "sizes of rotated and compressed logs (*.N, *.gz, *-YYYYMMDD) under " + _shown(layout.log),
        )
    ]


_CORE = re.compile(rb"core(\.[0-9]+)?")
_CORE_COST = "the crashes can no longer be debugged from these dumps"


def core_dumps(layout: RootsLayout) -> list[Proposal]:
    """Crash dumps: systemd-coredump's and apport's stores, and stray ``core``/``core.N`` files."""
    stores = [
        Proposal(
            "core_dump",
            _shown(root),
            layout.files([root]),
            "coredumpctl list (to see them first)",
            _CORE_COST,
            REVIEW,
            "sizes of the dumps under " + _shown(root),
        )
        for root in layout.coredump
    ]
    stray = Proposal(
        "core_dump",
        "stray",
        layout.files(
            [*layout.core_dirs, *layout.home_dirs()], lambda n: _CORE.fullmatch(n) is not None, recurse=False
        ),
        None,
        _CORE_COST,
        REVIEW,
        "sizes of core / core.N files at the top of /, /tmp and home directories",
    )
    return [*stores, stray]


def trash(layout: RootsLayout) -> list[Proposal]:
    """Desktop trash: files moved there free nothing until the trash is emptied."""
    return [
        Proposal(
            "trash",
            _shown(home),
            layout.files([base + b"/files", base + b"/info"]),
            "gio trash --empty",
            "the trashed files cannot be restored any more",
            REVIEW,
            "sizes of the files in " + _shown(base) + "/files and /info",
            note="files in the trash still use their space until the trash is emptied",
        )
        for home in layout.home_dirs()
        for base in (home + b"/.local/share/Trash",)
    ]


def containers(layout: RootsLayout) -> list[Proposal]:
    """What a container engine holds that could go, from the engine itself (``sysmcp.engine.containers``,
    its data root not walked): stopped containers' writable layers, dangling volumes, dangling images and
    the build cache, each freed by the engine's own command; and each container's log file, which
    ``reclaim`` may empty itself (a running container's engine keeps writing to it) when it is the
    server's own or the server runs as root."""
    if not layout.container_engines:
        return []
    request = ContainersRequest(
        socket=layout.container_socket,
        timeout_s=CONTAINER_TIMEOUT,
        walk=False,
        commands=layout.container_engines,
    )
    try:
        found = survey(request)
    except EngineError:
        return []  # no engine, or one that does not answer: nothing of it to plan
    engine = found.command or ("podman" if found.engine.startswith("Podman") else "docker")
    if layout.container_socket is not None:  # the engine's command must reach the same engine
        url = shell_word(f"unix://{found.socket}")
        engine += f" --url {url}" if engine == "podman" else f" -H {url}"
    # The engine names them: after ``--`` a name starting with "-" is a volume, never an option
    dangling = sorted(v.name for v in found.volumes if v.dangling)
    figures = (  # (key, bytes, command, cost, safety): what the engine's own commands free
        (
            "stopped",
            sum(c.writable or 0 for c in found.containers if c.stopped),
            f"{engine} container prune",
            "the stopped containers are gone with their writable layers and their logs: they cannot be "
            "started again",
            REVIEW,
        ),
        (
            "volumes",
            sum(v.size or 0 for v in found.volumes if v.dangling),
            f"{engine} volume rm -- {' '.join(map(shell_word, dangling))}",
            "the data in volumes no container uses is gone for good: nothing makes it again",
            RISKY,
        ),
        (
            "images",
            sum(i.unique or 0 for i in found.images if i.dangling),
            f"{engine} image prune",
            "untagged images are pulled or built again when needed",
            REGENERABLE,
        ),
        (
            "build",
            found.build_cache.bytes - found.build_cache.in_use,
            f"{engine} builder prune",
            "the next image build starts from scratch (slower)",
            REGENERABLE,
        ),
    )
    method = f"{found.engine}'s own figures"
    groups = [
        Proposal(
            "container", f"{found.socket}:{key}", [], command, cost, safety, method, "command", figure=size
        )
        for key, size, command, cost, safety in figures
        if size > 0
    ]
    stopped = {c.name for c in found.containers if c.stopped}  # the engine holds no log of theirs open
    # Whose engine named the logs: the owner of the socket the survey reached (``Survey.speaker``), not
    # of whatever its name leads to now (a rootless engine's user may have put a link to root's there).
    speaker = found.speaker
    for log in () if found.remote else found.logs:  # another host's paths: no file here is its log
        file = _regular(_real_parent(os.fsencode(log.file.path))) if log.file.path else None
        if file is None:
            continue
        limit = (
            f"its rotation limit is max-size {log.file.max_size}"
            if log.file.max_size
            else "it has no rotation limit"
        )
        # Only its owner (rootless Podman: the user it runs as) or root may empty it: for anyone else
        # it stays the engine's command, so truncating is never a way to another user's file.
        # An engine names its logs: one listening on another user's socket (a rootless engine, reached
        # through DOCKER_HOST or XDG_RUNTIME_DIR) may name any file, so its word counts only for its own.
        trusted = speaker is None or speaker == file[1].st_uid
        ours = os.geteuid() in (0, file[1].st_uid) and trusted
        # A log with another name (a hard link made to someone's file, where protected_hardlinks is off):
        # emptying it empties that file too, so it is never sysmcp's to empty.
        names = file[1].st_nlink
        grows = (
            "its container is stopped: the log grows again once it is started"
            if log.container in stopped
            else "the engine keeps the file open and goes on writing to it, so it grows again"
        )
        groups.append(
            Proposal(
                "container",
                f"{found.socket}:log:{log.file.path}",
                [file],
                command=f"truncate -s 0 {shell_word(file[0])}",
                # a command a person may paste, on one printable line: an engine may name a container
                # anything, an ESC that moves the cursor too
                cost=f"{engine} logs -- {shell_word(log.container)} loses what the log held",
                safety=REVIEW,
                method=f"blocks of the log file {found.engine} names for container {escaped(log.container)}",
                action="truncate" if ours and names == 1 else "command",
                note=f"{grows}; {limit}: "
                "--log-opt max-size (or log-opts in daemon.json) keeps it bounded for good"
                + (
                    ""
                    if trusted
                    else f"; the engine that named it {_listener(speaker)}, and it is uid {file[1].st_uid}'s "
                    "file: an engine's word makes no file but its own user's sysmcp's to empty"
                )
                + (
                    ""
                    if ours or not trusted
                    else f"; it is uid {file[1].st_uid}'s file: only that user or root empties it"
                )
                + (
                    ""
                    if names == 1
                    else f"; it has {names} names (hard links), and emptying one empties every one: look first"
                ),
            )
        )
    return groups


def _listener(speaker: int | None) -> str:
    """Whose engine answered, as a note says it (``Survey.speaker``'s -1: nobody could tell)."""
    if speaker == -1:
        return "answered on a socket that could not be looked at (gone or unreadable)"
    return f"listens on a socket of uid {speaker}'s"


def deleted_open(layout: RootsLayout) -> list[Proposal]:
    """Deleted files a process still holds open: truncating through ``/proc/PID/fd/N`` frees them now.

    The same scan as deleted_open_files (``procs.scan_processes``); only files a descriptor holds and no
    process has mapped are kept (truncating a mapped file kills the process that maps it, at its next touch
    of a page past the new end: SIGBUS), only those with blocks to free, and only those
    whose former path names them in this server's view (``DeletedFile.confined``): a file held in another
    mount namespace, or not on the filesystem mounted at its path here, is outside every scope."""
    found: list[Proposal] = []
    proc = os.fsdecode(layout.proc)
    if not platform.has_proc_fd(proc):
        return found  # macOS and the BSDs: no /proc/PID/fd to find them, or to truncate through
    try:
        scan = scan_processes(proc)
    except Unavailable:
        return found
    for deleted in scan.files.values():
        held = [holder for holder in deleted.holders if holder.fd is not None]
        if not held or deleted.mapped or deleted.disk == 0 or not deleted.confined:
            continue
        first = held[0]
        link = os.fsencode(os.path.join(proc, str(first.pid), "fd", str(first.fd)))
        try:
            st = os.stat(link)  # the item's identity, re-checked by reclaim when it acts
        except OSError:
            continue  # closed since the scan
        if (st.st_dev, st.st_ino) != (deleted.dev, deleted.ino):
            continue  # the descriptor number was reused for another file
        # The name it had, as os.fsdecode makes it: an answer shows it (in_json), a kept plan's JSON
        # keeps it (a byte that is not UTF-8 as an escaped lone surrogate, read back the same).
        name: dict[str, object] = {"file": os.fsdecode(deleted.path)}
        writer = next((holder for holder in held if "w" in holder.mode), None)
        named = writer or first
        found.append(
            Proposal(
                "deleted_open",
                f"{st.st_dev}:{st.st_ino}",
                [(link, st)],
                command=None,
                cost="the holder loses the file's content; one still writing goes on at its old offset "
                "(a sparse file)",
                safety=RISKY if writer is not None else REVIEW,
                method="blocks of the open file, through /proc/PID/fd (it has no name left)",
                action="truncate",
                note=(
                    f"restarting {named.command} (pid {named.pid}) is the better fix: it reopens its log and "
                    "the space comes back for good"
                )
                if writer is not None
                else f"or restart {named.command} (pid {named.pid}), which closes it",
                holders=[
                    {"pid": holder.pid, "fd": holder.fd, "command": holder.command, "mode": holder.mode}
                    | name
                    for holder in held
                ],
            )
        )
    return found


def _real_parent(path: bytes) -> bytes:
    """``path`` with its directories resolved (an engine's data root is often a symlink to another disk),
    so that acting, which follows no symlink on the way, reaches it."""
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _lstat(path: bytes) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _regular(path: bytes) -> tuple[bytes, os.stat_result] | None:
    st = _lstat(path)
    return (path, st) if st is not None and stat.S_ISREG(st.st_mode) else None


#: One copy of a duplicate set: its path and what it was when its bytes were read (``find_duplicates``
#: carries its descriptor's fstat); a bare path is looked at now (``lstat``).
Copy = tuple[bytes, os.stat_result]


def _copy(given: bytes | Copy) -> Copy | None:
    if isinstance(given, bytes):
        return _regular(given)
    return given if stat.S_ISREG(given[1].st_mode) else None


def _writers_beyond(keep: os.stat_result, extra: os.stat_result) -> bool:
    """Whether someone who cannot write ``extra`` can write ``keep`` (the owner is the same): a group
    or anyone with write permission on the kept copy that the extra did not give them."""
    if keep.st_mode & stat.S_IWOTH and not extra.st_mode & stat.S_IWOTH:
        return True
    return bool(keep.st_mode & stat.S_IWGRP) and not (
        extra.st_mode & stat.S_IWGRP and extra.st_gid == keep.st_gid
    )


def _exposed(path: bytes, owner: int, looked: dict[bytes, os.stat_result | None]) -> bool:
    """Whether a user other than ``owner`` (or root) may remove or replace ``path``: a directory on
    its way owned by another user, or writable by group or others without the sticky bit (as ssh
    judges the parents of ``~/.ssh``). A kept copy there could be taken away after the extras went.
    ``looked`` keeps each directory's ``lstat`` for the plan: copies share their parents."""
    directory: bytes | None = None
    parent = os.path.dirname(path)
    while parent != directory:  # up to "/", itself included
        directory, parent = parent, os.path.dirname(parent)
        if directory not in looked:
            looked[directory] = _lstat(directory)
        st = looked[directory]
        if (
            st is None
            or st.st_uid not in (0, owner)
            or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX)
        ):
            return True
    return False


def protection(parent: int | None, name: bytes, st: os.stat_result) -> str | None:
    """``"immutable"`` or ``"append_only"`` (``platform.protection_at``: looked at, not opened, where the
    system can tell so) when the regular file ``name`` (relative to ``parent``, or a path), still the
    inode ``st``, carries that flag; None when it carries neither, or cannot be looked at to tell (then
    the kernel refuses to remove it all the same)."""
    if not stat.S_ISREG(st.st_mode):
        return None
    return platform.protection_at(parent, name, st)


def directory_protection(path: bytes, looked: dict[bytes, str | None]) -> str | None:
    """``protection`` of the directory holding ``path``: in one marked immutable or append-only no name
    may be removed or renamed (``chattr +a /var/log``), though a file in it may still be emptied in
    place. Each directory looked at once (``looked``: by directory); None when it cannot be looked at."""
    directory = os.path.dirname(path)
    if directory not in looked:
        st = _lstat(directory)
        looked[directory] = (
            platform.protection_at(None, directory, st)
            if st is not None and stat.S_ISDIR(st.st_mode)
            else None
        )
    return looked[directory]


def _own_group(uid: int, gid: int) -> bool:
    """Whether ``gid`` is the owner's own group, which no one else is in: the owner's primary group,
    named as the owner (a user private group, as most distributions make), no other account's primary
    group, and no other user a member of any group entry with that number. A group's member list names
    its supplementary members only, and ``getgrgid`` returns one entry of a number several may share
    (``groupadd -o``): both would miss a user who writes the file through it. Accounts a name service
    does not enumerate (sssd without ``enumerate``) are not seen here, but for the group's own members."""
    try:
        account, group = pwd.getpwuid(uid), grp.getgrgid(gid)
    except (KeyError, OverflowError):
        return False
    if account.pw_gid != gid or group.gr_name != account.pw_name:
        return False
    owner = {account.pw_name}
    if any(set(entry.gr_mem) - owner for entry in [group, *grp.getgrall()] if entry.gr_gid == gid):
        return False
    return all(other.pw_uid == uid for other in pwd.getpwall() if other.pw_gid == gid)


#: ACLs the mode does not sum up: an NFSv4 ACL (an NFS mount lists it as this attribute) or a richacl
#: may let anyone write whatever the mode's bits say, and no mask shows it in them.
_RICH_ACLS = frozenset({"system.nfs4_acl", "system.nfs4_dacl", "system.richacl"})


def written_by_others(st: os.stat_result, attributes: dict[str, bytes] | None) -> str | None:
    """Who besides the owner may write the file (anyone; users or groups its ACL names, whose write the
    group bits then show as the ACL's mask; its group, when that is not the owner's own), or None. Such copies are never made one file: each name's directory lets in whom it lets in, and a
    hard link would let whoever reaches one name (the kept copy's, in a public directory) write what
    the others name (a copy in a directory only its owner may enter)."""
    if st.st_mode & stat.S_IWOTH:
        return "anyone"
    if attributes is not None and not _RICH_ACLS.isdisjoint(attributes):
        return "the users and groups its ACL names"
    if st.st_mode & stat.S_IWGRP and attributes is not None and "system.posix_acl_access" in attributes:
        return "the users and groups its ACL names"
    if st.st_mode & stat.S_IWGRP and not _own_group(st.st_uid, st.st_gid):
        return "its group"
    return None


def _why_no_link(keep: Copy, extras: Sequence[Copy]) -> str | None:
    """Why the extras cannot become names of the kept copy (None: they can). A hard link shares one
    owner, group, mode, ACL and set of extended attributes, so any difference would change a file's; a
    file others may write is not made reachable by them through every name (``written_by_others``); and
    no name can be linked to a file marked immutable or append-only (the kernel refuses)."""
    kst = keep[1]
    if (marked := protection(None, keep[0], kst)) is not None:
        return f"the kept copy is marked {marked.replace('_', '-')} (chattr), so no name can be linked to it"
    attributes = extended_attributes(keep[0])
    if (writers := written_by_others(kst, attributes)) is not None:
        return (
            f"the copies may be written by {writers} (mode {stat.S_IMODE(kst.st_mode):04o}): as one file, "
            "whoever reaches the kept copy's name could write what every other name holds"
        )
    for path, st in extras:
        if st.st_dev != kst.st_dev:
            return f"{escaped(path)} is on another filesystem than the kept copy"
        if (st.st_uid, st.st_gid) != (kst.st_uid, kst.st_gid):
            return f"{escaped(path)} has another owner or group than the kept copy"
        if stat.S_IMODE(st.st_mode) != stat.S_IMODE(kst.st_mode):
            return f"{escaped(path)} has another mode than the kept copy"
        if not platform.can_compare_xattrs():
            return "ACLs and extended attributes cannot be compared on this platform"
        if attributes is None or extended_attributes(path) != attributes:
            return f"{escaped(path)} has other ACLs or extended attributes than the kept copy (or unreadable ones)"
    return None


def duplicates(groups: Sequence[Sequence[bytes | Copy]]) -> list[Proposal]:
    """Extra copies of identical files (found by ``find_duplicates``), each set split by owner: one
    user's copies are never removed for, or linked to, another user's file. Of one owner's copies the
    one that stays is the one nobody else can write (no group or other write permission), then one
    nobody else can take away (``_exposed``), then the oldest (mtime), then the first by name; a copy is
    an extra only if the kept copy gives nobody write access that the extra did not, nor the power to
    remove the last copy. Each extra can go or, when owner, group, mode, ACLs and
    extended attributes all match, become a hard link to the kept copy (``ITEM:link`` in reclaim)."""
    found: list[Proposal] = []
    looked: dict[bytes, os.stat_result | None] = {}
    for group in groups:
        owners: dict[int, list[Copy]] = {}
        for copy in map(_copy, group):
            if copy is not None:
                owners.setdefault(copy[1].st_uid, []).append(copy)
        for copies in owners.values():
            exposed = {c[0]: _exposed(c[0], c[1].st_uid, looked) for c in copies}
            keep = min(
                copies, key=lambda c: (bool(c[1].st_mode & 0o022), exposed[c[0]], c[1].st_mtime_ns, c[0])
            )
            files = [c for c in copies if c is not keep and not _writers_beyond(keep[1], c[1])]
            if exposed[keep[0]]:  # another user may remove it: no copy in a safe place goes for it
                files = [c for c in files if exposed[c[0]]]
            if not files:
                continue
            shown = _shown(keep[0])
            refused = _why_no_link(keep, files)
            found.append(
                Proposal(
                    "duplicate",
                    shown,
                    files,
                    None,
                    "the extra copies are gone; whoever used them by name must use the kept copy",
                    REVIEW,
                    "blocks of the extra copies (identical content, confirmed by find_duplicates, and compared "
                    "byte by byte with the kept copy again when acting)",
                    note=None
                    if refused
                    # the name as os.fsdecode makes it, which the review escapes exactly (``escaped``)
                    else f"or replace each extra by a hard link to {os.fsdecode(keep[0])}: the names stay, "
                    "but a change through one name then shows in every one",
                    keep=keep,
                    no_link=refused,
                )
            )
    return found


CLASSES: dict[str, Callable[[RootsLayout], list[Proposal]]] = {
    "package_cache": package_caches,
    "language_cache": language_caches,
    "journal": journals,
    "rotated_log": rotated_logs,
    "core_dump": core_dumps,
    "trash": trash,
    "container": containers,
    "deleted_open": deleted_open,
}
"""Every class found by looking in its own places (``duplicate`` comes from ``find_duplicates``)."""
