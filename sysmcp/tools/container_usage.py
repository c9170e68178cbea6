"""container_usage: what Docker or Podman holds on disk, and what no docker command shows.

The engine (``sysmcp.engine.containers``) asks the container engine's API on its Unix socket and
walks its data root; this module is its MCP face: the schema, progress while containers are
inspected and the data root walked (cancellable), the roots (a path is named only inside them, the
data root walked only inside them), and the words: images, containers, volumes, build cache, log
files with their rotation limits, and the reconciliation with the disk.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio

from sysmcp.engine.containers import ContainersRequest, Survey, known_socket_at, known_sockets, survey
from sysmcp.engine.paths import PATH_MAX, escaped, one_line, within_roots
from sysmcp.protocol.context import Meter
from sysmcp.protocol.failures import ArgumentError
from sysmcp.protocol.threads import run_in_thread
from sysmcp.render import age, human_bytes, more_not_shown, plural
from sysmcp.tools import schemas as js
from sysmcp.tools.registry import RESOLVE_TIMEOUT, Tool, ToolContext, ToolOutput
from sysmcp.tools.typed import ABSENT, Open, Opt, prop, result
from sysmcp.views import CONTAINERS

MAX_TIMEOUT_S = 60
WALK_TIMEOUT_S = 120.0  # the data root's walk; past it the reconciliation says it is partial
PARTS_NAMED = 6  # data-root directories named in the reconciliation
NAME_CHARS = 512  # an engine's name, tag, state or version past this is cut (an image reference is ≤ 400)
TAGS_SHOWN = 10  # an image's tags named; the others counted

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "socket": js.string(
            "Engine API socket; with roots, inside them or one of these. Omitted: DOCKER_HOST, "
            "/var/run/docker.sock, then Podman's.",
            minLength=1,
        ),
        "timeout_s": js.number("Per API call.", minimum=0.1, maximum=MAX_TIMEOUT_S, default=10),
        "walk": js.boolean(
            "Walk the data root to reconcile the engine's figures with the disk.", default=True
        ),
        "top_n": js.top_n_argument("Rows per list.", maximum=50, default=10),
    },
    required=None,
)

_PATH = "Its path; null outside the allowed roots."
_NAME = "Its name."


_NOT_MEASURED = "{} of unknown size, not in the bytes beside (a lower bound then); absent: none."


@result
class LargeImage(Open):  # a row (Open) may carry more than its schema names, as every row here
    id: str = prop("The image ID, short.")
    tags: list[str] = prop("Its repository:tag names (none: dangling).")
    bytes: int | None = prop("All its layers' bytes (null: the engine gave no size it could have).")
    shared_bytes: int = prop("Bytes of layers other images have too (its whole size in a partial answer).")
    unique_bytes: int | None = prop(
        "Bytes only it holds: what removing it frees (unknown, 0, in a partial answer; null: its size unknown)."
    )
    containers: int = prop("Containers made from it.")
    tags_not_shown: Opt[int] = prop(f"Its tags past the first {TAGS_SHOWN}, not named; absent: none.")


@result
class ImageTotals:
    count: int = prop("Images in all.")
    layer_bytes: int = prop("Every image layer once (the engine's LayersSize).")
    layer_bytes_estimated: bool = prop(
        "No LayersSize (Podman): images' unique bytes plus the largest shared."
    )
    dangling: int = prop("Untagged images.")
    dangling_unique_bytes: int = prop(
        "Bytes only the untagged images hold (unknown, 0, in a partial answer)."
    )
    not_measured: Opt[int] = prop(
        "Images of unknown size, in no figure here (layer_bytes a lower bound where estimated); absent: none."
    )
    largest: list[LargeImage] = prop("The largest images (at most top_n).")


@result
class LargeContainer(Open):
    name: str = prop(_NAME)
    image: str = prop("The image it was made from.")
    state: str = prop("running, exited, created, paused …")
    age_s: float | None = prop("Seconds since it was created (null: the engine gave no time).")
    writable_bytes: int | None = prop("Its writable layer (null: not measured).")


def _unknown(sizes: list[int | None]) -> Opt[int]:
    return sum(size is None for size in sizes) or ABSENT


@result
class ContainerTotals:
    count: int = prop("Containers in all, stopped ones included.")
    running: int = prop("Containers running.")
    stopped: int = prop("Containers stopped (not running, paused nor restarting): what prune removes.")
    writable_bytes: int = prop("All writable layers the engine measured.")
    stopped_writable_bytes: int = prop("Writable layers the engine measured of the stopped containers.")
    not_measured: Opt[int] = prop(_NOT_MEASURED.format("Writable layers"))
    stopped_not_measured: Opt[int] = prop(_NOT_MEASURED.format("Stopped containers' writable layers"))
    largest: list[LargeContainer] = prop("The containers with the largest writable layers (at most top_n).")


@result
class LargeVolume(Open):
    name: str = prop(_NAME)
    bytes: int | None = prop("Its size (null: not measured).")
    containers: int | None = prop("Containers using it (0: dangling).")
    path: str | None = prop(_PATH)


@result
class VolumeTotals:
    count: int = prop("Volumes in all.")
    bytes: int = prop("Bytes of all volumes the engine measured.")
    dangling: int = prop("Volumes no container uses.")
    dangling_bytes: int = prop("Bytes of the volumes no container uses that the engine measured.")
    not_measured: Opt[int] = prop(_NOT_MEASURED.format("Volumes"))
    dangling_not_measured: Opt[int] = prop(_NOT_MEASURED.format("Dangling volumes"))
    largest: list[LargeVolume] = prop("The largest volumes (at most top_n).")


@result
class BuildCacheTotals:
    records: int = prop("Build cache records.")
    bytes: int = prop("Bytes of the build cache.")
    in_use_bytes: int = prop("Bytes of records in use.")


@result
class LargeLog(Open):
    container: str = prop("The container writing it.")
    driver: str = prop("Its log driver.")
    bytes: int | None = prop("Its size (null: not readable here).")
    max_size: str | None = prop("Its rotation limit (null: none).")
    path: str | None = prop(_PATH)


@result
class LogTotals:
    count: int = prop("Containers' log files.")
    bytes: int = prop("Bytes of all log files readable here.")
    not_measured: Opt[int] = prop(_NOT_MEASURED.format("Log files"))
    without_limit: int = prop("Log files with no max-size rotation limit.")
    not_inspected: Opt[int] = prop(
        "Containers whose log was not looked for: the engine's inspects (one each, for Podman) stopped at "
        "their time budget; absent: none."
    )
    not_the_engines: Opt[int] = prop(
        "Log files an engine on another user's socket names that are not that user's files: not measured "
        "(its word is no other file's); absent: none."
    )
    largest: list[LargeLog] = prop("The largest log files (at most top_n).")


@result
class DataRootPart(Open):
    name: str = prop("A directory of the data root.")
    bytes: int = prop("Its apparent bytes.")
    disk_bytes: int = prop("Its bytes on disk.")


@result
class Reconciliation:
    path: str | None = prop(
        "The directory walked: the data root with its symlinks resolved (inside the roots, as only such is "
        "walked); null outside the allowed roots."
    )
    walked_bytes: int = prop("Apparent bytes the walk found under the data root.")
    walked_disk_bytes: int = prop("Bytes allocated on disk under the data root.")
    accounted_bytes: int = prop("Layers, writable layers, volumes, build cache and logs measured.")
    not_measured: Opt[int] = prop(
        "Writable layers, volumes and logs in the data root of unknown size, not in accounted_bytes "
        "(a lower bound then, and difference_bytes an upper one); absent: none."
    )
    difference_bytes: int = prop("Walked minus accounted.")
    complete: bool = prop("False when the walk stopped early (stopped_reason says why).")
    stopped_reason: Opt[str] = prop(
        "Why the walk stopped early (its time budget, no file descriptor left); absent: complete."
    )
    parts: list[DataRootPart] = prop("The data root's directories, largest first.")
    skipped: dict[str, int] = prop("What the walk did not enter, by reason (other_filesystem: mounts).")
    parts_not_shown: Opt[int] = prop(
        "The data root's directories past those in parts, not named; absent: none."
    )


@result
class ContainerUsage:
    engine: str = prop("The engine and its version: 'Docker 20.10.24', 'Podman 4.3.1'.")
    socket: str = prop("The API socket asked.")
    data_root: str | None = prop("The engine's data root; null outside the allowed roots.")
    storage_driver: str = prop("The engine's storage driver (overlay2, vfs …).")
    log_driver: str = prop("The engine's default log driver (json-file, journald …).")
    images: ImageTotals = prop("Images.")
    containers: ContainerTotals = prop("Containers.")
    volumes: VolumeTotals = prop("Volumes.")
    build_cache: BuildCacheTotals = prop("The build cache.")
    logs: LogTotals = prop("Container log files, which no docker command counts.")
    reconciliation: Reconciliation | None = prop(
        "The data root walked against the engine's figures; null when not walked."
    )
    note: str | None = prop("Why the data root was not walked, if it was not.")
    command: Opt[str] = prop(
        "The engine's command asked where no API socket was reachable (docker's sizes are rounded); "
        "absent: the socket was asked."
    )
    partial: Opt[str] = prop(
        "Why the engine's sizes are missing: its lists only (image sizes whole, shared and unique "
        "bytes unknown; no layer total, writable layer, volume size nor build cache); absent: complete."
    )
    repeated: Opt[int] = prop(
        "Entries the engine listed again (an image's or container's id, a volume's name, a log file), "
        "each counted once; absent: none."
    )


def _shown(path: str, allowed: list[Path] | None) -> str | None:
    """The path for the answer, or None when it is outside the roots (counted, never named)."""
    return path if path and within_roots(path, allowed) else None


def _said(text: str, limit: int = NAME_CHARS) -> str:
    """A name the engine gives, as the answer carries it: one longer than ``limit`` characters is cut
    and its length said, so an engine's megabytes of name cannot swell the answer past what is sent."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def _path_said(path: str, allowed: list[Path] | None) -> str | None:
    """``_shown``, cut as ``_said`` past what any file's name can be (never looked at, then)."""
    shown = _shown(path, allowed)
    return None if shown is None else _said(shown, PATH_MAX)


