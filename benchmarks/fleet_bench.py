"""Fleet benchmark: ``disk_usage hosts:["all"]`` on 20 simulated hosts against ``parallel-ssh … df -P``.

The hosts are real sshd servers on loopback (``tests.fleet.lab``: root, openssh-server, unshare).
Measured interleaved in one run, medians of each:

- pssh: ``parallel-ssh -h HOSTS -i df -P`` (Debian's pssh), its whole wall time;
- cold: a fresh sysmcp (started and initialized, no ssh session yet), the one fan-out call;
- warm: the same call again on the open sessions;
- local: ``disk_usage`` on this machine, on the same server.

Targets: cold ≤ 1.5 × pssh; warm ≤ 0.25 × pssh and ≤ 3 × local + 50 ms.

Usage (from the project root, as root): ``uv run python benchmarks/fleet_bench.py [--hosts 20] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sysmcp.protocol.client import ClientSession
from tests.fleet.lab import Lab, unavailable

COLD_TARGET = 1.5
WARM_TARGET = 0.25
LOCAL_FACTOR, LOCAL_SLACK = 3.0, 0.050


def pssh_program() -> str:
    for name in ("parallel-ssh", "pssh"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("parallel-ssh is not installed (apt-get install pssh)")


def run_pssh(program: str, hosts_file: Path, config: Path, count: int) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [
            program,
            "-h",
            str(hosts_file),
            "-x",
            f"-F {config}",
            "-O",
            "BatchMode=yes",
            "-p",
            "32",
            "-i",
            "df -P",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if done.stdout.count("[SUCCESS]") != count:
        raise SystemExit(f"pssh did not reach every host:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return elapsed


async def sysmcp_round(
    inventory: Path, config: Path, count: int, warm_calls: int
) -> tuple[float, list[float], list[float]]:
    """One fresh server: the cold fan-out, then warm ones and local ones, interleaved."""
    command = [sys.executable, "-m", "sysmcp", "--inventory", str(inventory), "--ssh-config", str(config)]
    async with await anyio.open_process(command, stderr=subprocess.DEVNULL) as process:
        assert process.stdin is not None and process.stdout is not None
        session = ClientSession(process.stdin, process.stdout)
        async with anyio.create_task_group() as group:
            group.start_soon(session.run)
            await session.initialize()

            async def fleet_call() -> float:
                started = time.perf_counter()
                reply = await session.call_tool("disk_usage", {"hosts": ["all"]})
                elapsed = time.perf_counter() - started
                answered = reply.get("structuredContent", {}).get("answered")
                if answered != count:
                    raise SystemExit(
                        f"sysmcp: {answered} of {count} hosts answered: {reply['content'][0]['text'][:2000]}"
                    )
                return elapsed

            async def local_call() -> float:
                started = time.perf_counter()
                await session.call_tool("disk_usage", {})
                return time.perf_counter() - started

            cold = await fleet_call()
            warm, local = [], []
            for _ in range(warm_calls):
                warm.append(await fleet_call())
                local.append(await local_call())
            await process.stdin.aclose()
            await process.wait()
            group.cancel_scope.cancel()
    return cold, warm, local


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5, help="fresh servers (cold samples) and pssh runs")
    parser.add_argument("--warm-calls", type=int, default=10, help="warm and local calls per server")
    args = parser.parse_args()
    reason = unavailable()
    if reason is not None:
        raise SystemExit(f"fleet_bench: {reason}")
    program = pssh_program()
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as base:
        lab = Lab(Path(base))
        try:
            for i in range(1, args.hosts + 1):
                lab.add(f"host{i:02d}", allow_df=True)
            inventory = lab.inventory({"bench": list(lab.hosts)})
            hosts_file = Path(base) / "pssh_hosts"
            hosts_file.write_text("".join(f"root@{h.address}:{h.port}\n" for h in lab.hosts.values()))
            pssh, cold, warm, local = [], [], [], []
            for _ in range(args.rounds):
                pssh.append(run_pssh(program, hosts_file, lab.ssh_config, args.hosts))
                c, w, loc = anyio.run(sysmcp_round, inventory, lab.ssh_config, args.hosts, args.warm_calls)
                cold.append(c)
                warm += w
                local += loc
        finally:
            lab.close()
    report(
        args.hosts,
        statistics.median(pssh),
        statistics.median(cold),
        statistics.median(warm),
        statistics.median(local),
    )
    return 0


def report(hosts: int, pssh: float, cold: float, warm: float, local: float) -> None:
    rows: list[tuple[str, float, str, bool | None]] = [
        (f"parallel-ssh -i df -P ({hosts} hosts)", pssh, "reference", None),
        (
            'sysmcp disk_usage hosts:["all"], cold',
            cold,
            f"≤ {COLD_TARGET} × pssh = {COLD_TARGET * pssh * 1000:.0f} ms",
            cold <= COLD_TARGET * pssh,
        ),
        (
            'sysmcp disk_usage hosts:["all"], warm',
            warm,
            f"≤ {WARM_TARGET} × pssh = {WARM_TARGET * pssh * 1000:.0f} ms",
            warm <= WARM_TARGET * pssh,
        ),
        (
            "",
            warm,
            f"≤ 3 × local + 50 ms = {(LOCAL_FACTOR * local + LOCAL_SLACK) * 1000:.0f} ms",
            warm <= LOCAL_FACTOR * local + LOCAL_SLACK,
        ),
        ("sysmcp disk_usage, this machine", local, "", None),
    ]
    print(f"{'measurement':<42} {'median':>10}  {'target':<34} verdict")
    for name, value, target, verdict in rows:
        shown = "" if verdict is None else ("PASS" if verdict else "FAIL")
        print(f"{name:<42} {value * 1000:>7.1f} ms  {target:<34} {shown}")


if __name__ == "__main__":
    raise SystemExit(main())
