"""disk_health benchmark: the tool for every device here against the shell doing the same reads.

Goal (issue 36): ``disk_health`` for all devices in under 2 s when smartctl answers promptly, and bounded
by the per-device timeout when it does not. Each round times one ``tools/call disk_health`` on a running
server (``python -m sysmcp --no-history``) and, in the same round, the shell's
``smartctl --scan-open`` plus ``smartctl -j -a`` for each whole disk of /sys/block, one after another.
Then the same call with a smartctl that never answers (a script that sleeps, first on PATH) and
``timeout_s=2``: the call must end near 2 s, however many devices. The table gives medians.

    flock /tmp/bench.lock uv run python benchmarks/health_bench.py --rounds 5
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hash_bench import Server  # the one JSON-RPC client the benchmarks share

TARGET_S = 2.0
HUNG_TIMEOUT_S = 2
SHELL = (
    "smartctl --scan-open --json >/dev/null; "
    "for d in /sys/block/*; do case $(readlink -f $d) in */virtual/*) ;; *) "
    "smartctl -j -a /dev/$(basename $d) >/dev/null;; esac; done"
)


def tool_call(server: Server, arguments: dict[str, object]) -> tuple[float, int]:
    started = time.perf_counter()
    result = server.request("tools/call", {"name": "disk_health", "arguments": arguments})
    seconds = time.perf_counter() - started
    return seconds, len(result["structuredContent"]["devices"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    server = Server(options=["--no-history"])
    tool_times, shell_times, devices = [], [], 0
    for _ in range(args.rounds):
        seconds, devices = tool_call(server, {})
        tool_times.append(seconds)
        started = time.perf_counter()
        subprocess.run(["sh", "-c", SHELL], check=False)
        shell_times.append(time.perf_counter() - started)
    server.finish()
    with tempfile.TemporaryDirectory() as fake:
        script = Path(fake) / "smartctl"
        script.write_text("#!/bin/sh\nexec sleep 600\n")
        script.chmod(0o755)
        os.environ["PATH"] = f"{fake}:{os.environ['PATH']}"
        server = Server(options=["--no-history"])
        hung, hung_devices = tool_call(server, {"timeout_s": HUNG_TIMEOUT_S})
        server.finish()
    tool, shell = statistics.median(tool_times), statistics.median(shell_times)
    print("| case | devices | disk_health | shell (smartctl --scan-open + -j -a each) | target |")
    print("|---|---|---|---|---|")
    print(f"| smartctl answers | {devices} | {tool:.3f} s | {shell:.3f} s | < {TARGET_S:g} s |")
    print(
        f"| smartctl hangs, timeout_s={HUNG_TIMEOUT_S} | {hung_devices} | {hung:.3f} s | (would hang) | "
        f"≈ {HUNG_TIMEOUT_S} s per batch of 8 devices (the scan runs beside them) |"
    )
    return 0 if tool < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