def answer(found: Survey, top_n: int, now: float, allowed: list[Path] | None) -> ContainerUsage:
    images = sorted(found.images, key=lambda i: (-(i.size or 0), i.id))
    containers = sorted(found.containers, key=lambda c: (-(c.writable or 0), c.name))
    volumes = sorted(found.volumes, key=lambda v: (-(v.size or 0), v.name))
    logs = sorted(found.logs, key=lambda log: (-(log.bytes or 0), log.container))
    dangling_volumes = [v for v in volumes if v.dangling]
    stopped = [c for c in containers if c.stopped]
    files = [log for log in logs if log.file.path]
    walked = found.walked
    note = None
    if found.walk_refused:
        note = "The data root is outside the allowed roots: neither walked nor read, its logs unmeasured."
    elif found.unwalkable:
        note = f"The data root could not be read here ({found.unwalkable}): the engine's figures only."
    elif walked is None:
        note = "The data root was not walked: the engine's figures only."
    return ContainerUsage(
        engine=_said(found.engine),
        socket=found.socket,
        data_root=_path_said(found.data_root, allowed),
        storage_driver=_said(found.driver),
        log_driver=_said(found.log_driver),
        images=ImageTotals(
            count=len(images),
            layer_bytes=found.layers,
            layer_bytes_estimated=found.layers_estimated,
            dangling=sum(i.dangling for i in images),
            dangling_unique_bytes=sum(i.unique or 0 for i in images if i.dangling),
            not_measured=_unknown([i.size for i in images]),
            largest=[
                LargeImage(
                    _said(i.id.removeprefix("sha256:")[:12]),
                    [_said(tag) for tag in i.tags[:TAGS_SHOWN]],
                    i.size,
                    i.shared,
                    i.unique,
                    i.containers,
                    tags_not_shown=max(len(i.tags) - TAGS_SHOWN, 0) or ABSENT,
                )
                for i in images[:top_n]
            ],
        ),
        containers=ContainerTotals(
            count=len(containers),
            running=sum(c.state == "running" for c in containers),
            stopped=len(stopped),
            writable_bytes=sum(c.writable or 0 for c in containers),
            stopped_writable_bytes=sum(c.writable or 0 for c in stopped),
            not_measured=_unknown([c.writable for c in containers]),
            stopped_not_measured=_unknown([c.writable for c in stopped]),
            largest=[
                LargeContainer(
                    _said(c.name),
                    _said(c.image),
                    _said(c.state),
                    round(max(now - c.created, 0), 1) if c.created else None,
                    c.writable,
                )
                for c in containers[:top_n]
            ],
        ),
        volumes=VolumeTotals(
            count=len(volumes),
            bytes=sum(v.size or 0 for v in volumes),
            dangling=len(dangling_volumes),
            dangling_bytes=sum(v.size or 0 for v in dangling_volumes),
            not_measured=_unknown([v.size for v in volumes]),
            dangling_not_measured=_unknown([v.size for v in dangling_volumes]),
            largest=[
                LargeVolume(_said(v.name), v.size, v.refs, _path_said(v.mountpoint, allowed))
                for v in volumes[:top_n]
            ],
        ),
        build_cache=BuildCacheTotals(
            found.build_cache.records, found.build_cache.bytes, found.build_cache.in_use
        ),
        logs=LogTotals(
            count=len(files),
            bytes=sum(log.bytes or 0 for log in files),
            not_measured=_unknown([log.bytes for log in files]),
            without_limit=sum(log.file.max_size is None for log in files),
            not_inspected=sum(not log.inspected for log in logs) or ABSENT,
            not_the_engines=sum(log.foreign for log in files) or ABSENT,
            largest=[
                LargeLog(
                    _said(log.container),
                    _said(log.file.driver),
                    log.bytes,
                    None if log.file.max_size is None else _said(log.file.max_size),
                    _path_said(log.file.path, allowed),
                )
                for log in files[:top_n]
            ],
        ),
        reconciliation=None
        if walked is None
        else Reconciliation(
            path=_path_said(walked.root, allowed),
            walked_bytes=walked.apparent,
            walked_disk_bytes=walked.disk,
            accounted_bytes=found.accounted,
            not_measured=found.not_measured or ABSENT,
            difference_bytes=walked.apparent - found.accounted,
            complete=walked.stopped is None,
            stopped_reason=walked.stopped or ABSENT,
            parts=[
                DataRootPart(*part) for part in sorted(walked.parts, key=lambda part: (-part[1], part[0]))
            ],
            skipped=walked.skipped,
            parts_not_shown=max(walked.directories - len(walked.parts), 0) or ABSENT,
        ),
        note=note,
        command=found.command or ABSENT,
        partial=found.sizes_missing or ABSENT,
        repeated=found.repeated or ABSENT,
    )


