"""container_usage's engine: what Docker or Podman holds on disk, from its API, set against a walk.

``ContainersRequest`` in, ``Survey`` out, through ``survey``. The engine's figures come
from read-only GETs on its Unix socket, or where none is found from its command (``_command``); the
disk's from a ``du -x`` walk of its data root (overlay mounts of running containers are other
filesystems and skipped, so each layer is counted once). What the walk finds beyond the engine's
figures is the difference, by data-root directory. Faults: ``NotFound`` (no engine),
``PermissionRefused`` (the socket is another user's), ``Unavailable`` (no answer in time, a bad answer);
only ``/system/df`` not answered in time is no fault: the engine's lists without its sizes (``sizes_missing``).
Paths the engine names (data root, log files) are looked at only inside the roots (``may_walk``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar
from urllib.parse import quote

from sysmcp.engine.calls import Cancel, StopFlag, never_cancelled, wait_for
from sysmcp.engine.containers import _command, _model
from sysmcp.engine.containers._api import Api
from sysmcp.engine.containers._model import BuildCache, Container, Image, LogFile, Volume
from sysmcp.engine.faults import NotFound, Unavailable
from sysmcp.engine.mounts import MOUNTINFO, parse_mountinfo
from sysmcp.engine.opens import closing_fd, open_parent, open_path, read_small_regular_at
from sysmcp.engine.paths import PATH_MAX, escaped
from sysmcp.engine.walk import Totals, walk_totals

PARTS_KEPT = 50  # the data root's directories in a walk's answer, largest first
KEPT_MAX = 1024 * 1024  # a container's file in the data root larger than this is not Docker's: not read

#: Where engines listen, looked at in this order when no socket is named (DOCKER_HOST first).
SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock")


@dataclass(frozen=True, slots=True)
class ContainersRequest:
    socket: str | None = None  # None: DOCKER_HOST's unix socket, then SOCKETS, then the user's Podman
    timeout_s: float = 10.0  # each API call
    walk: bool = True  # walk the data root to reconcile
    walk_timeout_s: float = 120.0
    #: The engine's inspects of its containers' logs (one call each where the data root does not keep
    #: them: Podman); those past it are counted, not asked (``Log.inspected``).
    inspect_timeout_s: float = 120.0
    #: Whether a path the engine names (its data root, a log file) may be looked at: the roots in
    #: force. The data root outside them is neither read nor walked: the engine's figures only.
    may_walk: Callable[[str], bool] = lambda _: True
    sockets: tuple[str, ...] = SOCKETS  # where engines' sockets are looked for when none is named
    pinned: bool = False  # the socket named was resolved inside the roots: reached without a symlink
    #: The commands asked, in this order, when no socket is named nor found.
    commands: tuple[str, ...] = ("docker", "podman")


@dataclass(frozen=True, slots=True)
class Log:
    """A container's log file: its size on disk now (None: not a file here, or unreadable); not
    ``inspected``: its inspect not asked, past the time budget (its log unknown); ``foreign``: a file
    not the engine's user's, named by an engine on another user's socket (not measured)."""

    container: str
    file: LogFile
    bytes: int | None
    inspected: bool = True
    foreign: bool = False


@dataclass(frozen=True, slots=True)
class DataRootWalk:
    """The data root as the walk found it."""

    apparent: int
    disk: int
    stopped: str | None  # why the walk is partial (the time budget), None when complete
    #: (name, apparent, disk) of the data root's directories, largest first.
    parts: tuple[tuple[str, int, int], ...]
    skipped: dict[str, int]
    root: str = ""  # the directory walked: the data root with its symlinks resolved
    directories: int = 0  # the data root's directories in all (``parts`` keeps the largest)


