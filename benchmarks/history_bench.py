"""What history costs: recording overhead on dir_usage, what_changed between two stored snapshots of
``/``, and a snapshot's size beside ``ncdu -o`` and ``duc index`` of the same tree.

    flock /tmp/bench.lock uv run python benchmarks/history_bench.py --tree /tmp/hist-corpus --rounds 5 --slash

Rounds alternate plain and recording scans so machine load falls on both alike; the table gives
medians. A shared machine makes the figures indicative only.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import MARKER, generate

from sysmcp.engine.paths import PathPolicy
from sysmcp.engine.usage import UsageRequest, scan_usage
from sysmcp.history import state
from sysmcp.history.store import DB_NAME
from sysmcp.protocol.context import RequestContext
from sysmcp.results import ResultStore
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.dir_usage import FULL_DIRECTORIES, FULL_FILES
from sysmcp.tools.history_hooks import recorded_scan
from sysmcp.tools.registry import ToolContext
from sysmcp.tools.what_changed import INPUT_SCHEMA, handle


def dir_usage_request(root: Path) -> UsageRequest:
    """What a default dir_usage call of ``root`` asks for (show both, max_depth 1)."""
    return UsageRequest(FULL_FILES, FULL_DIRECTORIES, 1, True, 0, 300.0, root=os.fsencode(root))


def cpu_now() -> float:
    """CPU seconds of this process and of the workers it forked and reaped (a shared walk's)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


CPU: list[float] = []  # the last scan's CPU seconds, handed from plain/recording to overhead


def plain(root: Path) -> float:
    started, cpu = time.perf_counter(), cpu_now()
    scan_usage(dir_usage_request(root))
    CPU.append(cpu_now() - cpu)
    return time.perf_counter() - started


def recording(root: Path) -> tuple[float, int]:
    started, cpu = time.perf_counter(), cpu_now()
    _, snap, note = recorded_scan(dir_usage_request(root), scan_usage)
    assert snap is not None, note
    CPU.append(cpu_now() - cpu)
    return time.perf_counter() - started, len(snap.dirs)


def snapshot_bytes(root: Path) -> tuple[int, int]:
    """(bytes, rows) one snapshot of ``root`` takes in a store of its own."""
    with tempfile.TemporaryDirectory() as place:
        state.configure(place)
        _, rows = recording(root)
        with sqlite3.connect(Path(place) / DB_NAME) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.execute("VACUUM")
        size = (Path(place) / DB_NAME).stat().st_size
        empty = Path(place) / "empty"
        state.configure(empty)
        assert state.active() is not None
        with sqlite3.connect(empty / DB_NAME) as db:
            db.execute("VACUUM")
        return size - (empty / DB_NAME).stat().st_size, rows


def overhead(root: Path, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as place:
        state.configure(place)
        plain(root)  # warm the caches for both
        times: dict[str, list[float]] = {"plain": [], "recording": [], "plain_cpu": [], "recording_cpu": []}
        rows = 0
        for _ in range(rounds):
            times["plain"].append(plain(root))
            times["plain_cpu"].append(CPU.pop())
            spent, rows = recording(root)
            times["recording"].append(spent)
            times["recording_cpu"].append(CPU.pop())
        state.configure(None)
    a, b = statistics.median(times["plain"]), statistics.median(times["recording"])
    cpu_a, cpu_b = statistics.median(times["plain_cpu"]), statistics.median(times["recording_cpu"])
    return {
        "plain": a,
        "recording": b,
        "overhead": b / a - 1,
        "cpu_overhead": cpu_b / cpu_a - 1,
        "rows": rows,
        "all": times,
    }


def what_changed_slash(rounds: int) -> list[float]:
    """what_changed between two stored snapshots of / (no new scan: the newest is minutes old)."""
    with tempfile.TemporaryDirectory() as place:
        state.configure(place)
        recording(Path("/"))
        recording(Path("/"))

        async def one() -> float:
            ctx = ToolContext(RequestContext(1, "tools/call", Peer()), PathPolicy(), ResultStore())
            args = validate_arguments(INPUT_SCHEMA, {"path": "/", "since": "last"})
            started = time.perf_counter()
            output = await handle(args, ctx)
            spent = time.perf_counter() - started
            assert output.structured["comparable"] and not output.structured["current"]["fresh"], output.text
            return spent

        spent = [anyio.run(one) for _ in range(rounds)]
        state.configure(None)
        return spent


def store_operations(count: int) -> dict[str, float]:
    """Microseconds per small write (a disk_usage reading), per kv put and per kv get: the store's
    own cost, which its connection handling decides (the scans above hide it)."""
    from sysmcp.history.snapshots import DiskReading
    from sysmcp.history.store import Store

    with tempfile.TemporaryDirectory() as place:
        store = Store.open(Path(place))
        reading = DiskReading("h", b"/", "8:1/0", 0.0, 100, 50, 50)
        timed: dict[str, float] = {}
        for name, op in (
            ("reading write", lambda i: store.save_readings([reading])),
            ("kv put", lambda i: store.put("bench", str(i % 50), b"x" * 200)),
            ("kv get", lambda i: store.get("bench", str(i % 50))),
        ):
            started = time.perf_counter()
            for i in range(count):
                op(i)
            timed[name] = (time.perf_counter() - started) / count * 1e6
        return timed


class Peer:
    async def notify(self, method: str, params: dict[str, Any]) -> None:
        return None


def others(root: Path) -> dict[str, Any]:
    """ncdu -o and duc index of the same tree: sizes and duc's index time."""
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as place:
        if shutil.which("ncdu"):
            out = Path(place) / "ncdu.json"
            started = time.perf_counter()
            subprocess.run(["ncdu", "-x", "-0", "-o", str(out), str(root)], check=True, capture_output=True)
            found["ncdu"] = (out.stat().st_size, time.perf_counter() - started)
        if shutil.which("duc"):
            db = Path(place) / "duc.db"
            started = time.perf_counter()
            subprocess.run(["duc", "index", "-x", "-d", str(db), str(root)], check=True, capture_output=True)
            spent = time.perf_counter() - started
            size = sum(p.stat().st_size for p in Path(place).glob("duc.db*"))
            found["duc"] = (size, spent)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", type=Path, default=Path("/tmp/hist-corpus"))
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slash", action="store_true", help="also scan / (slower)")
    parser.add_argument(
        "--store-ops", type=int, default=2000, metavar="N", help="small store operations timed"
    )
    parser.add_argument("--store-only", action="store_true", help="only the store operations (no tree)")
    args = parser.parse_args(argv)
    if args.store_ops:
        timed = store_operations(args.store_ops)
        print(f"load average {os.getloadavg()[0]:.1f}; {args.store_ops} of each store operation")
        print("| operation | µs each |\n|---|---|")
        for name, micros in timed.items():
            print(f"| {name} | {micros:,.0f} |")
        print()
    if args.store_only:
        return 0
    if not (args.tree / MARKER).exists():
        generate(args.tree, args.files)
    trees = [args.tree] + ([Path("/")] if args.slash else [])
    print(f"load average {os.getloadavg()[0]:.1f}; medians of {args.rounds} rounds (alternating)")
    print(
        "| tree | dir_usage | with recording | overhead | CPU overhead | dirs kept | snapshot | ncdu -o "
        "| duc index (time) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for tree in trees:
        rounds = args.rounds if tree != Path("/") else max(1, args.rounds // 2)
        result = overhead(tree, rounds)
        size, _ = snapshot_bytes(tree)
        theirs = others(tree)
        ncdu = f"{theirs['ncdu'][0] / 1e6:.2f} MB" if "ncdu" in theirs else "-"
        duc = f"{theirs['duc'][0] / 1e6:.2f} MB ({theirs['duc'][1]:.2f} s)" if "duc" in theirs else "-"
        print(
            f"| {tree} | {result['plain']:.3f} s | {result['recording']:.3f} s | {100 * result['overhead']:+.1f} % "
            f"| {100 * result['cpu_overhead']:+.1f} % | {result['rows']:,} | {size / 1e6:.3f} MB | {ncdu} | {duc} |"
        )
        print(
            f"<!-- {tree}: "
            + ", ".join(f"{k}={[round(t, 3) for t in v]}" for k, v in result["all"].items())
            + " -->"
        )
    if args.slash:
        spent = what_changed_slash(args.rounds)
        print(
            f"\nwhat_changed path=/ since=last between two stored snapshots: median {statistics.median(spent):.3f} s "
            f"(rounds: {', '.join(f'{t:.3f}' for t in spent)}; goal ≤ 0.5 s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