def _more(shown: int, count: int, noun: str) -> list[str]:
    return [f"  {more_not_shown(count - shown, noun)}"] if count > shown else []


def render(s: ContainerUsage) -> str:
    root = f"data root {escaped(s.data_root)}" if s.data_root else "data root outside the allowed roots"
    asked = f"through its command `{s.command}` (no API socket)" if s.command else f"at {s.socket}"
    lines = [f"{s.engine} {asked}: {root} ({s.storage_driver}, logs {s.log_driver or 'unknown'})"]
    walked = s.reconciliation
    if walked is not None and walked.stopped_reason is not ABSENT:
        lines.insert(
            0,
            f"PARTIAL RESULT: the walk of the data root stopped early ({walked.stopped_reason}); the engine's "
            "figures are whole, what the walk found on disk is not.",
        )
    if s.partial:
        lines.append(
            f"Partial: {s.partial}; its lists below: image sizes whole (the bytes each shares or holds alone "
            "unknown), writable layers and volumes unmeasured, no layer total nor build cache"
        )
    im = s.images
    # The lists give no shared bytes: what an image holds alone is unknown, never 0 B.
    dangling = "unique bytes unknown" if s.partial else f"{human_bytes(im.dangling_unique_bytes)} unique"
    layers = "layer total not known" if s.partial else f"{human_bytes(im.layer_bytes)} of layers"
    lines.append(
        f"Images: {plural(im.count, 'image')}, {layers}"
        + (" (estimated: the engine gave no total)" if im.layer_bytes_estimated else "")
        + ("" if im.not_measured is ABSENT else f" ({im.not_measured:,} of unknown size)")
        + (f"; {im.dangling:,} dangling ({dangling})" if im.dangling else "")
    )
    for i in im.largest:
        held = f"unique {_size(i.unique_bytes)}, shared {human_bytes(i.shared_bytes)}"
        held = "unique and shared bytes unknown" if s.partial else held
        held = "size unknown" if i.bytes is None else held
        more = "" if i.tags_not_shown is ABSENT else f" (and {plural(i.tags_not_shown, 'more tag')})"
        lines.append(
            f"  {_size(i.bytes):>10}  {', '.join(i.tags) or '<none> ' + i.id}{more}  "
            f"{held}, {plural(i.containers, 'container')}"
        )
    lines += _more(len(im.largest), im.count, "image")
    co = s.containers
    lines.append(
        f"Containers: {co.count:,} ({co.running:,} running), writable layers "
        f"{_total(co.writable_bytes, co.not_measured, co.count)}, of stopped ones "
        f"{_total(co.stopped_writable_bytes, co.stopped_not_measured, co.stopped)}"
    )
    for c in co.largest:
        old = "age unknown" if c.age_s is None else age(c.age_s, " old")
        lines.append(f"  {_size(c.writable_bytes):>10}  {c.name}  {c.state}, {c.image}, {old}")
    lines += _more(len(co.largest), co.count, "container")
    vo = s.volumes
    lines.append(
        f"Volumes: {plural(vo.count, 'volume')}, {_total(vo.bytes, vo.not_measured, vo.count)}"
        + (
            f"; {vo.dangling:,} dangling ({_total(vo.dangling_bytes, vo.dangling_not_measured, vo.dangling)})"
            if vo.dangling
            else ""
        )
    )
    for v in vo.largest:
        use = f"used by {plural(v.containers, 'container')}" if v.containers else "dangling"
        use = "containers using it unknown" if v.containers is None else use
        lines.append(f"  {_size(v.bytes):>10}  {v.name}  {use}")
    lines += _more(len(vo.largest), vo.count, "volume")
    bc = s.build_cache
    if not s.partial:  # only /system/df tells the build cache
        lines.append(
            f"Build cache: {human_bytes(bc.bytes)} in {plural(bc.records, 'record')}"
            f" ({human_bytes(bc.in_use_bytes)} in use)"
        )
    lo = s.logs
    lines.append(
        f"Log files: {plural(lo.count, 'file')}, {_total(lo.bytes, lo.not_measured, lo.count)}"
        + (f"; {lo.without_limit:,} with no rotation limit (max-size)" if lo.without_limit else "")
        + (
            ""
            if lo.not_inspected is ABSENT
            else f"; {plural(lo.not_inspected, 'container')} not inspected within the time budget: "
            "their logs unknown"
        )
        + (
            ""
            if lo.not_the_engines is ABSENT
            else f"; {plural(lo.not_the_engines, 'file')} named not the engine's user's (another user's "
            "socket): not measured"
        )
    )
    for log in lo.largest:
        limit = f"max-size {log.max_size}" if log.max_size else "no max-size"
        where = f"  {escaped(log.path)}" if log.path else ""
        lines.append(f"  {_size(log.bytes):>10}  {log.container}  {limit}{where}")
    lines += _more(len(lo.largest), lo.count, "log file")
    if s.reconciliation is not None:
        lines += _reconciled(s.reconciliation, s.data_root)
    if s.repeated is not ABSENT:
        lines.append(
            f"The engine listed {plural(s.repeated, 'entry', 'entries')} again (the same image or container id, "
            "volume name or log file): each counted once"
        )
    if s.note:
        lines.append(s.note)
    return "\n".join(map(one_line, lines))  # on their lines: no newline, no ESC (names: escaped)


