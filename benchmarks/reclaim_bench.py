"""Reclaim benchmark: ``reclaim_plan`` of a path against ``dir_usage`` of the same path, side by side.

Goal (issue 25): ``reclaim_plan`` for ``/`` in at most the time of one ``dir_usage`` of ``/`` plus 2 s, in at
most 100 MB. Each round starts one server per tool (``python -m sysmcp --no-history``, so history writes do
not count), asks the same call twice over stdio (a fresh call, then the warm one, as a desktop host does),
and reads the server's peak RSS from ``wait4`` when it exits. The tools alternate which goes first. The
table gives the median of the rounds.

    flock /tmp/bench.lock uv run python benchmarks/reclaim_bench.py --path / --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hash_bench import Server  # the one JSON-RPC client the benchmarks share

TARGET_EXTRA_S = 2.0
TARGET_RSS_MB = 100.0
#: dir_usage's default budget is 30 s (300 at most); reclaim_plan has none to give.
ARGUMENTS: dict[str, dict[str, Any]] = {"dir_usage": {"timeout_s": 300}, "reclaim_plan": {}}


def one_server(tool: str, path: str) -> tuple[float, float, float, bool]:
    """Seconds of the fresh call, of the warm one, the server's peak RSS in MB, and whether it was cut."""
    server = Server(options=["--no-history"])
    times, partial = [], False
    for _ in range(2):
        started = time.perf_counter()
        result = server.request("tools/call", {"name": tool, "arguments": ARGUMENTS[tool] | {"path": path}})
        times.append(time.perf_counter() - started)
        text = " ".join(c.get("text", "") for c in result["content"])
        partial = partial or "PARTIAL" in text or bool(result.get("isError"))
    return times[0], times[1], server.finish(), partial


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default="/")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows: dict[str, list[tuple[float, float, float, bool]]] = {"dir_usage": [], "reclaim_plan": []}
    for round_no in range(args.rounds):
        order = ["dir_usage", "reclaim_plan"] if round_no % 2 == 0 else ["reclaim_plan", "dir_usage"]
        for tool in order:
            rows[tool].append(one_server(tool, args.path))
    print(f"path {args.path}, {args.rounds} rounds, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"{'tool':14} {'fresh s':>8} {'warm s':>8} {'peak RSS MB':>12} {'cut':>4}")
    med: dict[str, tuple[float, float, float]] = {}
    for tool, runs in rows.items():
        fresh = statistics.median(r[0] for r in runs)
        warm = statistics.median(r[1] for r in runs)
        rss = max(r[2] for r in runs)
        med[tool] = (fresh, warm, rss)
        print(
            f"{tool:14} {fresh:8.2f} {warm:8.2f} {rss:12.1f} {'yes' if any(r[3] for r in runs) else 'no':>4}"
        )
    extra_fresh = med["reclaim_plan"][0] - med["dir_usage"][0]
    extra_warm = med["reclaim_plan"][1] - med["dir_usage"][1]
    ok = max(extra_fresh, extra_warm) <= TARGET_EXTRA_S and med["reclaim_plan"][2] <= TARGET_RSS_MB
    print(
        f"reclaim_plan - dir_usage: fresh {extra_fresh:+.2f} s, warm {extra_warm:+.2f} s "
        f"(goal <= +{TARGET_EXTRA_S:g} s); reclaim_plan peak RSS {med['reclaim_plan'][2]:.1f} MB "
        f"(goal <= {TARGET_RSS_MB:g} MB): {'met' if ok else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