@dataclass
class Survey:
    socket: str  # '' when the engine's command was asked
    engine: str  # 'Docker 20.10.24', 'Podman 4.3.1'
    data_root: str
    driver: str  # the storage driver (overlay2, vfs, ...)
    log_driver: str
    layers: int  # bytes of every image layer, once (LayersSize)
    layers_estimated: bool = False  # no LayersSize: unique bytes of each image plus the largest shared
    images: list[Image] = field(default_factory=list)
    containers: list[Container] = field(default_factory=list)
    volumes: list[Volume] = field(default_factory=list)
    build_cache: BuildCache = field(default_factory=BuildCache)
    logs: list[Log] = field(default_factory=list)
    walked: DataRootWalk | None = None
    walk_refused: bool = False  # the data root is outside the roots: not walked
    unwalkable: str | None = None  # why the data root could not be opened (a user in the docker group)
    command: str | None = None  # the command asked where no socket was (its figures, not the API's)
    sizes_missing: str | None = None  # why the engine's sizes are not in it: its lists only (``_listed``)
    #: Where the engine's command reaches it (docker's context: 'unix:///…', 'ssh://…', 'tcp://…'; Podman's
    #: remote service), '' where it is this machine's own or not told.
    endpoint: str = ""
    #: Whose word the engine's paths are: None for root's or this user's engine, else the uid owning its
    #: socket (a rootless engine's user; -1: not looked at), whose files alone it may name (``_engine_user``).
    speaker: int | None = None
    foreign_root: bool = False  # the data root is not the speaker's: neither walked nor read
    repeated: int = 0  # entries the engine listed again (an id, a volume's name, a log file)

    def _inside(self) -> list[int | None]:
        """The sizes of what lies in the data root: writable layers, volumes and log files there (the
        data root as the engine names it, or as walked: its symlinks resolved)."""
        inside = tuple(
            {root.rstrip("/") + "/" for root in (self.data_root, self.walked and self.walked.root) if root}
        )
        return [
            *(c.writable for c in self.containers),
            *(v.size for v in self.volumes if inside and v.mountpoint.startswith(inside)),
            *(log.bytes for log in self.logs if inside and log.file.path.startswith(inside)),
        ]

    @property
    def remote(self) -> bool:
        """The engine's command reaches another host: its data root and log paths are that host's,
        and a file here at such a path is not the engine's (never walked, measured nor emptied)."""
        return bool(self.endpoint) and not self.endpoint.startswith("unix://")

    @property
    def accounted(self) -> int:
        """The bytes the engine's figures account for: layers, writable layers, volumes, build
        cache, and the log files (which no engine command counts); an unknown size is not in it."""
        return self.layers + self.build_cache.bytes + sum(size or 0 for size in self._inside())

    @property
    def not_measured(self) -> int:
        """How many sizes of what lies in the data root are unknown: ``accounted`` is a lower bound
        (an image's too where the layers' total is estimated from the images' sizes)."""
        images = sum(i.size is None for i in self.images) if self.layers_estimated else 0
        return sum(size is None for size in self._inside()) + (self.sizes_missing is not None) + images


def known_sockets(environ: Mapping[str, str] | None = None, sockets: tuple[str, ...] = SOCKETS) -> list[str]:
    """Where engines listen, as ``find_socket`` looks: DOCKER_HOST's unix:// path, ``sockets``, the
    user's Podman socket (the ones a socket named may be outside the roots, as one not named is)."""
    env = os.environ if environ is None else environ
    host, runtime = env.get("DOCKER_HOST", ""), env.get("XDG_RUNTIME_DIR")
    return [
        *([host.removeprefix("unix://")] if host.startswith("unix://") else []),
        *sockets,
        *([f"{runtime}/podman/podman.sock"] if runtime else []),
    ]


def known_socket_at(way: str | None, known: list[str]) -> str | None:
    """The socket of ``known`` that ``way`` (where a path named leaves the roots, ``PathPolicy.way_out``)
    names exactly, as it is or as its real path (a link to /var/run/docker.sock may say /run/docker.sock,
    as /var/run leads there); else None. Only the known sockets' names are resolved, never ``way``: what
    a name outside the roots leads to is not looked at, so the answer tells nothing of it."""
    if way is None:
        return None
    for socket in known:
        try:
            if way in (socket, os.path.realpath(socket)):
                return socket
        except (OSError, ValueError):  # a NUL byte in DOCKER_HOST, a name no file can have
            continue
    return None