def _size(value: int | None) -> str:
    return human_bytes(value) if value is not None else "?"


def _total(measured: int, unknown: Opt[int], count: int) -> str:
    """A total some of whose sizes are unknown ("?" in the rows): never 0 B for sizes nobody measured."""
    if unknown is ABSENT:
        return human_bytes(measured)
    return "size unknown" if unknown == count else f"at least {human_bytes(measured)} ({unknown:,} unknown)"


def _reconciled(re: Reconciliation, data_root: str | None) -> list[str]:
    partial = "" if re.complete else " (the walk stopped early: partial)"
    diff, unknown = re.difference_bytes, re.not_measured
    accounted = human_bytes(re.accounted_bytes)
    if unknown is not ABSENT:  # the unknown sizes are not in it: accounted is a floor
        accounted = f"at least {accounted} ({plural(unknown, 'size')} unknown)"
    # A floor of what is accounted makes the difference a ceiling; a floor of what was walked (a partial
    # walk, directories it could not read), a floor; both: no bound at all.
    unread = re.skipped.get("unreadable", 0) + re.skipped.get("filesystem_error", 0)
    low, short = unknown is not ABSENT, not re.complete or bool(unread)
    if low and short:
        said = "the difference cannot be told (sizes unknown, and not all of the data root walked)"
    else:
        said = "" if low == short else "at most " if low == (diff >= 0) else "at least "
        said += (
            f"{human_bytes(diff)} on disk that the engine does not count"
            if diff >= 0
            else f"{human_bytes(-diff)} less"
        )
    walked = f" (walked at {escaped(re.path)}, where it leads)" if re.path and re.path != data_root else ""
    lines = [
        f"On disk: the data root{walked} holds {human_bytes(re.walked_bytes)} ({human_bytes(re.walked_disk_bytes)} "
        f"allocated){partial}; the engine's figures and the logs account for {accounted}: {said}"
    ]
    parts = ", ".join(f"{p.name} {human_bytes(p.bytes)}" for p in re.parts[:PARTS_NAMED])
    more = len(re.parts[PARTS_NAMED:]) + (0 if re.parts_not_shown is ABSENT else re.parts_not_shown)
    parts += f", and {plural(more, 'more directory', 'more directories')}" if more else ""
    if re.parts:
        lines.append(f"  by directory: {parts}")
    mounts = sum(
        re.skipped.get(reason, 0) for reason in ("other_filesystem", "btrfs_subvolume", "pseudo_filesystem")
    )
    if mounts:
        lines.append(
            f"  {plural(mounts, 'mount')} inside not entered (running containers' overlay and shm mounts: "
            "each layer is counted once, where it lies)"
        )
    unread = re.skipped.get("unreadable", 0) + re.skipped.get("filesystem_error", 0)
    if unread:
        lines.append(f"  {plural(unread, 'directory')} could not be read: not counted")
    return lines


