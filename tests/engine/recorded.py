"""Command outputs recorded from the tools' documented formats (this VM has no device-mapper and no
ZFS): lvm2's ``lvs --reportformat json`` report and ``zfs list -Hp`` (tab-separated, exact numbers)."""

from __future__ import annotations

import json
from typing import Any

GiB = 1 << 30


def lv(
    name: str, attr: str, size: int, pool: str = "", data: str = "", meta: str = "", vg: str = "vg0"
) -> dict[str, str]:
    return {
        "lv_name": name,
        "vg_name": vg,
        "lv_attr": attr,
        "pool_lv": pool,
        "data_percent": data,
        "metadata_percent": meta,
        "lv_size": str(size),
    }


def lvs_report(pool_data: str = "97.00", pool_meta: str = "12.50", *extra: dict[str, Any]) -> str:
    """A 10 GiB thin pool overcommitted by two 20 GiB thin volumes, with lvm's hidden volumes (-a)."""
    rows = [
        lv("pool", "twi-aotz--", 10 * GiB, data=pool_data, meta=pool_meta),
        lv("[pool_tdata]", "Twi-ao----", 10 * GiB),
        lv("[pool_tmeta]", "ewi-ao----", 16 << 20),
        lv("[lvol0_pmspare]", "ewi-------", 16 << 20),
        lv("thin1", "Vwi-aotz--", 20 * GiB, pool="pool", data="40.00"),
        lv("thin2", "Vwi-aotz--", 20 * GiB, pool="pool", data="8.50"),
        lv("root", "-wi-ao----", 8 * GiB, vg="sys"),
        *extra,
    ]
    return json.dumps({"report": [{"lv": rows}]}, indent=2)


ZFS_LIST = (
    "\n".join(
        "\t".join(row)
        for row in (
            (
                "tank/home",
                "filesystem",
                "5368709120",
                "10737418240",
                "1073741824",
                "3221225472",
                "805306368",
                "268435456",
                "3221225472",
            ),
            ("tank/home@monday", "snapshot", "536870912", "-", "-", "-", "-", "-", "3000000000"),
            ("tank/home@tuesday", "snapshot", "131072", "-", "-", "-", "-", "-", "3100000000"),
            (
                "tank/home/alice",
                "filesystem",
                "805306368",
                "10737418240",
                "0",
                "805306368",
                "0",
                "0",
                "805306368",
            ),
        )
    )
    + "\n"
)


#: ``zpool list -Hp -o name,size,allocated,free,fragmentation,capacity,health``, written by hand in the
#: format zpool-list(8) and libzfs give with -H (tabs, no header) and -p (exact bytes; capacity and
#: fragmentation whole numbers without '%', fragmentation '-' where not known; an UNAVAIL pool's
#: figures '-'): a healthy pool at 42 %, a degraded one at 87 %, one that cannot be opened.
ZPOOL_LIST = (
    "tank\t3985729650688\t1674006454272\t2311723196416\t12\t42\tONLINE\n"
    "backup\t1992864825344\t1733792399360\t259072425984\t31\t87\tDEGRADED\n"
    "old\t-\t-\t-\t-\t-\tUNAVAIL\n"
)
#: ``zfs list -Hp -o name,used,available,referenced,quota,refquota,reservation,refreservation DATASET…``:
#: -p writes 'none' as 0. tank/home has a 100 GiB quota it has nearly reached (available is the quota
#: less used); backup/db no limit.
ZFS_LIMITS = (
    "tank/home\t106830036992\t544145408\t96636764160\t107374182400\t0\t0\t0\n"
    "backup/db\t536870912000\t259072425984\t536870912000\t0\t0\t10737418240\t0\n"
)