def find_socket(
    named: str | None, environ: dict[str, str] | None = None, sockets: tuple[str, ...] = SOCKETS
) -> str:
    """The socket to ask: the one named, else DOCKER_HOST's unix:// path, else the first of
    ``sockets`` and the user's Podman socket that exists; ``NotFound`` when there is none."""
    if named:
        return named
    env = os.environ if environ is None else environ
    host = env.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        return host.removeprefix("unix://")
    candidates = known_sockets(env, sockets)
    for path in candidates:
        if os.path.exists(path):
            return path
    raise NotFound(
        f"No container engine socket found (looked at {', '.join(candidates)})", reason="no_engine"
    )


def _inside(path: str, may_look: Callable[[str], bool]) -> str:
    """``path`` resolved where it is absolute and inside the roots as given and as resolved, else '':
    a path an engine names outside them is looked at no further than its symlinks inside them. One
    as long as no file's name can be is not resolved either (an engine's megabytes of '/a/a/…' would
    keep ``realpath`` busy for hours), nor one with a NUL byte, which no path has."""
    if len(path) >= PATH_MAX or "\0" in path or not os.path.isabs(path) or not may_look(path):
        return ""
    real = os.path.realpath(path)
    return real if may_look(real) else ""


def _log_looked(path: str, may_look: Callable[[str], bool]) -> os.stat_result | None:
    """A log file inside the roots, stat'ed reached without a symlink (``open_parent``): one swapped
    in on the way since ``_inside`` resolved it is refused, not followed out of the roots."""
    if not (real := _inside(path, may_look)):
        return None
    try:
        parent, name = open_parent(real)
        with closing_fd(parent):
            return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except (OSError, ValueError):
        return None


def _log(container: str, file: LogFile | None, may_look: Callable[[str], bool], speaker: int | None) -> Log:
    """A container's log as its engine names it (``file`` None: its inspect not asked, past the time
    budget), measured only where the file is the engine's user's (``speaker``; None: root's or this
    user's engine, whose word any file may be): a rootless engine on another user's socket may name
    any file as a log (/etc/shadow, a database's 40 GiB), which is not its to count."""
    if file is None:
        return Log(container, LogFile("", "", None), None, inspected=False)
    looked = _log_looked(file.path, may_look)
    if looked is not None and speaker is not None and looked.st_uid != speaker:
        return Log(container, file, None, foreign=True)
    # A directory, device, FIFO or symlink the engine names is no log file: its size is not a log's.
    return Log(
        container, file, looked.st_size if looked is not None and stat.S_ISREG(looked.st_mode) else None
    )


def _engine_user(socket: str, connected: int | None = None) -> int | None:
    """Whose word the engine's paths are: None for an engine on root's or this user's socket, else the
    uid owning the socket (-1 where it cannot be looked at: no file is that uid's). ``connected``: the
    owner of the socket file connected to (``Api.socket_uid``), else it is looked up by name."""
    if connected is None:
        try:
            connected = os.stat(socket).st_uid
        except (OSError, ValueError):
            return -1
    return None if connected in (0, os.geteuid()) else connected


def _not_walkable(root: str) -> str | None:
    """Why the data root is no directory to walk (a symlink loop, missing, a file), None when it is one."""
    try:
        return None if stat.S_ISDIR(os.stat(root).st_mode) else "it is not a directory"
    except OSError as exc:
        return exc.strerror or str(exc)


def _not_the_speakers(root: str, speaker: int | None) -> str | None:
    """Why the data root an engine on another user's socket names is not its to have walked and read
    (another user's home, /): its owner is not the engine's user; None when it is, or any may be."""
    if speaker is None:
        return None
    try:
        owner = os.stat(root).st_uid
    except OSError:
        return None  # said as it is when walked (``_not_walkable``)
    return None if owner == speaker else f"it is uid {owner}'s, not the engine's user's, uid {speaker}"


