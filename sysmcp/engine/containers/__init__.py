"""container_usage's engine: what Docker or Podman holds on disk, from its API, set against a walk.

Front door: ``Request`` in, ``Survey`` out, through ``survey``. The engine's own figures come from
read-only GETs on its Unix socket (``/version``, ``/info``, ``/system/df``, each container's inspect
for its log file); the disk's from sysmcp's walk engine over the engine's data root (``du -x``:
overlay mounts of running containers are other filesystems and skipped, so each layer is counted
once). What the walk finds and the engine's figures leave out is the difference, by data-root
directory. Faults are ``sysmcp.engine.errors`` exceptions: ``NotFound`` (no engine), ``PermissionRefused``
(the socket is another user's), ``Unavailable`` (no answer within the timeout, a bad answer).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from sysmcp.engine.containers._api import Api
from sysmcp.engine.containers._model import BuildCache, Container, Image, LogFile, Volume
from sysmcp.engine.containers._model import build_cache as _build_cache
from sysmcp.engine.containers._model import containers as _containers
from sysmcp.engine.containers._model import engine_name as _engine_name
from sysmcp.engine.containers._model import images as _images
from sysmcp.engine.containers._model import log_file as _log_file
from sysmcp.engine.containers._model import volumes as _volumes
from sysmcp.engine.errors import NotFound

__all__ = [
    "SOCKETS",
    "BuildCache",
    "Container",
    "Image",
    "Log",
    "LogFile",
    "Request",
    "Survey",
    "Volume",
    "Walked",
    "find_socket",
    "survey",
]

#: Where engines listen, looked at in this order when no socket is named (DOCKER_HOST first).
SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock")


@dataclass(frozen=True, slots=True)
class Request:
    socket: str | None = None  # None: DOCKER_HOST's unix socket, then SOCKETS, then the user's Podman
    timeout_s: float = 10.0  # each API call
    walk: bool = True  # walk the data root to reconcile
    walk_timeout_s: float = 120.0
    #: Whether the data root may be walked (the roots in force); False: the engine's figures only.
    may_walk: Callable[[str], bool] = lambda _: True


@dataclass(frozen=True, slots=True)
class Log:
    """A container's log file: its size on disk now (None: not a file here, or unreadable)."""

    container: str
    file: LogFile
    bytes: int | None


@dataclass(frozen=True, slots=True)
class Walked:
    """The data root as the walk found it."""

    apparent: int
    disk: int
    stopped: str | None  # why the walk is partial (the time budget), None when complete
    #: (name, apparent, disk) of the data root's directories, largest first.
    parts: tuple[tuple[str, int, int], ...]
    skipped: dict[str, int]


@dataclass
class Survey:
    socket: str
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
    walked: Walked | None = None
    walk_refused: bool = False  # the data root is outside the roots: not walked

    @property
    def accounted(self) -> int:
        """The bytes the engine's figures account for: layers, writable layers, volumes, build
        cache, and the log files (which no engine command counts)."""
        inside = self.data_root.rstrip("/") + "/"
        return (
            self.layers
            + sum(c.writable or 0 for c in self.containers)
            + sum(v.size or 0 for v in self.volumes if v.mountpoint.startswith(inside))
            + self.build_cache.bytes
            + sum(log.bytes or 0 for log in self.logs if log.file.path.startswith(inside))
        )


def find_socket(named: str | None, environ: dict[str, str] | None = None) -> str:
    """The socket to ask: the one named, else DOCKER_HOST's unix:// path, else the first of
    ``SOCKETS`` and the user's Podman socket that exists; ``NotFound`` when there is none."""
    if named:
        return named
    env = os.environ if environ is None else environ
    host = env.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        return host.removeprefix("unix://")
    runtime = env.get("XDG_RUNTIME_DIR")
    candidates = [*SOCKETS, *([f"{runtime}/podman/podman.sock"] if runtime else [])]
    for path in candidates:
        if os.path.exists(path):
            return path
    raise NotFound(
        f"No container engine socket found (looked at {', '.join(candidates)})", reason="no_engine"
    )


def _log_bytes(path: str) -> int | None:
    try:
        return os.stat(path).st_size if path else None
    except OSError:
        return None


