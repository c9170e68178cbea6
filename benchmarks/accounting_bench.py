"""Accounting benchmark: disk_usage explain against ``du -sx`` of the same filesystem, side by side.

Goal (issue 24): explain takes at most one ``du -x`` walk plus 10 %. Two filesystems: a loop ext4
holding the 200,000-file corpus (benchmarks/corpus.py), made and mounted in a private mount
namespace of this process (the script re-runs itself under ``unshare -m``, so no other process sees
it), and ``/``. Each round runs du and explain once each, alternating which goes first, on a warm
cache; the table gives the median wall time of the rounds. explain runs in this process as the tool
does (worker thread, progress meter live, then its words); its time includes every part (the walk,
the /proc scan, the look under the mount points, snapshot and overhead queries). Needs root.

    flock /tmp/bench.lock uv run python benchmarks/accounting_bench.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus

INSIDE = "SYSMCP_ACCOUNTING_BENCH_INSIDE"
TARGET = 1.10


def du_seconds(path: str) -> float:
    started = time.perf_counter()
    subprocess.run(["du", "-sxB1", path], check=False, capture_output=True)  # 1: a file vanished mid-walk
    return time.perf_counter() - started


def explain_seconds(path: str) -> tuple[float, dict[str, Any]]:
    import anyio

    from sysmcp.engine.paths import PathPolicy
    from sysmcp.protocol.context import RequestContext
    from sysmcp.results import ResultStore
    from sysmcp.tools.disk_usage import DiskUsage
    from sysmcp.tools.registry import ToolContext

    class Peer:
        async def notify(self, method: str, params: dict[str, Any]) -> None:
            pass

    async def call() -> dict[str, Any]:
        ctx = ToolContext(
            RequestContext(1, "tools/call", Peer(), progress_token="p"), PathPolicy(), ResultStore()
        )
        args = {"path": path, "explain": True, "unit": "percent", "all": False, "timeout_s": 600}
        output = await DiskUsage()(args, ctx)
        return output.structured["explain"]  # type: ignore[no-any-return]

    started = time.perf_counter()
    data = anyio.run(call)
    return time.perf_counter() - started, data


def measure(label: str, path: str, rounds: int) -> list[str]:
    du_times, explain_times = [], []
    du_seconds(path)  # warm the cache for both, and import sysmcp once (a running server has)
    explain_seconds(path)
    data: dict[str, Any] = {}
    for index in range(rounds):
        if index % 2:
            du_times.append(du_seconds(path))
            seconds, data = explain_seconds(path)
            explain_times.append(seconds)
        else:
            seconds, data = explain_seconds(path)
            explain_times.append(seconds)
            du_times.append(du_seconds(path))
    du_median, explain_median = statistics.median(du_times), statistics.median(explain_times)
    ratio = explain_median / du_median
    rest = data["remainder"]
    return [
        f"| {label} | {data['files']['files']:,} | {du_median:.2f} | {explain_median:.2f} | {ratio:.2f} "
        f"| {'met' if ratio <= TARGET else 'NOT met'} | {rest['percent']:.2f} % |"
    ]


def inside(rounds: int, files: int, slash: bool) -> None:
    work = Path(tempfile.mkdtemp(prefix="sysmcp-accounting-bench-"))
    image, mnt = work / "ext4.img", work / "mnt"
    mnt.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(8 << 30)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        made = corpus.generate(mnt / "tree", files)
        subprocess.run(["sync"], check=True)
        rows = [
            f"corpus: {made.files:,} files, {made.directories:,} directories, made in {made.seconds:.0f} s; "
            f"{rounds} rounds, median wall seconds; machine shared and loaded (2 cores): indicative only",
            "",
            "| filesystem | files walked | du -sx s | explain s | explain / du | goal ≤ 1.10 | unexplained |",
            "|---|---:|---:|---:|---:|---|---:|",
        ]
        print("\n".join(rows), flush=True)
        print(*measure(f"loop ext4, {files:,}-file corpus", str(mnt), rounds), flush=True)
        if slash:
            print(*measure("/ (ext4, shared)", "/", rounds), flush=True)
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
        image.unlink(missing_ok=True)
        mnt.rmdir()
        work.rmdir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument(
        "--skip-slash", action="store_true", help="only the loop filesystem, not / (a smoke run)"
    )
    options = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: it makes a loop filesystem in a private mount namespace")
    if os.environ.get(INSIDE) != "1":
        env = {**os.environ, INSIDE: "1"}
        argv = ["unshare", "-m", "--propagation", "private", sys.executable, *sys.argv]
        raise SystemExit(subprocess.run(argv, env=env, check=False).returncode)
    inside(options.rounds, options.files, not options.skip_slash)


if __name__ == "__main__":
    main()