def self_binds(root: str, mountinfo: str = MOUNTINFO) -> list[str]:
    """The mount points under ``root`` that show the very directory they cover: a directory bind-mounted
    on itself, as containers/storage does with its ``overlay/`` (its layers, writable layers included).
    A walk that keeps to one filesystem does not enter a mount, but such a one hides nothing and shows
    nothing from elsewhere: what lies there is the data root's own. Only the mount seen at its point counts:
    one something else was mounted over (a tmpfs, another directory) shows that, not the data root, and so
    does one inside such a mount. A self-bind inside another is a mount to the walk of the outer one, so
    each is named. Nearest the root first."""
    try:
        with open(mountinfo, "rb") as handle:
            table = parse_mountinfo(handle.read())
    except OSError:
        return []
    prefix = root.rstrip("/") + "/"
    # The mounts whose directories are the data root's own: the one holding it, then each self-bind on one
    # of them. One on anything else (a tmpfs, a directory bound from elsewhere) shows what that shows.
    own = [table.holding(root)]
    found = []
    below = [m for m in table.mounts if m.mount_point.startswith(prefix) and m.dev]
    for mount in sorted(below, key=lambda m: m.mount_point.count("/")):
        point = mount.mount_point
        if table.holding(point) is not mount:
            continue  # covered by a mount over it
        covered = table.holding(os.path.dirname(point))  # the mount it sits on
        if covered is None or not any(covered is mine for mine in own) or covered.dev != mount.dev:
            continue
        inside = os.path.relpath(point, covered.mount_point)
        if os.path.normpath(os.path.join(covered.root, inside)) == os.path.normpath(mount.root):
            own.append(mount)
            found.append(point)
    return sorted(set(found), key=lambda point: (point.count("/"), point))


def _walk(
    root: str, timeout_s: float, report: Callable[[int, int], None], cancel: Callable[[], None]
) -> DataRootWalk:
    started = time.monotonic()
    whole, parts, stopped, skipped = walk_totals(root, timeout_s, report, cancel)
    for point in self_binds(root):
        if stopped is not None:
            break  # out of time
        left = timeout_s - (time.monotonic() - started)
        if left <= 0:
            stopped = f"time budget of {timeout_s:g} s reached"
            break
        try:
            mine, _, stopped, theirs = walk_totals(point, left, report, cancel)
        except OSError:
            continue  # gone, or unreadable: it stays a mount not entered
        if skipped.as_dict().get("other_filesystem", 0) > 0:
            skipped.add("other_filesystem", -1)  # counted as not entered by the walk that met it
        skipped.merge(theirs.as_dict(), (os.path.join(os.path.relpath(point, root), n) for n in theirs.named))
        top = os.path.relpath(point, root).split("/")[0]
        for total in (whole, parts.setdefault(top, Totals())):
            total.apparent += mine.apparent
            total.blocks += mine.blocks
            total.entries += mine.entries
    return DataRootWalk(
        apparent=whole.apparent,
        disk=whole.blocks * 512,
        stopped=stopped,
        parts=tuple(
            (name, part.apparent, part.blocks * 512)
            for name, part in sorted(
                parts.items(), key=lambda item: (-item[1].blocks, -item[1].apparent, item[0])
            )[:PARTS_KEPT]
        ),
        skipped=skipped.as_dict(),
        root=root,
        directories=len(parts),
    )


def _measure(df: dict[str, Any], found: Survey) -> None:
    """``/system/df``'s answer into ``found``: the engine measured every layer and writable layer."""
    found.images = _model.images(df.get("Images") or [])
    found.containers = _model.containers(df)
    found.volumes = _model.volumes(df)
    found.layers = _model.layers_size(df)
    if not found.layers:  # Podman's compatible API leaves it 0
        _estimate_layers(found)
    found.build_cache = _model.build_cache(df)