async def _socket(named: str | None, ctx: ToolContext) -> tuple[str | None, bool]:
    """The socket to ask for the one named, and whether it is pinned (resolved inside the roots, so
    reached without a symlink: one swapped in since is refused). With roots in force, a socket the
    engine listens on (``known_sockets``, as asked when none is named) may be named as it is or
    through a symlink inside them that leads to it by name, and is asked at its own path; any other
    only inside them. No name outside the roots is looked at to decide."""
    known = known_sockets()
    if named is None or ctx.paths.allowed is None or named in known:
        return named, False
    try:
        return str(await ctx.resolve(named)), True
    except ArgumentError as outside:
        with anyio.move_on_after(RESOLVE_TIMEOUT):  # resolved once already: this does not wait
            if (
                same := await run_in_thread(
                    lambda raw: known_socket_at(ctx.paths.way_out(raw), known), named, None
                )
            ) is not None:
                return same, False
        raise ArgumentError(
            f"{outside.message}. An engine's own socket may be named outside them, as it is or through a "
            f"symlink to it: {', '.join(known)}; or leave 'socket' out to ask where engines listen"
        ) from None


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    allowed = ctx.paths.allowed
    named, pinned = await _socket(args.get("socket"), ctx)
    request = ContainersRequest(
        socket=named,
        pinned=pinned,
        timeout_s=float(args["timeout_s"]),
        walk=bool(args["walk"]),
        walk_timeout_s=WALK_TIMEOUT_S,
        may_walk=lambda root: _shown(root, allowed) is not None,
    )

    done = {"inspect": 0, "walk": 0}  # containers inspected, data-root entries walked (two threads)

    def describe(meter: Meter, elapsed: float) -> str:
        walked = f", data root: {plural(done['walk'], 'entry')} walked" if done["walk"] else ""
        return f"{plural(done['inspect'], 'container')} inspected{walked}"

    def work(meter: Meter) -> Survey:
        def progress(phase: str, count: int, seen: int) -> None:
            done[phase] = count
            meter.done = done["inspect"] + done["walk"]  # each only grows, so their sum does

        return survey(request, progress, meter.cancel)

    found = await ctx.run_in_worker(work, describe=describe)
    return ToolOutput.of(answer(found, args["top_n"], time.time(), allowed), render)


TOOL = Tool(
    name="container_usage",
    title="Container disk usage",
    description=(
        "What Docker or Podman holds on disk, from its API: images (shared, unique, dangling), containers' "
        "writable layers, volumes (dangling), build cache, and container log files with their rotation "
        "limit; the data root walked and set against the engine's figures, the difference named. Read-only."
    ),
    input_schema=INPUT_SCHEMA,
    output=ContainerUsage,
    handler=handle,
    view=CONTAINERS.uri,
)
