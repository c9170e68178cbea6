"""Fleet at scale: (a) ``disk_usage hosts:["all"]`` on N real sshd hosts (``tests.fleet.lab``)
against ``parallel-ssh -p 64 -i df -P`` in the same run, cold and warm, with the gateway's memory;
(b) 1,000 hosts whose ``ssh`` is a stub MCP answerer (``tests/fleet/stub_ssh.py``), so what is
measured is the gateway's own cost: hosts/s cold, the warm fan-out, descriptors and processes per
host, and nothing left after EOF or SIGTERM.

Everything runs on this machine: every simulated host's sshd, its remote Python and the gateway
share its cores, and loopback has no round trip. Figures are indicative on a loaded machine.

Usage (root, from the project root): ``flock /tmp/bench.lock uv run python benchmarks/fleet_scale_bench.py
lab --hosts 50`` and ``… stub --hosts 1000``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib

from sysmcp.protocol.client import ClientSession
from tests.fleet.lab import Lab, unavailable

STUB = Path(__file__).resolve().parent.parent / "tests" / "fleet" / "stub_ssh.py"


def pssh(hosts_file: Path, config: Path, count: int, forks: int) -> float:
    program = shutil.which("parallel-ssh") or shutil.which("pssh")
    if program is None:
        raise SystemExit("parallel-ssh is not installed (apt-get install pssh)")
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
            str(forks),
            "-t",
            "0",
            "-i",
            "df -P",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if done.stdout.count("[SUCCESS]") != count:
        raise SystemExit(f"pssh did not reach every host:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
    return elapsed


def tree(pid: int) -> tuple[int, int, int, int]:
    """(processes below the gateway, the gateway's descriptors, its RSS, its children's RSS in bytes)."""
    gateway = psutil.Process(pid)
    children = gateway.children(recursive=True)
    own = gateway.memory_info().rss
    rss = 0
    for child in children:
        with contextlib.suppress(psutil.Error):
            rss += child.memory_info().rss
    return len(children), gateway.num_fds(), own, rss


async def fan_out(
    command: list[str],
    env: dict[str, str],
    count: int,
    warm_calls: int,
    stop: str,
    call: tuple[str, dict[str, Any]] = ("disk_usage", {}),
    log: Path | None = None,
    every: bool = True,
) -> dict[str, Any]:
    """One fresh gateway: the cold call, warm calls (each one's time and how many hosts it had to
    reconnect), its footprint, then its end (EOF or SIGTERM). ``log`` keeps the gateway's stderr;
    ``every``: a call that some host did not answer ends the benchmark."""
    figures: dict[str, Any] = {"reconnected": [], "answered": []}
    tool, arguments = call
    stderr: Any = subprocess.DEVNULL if log is None else log.open("wb")
    async with await anyio.open_process(command, stderr=stderr, env=env) as process:
        assert process.stdin is not None and process.stdout is not None
        session = ClientSession(process.stdin, process.stdout)
        async with anyio.create_task_group() as group:
            group.start_soon(session.run)
            await session.initialize()

            async def ask() -> float:
                started = time.perf_counter()
                reply = await session.call_tool(tool, {**arguments, "hosts": ["all"]})
                elapsed = time.perf_counter() - started
                answered = reply.get("structuredContent", {}).get("answered", 0)  # none when none answered
                text = reply["content"][0]["text"]
                if every and answered != count:
                    raise SystemExit(f"{answered} of {count} answered: {text[:1500]}")
                figures["answered"].append(answered)
                again = re.search(r"(\d+) reconnected", text.split("\n", 1)[0])
                figures["reconnected"].append(int(again.group(1)) if again else 0)
                return elapsed

            figures["cold"] = await ask()
            figures["warms"] = [await ask() for _ in range(warm_calls)]
            figures["warm"] = sorted(figures["warms"])[warm_calls // 2]
            figures["processes"], figures["fds"], figures["own"], figures["rss"] = tree(process.pid)
            started = time.perf_counter()
            if stop == "eof":
                await process.stdin.aclose()
            else:
                process.send_signal(signal.SIGTERM)
            await process.wait()
            figures["exit_s"] = time.perf_counter() - started
            group.cancel_scope.cancel()
    if log is not None:
        stderr.close()
    return figures


def leftovers(marker: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if marker in line and proc.pid != os.getpid():
            found.append(f"{proc.pid} {line[:120]}")
    return found


#: Each host's tree for ``dir_usage``: what a real call walks, not only the answerer's start.
TREE = {f"d{d}/s{s}/f{f}.log": "x" * (64 * f + 1) for d in range(5) for s in range(4) for f in range(10)}


def lab_mode(
    hosts: int, forks: int, warm_calls: int, tool: str, log: Path | None, connect_timeout: float
) -> None:
    """Each host runs ``sysmcp --no-history`` (as a fleet's hosts would) and the call is ``tool`` on
    every host: ``dir_usage`` of its own 200-file tree (default), or ``disk_usage``. With a short
    ``connect_timeout`` (sysmcp's default is 10 s) hosts still starting are counted, not fatal."""
    reason = unavailable()
    if reason is not None:
        raise SystemExit(reason)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="fleet-scale-") as base:
        lab = Lab(Path(base))
        try:
            for i in range(hosts):
                lab.add(f"host{i:03d}", allow_df=True, files=TREE, sysmcp_args=["--no-history"])
            lab.inventory()
            hosts_file = Path(base) / "pssh_hosts"
            hosts_file.write_text("".join(f"root@{h.address}:{h.port}\n" for h in lab.hosts.values()))
            reference = pssh(hosts_file, lab.ssh_config, hosts, forks)
            command = [
                sys.executable,
                "-m",
                "sysmcp",
                *lab.gateway_args(connect_timeout),
                "--fleet-deadline",
                "900",
                "--fleet-forks",
                str(forks),
            ]
            if log is not None:
                command += ["--log-level", "debug"]
            arguments = {"path": str(Path(base) / "srv")} if tool == "dir_usage" else {}
            figures = anyio.run(
                fan_out,
                command,
                dict(os.environ),
                hosts,
                warm_calls,
                "eof",
                (tool, arguments),
                log,
                connect_timeout >= 120,
            )
            load_peak = os.getloadavg()
        finally:
            lab.close()
    load = f"load average {load_before[0]:.1f} before, {load_peak[0]:.1f} after the calls"
    print(
        f"{hosts} sshd hosts, remote sysmcp --no-history, {tool}, fan-out {forks}, "
        f"connect timeout {connect_timeout:g} s; {load}"
    )
    print("  hosts answered, cold then each warm call: " + ", ".join(map(str, figures["answered"])))
    print(f"  parallel-ssh -p {forks} -i df -P         {reference:8.2f} s")
    print(
        f"  sysmcp {tool} hosts=all, cold   {figures['cold']:8.2f} s   {figures['cold'] / reference:.2f} × pssh (target ≤ 1.5)"
    )
    warms = ", ".join(
        f"{t:.3f} s ({n} reconnected)"
        for t, n in zip(figures["warms"], figures["reconnected"][1:], strict=True)
    )
    print(
        f"  sysmcp {tool} hosts=all, warm   {figures['warm']:8.3f} s   {figures['warm'] / reference:.3f} × pssh (target ≤ 0.25); each: {warms}"
    )
    print(
        f"  gateway {figures['own'] / 2**20:.0f} MiB RSS ({figures['own'] / hosts / 1024:.0f} KiB per host); its ssh "
        f"processes {figures['rss'] / hosts / 1024:.0f} KiB RSS per host (shared pages counted in each); "
        f"{figures['processes'] / hosts:.2f} processes and {figures['fds'] / hosts:.2f} gateway fds per host"
    )


def stub_mode(hosts: int, forks: int, warm_calls: int) -> None:
    with tempfile.TemporaryDirectory(prefix="fleet-stub-") as base:
        program = Path(base) / "ssh"
        program.write_text(f"#!{sys.executable} -SE\n" + STUB.read_text())
        program.chmod(0o755)
        inventory = Path(base) / "hosts"
        inventory.write_text("".join(f"ok{i:04d}\n" for i in range(hosts)))
        env = {**os.environ, "PATH": f"{base}{os.pathsep}{os.environ['PATH']}"}
        command = [
            sys.executable,
            "-m",
            "sysmcp",
            "--inventory",
            str(inventory),
            "--fleet-deadline",
            "600",
            "--connect-timeout",
            "120",
            "--fleet-forks",
            str(forks),
        ]
        rows = []
        for stop in ("eof", "sigterm"):
            figures = anyio.run(fan_out, command, env, hosts, warm_calls, stop)
            time.sleep(1)  # ssh children are reaped by the gateway before it exits; a moment for ps
            rows.append((stop, figures, leftovers(base)))
    print(f"{hosts} stub hosts (ssh = a tiny MCP answerer), fan-out {forks}")
    for stop, f, left in rows:
        print(
            f"  cold {f['cold']:6.2f} s = {hosts / f['cold']:5.1f} hosts/s (target ≥ 20); warm {f['warm']:.3f} s "
            f"(target < 2); {f['processes'] / hosts:.2f} processes and {f['fds'] / hosts:.2f} gateway fds per host; "
            f"gateway RSS {f['own'] / 2**20:.0f} MiB ({f['own'] / hosts / 1024:.0f} KiB per host); after {stop.upper()}: exit in {f['exit_s']:.2f} s, "
            f"{len(left)} processes left" + (f" {left[:3]}" if left else "")
        )


def start_mode(starts: int, python: str) -> None:
    """The CPU of one remote start (``python -m sysmcp``: imports, initialize, one disk_usage), what
    every cold host costs on top of its sshd; ``hosts × this / cores`` is the cold floor here. Beside
    it the least a Python stdio answerer costs (``bare_server.py``: asyncio, no MCP rules at all) and
    the least an anyio one costs (``bare_anyio_server.py``: sysmcp's core is on anyio).

    Each start runs as sshd would start it: from another directory (``-m sysmcp`` is the installed
    one, not the current directory's) and without ``PYTHONDONTWRITEBYTECODE``, after one start that
    compiles what was not compiled yet; its CPU (user + sys) comes from ``wait4``."""
    import json
    import statistics

    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "disk_usage", "arguments": {}},
        },
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    here = Path(__file__).resolve().parent
    bare, bare_anyio = str(here / "bare_server.py"), str(here / "bare_anyio_server.py")
    cores = os.cpu_count() or 1
    starts_of = (
        ("sysmcp", [python, "-m", "sysmcp"]),
        ("bare", [python, bare]),
        ("anyio", [python, bare_anyio]),
    )
    with tempfile.TemporaryDirectory(prefix="fleet-start-") as elsewhere:
        for name, argv in starts_of:
            cpu, walls = [], []
            for n in range(starts + 1):
                started = time.perf_counter()
                process = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    env=env,
                    cwd=elsewhere,
                )
                out = _talk(process, data)
                _, status, usage = os.wait4(process.pid, 0)
                process.returncode = os.waitstatus_to_exitcode(status)
                assert process.returncode == 0 and out.count(b'"id":') >= 2, out[:300]
                if n:  # the first one compiles what is not compiled yet
                    walls.append(time.perf_counter() - started)
                    cpu.append(usage.ru_utime + usage.ru_stime)
            median = statistics.median(cpu)
            print(
                f"one remote start, {name:6} (initialize, disk_usage, EOF): {median * 1000:4.0f} ms CPU "
                f"(median of {starts}, min {min(cpu) * 1000:.0f}), {statistics.median(walls) * 1000:4.0f} ms wall; "
                f"alone on {cores} cores: {median / cores * 1000:.0f} ms per host"
            )


def _talk(process: subprocess.Popen[bytes], data: bytes) -> bytes:
    """Write the requests, close stdin, read stdout to its end (the process is reaped by the caller)."""
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(data)
    process.stdin.close()
    return process.stdout.read()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=("lab", "stub", "start"))
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--forks", type=int, default=64)
    parser.add_argument("--warm-calls", type=int, default=3, help="warm calls; with start: starts measured")
    parser.add_argument("--connect-timeout", type=float, default=120.0, help="lab: the gateway's")
    parser.add_argument(
        "--tool", choices=("dir_usage", "disk_usage"), default="dir_usage", help="lab: the call"
    )
    parser.add_argument(
        "--log", type=Path, help="lab: keep the gateway's debug log (why sessions ended) here"
    )
    parser.add_argument(
        "--python", default=sys.executable, help="start: the interpreter whose installed sysmcp is measured"
    )
    args = parser.parse_args()
    if args.mode == "start":
        start_mode(args.warm_calls, args.python)
    elif args.mode == "lab":
        lab_mode(args.hosts, args.forks, args.warm_calls, args.tool, args.log, args.connect_timeout)
    else:
        stub_mode(args.hosts, args.forks, args.warm_calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