def _listed(api: Api, found: Survey, check: Callable[[], None]) -> None:
    """The engine's lists into ``found`` where ``/system/df`` (which measures every layer: minutes on a
    large host) did not answer in time: images with their whole sizes (the bytes they share unknown,
    so none counted unique), containers and volumes unmeasured, no layer total nor build cache."""
    images, listed = api.get("/images/json"), api.get("/containers/json?all=1")
    uses = Counter(str(c.get("ImageID")) for c in listed)  # as /system/df counts them
    found.images = [replace(i, shared=i.size or 0, containers=uses[i.id]) for i in _model.images(images)]
    found.containers = [replace(c, writable=None) for c in _model.containers({"Containers": listed})]
    check()
    found.volumes = _model.volumes(api.get("/volumes"))


def _estimate_layers(found: Survey) -> None:
    """The layers' total where the engine gives none: each image's unique bytes plus the largest shared."""
    if found.images:
        found.layers = sum(i.unique or 0 for i in found.images) + max(i.shared for i in found.images)
        found.layers_estimated = True


def _read_logs(
    api: Api,
    data_root: str,
    report: Callable[[str, int, int], None],
    check: Callable[[], None],
    may_look: Callable[[str], bool] = lambda _: True,
    until: float = math.inf,
    speaker: int | None = None,
) -> list[Log]:
    """Each container's log file (``/system/df`` has none): its name, log path and log options; the
    data root's files read only inside the roots (``may_look``), and each log file's size too (where
    it is the engine's user's: ``_log``). The engine is asked for no inspect once ``until``
    (monotonic) has passed: those containers' logs are not ``inspected``."""
    logs = []
    for done, (name, config) in enumerate(_configs(api, _inside(data_root, may_look), check, until), 1):
        logs.append(_log(name, None if config is None else _model.log_file(config), may_look, speaker))
        report("inspect", done, 0)
    return logs


def _configs(
    api: Api, data_root: str, check: Callable[[], None], until: float = math.inf
) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """Each container's name and the part of its inspect its log comes from: from Docker's own files
    in the data root (``containers/<id>``), which spares the engine 26 ms of CPU for 200 containers
    while it measures its layers; where any is not there to read (Podman, an unreadable data root, a
    container being created or removed), from the engine's list and the inspects the data root lacks.
    Both, its files read and the inspects asked, until ``until`` (monotonic; None for those neither
    read nor asked: an engine of a hundred thousand containers, one answering each inspect just within
    the timeout, or a data root of a million containers' files bounds the call no more)."""
    ids = None
    if data_root:  # reached without a symlink, as each container's files are: none leads out of the roots
        with (
            contextlib.suppress(OSError, ValueError),
            closing_fd(open_path(os.path.join(data_root, "containers"), directory=True)) as fd,
        ):
            ids = os.listdir(fd)
    kept = []
    for container in ids or ():  # read within the inspects' budget: a data root may hold a million
        check()
        if time.monotonic() >= until or (config := _kept_config(data_root, container)) is None:
            break
        kept.append(config)
    if ids is not None and len(kept) == len(ids):
        for config in kept:
            yield str(config.pop("Name")).lstrip("/"), config
        return
    for item in api.get("/containers/json?all=1"):
        check()
        container = str(item.get("Id", ""))
        names = _model.strings(item.get("Names")) or [container[:12]]
        name = str(names[0]).lstrip("/")
        if time.monotonic() >= until:
            yield name, None
            continue
        config = _kept_config(data_root, container)
        # The engine's id quoted: one with '/', '?' or a control character asks for no other URL.
        config = config or api.get(f"/containers/{quote(container, safe='')}/json", {})
        if config:  # {}: removed since it was listed, its log gone with it
            yield name, config


