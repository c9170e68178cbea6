"""LVM thin pools: which pool a filesystem's logical volume draws on, and how full that pool is.

``lvs --reportformat json`` (lvm2's documented report: ``{"report": [{"lv": [{field: string}]}]}``,
every value a string, sizes in bytes with ``--units b --nosuffix``) is parsed apart from running it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sysmcp import platform
from sysmcp.engine.commands import BadOutput, run_command

LVS_FIELDS = "lv_name,vg_name,lv_attr,pool_lv,data_percent,metadata_percent,lv_size,origin"
LVS = ["lvs", "--reportformat", "json", "--units", "b", "--nosuffix", "-a", "-o", LVS_FIELDS]


@dataclass(frozen=True, slots=True)
class LogicalVolume:
    name: str
    vg: str
    attr: str  # lv_attr: its first letter is the volume type ('t' thin pool, 'V' thin volume)
    pool: str  # pool_lv: the thin pool a thin volume draws on ('' for others)
    size: int
    data_percent: float | None
    metadata_percent: float | None
    origin: str = ""  # the volume a snapshot is of ('' for others)


def _dm(vg: str, lv: str) -> str:
    """The device-mapper name (/dev/mapper/<this>): vg-lv with each '-' in a name doubled."""
    return f"{vg.replace('-', '--')}-{lv.replace('-', '--')}"


@dataclass(frozen=True, slots=True)
class ThinPool:
    """The thin pool under one thin volume."""

    name: str  # "vg/pool"
    volume: str  # "vg/lv": the thin volume the filesystem is on
    size: int  # the pool's data size in bytes
    data_percent: float
    metadata_percent: float | None
    provisioned: int  # the sizes of every thin volume in the pool, added up

    @property
    def used(self) -> int:
        return round(self.size * self.data_percent / 100)

    @property
    def free(self) -> int:
        return max(self.size - self.used, 0)

    @property
    def overcommitted(self) -> int:
        """Bytes promised to thin volumes beyond the pool's size (0 when not overcommitted)."""
        return max(self.provisioned - self.size, 0)

    def fuller_than(self, percent: int | None) -> bool:
        """Whether the pool (data or metadata) is fuller than a filesystem on it at ``percent`` used."""
        return percent is not None and self.fullest_percent > percent

    @property
    def fullest_percent(self) -> float:
        """The tighter of data and metadata: a pool at 100 % of either stops every volume on it."""
        return max(self.data_percent, self.metadata_percent or 0.0)


def _percent(value: object) -> float | None:
    if value in ("", None):
        return None
    try:
        number = float(str(value))
    except ValueError:
        raise BadOutput(f"lvs gave {str(value)[:40]!r} as a percentage", reason="lvs") from None
    if not 0 <= number <= 100:
        raise BadOutput(f"lvs gave {number} as a percentage", reason="lvs")
    return number


def parse_lvs(text: str) -> list[LogicalVolume]:
    """The volumes of ``lvs --reportformat json --units b --nosuffix -o LVS_FIELDS``."""
    try:
        report = json.loads(text)
        rows = [row for part in report["report"] for row in part["lv"]]
        volumes = []
        for row in rows:
            size = str(row["lv_size"]).strip().rstrip("B")
            volumes.append(
                LogicalVolume(
                    str(row["lv_name"]).strip("[]"),  # -a shows hidden volumes as [name]
                    str(row["vg_name"]),
                    str(row["lv_attr"]),
                    str(row.get("pool_lv", "")).strip("[]"),
                    int(float(size)) if size else 0,
                    _percent(row.get("data_percent")),
                    _percent(row.get("metadata_percent")),
                    str(row.get("origin", "")),
                )
            )
    except (ValueError, KeyError, TypeError, AttributeError):
        raise BadOutput("lvs gave output that is not its JSON report", reason="lvs") from None
    return volumes


def _dm_name(device: str) -> str:
    """The device-mapper name of a mount's device: /dev/mapper/NAME, /dev/VG/LV, or /dev/dm-N
    (its name read from sysfs)."""
    if device.startswith("/dev/mapper/"):
        return device.removeprefix("/dev/mapper/")
    base = os.path.basename(device)
    if base.startswith("dm-"):
        try:
            with open(os.path.join(platform.SYS_BLOCK, base, "dm", "name"), encoding="utf-8") as handle:
                return handle.read().strip()
        except OSError:
            return ""
    parts = device.removeprefix("/dev/").split("/")
    return _dm(*parts) if len(parts) == 2 else ""


def thin_pool_of(device: str, volumes: Sequence[LogicalVolume]) -> ThinPool | None:
    """The thin pool under ``device`` (a mount's source), or None when it is no thin volume."""
    name = _dm_name(device)
    lv = next((v for v in volumes if _dm(v.vg, v.name) == name and v.attr.startswith("V") and v.pool), None)
    if lv is None:
        return None
    pool = next((v for v in volumes if v.vg == lv.vg and v.name == lv.pool and v.attr.startswith("t")), None)
    if pool is None or pool.data_percent is None:
        return None
    provisioned = sum(
        v.size for v in volumes if v.vg == lv.vg and v.pool == lv.pool and v.attr.startswith("V")
    )
    return ThinPool(
        f"{pool.vg}/{pool.name}",
        f"{lv.vg}/{lv.name}",
        pool.size,
        pool.data_percent,
        pool.metadata_percent,
        provisioned,
    )


def snapshots_of_volume(device: str, volumes: Sequence[LogicalVolume]) -> list[LogicalVolume]:
    """The snapshots of the logical volume ``device`` (a mount's source) is: thin ones (type 'V', in
    its thin pool) and classic ones ('s', or 'S' once invalid: a copy-on-write volume of their own)."""
    name = _dm_name(device)
    return [v for v in volumes if v.origin and _dm(v.vg, v.origin) == name]


def could_be_thin(device: str) -> bool:
    """Only a device-mapper device can be a thin volume: others are not worth an lvs."""
    return device.startswith(("/dev/mapper/", "/dev/dm-")) or (
        device.startswith("/dev/") and device.count("/") == 3
    )


#: The last lvs reading: (its devices and runner, when it was taken, the pools found).
_last: tuple[tuple[object, ...], float, dict[str, ThinPool]] | None = None
_last_lock = threading.Lock()


def thin_pools(
    devices: Sequence[str],
    timeout: float,
    run: Callable[[list[str], float], str] = run_command,
    max_age: float = 0.0,
) -> dict[str, ThinPool]:
    """The thin pool under each of ``devices`` (mount sources) that is a thin volume, from one ``lvs``
    run when some device could be one (raises the command's faults). A reading of the same devices at
    most ``max_age`` seconds old is answered again: lvs takes 50-100 ms a call."""
    global _last
    candidates = [device for device in devices if could_be_thin(device)]
    if not candidates:
        return {}
    key, now = (*candidates, run), time.monotonic()
    with _last_lock:
        last = _last
    if max_age > 0 and last is not None and last[0] == key and now - last[1] <= max_age:
        return dict(last[2])
    volumes = parse_lvs(run(LVS, timeout))
    found = {device: thin_pool_of(device, volumes) for device in candidates}
    pools = {device: pool for device, pool in found.items() if pool is not None}
    with _last_lock:
        _last = (key, now, pools)
    return dict(pools)
