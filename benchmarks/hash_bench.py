"""Hashing benchmark: sysmcp through its own server versus the command-line tools, in one run.

Two parts, each printed as a Markdown table with ratios against the reference tool:

1. One large file (1 GiB by default, random bytes, page cache warmed first): ``file_sha256`` through a
   spawned ``python -m sysmcp`` (raw JSON-RPC over pipes; timed from sending ``tools/call`` to reading
   its result; with and without a progress token, to price progress) against ``openssl dgst -sha256``
   (timed as a whole process, start-up included). With ``b3sum`` installed, also ``hash_tree
   algorithm=blake3`` on the same file against ``b3sum``; with ``--coreutils``, ``sha256sum`` too.
2. Many small files (the scan corpus, 20,000 files by default): ``hash_tree`` against
   ``find DIR -type f -print0 | xargs -0 sha256sum`` (and ``b3sum`` when installed); the manifests are
   compared so a fast wrong answer cannot win.

Why a spawned server and raw JSON-RPC: the claim is end-to-end speed as a client sees it, so the
client is a few lines of stdlib and shares nothing with sysmcp. Rounds are interleaved so machine
noise hits every contender alike; the best round is what each tool can do, the median what it did.

    uv run python benchmarks/hash_bench.py                       # 1 GiB file, 20,000 small files
    uv run python benchmarks/hash_bench.py --size-mib 2048 --rounds 7 --files 50000 --coreutils
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus

SPEED_TARGET = 0.90  # file_sha256 end to end must reach this fraction of openssl's throughput
PROGRESS_BUDGET = 0.02  # and progress may cost at most this fraction


class Server:
    """``python -m sysmcp`` on pipes: one JSON object per line each way; notifications are skipped."""

    def __init__(self, python: str | None = None, options: Sequence[str] = ()) -> None:
        """``python``: another interpreter whose installed sysmcp is run (another checkout's venv);
        ``options``: sysmcp's own command-line options (e.g. ``--no-history``)."""
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        # Bytecode is cached as on any installed Python: with PYTHONDONTWRITEBYTECODE set (some CI and
        # container images set it) every fresh server would compile each module it imports from source,
        # tens of milliseconds charged to whichever request first imports it.
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        # -P: the interpreter's own installed sysmcp, never a checkout that happens to be the cwd
        self.proc = subprocess.Popen(
            [python or sys.executable, "-P", "-m", "sysmcp", *options],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self._ids = 0
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "hash-bench", "version": "1"},
            },
        )
        self._write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        # A host lists the tools before it calls one; sysmcp loads a tool's module (and its engine)
        # when it is first listed or called, so without this a fresh server's first timed call would
        # also pay for those imports, which a host has already paid for at tools/list.
        self.request("tools/list", {})

    def _write(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._ids += 1
        self._write({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                self._stderr.seek(0)
                raise SystemExit(f"sysmcp exited: {self._stderr.read()[-2000:].decode(errors='replace')}")
            message = json.loads(line)
            if message.get("id") == self._ids:
                if "error" in message:
                    raise SystemExit(f"sysmcp error: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    def call(
        self, tool: str, arguments: dict[str, Any], *, progress: bool = False
    ) -> tuple[float, dict[str, Any]]:
        """Seconds from sending ``tools/call`` to reading its result, and the structured result."""
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if progress:
            params["_meta"] = {"progressToken": self._ids + 1}
        started = time.perf_counter()
        result = self.request("tools/call", params)
        seconds = time.perf_counter() - started
        if result.get("isError"):
            raise SystemExit(f"{tool} failed: {result['content'][0]['text']}")
        structured: dict[str, Any] = result["structuredContent"]
        if structured.get("manifest_uri"):
            read = self.request("resources/read", {"uri": structured["manifest_uri"]})
            structured["manifest"] = read["contents"][0]["text"]
        return seconds, structured

    def cpu_seconds(self, *, children: bool = False) -> float:
        """User + system CPU time of the server process so far; with ``children``, also of the worker
        processes it forked and has waited for (the kernel adds theirs when they are reaped)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        if children:
            ticks += int(fields[13]) + int(fields[14])
        return ticks / os.sysconf("SC_CLK_TCK")

    def finish(self) -> float:
        """End the session (stdin closed) and wait for the server to exit: its peak RSS in MB, from
        ``wait4`` (the kernel's own figure, the server alone)."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self._stderr.close()
        return usage.ru_maxrss / 1024

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


def timed_process(
    command: list[str] | str, *, shell: bool = False, cwd: Path | None = None
) -> tuple[float, bytes]:
    started = time.perf_counter()
    done = subprocess.run(command, shell=shell, cwd=cwd, capture_output=True, check=True)
    return time.perf_counter() - started, done.stdout


def make_file(path: Path, size: int) -> None:
    block = os.urandom(1 << 20)
    with path.open("wb") as out:
        for i in range(size >> 20):
            out.write(block[i % 7 :] + block[: i % 7])  # every MiB differs a little; no compression tricks
    with path.open("rb") as warm:  # into the page cache: this measures hashing, not the disk
        while warm.read(8 << 20):
            pass


def interleave(contenders: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Each round runs every contender once, the starting one rotating, so noise is shared."""
    names = list(contenders)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(contenders[name]())
            print(f"  round {r + 1}/{rounds} {name}: {times[name][-1]:.3f} s", file=sys.stderr)
    return times


def table(
    title: str, times: dict[str, list[float]], reference: str, work: float, unit: str, scale: float
) -> str:
    """Best and median per contender, as throughput and as a ratio to the reference's throughput."""
    best_ref = min(times[reference])
    median_ref = statistics.median(times[reference])
    rows = [
        f"### {title}",
        "",
        f"| contender | best (s) | median (s) | best {unit} | median {unit} | best vs {reference} | median vs {reference} |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, samples in times.items():
        best, median = min(samples), statistics.median(samples)
        rows.append(
            f"| {name} | {best:.3f} | {median:.3f} | {work / best / scale:.2f} | {work / median / scale:.2f} | "
            f"{best_ref / best:.2f} | {median_ref / median:.2f} |"
        )
    return "\n".join(rows)


def large_file(
    args: argparse.Namespace, server: Server, workdir: Path, before: Server | None = None
) -> tuple[str, list[str]]:
    target = workdir / "large.bin"
    size = args.size_mib << 20
    print(f"writing and warming a {args.size_mib} MiB file …", file=sys.stderr)
    make_file(target, size)
    expected = subprocess.run(["openssl", "dgst", "-sha256", "-r", target], capture_output=True, check=True)
    digest = expected.stdout.split()[0].decode()

    def sysmcp_sha256(progress: bool, server: Server = server) -> Callable[[], float]:
        def run() -> float:
            seconds, result = server.call("file_sha256", {"path": str(target)}, progress=progress)
            assert result["sha256"] == digest, "file_sha256 disagrees with openssl"
            return seconds

        return run

    contenders: dict[str, Callable[[], float]] = {
        "openssl dgst -sha256": lambda: timed_process(["openssl", "dgst", "-sha256", str(target)])[0],
        "sysmcp file_sha256": sysmcp_sha256(False),
        "sysmcp file_sha256 + progress": sysmcp_sha256(True),
    }
    if before is not None:
        contenders["sysmcp file_sha256 (before)"] = sysmcp_sha256(False, before)
    if args.coreutils:
        contenders["sha256sum (coreutils)"] = lambda: timed_process(["sha256sum", str(target)])[0]
    b3sum = shutil.which("b3sum")
    if b3sum:
        b3_digest = subprocess.run(
            [b3sum, "--no-names", target], capture_output=True, check=True
        ).stdout.strip()

        def sysmcp_blake3(server: Server = server) -> Callable[[], float]:
            def run() -> float:
                seconds, result = server.call("hash_tree", {"path": str(target), "algorithm": "blake3"})
                assert result["manifest"].split()[0] == b3_digest.decode(), (
                    "hash_tree blake3 disagrees with b3sum"
                )
                return seconds

            return run

        contenders["b3sum"] = lambda: timed_process([b3sum, str(target)])[0]
        contenders["sysmcp hash_tree blake3"] = sysmcp_blake3()
        if before is not None:
            contenders["sysmcp hash_tree blake3 (before)"] = sysmcp_blake3(before)
    times = interleave(contenders, args.rounds)
    notes = []
    ratio = min(times["openssl dgst -sha256"]) / min(times["sysmcp file_sha256"])
    median_ratio = statistics.median(times["openssl dgst -sha256"]) / statistics.median(
        times["sysmcp file_sha256"]
    )
    notes.append(
        f"file_sha256 vs openssl: {ratio:.2f} best, {median_ratio:.2f} median (target >= {SPEED_TARGET:.2f}): "
        f"{'PASS' if ratio >= SPEED_TARGET else 'FAIL'}"
    )
    notes.append(progress_cost(args, server, target))
    if not b3sum:
        notes.append("b3sum is not installed: the blake3 rows are left out")
    target.unlink()
    title = f"One {args.size_mib} MiB file, warm cache, {args.rounds} rounds (throughput in GB/s)"
    return table(title, times, "openssl dgst -sha256", size, "GB/s", 1e9), notes


def progress_cost(args: argparse.Namespace, server: Server, target: Path) -> str:
    """Price progress with many back-to-back pairs (plain, then with a token, order alternating).

    A single pair is at the mercy of a noisy machine; the median of many pair ratios much less so.
    Both the wall time and the server's CPU time (user + system, from /proc) are compared: CPU time is
    what progress really adds (a 10 Hz timer and a notification on the event loop) and is far less
    disturbed by other load, so it decides PASS/FAIL.
    """
    walls, cpus = [], []
    for i in range(args.progress_pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        measured: dict[bool, tuple[float, float]] = {}
        for progress in order:
            cpu_before = server.cpu_seconds()
            wall = server.call("file_sha256", {"path": str(target)}, progress=progress)[0]
            measured[progress] = (wall, server.cpu_seconds() - cpu_before)
        walls.append(measured[True][0] / measured[False][0])
        if measured[False][1]:  # CPU time counts in clock ticks (10 ms): a small file's call may cost none
            cpus.append(measured[True][1] / measured[False][1])
    if not cpus:
        return "progress not priced: no pair's plain call cost a clock tick of server CPU time (use a larger file)"
    wall_cost, cpu_cost = statistics.median(walls) - 1, statistics.median(cpus) - 1
    ticked = "" if len(cpus) == len(walls) else f", CPU of the {len(cpus)} a clock tick could time"
    return (
        f"progress costs {cpu_cost * 100:+.1f} % server CPU time and {wall_cost * 100:+.1f} % wall time (medians of "
        f"{len(walls)} back-to-back pairs on the same file{ticked}; budget {PROGRESS_BUDGET * 100:.0f} % of CPU time): "
        f"{'PASS' if cpu_cost <= PROGRESS_BUDGET else 'FAIL'}"
    )


def many_files(
    args: argparse.Namespace, server: Server, before: Server | None = None
) -> tuple[str, list[str]]:
    root: Path = args.corpus
    stats = corpus.ensure(root, args.files)
    if stats is not None:
        print(f"made {stats.files:,} files in {stats.seconds:.1f} s", file=sys.stderr)
    subprocess.run(["sh", "-c", "find . -type f -print0 | xargs -0 cat > /dev/null"], cwd=root, check=True)
    reference = "find + xargs sha256sum"
    outputs: dict[str, bytes] = {}

    def shell(name: str, command: str) -> Callable[[], float]:
        def run() -> float:
            seconds, out = timed_process(command, shell=True, cwd=root)
            outputs[name] = out
            return seconds

        return run

    def ours(algorithm: str, server: Server = server, suffix: str = "") -> Callable[[], float]:
        def run() -> float:
            seconds, result = server.call(
                "hash_tree", {"path": str(root), "algorithm": algorithm, "max_lines": 0}
            )
            outputs[f"sysmcp {algorithm}{suffix}"] = result["manifest"].encode()
            return seconds

        return run

    contenders = {
        reference: shell(reference, "find . -type f -print0 | xargs -0 sha256sum"),
        "sysmcp hash_tree sha256": ours("sha256"),
    }
    if before is not None:
        contenders["sysmcp hash_tree sha256 (before)"] = ours("sha256", before, " (before)")
    b3sum = shutil.which("b3sum")
    if b3sum:
        contenders["find + xargs b3sum"] = shell(
            "find + xargs b3sum", "find . -type f -print0 | xargs -0 b3sum"
        )
        contenders["sysmcp hash_tree blake3"] = ours("blake3")
        if before is not None:
            contenders["sysmcp hash_tree blake3 (before)"] = ours("blake3", before, " (before)")
    times = interleave(contenders, args.rounds)

    def digests(text: bytes) -> list[bytes]:
        return sorted(line.split()[0].lstrip(b"\\") for line in text.splitlines() if line)

    notes = []
    same = digests(outputs[reference]) == digests(outputs["sysmcp sha256"])
    notes.append(
        f"sha256 manifests agree with sha256sum's ({len(digests(outputs[reference])):,} lines): {same}"
    )
    if b3sum:
        same_b3 = digests(outputs["find + xargs b3sum"]) == digests(outputs["sysmcp blake3"])
        notes.append(f"blake3 manifests agree with b3sum's: {same_b3}")
    files = len(digests(outputs[reference]))
    title = f"{files:,} small files (scan corpus), warm cache, {args.rounds} rounds (thousands of files per second)"
    return table(title, times, reference, files, "kfiles/s", 1e3), notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=1024, help="size of the large file in MiB (1024)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per part (5)")
    parser.add_argument("--files", type=int, default=20_000, help="small files in the corpus (20000)")
    parser.add_argument(
        "--corpus",
        type=Path,
        default=Path(tempfile.gettempdir()) / "sysmcp-hash-corpus-20k",
        help="corpus path",
    )
    parser.add_argument("--progress-pairs", type=int, default=30, help="pairs for the progress cost (30)")
    parser.add_argument(
        "--coreutils", action="store_true", help="also time sha256sum on the large file (slow)"
    )
    parser.add_argument("--skip-large", action="store_true", help="only the many-files part")
    parser.add_argument("--skip-many", action="store_true", help="only the large-file part")
    parser.add_argument(
        "--before",
        metavar="PYTHON",
        help="also time another checkout's sysmcp (its venv's python) in the same interleaved rounds",
    )
    args = parser.parse_args(argv)
    if not shutil.which("openssl"):
        raise SystemExit("openssl is needed as the reference")
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "?",
    )
    openssl = subprocess.run(
        ["openssl", "version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}, {openssl}"
    )
    print()
    server = Server()
    before = None if args.before is None else Server(args.before)
    try:
        with tempfile.TemporaryDirectory(prefix="sysmcp-hash-bench-") as workdir:
            parts: list[tuple[str, list[str]]] = []
            if not args.skip_large:
                parts.append(large_file(args, server, Path(workdir), before))
            if not args.skip_many:
                parts.append(many_files(args, server, before))
            for text, notes in parts:
                print(text)
                print()
                for note in notes:
                    print(f"- {note}")
                print()
    finally:
        server.close()
        if before is not None:
            before.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