def _kept_config(data_root: str, container: str) -> dict[str, Any] | None:
    """The part of a container's inspect its name and log come from, from Docker's own files in the
    data root (``config.v2.json``: Name, LogPath; ``hostconfig.json``: LogConfig); None where they
    are not there to read, or not JSON objects."""
    if not data_root or not container or "/" in container or container.startswith("."):
        return None
    where = os.path.join(data_root, "containers", container)
    try:
        config = _kept_json(os.path.join(where, "config.v2.json"))
        host_config = _kept_json(os.path.join(where, "hostconfig.json"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(config, dict) or not isinstance(host_config, dict) or not config.get("Name"):
        return None
    return {"Name": config["Name"], "LogPath": config.get("LogPath"), "HostConfig": host_config}


def _kept_json(path: str) -> Any:
    """A file of the data root's JSON, read only where it is a small regular file (never a FIFO that
    would block the open, a device or a symlink: ``read_small_regular_at``), reached without a symlink
    on the way (``open_parent``: ``containers/<id>`` may not lead out of the roots)."""
    parent, name = open_parent(path)
    with closing_fd(parent):
        looked = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if looked.st_size > KEPT_MAX:
            raise ValueError(path)
        buffer = bytearray(looked.st_size + 1)
        count, _, failure = read_small_regular_at(name, looked, buffer, dir_fd=parent)
    if failure is not None:
        raise failure
    return json.loads(buffer[:count])


def survey(
    request: ContainersRequest,
    progress: Callable[[str, int, int], None] | None = None,
    cancel: Cancel = never_cancelled,
) -> Survey:
    """Ask the engine, read each container's log file and walk its data root (when asked and allowed).

    Three things at once, so the call takes about the longest of them: ``/system/df`` (the engine
    measures layers itself) on one connection, ``/info`` then the log files on another, and the walk
    on this thread once ``/info`` named the data root; without a socket, the first of
    ``request.commands`` that answers. ``progress(phase, done, bytes)``: 'inspect' (containers done)
    or 'walk' (entries, bytes), from two threads; ``cancel()`` raises to stop (this thread only). An
    answer not in the shape an engine gives (a list for an object) is ``Unavailable``."""
    try:
        return _survey(request, progress or (lambda *_: None), cancel)
    except (AttributeError, TypeError, ValueError, LookupError, ArithmeticError) as exc:
        raise Unavailable(
            f"The container engine answered in a shape no engine gives ({type(exc).__name__}: {exc})",
            reason="engine_fault",
        ) from None


def _survey(request: ContainersRequest, report: Callable[[str, int, int], None], cancel: Cancel) -> Survey:
    try:
        path = find_socket(request.socket, sockets=request.sockets)
    except NotFound as none:
        found, command = _by_command(request, none, cancel)
        works = [lambda check: _command_figures(command, found, request, report, check)]
        return _reconciled(found, request, works, report, cancel)
    with (
        Api(path, request.timeout_s, request.pinned) as api,
        Api(path, request.timeout_s, request.pinned) as second,
        Api(path, request.timeout_s, request.pinned) as third,
        ThreadPoolExecutor(3, thread_name_prefix="engine-api") as first,
    ):

        def abort() -> None:
            for connection in (api, second, third):
                connection.abort()

        def waited(future: Future[Any]) -> Any:
            """A GET's answer, waited for with ``cancel`` asked: a cancel (or a fault) ends every GET."""
            try:
                return wait_for([future], cancel)[0]
            except BaseException:
                abort()
                raise

        # The engine measures its layers for /system/df (the slow call): asked before anything else,
        # and /version beside it, while /info, which the walk waits for (the data root), is asked on
        # the other connection (measured: the walk starts 45 ms sooner).
        df = first.submit(api.get, "/system/df")
        version = first.submit(third.get, "/version")
        info = waited(first.submit(second.get, "/info"))
        found = Survey(
            socket=path,
            engine="",
            data_root=str(info.get("DockerRootDir") or ""),
            driver=str(info.get("Driver") or ""),
            log_driver=str(info.get("LoggingDriver") or ""),
            layers=0,
            speaker=_engine_user(path, second.socket_uid),
        )

        def figures(check: Callable[[], None]) -> None:
            try:
                _measure(df.result(), found)
            except Unavailable as slow:
                if slow.reason != "engine_silent":
                    raise
                found.sizes_missing = (
                    f"the engine did not give its sizes within {request.timeout_s:g} s "
                    "(GET /system/df, which measures every layer)"
                )
                _listed(api, found, check)

        def logs(check: Callable[[], None]) -> None:
            until = time.monotonic() + request.inspect_timeout_s
            root = "" if found.foreign_root else found.data_root
            found.logs = _read_logs(second, root, report, check, request.may_walk, until, found.speaker)

        _reconciled(found, request, [figures, logs], report, cancel, abort)
        found.engine = _model.engine_name(waited(version))  # /version may still be coming
        return found


def _reconciled(
    found: Survey,
    request: ContainersRequest,
    works: list[Callable[[Callable[[], None]], None]],
    report: Callable[[str, int, int], None],
    cancel: Cancel,
    abort: Callable[[], None] = lambda: None,
) -> Survey:
    """``found`` filled by ``works``, each on a thread of its own, while this one walks the data root.
    A work calls the ``check`` it is given between its calls, which raises once this thread stopped
    (cancelled, or another work failed), and ``abort`` then ends the engine calls under way; every
    thread has ended when this returns."""
    # The roots are compared with the real path, and the real path is walked (a symlinked data root).
    root = _inside(found.data_root, request.may_walk)
    if len(found.data_root) >= PATH_MAX:  # not looked at (``_inside``), and not for the roots' sake
        found.unwalkable = f"its name is {len(found.data_root):,} characters long, longer than any path"
    elif "\0" in found.data_root:
        found.unwalkable = "its name holds a NUL byte, which no path can"
    if found.remote:
        found.unwalkable = f"it is on the engine's host, {escaped(found.endpoint)}"
    elif root and (whose := _not_the_speakers(root, found.speaker)) is not None:
        found.unwalkable, found.foreign_root, root = whose, True, ""
    found.walk_refused = request.walk and bool(found.data_root) and not root and not found.unwalkable
    walk = request.walk and bool(root) and not found.remote
    if walk and (why := _not_walkable(root)) is not None:  # said, not 'not walked' with no reason
        found.unwalkable, walk = why, False
    stop = StopFlag()
    with ThreadPoolExecutor(len(works), thread_name_prefix="engine-api") as pool:
        futures = [pool.submit(work, stop.check) for work in works]

        def walking() -> None:  # a work that failed ends the walk: the survey is lost with it
            cancel()
            for failed in (future for future in futures if future.done() and future.exception()):
                failed.result()

        try:
            if walk and not found.walk_refused:
                try:
                    found.walked = _walk(
                        root,
                        request.walk_timeout_s,
                        lambda entries, seen: report("walk", entries, seen),
                        walking,
                    )
                except OSError as exc:  # the root itself: /var/lib/docker is root's alone (0710)
                    found.unwalkable = exc.strerror or str(exc)
            wait_for(futures, cancel)  # a work's failure is raised here
            _once(found)
        except BaseException:
            stop.set()
            abort()
            raise
        finally:
            stop.set()  # the threads end at their next check, or their call's timeout
    return found


T = TypeVar("T")


def _first(rows: list[T], key: Callable[[T], str]) -> tuple[list[T], int]:
    """The first row of each key (rows whose key is '' all kept), and how many were left out."""
    seen: set[str] = set()
    kept = []
    for row in rows:
        if (name := key(row)) and name in seen:
            continue
        seen.add(name)
        kept.append(row)
    return kept, len(rows) - len(kept)


def _once(found: Survey) -> None:
    """Each image, container and volume, and each log file, once: one an engine lists again (the same
    id, name or path) would be counted again in every total, and planned for removal twice."""
    found.images, images = _first(found.images, lambda i: i.id)
    found.containers, containers = _first(found.containers, lambda c: c.id)
    found.volumes, volumes = _first(found.volumes, lambda v: v.name)
    found.logs, logs = _first(found.logs, lambda log: log.file.path)
    found.repeated = images + containers + volumes + logs


def _by_command(
    request: ContainersRequest, none: NotFound, cancel: Cancel = never_cancelled
) -> tuple[Survey, str]:
    """The engine as the first of ``request.commands`` that answers tells it (version, data root,
    drivers); ``none`` (no socket) with what each command said when none does."""
    said = []
    for command in request.commands:
        try:
            info = _command.ask([command, "info", "--format", "json"], request.timeout_s, cancel)
        except (NotFound, Unavailable) as exc:
            said.append(str(exc))
            continue
        store, host = info.get("store") or {}, info.get("host") or {}
        if command == "podman" or store:
            version = (info.get("version") or {}).get("Version", "")
            engine, root = f"Podman {version}".strip(), store.get("graphRoot")
            driver, logs = store.get("graphDriverName"), host.get("logDriver")
            # podman --remote (CONTAINER_HOST, a connection): a service on another machine
            endpoint = "podman's remote service" if host.get("serviceIsRemote") is True else ""
        else:
            engine = f"Docker {info.get('ServerVersion', '')}".strip()
            root, driver, logs = info.get("DockerRootDir"), info.get("Driver"), info.get("LoggingDriver")
            endpoint = _docker_endpoint(command, request.timeout_s, cancel)
        found = Survey("", engine, str(root or ""), str(driver or ""), str(logs or ""), 0, command=command)
        found.endpoint = endpoint
        if endpoint.startswith("unix://"):  # a context may lead to a rootless engine's socket
            found.speaker = _engine_user(endpoint.removeprefix("unix://"))
        return found, command
    raise NotFound(f"{none}; {'; '.join(said)}", reason="no_engine")


def _docker_endpoint(command: str, timeout_s: float, cancel: Cancel = never_cancelled) -> str:
    """Where docker's command reaches its engine (DOCKER_HOST, else the context's: 'unix:///…',
    'ssh://…', 'tcp://…'); where its ``context`` command does not say (a docker before contexts, which
    reached ssh:// hosts already, or one whose context store cannot be read), DOCKER_HOST as docker reads
    it; '' where neither says (this machine's default socket)."""
    try:
        host = _command.ask(
            [command, "context", "inspect", "--format", "{{json .Endpoints.docker.Host}}"], timeout_s, cancel
        )
    except (NotFound, Unavailable):
        host = None
    return host if isinstance(host, str) and host else os.environ.get("DOCKER_HOST", "")


def _command_figures(
    command: str,
    found: Survey,
    request: ContainersRequest,
    report: Callable[[str, int, int], None],
    check: Callable[[], None],
) -> None:
    """Images, containers, volumes, build cache and log files into ``found``, from ``command``."""
    timeout_s = request.timeout_s
    if command == "podman":
        found.images = _model.images(
            _command.ask([command, "images", "-a", "--format", "json"], timeout_s, check), tags="Names"
        )
        check()
        found.containers = _command.podman_containers(
            _command.ask([command, "ps", "-a", "--size", "--format", "json"], timeout_s, check)
        )
        check()
        found.volumes = _command.podman_volumes(
            _command.ask([command, "volume", "ls", "--format", "json"], timeout_s, check)
        )
    else:
        df = _command.ask([command, "system", "df", "-v", "--format", "json"], timeout_s, check)
        found.images, found.containers, found.volumes, found.build_cache = _command.docker_df(df)
    _estimate_layers(found)  # no command gives the engine's LayersSize
    check()
    until = time.monotonic() + request.inspect_timeout_s
    looks = (lambda _: False) if found.remote else request.may_walk  # another host's paths name no file here
    ids = [c.id for c in found.containers]
    logs = _command.inspected_logs(command, ids, timeout_s, check, until) if ids else {}
    for done, container in enumerate(found.containers, 1):
        if container.id in logs:  # else removed since it was listed: its log gone with it
            found.logs.append(_log(container.name, logs[container.id], looks, found.speaker))
        report("inspect", done, 0)
