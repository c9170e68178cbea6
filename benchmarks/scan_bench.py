"""Scan benchmark: sysmcp's dir_usage scanner against ``du -s`` (and gdu, ncdu when installed), side by side.

Every round runs each contender once, in a rotating order, on the same warm tree, so machine noise
hits them all alike. Each contender is its own process. For the Python contenders the time is the
scan itself, measured inside the child after its imports (what a running server pays per call);
interpreter start-up is not counted. The sysmcp scan runs exactly as the tool does: in an anyio
worker thread, with cancellation checks and the progress meter live, then renders its answer.
CPU time (user + system, of every process a contender used) is reported beside wall time: it is
far less sensitive to other load, and shows what sharing a scan between processes costs in total.

    uv run python benchmarks/scan_bench.py                      # 200,000-file corpus in /tmp
    uv run python benchmarks/scan_bench.py --root /srv --no-corpus --rounds 3
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus

TARGET_RATIO = 1.5
TARGET_RSS_MB = 100
GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None

CHILD = r"""
import json, os, sys, time
mode, root = sys.argv[1], sys.argv[2]
if mode == "sysmcp":
    import anyio, anyio.to_thread
    from sysmcp.protocol.context import Meter
    from sysmcp.engine.usage import UsageRequest, scan_usage
    from sysmcp.tools.dir_usage import FULL_DIRECTORIES, FULL_FILES, INPUT_SCHEMA, answer
    from sysmcp.tools.arguments import validate_arguments

    args = validate_arguments(INPUT_SCHEMA, {"path": root})

    def work():
        request = UsageRequest(FULL_FILES, FULL_DIRECTORIES, 1, True, 0, 300.0, root=os.fsencode(root))
        meter, seen = Meter(), [0]

        def report(entries, bytes_seen):  # what dir_usage's handler does with a report
            meter.done = entries
            seen[0] = bytes_seen

        usage = scan_usage(request, report, meter.cancel)
        answer(root, usage, args)
        return usage.totals.disk

    async def run():
        return await anyio.to_thread.run_sync(work)

    started, cpu_started = time.perf_counter(), time.process_time()
    size = anyio.run(run)
elif mode == "walk_files":
    from sysmcp.engine.walk._walk import SkipCounter, WalkOptions, walk_files
    started, cpu_started = time.perf_counter(), time.process_time()
    size = sum(e.stat.st_size for e in walk_files(os.fsencode(root), WalkOptions(), SkipCounter(), lambda: None))
