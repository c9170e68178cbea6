"""What an engine's API answers, read into typed rows: images, containers, volumes, build cache.

Pure: JSON documents in (``/system/df``, ``/info``, ``/version``, a container's inspect), rows out.
Docker and Podman's Docker-compatible API give the same shapes; a field an engine leaves out is read
as unknown (None), never as zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Image:
    id: str
    tags: tuple[str, ...]
    size: int | None  # bytes of every layer it has (None: the engine gave no size it could have)
    shared: int  # of which layers other images have too
    containers: int
    created: float

    @property
    def unique(self) -> int | None:
        return None if self.size is None else max(self.size - self.shared, 0)

    @property
    def dangling(self) -> bool:
        return not self.tags


@dataclass(frozen=True, slots=True)
class Container:
    id: str
    name: str
    image: str
    state: str  # running, exited, created, paused, ...
    created: float
    writable: int | None  # the writable layer's bytes (SizeRw)
    volumes: tuple[str, ...]

    @property
    def stopped(self) -> bool:
        """Not running: what ``container prune`` removes (a paused or restarting one runs still)."""
        return self.state not in ("running", "paused", "restarting", "removing")


@dataclass(frozen=True, slots=True)
class Volume:
    name: str
    size: int | None  # None: the engine did not measure it
    refs: int | None  # containers using it
    mountpoint: str

    @property
    def dangling(self) -> bool:
        return self.refs == 0


@dataclass(frozen=True, slots=True)
class BuildCache:
    records: int = 0
    bytes: int = 0
    in_use: int = 0  # bytes of records in use


@dataclass(frozen=True, slots=True)
class LogFile:
    """A container's log as its inspect says it: driver, file (json-file, local), rotation limit."""

    driver: str
    path: str
    max_size: str | None  # the rotation limit (max-size) set for it, if any


def amount(value: Any) -> int | None:
    """A size or count: an int (not a bool) from 0 to what a file's size can be (JSON has no bound);
    None (unknown) for anything else: a float, NaN, Infinity, a string, a negative or huge number."""
    return value if type(value) is int and 0 <= value < 2**63 else None


def strings(value: Any) -> list[str]:
    """The strings of a list (names, tags); none for anything else."""
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def seconds(value: Any) -> float:
    """A creation time in epoch seconds; 0 (unknown) for anything but a number in range (NaN is not)."""
    return float(value) if type(value) in (int, float) and 0 < value < 1e12 else 0.0


def images(items: list[dict[str, Any]], tags: str = "RepoTags") -> list[Image]:
    """``/system/df``'s images, or ``podman images -a --format json``'s (their tags in ``Names``)."""
    rows = []
    for item in items:
        size = amount(item.get("Size"))
        rows.append(
            Image(
                id=str(item.get("Id", "")),
                tags=tuple(t for t in strings(item.get(tags)) if t and "<none>" not in t),
                size=size,
                shared=min(amount(item.get("SharedSize")) or 0, size or 0),
                containers=amount(item.get("Containers")) or 0,
                created=seconds(item.get("Created")),
            )
        )
    return rows


def containers(df: dict[str, Any]) -> list[Container]:
    rows = []
    for item in df.get("Containers") or []:
        names = strings(item.get("Names")) or [str(item.get("Id", ""))[:12]]
        rows.append(
            Container(
                id=str(item.get("Id", "")),
                name=str(names[0]).lstrip("/"),
                image=str(item.get("Image", "")),
                state=str(item.get("State", "") or "unknown"),
                created=seconds(item.get("Created")),
                writable=amount(item.get("SizeRw", 0)),  # Docker leaves a 0 out
                volumes=tuple(
                    str(m.get("Name"))
                    for m in item.get("Mounts") or ()
                    if m.get("Type") == "volume" and m.get("Name")
                ),
            )
        )
    return rows


def volumes(df: dict[str, Any]) -> list[Volume]:
    rows = []
    for item in df.get("Volumes") or []:
        usage = item.get("UsageData") or {}
        rows.append(
            Volume(
                name=str(item.get("Name", "")),
                size=amount(usage.get("Size")),
                refs=amount(usage.get("RefCount")),
                mountpoint=str(item.get("Mountpoint", "")),
            )
        )
    return rows


def layers_size(df: dict[str, Any]) -> int:
    """Every image layer's bytes once (``LayersSize``); 0 where the engine gives none (Podman)."""
    return amount(df.get("LayersSize")) or 0


def build_cache(df: dict[str, Any]) -> BuildCache:
    records = df.get("BuildCache") or []
    total = sum(amount(r.get("Size")) or 0 for r in records)
    in_use = sum(amount(r.get("Size")) or 0 for r in records if r.get("InUse"))
    return BuildCache(len(records), max(total, amount(df.get("BuilderSize")) or 0), in_use)


def log_file(inspect: dict[str, Any]) -> LogFile:
    config = (inspect.get("HostConfig") or {}).get("LogConfig") or {}
    options = config.get("Config") or {}
    limit = options.get("max-size")
    return LogFile(
        driver=str(config.get("Type", "")),
        path=str(inspect.get("LogPath") or ""),
        max_size=limit if isinstance(limit, str) and limit else None,
    )


def engine_name(version: dict[str, Any]) -> str:
    """'Docker 20.10.24' or 'Podman 4.3.1', from ``/version``'s components."""
    for component in version.get("Components") or ():
        if str(component.get("Name", "")).lower().startswith("podman"):
            return f"Podman {component.get('Version', '')}".strip()
    return f"Docker {version.get('Version', '')}".strip()
