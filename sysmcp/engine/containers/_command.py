"""The engine's figures from its command line, where no API socket is reachable.

Podman is daemonless: without its socket service, its command still answers with exact byte counts
(``--format json``). Docker's command reaches engines the socket search cannot (a ``docker context``,
DOCKER_HOST over ssh or tcp), but ``docker system df -v`` gives sizes only as rounded decimal text
('1.982MB'), read back here. Every command goes through ``ask``, with the survey's timeout.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from sysmcp.engine.calls import Cancel, never_cancelled
from sysmcp.engine.commands import run_command
from sysmcp.engine.containers import _model
from sysmcp.engine.containers._model import BuildCache, Container, Image, LogFile, Volume, log_file, seconds
from sysmcp.engine.faults import Unavailable

#: Container ids named in one ``inspect`` command at most (an argv stays far below ARG_MAX).
INSPECT_AT_ONCE = 500


def ask(argv: Sequence[str], timeout_s: float, cancel: Cancel = never_cancelled) -> Any:
    """The standard output of ``argv`` read as JSON, the command killed after ``timeout_s`` or once
    ``cancel`` raises (the survey stopped: it waits for no command): the one place this engine runs a
    command. ``Unavailable`` (``engine.commands``' faults are) when it gives no answer or one that is
    not JSON."""
    try:
        return json.loads(run_command(argv, timeout_s, cancel))
    except (ValueError, RecursionError):  # RecursionError: arrays nested beyond the parser's depth
        raise Unavailable(
            f"`{' '.join(argv[:3])}` answered with something not JSON", reason="engine_fault"
        ) from None


#: A figure as docker's command prints it: digits, an optional fraction, a decimal unit, and what it
#: may add in parentheses ('1.2GB (50%)'); nothing else (no sign, exponent, NaN, second point).
_DECIMAL = re.compile(r"([0-9]{1,20}(?:\.[0-9]{1,20})?)\s*([kKMGTP]?)B(?:\s*\(.*\))?")
_SCALE = {"": 1, "k": 1000, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4, "P": 1000**5}
_COUNT = re.compile(r"[0-9]{1,19}")


def decimal_size(text: str) -> int | None:
    """``'1.2GB (50%)'`` → 1200000000: a figure as docker's command prints it (decimal units, rounded);
    None (unknown) for anything else, or past what a file's size can be: one malformed figure of a
    hostile engine is that item's size unknown, never a failed survey."""
    match = _DECIMAL.fullmatch(text.strip())
    if match is None:
        return None
    return _model.amount(int(Decimal(match.group(1)) * _SCALE[match.group(2)]))


def _count(text: Any) -> int | None:
    """A count as docker's command prints it (``'3'``; ``'N/A'`` where the engine did not count):
    decimal digits, or a JSON integer; '-1', '1e3', 'NaN' or a boolean are unknown, never 0 nor a failure."""
    if isinstance(text, str):
        return _model.amount(int(text)) if _COUNT.fullmatch(text) else None
    return _model.amount(text)


def _when(text: Any) -> float:
    """'2026-12-03 15:02:11 +0000 UTC' → epoch seconds; 0 (unknown) when unreadable or out of range, as
    ``seconds``: docker prints Go's zero time ('0001-01-01 00:00:00 +0000 UTC') for a time not given."""
    try:
        when = datetime.strptime(str(text).removesuffix(" UTC"), "%Y-%m-%d %H:%M:%S %z").timestamp()
    except ValueError:
        return 0.0
    return seconds(when)


def docker_df(df: dict[str, Any]) -> tuple[list[Image], list[Container], list[Volume], BuildCache]:
    """``docker system df -v --format json``'s rows as the API's (sizes rounded as printed)."""
    images = []
    for row in df.get("Images") or ():
        repository, tag = str(row.get("Repository", "")), str(row.get("Tag", ""))
        size = decimal_size(str(row.get("Size", "")))
        images.append(
            Image(
                id=str(row.get("ID", "")),
                tags=() if "<none>" in (repository, tag) else (f"{repository}:{tag}",),
                size=size,
                shared=min(decimal_size(str(row.get("SharedSize", ""))) or 0, size or 0),
                containers=_count(row.get("Containers")) or 0,
                created=_when(row.get("CreatedAt")),
            )
        )
    containers = [
        Container(
            id=str(row.get("ID", "")),
            name=str(row.get("Names", "")).split(",")[0],
            image=str(row.get("Image", "")),
            state=str(row.get("State") or "unknown"),
            created=_when(row.get("CreatedAt")),
            writable=decimal_size(str(row.get("Size", ""))),
            volumes=tuple(name for name in str(row.get("Mounts", "")).split(",") if name),
        )
        for row in df.get("Containers") or ()
    ]
    volumes = [
        Volume(
            name=str(row.get("Name", "")),
            size=decimal_size(str(row.get("Size", ""))),
            refs=_count(row.get("Links")),
            mountpoint=str(row.get("Mountpoint", "")),
        )
        for row in df.get("Volumes") or ()
    ]
    cache = [
        (decimal_size(str(row.get("Size", ""))) or 0, bool(row.get("InUse")))
        for row in df.get("BuildCache") or ()
    ]
    build = BuildCache(len(cache), sum(size for size, _ in cache), sum(size for size, used in cache if used))
    return images, containers, volumes, build


def podman_containers(rows: list[dict[str, Any]]) -> list[Container]:
    """``podman ps -a --size --format json``, read as the API's list: its writable layer is under ``Size``,
    and it names mount destinations, not volumes."""
    listed = [{**row, "SizeRw": (row.get("Size") or {}).get("rwSize"), "Mounts": ()} for row in rows]
    return _model.containers({"Containers": listed})


def podman_volumes(rows: list[dict[str, Any]]) -> list[Volume]:
    """``podman volume ls --format json``, read as the API's list: no sizes (podman measures them only in
    ``system df``), its containers using one in ``MountCount``."""
    return _model.volumes(
        {"Volumes": [{**row, "UsageData": {"RefCount": row.get("MountCount")}} for row in rows]}
    )


def inspected_logs(
    command: str,
    ids: Sequence[str],
    timeout_s: float,
    check: Callable[[], None] = lambda: None,
    until: float = math.inf,
) -> dict[str, LogFile | None]:
    """Each container's log file, by id, through as few ``inspect`` commands as the ids need, asked
    while ``until`` (monotonic) has not passed: the ids of those not asked map to None (an engine of a
    hundred thousand containers is 200 commands of up to ``timeout_s`` each). ``check`` between them
    raises once the survey stopped (cancelled, or another part failed)."""
    found: dict[str, LogFile | None] = {}
    for start in range(0, len(ids), INSPECT_AT_ONCE):
        check()
        if time.monotonic() >= until:
            found.update(dict.fromkeys(ids[start:], None))
            break
        for item in ask(
            [command, "container", "inspect", "--format", "json", *ids[start : start + INSPECT_AT_ONCE]],
            timeout_s,
            check,
        ):
            config = (item.get("HostConfig") or {}).get("LogConfig") or {}
            if not item.get("LogPath") and config.get("Path"):  # Podman: its log and its limit in LogConfig
                limit = {"max-size": config["Size"]} if decimal_size(str(config.get("Size", ""))) else {}
                config = {**config, "Config": {**(config.get("Config") or {}), **limit}}
                item = {**item, "LogPath": config["Path"], "HostConfig": {"LogConfig": config}}
            found[str(item.get("Id", ""))] = log_file(item)
    return found