else:  # the plain os.scandir walk a first version would write
    started, cpu_started = time.perf_counter(), time.process_time()
    size, stack = 0, [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                size += st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
elapsed = time.perf_counter() - started
cpu = time.process_time() - cpu_started
import resource
children = resource.getrusage(resource.RUSAGE_CHILDREN)  # forked scan processes, when there were any
cpu += children.ru_utime + children.ru_stime
print(json.dumps({"seconds": elapsed, "cpu": cpu, "size": size}))
"""


@dataclass
class Contender:
    name: str
    command: list[str]
    project: Path | None = None  # the checkout on PYTHONPATH (None: this one)
    in_process_time: bool = False  # the child reports its own scan time on stdout
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rss_kb: list[int] = field(default_factory=list)


def measure(contender: Contender, project: Path) -> None:
    """One run: wall (or in-process) seconds, CPU seconds, and the contender's own peak RSS.

    The peak comes from GNU time when installed: ``wait4`` on a child forked from this Python process
    also counts the pages it shared with us before ``exec``, which inflates small tools like du.
    """
    project = contender.project or project
    env = {**os.environ, "PYTHONPATH": str(project)}
    with (
        tempfile.NamedTemporaryFile("r") as report,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        prefix = [GNU_TIME, "-f", "%M %U %S", "-o", report.name] if GNU_TIME else []
        started = time.perf_counter()
        process = subprocess.Popen(
            [*prefix, *contender.command], stdout=out, stderr=err, env=env, cwd=project
        )
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        if process.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{contender.name} failed: {err.read()[-2000:].decode(errors='replace')}")
        if GNU_TIME:
            rss_kb, user, system = report.read().split()[-3:]
            rss, cpu = int(rss_kb), float(user) + float(system)
        else:
            rss, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
        if contender.in_process_time:
            out.seek(0)
            child = json.loads(out.read())
            wall, cpu = child["seconds"], child["cpu"]
    contender.seconds.append(wall)
    contender.cpu.append(cpu)
    contender.rss_kb.append(rss)


def before_child(bench: Path) -> str:
    """The child script of another checkout's scan_bench: it calls that checkout's own internals."""
    tree = ast.parse(bench.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CHILD" for t in node.targets):
            value = ast.literal_eval(node.value)
            if isinstance(value, str):
                return value
    raise SystemExit(f"{bench} has no CHILD script")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "sysmcp-corpus-200k")
    parser.add_argument("--files", type=int, default=200_000, help="corpus size when generating (200000)")
    parser.add_argument("--no-corpus", action="store_true", help="scan --root as it is; generate nothing")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per contender (7)")
    parser.add_argument("--check", action="store_true", help="exit 1 when sysmcp misses a target")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="CHECKOUT",
        help="also time another checkout's scan (its .venv and its own benchmarks/scan_bench.py child) "
        "in the same rounds",
    )
    args = parser.parse_args(argv)
    project = Path(__file__).resolve().parent.parent
    root = args.root
    if not args.no_corpus:
        made = corpus.ensure(root, args.files)
        if made is not None:
            print(f"generated {made.files:,} files in {made.seconds:.1f} s", file=sys.stderr)
    target = str(root)
    python = sys.executable
    contenders = [
        Contender("du -s", ["du", "-s", target]),
        Contender("sysmcp dir_usage scan", [python, "-c", CHILD, "sysmcp", target], in_process_time=True),
        Contender("sysmcp walk_files", [python, "-c", CHILD, "walk_files", target], in_process_time=True),
        Contender("plain os.scandir walk", [python, "-c", CHILD, "scandir", target], in_process_time=True),
    ]
    if args.before is not None:
        before = args.before.resolve()
        child = before_child(before / "benchmarks" / "scan_bench.py")
        python_before = str(before / ".venv" / "bin" / "python")
        for mode, name in (("sysmcp", "sysmcp dir_usage scan"), ("walk_files", "sysmcp walk_files")):
            contenders.append(
                Contender(f"{name} (before)", [python_before, "-c", child, mode, target], before, True)
            )
    if shutil.which("gdu"):
        contenders.append(Contender("gdu", ["gdu", "--non-interactive", "--no-progress", "-s", "-x", target]))
    if shutil.which("ncdu"):
        contenders.append(Contender("ncdu", ["ncdu", "-0", "-x", "-o", "/dev/null", target]))
    for contender in contenders:  # warm the page and dentry caches: every contender sees them warm
        measure(contender, project)
        contender.seconds.clear()
        contender.cpu.clear()
        contender.rss_kb.clear()
    for round_number in range(args.rounds):
        shift = round_number % len(contenders)
        for contender in contenders[shift:] + contenders[:shift]:
            measure(contender, project)
        print(f"round {round_number + 1}/{args.rounds} done", file=sys.stderr)

    reference = contenders[0]
    ref_median, ref_min = statistics.median(reference.seconds), min(reference.seconds)
    ref_cpu = statistics.median(reference.cpu) or 0.001  # du on a tiny tree: below the clock's tick
    print(
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}, {os.cpu_count()} CPUs; "
        f"tree: {target}; {args.rounds} rounds; load average at the end {os.getloadavg()[0]:.2f}\n"
    )
    print(
        "| contender | median (s) | min (s) | median / du -s | min / du -s min | CPU median (s) "
        "| CPU / du -s | peak RSS (MB) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for c in contenders:
        median, cpu = statistics.median(c.seconds), statistics.median(c.cpu)
        print(
            f"| {c.name} | {median:.3f} | {min(c.seconds):.3f} | {median / ref_median:.2f} | "
            f"{min(c.seconds) / ref_min:.2f} | {cpu:.3f} | {cpu / ref_cpu:.2f} | {max(c.rss_kb) / 1024:.1f} |"
        )
    sysmcp = contenders[1]
    ratio = statistics.median(sysmcp.seconds) / ref_median
    rss_mb = max(sysmcp.rss_kb) / 1024
    ok = ratio <= TARGET_RATIO and rss_mb < TARGET_RSS_MB
    print(
        f"\ntargets: sysmcp scan <= {TARGET_RATIO} x du -s (median wall: {ratio:.2f} x), peak RSS < "
        f"{TARGET_RSS_MB} MB ({rss_mb:.1f} MB): {'PASS' if ok else 'FAIL'}"
    )
    print(
        "Python rows time the scan inside an already started interpreter (its RSS includes the interpreter); "
        "du, gdu and ncdu rows are whole runs."
    )
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