def _walk(
    root: str, timeout_s: float, report: Callable[[int, int], None], check_cancelled: Callable[[], None]
) -> Walked:
    from sysmcp.engine.usage import Request as UsageRequest
    from sysmcp.engine.usage import scan_usage

    request = UsageRequest(
        top_files=0,
        top_directories=50,
        max_depth=1,
        by_disk=True,
        min_size=0,
        timeout_s=timeout_s,
        root=os.fsencode(root),  # one filesystem: WalkOptions' default
    )
    usage = scan_usage(request, report, check_cancelled)
    totals = usage.totals
    return Walked(
        apparent=totals.apparent if totals else 0,
        disk=totals.disk if totals else 0,
        stopped=usage.stopped,
        parts=tuple((row.relative, row.apparent, row.disk) for row in usage.directories if row.depth == 1),
        skipped=usage.skipped.as_dict(),
    )


class _Stopped(Exception):
    """The API thread's own stop: the walk beside it failed or was cancelled."""


def _ask(api: Api, found: Survey, report: Callable[[str, int, int], None], check: Callable[[], None]) -> None:
    """``/system/df`` and each container's inspect into ``found`` (``check()`` between calls)."""
    df = api.get("/system/df")
    found.images, found.containers, found.volumes = _images(df), _containers(df), _volumes(df)
    found.layers = int(df.get("LayersSize") or 0)
    if not found.layers and found.images:  # Podman's compatible API leaves it 0: each image's own bytes
        found.layers = sum(i.unique for i in found.images) + max(i.shared for i in found.images)
        found.layers_estimated = True
    found.build_cache = _build_cache(df)
    for done, container in enumerate(found.containers, 1):
        check()
        log = _log_file(api.get(f"/containers/{container.id}/json"))
        found.logs.append(Log(container.name, log, _log_bytes(log.path)))
        report("inspect", done, 0)


def survey(
    request: Request,
    progress: Callable[[str, int, int], None] | None = None,
    check_cancelled: Callable[[], None] = lambda: None,
) -> Survey:
    """Ask the engine, read each container's log file and walk its data root (when asked and allowed).

    The engine's answers (it measures layers itself, then one inspect per container) are awaited on a
    thread of their own while this one walks, so the call takes about the longer of the two.
    ``progress(phase, done, bytes)``: 'inspect' with containers done, 'walk' with entries and bytes
    seen (from two threads); ``check_cancelled()`` raises to stop, between API calls and during the
    walk (called on this thread only)."""
    report = progress or (lambda *_: None)
    path = find_socket(request.socket)
    with Api(path, request.timeout_s) as api:
        version = api.get("/version")
        info = api.get("/info")
        found = Survey(
            socket=path,
            engine=_engine_name(version),
            data_root=str(info.get("DockerRootDir") or ""),
            driver=str(info.get("Driver") or ""),
            log_driver=str(info.get("LoggingDriver") or ""),
            layers=0,
        )
        # The roots are compared with the real path, and the real path is walked (a symlinked data root).
        root = os.path.realpath(found.data_root) if found.data_root else ""
        walk = request.walk and bool(root) and os.path.isdir(root)
        found.walk_refused = walk and not request.may_walk(root)
        if not walk or found.walk_refused:
            _ask(api, found, report, check_cancelled)
            return found
        stop = threading.Event()
        failed: list[BaseException] = []

        def check() -> None:
            if stop.is_set():
                raise _Stopped

        def ask() -> None:
            try:
                _ask(api, found, report, check)
            except BaseException as exc:  # handed to the walking thread, raised there
                failed.append(exc)

        asking = threading.Thread(target=ask, name="engine-api", daemon=True)
        asking.start()
        try:
            found.walked = _walk(
                root,
                request.walk_timeout_s,
                lambda entries, seen: report("walk", entries, seen),
                check_cancelled,
            )
            while asking.is_alive():
                asking.join(0.05)
                check_cancelled()
        finally:
            stop.set()
            asking.join(request.timeout_s + 1)  # the API thread's next check, or its call's timeout
        if failed and not isinstance(failed[0], _Stopped):
            raise failed[0]
    return found
