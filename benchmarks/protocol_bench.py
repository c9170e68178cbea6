"""Protocol benchmark for any stdio MCP server: cold start and sequential ``tools/call`` round trips.

Why it is stdlib only and speaks raw JSON-RPC: the client must cost the same for every server it measures and
must share no code (or bugs) with sysmcp, so it writes newline-delimited JSON to a pipe with ``os.write`` and
waits on the other pipe with a selector. Servers are measured interleaved so machine noise hits all of them
alike.

Usage (from the project root)::

    uv run python benchmarks/protocol_bench.py                     # sysmcp vs the SDK reference server
    uv run python benchmarks/protocol_bench.py --server sysmcp="sysmcp" \\
        --server sdk="python benchmarks/sdk_server.py" --starts 10 --calls 2000 --json bench.json
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import selectors
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

PROTOCOL_VERSION = "2025-06-18"
COLD_START_TARGET = 0.30  # sysmcp's cold start must be at most this fraction of the reference's
CALLS_TARGET = 0.10  # and its N sequential calls at most this fraction of the reference's time
STDERR_TAIL = 2000  # bytes of a failing server's stderr shown in the error

JSONObject = dict[str, Any]

INITIALIZE_PARAMS: JSONObject = {
    "protocolVersion": PROTOCOL_VERSION,
    "capabilities": {},
    "clientInfo": {"name": "sysmcp-protocol-bench", "version": "1.0"},
}


class BenchError(RuntimeError):
    """A server died, stalled or answered with an error: its numbers would mean nothing, so the run stops."""


class StdioPeer:
    """One spawned server and raw pipes to it; replies are matched by id and everything else is skipped.

    The bench never answers the server (no replies to server requests, no pings): it only sends the handshake
    and the measured requests, so every server sees exactly the same traffic.
    """

    def __init__(self, name: str, argv: list[str], timeout: float) -> None:
        self.name = name
        self.timeout = timeout
        self.skipped = 0  # messages that were not the awaited reply (notifications, server requests)
        # A file, not a pipe: a chatty server never blocks on it. Closed in close(), hence no `with`.
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self._buf = bytearray()
        self._next_id = 0
        self.spawned_at = time.perf_counter()
        try:
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, bufsize=0
            )
        except OSError as exc:
            self._stderr.close()
            raise BenchError(f"{name}: cannot start {shlex.join(argv)}: {exc}") from exc
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in_fd = self.proc.stdin.fileno()
        self._out_fd = self.proc.stdout.fileno()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._out_fd, selectors.EVENT_READ)

    def send(self, message: JSONObject) -> None:
        """Write one message as one line; a short write is finished rather than trusted."""
        view = memoryview(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        while view:
            try:
                written = os.write(self._in_fd, view)
            except BrokenPipeError as exc:
                raise BenchError(f"{self.name}: server closed its stdin{self._diagnostics()}") from exc
            view = view[written:]

    def notify(self, method: str, params: JSONObject | None = None) -> None:
        """Send a notification (no id, so no reply is expected or awaited)."""
        message: JSONObject = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def request(self, method: str, params: JSONObject) -> JSONObject:
        """Send a request and return its result, skipping whatever else the server writes meanwhile."""
        self._next_id += 1
        request_id = self._next_id
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        deadline = time.monotonic() + self.timeout
        while True:
            line = self._read_line(deadline, method)
            try:
                message = json.loads(line)
            except ValueError as exc:
                raise BenchError(f"{self.name}: non-JSON line on stdout: {bytes(line[:200])!r}") from exc
            if (
                isinstance(message, dict)
                and "method" not in message
                and type(message.get("id")) is int  # a bool id is not our int id
                and message["id"] == request_id
            ):
                if "error" in message:
                    raise BenchError(f"{self.name}: {method} failed: {json.dumps(message['error'])[:500]}")
                result = message.get("result")
                if not isinstance(result, dict):
                    shown = bytes(line[:300])
                    raise BenchError(f"{self.name}: {method} reply has no result object: {shown!r}")
                return result
            self.skipped += 1

    def _read_line(self, deadline: float, waiting_for: str) -> bytearray:
        """Return the next non-blank line from stdout, reading more only when no full line is buffered."""
        while True:
            newline = self._buf.find(b"\n")
            if newline >= 0:
                line = self._buf[:newline]
                del self._buf[: newline + 1]
                if line.strip():
                    return line
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._selector.select(remaining):
                raise BenchError(
                    f"{self.name}: no reply to {waiting_for} within {self.timeout:g} s{self._diagnostics()}"
                )
            chunk = os.read(self._out_fd, 1 << 16)
            if not chunk:
                self.proc.poll()
                raise BenchError(
                    f"{self.name}: server closed stdout while we awaited {waiting_for} "
                    f"(exit code {self.proc.returncode}){self._diagnostics()}"
                )
            self._buf += chunk

    def close(self, grace: float) -> Shutdown:
        """Close stdin (the stdio way to say goodbye), wait for the exit, and kill after `grace` seconds."""
        started = time.perf_counter()
        killed = False
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            killed = True
            self.proc.kill()
            self.proc.wait()
        elapsed = time.perf_counter() - started
        self._selector.close()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self._stderr.close()
        return Shutdown(seconds=elapsed, returncode=self.proc.returncode, killed=killed)

    def _diagnostics(self) -> str:
        """The tail of the server's stderr, because a bare 'timed out' helps nobody."""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - STDERR_TAIL))
            tail = self._stderr.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        return f"\n--- {self.name} stderr (tail) ---\n{tail}" if tail else ""


@dataclass(frozen=True)
class Shutdown:
    """How one server process ended, so slow or unclean exits show up next to the numbers."""

    seconds: float
    returncode: int | None
    killed: bool


@dataclass
class ServerResult:
    """Everything measured for one server."""

    name: str
    argv: list[str]
    cold_starts_s: list[float] = field(default_factory=list)
    calls_s: list[float] = field(default_factory=list)
    shutdowns: list[Shutdown] = field(default_factory=list)
    server_info: JSONObject = field(default_factory=dict)
    protocol_version: str = ""
    skipped_messages: int = 0

    @property
    def cold_start_median(self) -> float:
        return statistics.median(self.cold_starts_s)

    @property
    def calls_total(self) -> float:
        return math.fsum(self.calls_s)


def cold_start(result: ServerResult, timeout: float, grace: float) -> None:
    """Time spawn → initialize result once, then finish the handshake and let the server go."""
    peer = StdioPeer(result.name, result.argv, timeout)
    try:
        init = peer.request("initialize", INITIALIZE_PARAMS)
        result.cold_starts_s.append(time.perf_counter() - peer.spawned_at)
        peer.notify("notifications/initialized")
        result.server_info = init.get("serverInfo") or {}
        result.protocol_version = str(init.get("protocolVersion", ""))
    finally:
        result.shutdowns.append(peer.close(grace))


def open_session(result: ServerResult, timeout: float) -> StdioPeer:
    """Spawn and complete the handshake, untimed: round trips are measured on a ready session."""
    peer = StdioPeer(result.name, result.argv, timeout)
    try:
        peer.request("initialize", INITIALIZE_PARAMS)
        peer.notify("notifications/initialized")
    except BaseException:
        peer.close(0.5)
        raise
    return peer


def call_tool(peer: StdioPeer, params: JSONObject) -> None:
    """One ``tools/call``; an ``isError`` result stops the run, since timing failures flatter a server."""
    result = peer.request("tools/call", params)
    if result.get("isError") is True:
        raise BenchError(f"{peer.name}: tool call returned isError: {json.dumps(result)[:500]}")


def run_benchmark(
    results: list[ServerResult],
    *,
    starts: int,
    calls: int,
    warmup: int,
    block: int,
    params: JSONObject,
    timeout: float,
    grace: float,
) -> None:
    """Measure every server, interleaved: cold starts alternate per round, calls alternate per block."""
    log = sys.stderr
    # An untimed start each fills the page cache and __pycache__: "cold" means a new process, not a cold disk.
    for result in results:
        print(f"[bench] warm-up start: {result.name}", file=log, flush=True)
        cold_start(result, timeout, grace)
        result.cold_starts_s.clear()
        result.shutdowns.clear()
    for round_no in range(starts):
        print(f"[bench] cold start round {round_no + 1}/{starts}", file=log, flush=True)
        shift = round_no % len(results)  # rotate who goes first, so no server always follows a teardown
        for result in results[shift:] + results[:shift]:
            cold_start(result, timeout, grace)
    if calls <= 0:
        return
    peers = []
    try:
        for result in results:
            peers.append(open_session(result, timeout))
        for peer in peers:
            for _ in range(warmup):
                call_tool(peer, params)
        done = 0
        gc_was_enabled = gc.isenabled()
        gc.disable()  # the client's collector must not land inside one server's timings
        try:
            while done < calls:
                count = min(block, calls - done)
                shift = (done // block) % len(results)
                print(f"[bench] calls {done + 1}-{done + count}/{calls}", file=log, flush=True)
                order = zip(peers[shift:] + peers[:shift], results[shift:] + results[:shift], strict=True)
                for peer, result in order:
                    timings = result.calls_s
                    for _ in range(count):
                        started = time.perf_counter()
                        call_tool(peer, params)
                        timings.append(time.perf_counter() - started)
                done += count
        finally:
            if gc_was_enabled:
                gc.enable()
    finally:
        for peer, result in zip(peers, results[: len(peers)], strict=True):
            result.skipped_messages += peer.skipped
            result.shutdowns.append(peer.close(grace))


def percentile(samples: list[float], fraction: float) -> float:
    """Nearest-rank percentile: an observed value, never an interpolated one."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def ratio(value: float, reference: float) -> float:
    """value / reference, infinite when the reference is zero."""
    return value / reference if reference > 0 else math.inf


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def machine_lines() -> list[str]:
    """Where the numbers came from: they only compare within one machine."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    return [
        f"python: {platform.python_version()} ({platform.python_implementation()}) {sys.executable}",
        f"machine: {platform.platform()}, {platform.machine()}, cpus: {os.cpu_count()} (usable: {usable})",
        f"processor: {platform.processor() or 'unknown'}",
    ]


def render(
    results: list[ServerResult],
    reference: ServerResult,
    *,
    calls: int,
    starts: int,
    warmup: int,
    block: int,
    params: JSONObject,
) -> tuple[str, dict[str, dict[str, bool]]]:
    """The Markdown report and the per-server target verdicts."""
    lines = ["# MCP stdio protocol benchmark", ""]
    lines += [f"- {line}" for line in machine_lines()]
    lines.append(
        f"- load: {starts} cold starts per server (after 1 untimed); {calls} sequential tools/call "
        f"`{params['name']}` `{json.dumps(params.get('arguments', {}))}` per server "
        f"(after {warmup} untimed), interleaved in blocks of {block}"
    )
    for result in results:
        info = result.server_info
        tag = " (reference)" if result is reference else ""
        lines.append(
            f"- {result.name}{tag}: `{shlex.join(result.argv)}` → {info.get('name', '?')} "
            f"{info.get('version', '?')}, protocol {result.protocol_version or '?'}"
        )
    lines.append("")
    header = [
        "server",
        "cold start median (ms)",
        "cold start min (ms)",
        f"{calls} calls total (s)",
        "per call mean (ms)",
        "per call median (ms)",
        "per call p99 (ms)",
        f"cold start vs {reference.name}",
        f"calls vs {reference.name}",
    ]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---" + "|---:" * (len(header) - 1) + "|")
    verdicts: dict[str, dict[str, bool]] = {}
    target_lines = []
    for result in results:
        cold_ratio = ratio(result.cold_start_median, reference.cold_start_median)
        row = [
            result.name,
            f"{result.cold_start_median * 1e3:.1f}",
            f"{min(result.cold_starts_s) * 1e3:.1f}",
        ]
        if result.calls_s:
            calls_ratio = ratio(result.calls_total, reference.calls_total)
            row += [
                f"{result.calls_total:.3f}",
                f"{statistics.fmean(result.calls_s) * 1e3:.3f}",
                f"{statistics.median(result.calls_s) * 1e3:.3f}",
                f"{percentile(result.calls_s, 0.99) * 1e3:.3f}",
            ]
        else:
            calls_ratio = math.nan
            row += ["-"] * 4
        row += [f"{cold_ratio:.2f} x", f"{calls_ratio:.2f} x" if result.calls_s else "-"]
        lines.append("| " + " | ".join(row) + " |")
        if result is not reference:
            cold_ok = cold_ratio <= COLD_START_TARGET
            verdicts[result.name] = {"cold_start": cold_ok}
            line = f"- {result.name}: cold start {cold_ratio:.2f} x {reference.name} {_verdict(cold_ok)}; "
            if result.calls_s:
                calls_ok = calls_ratio <= CALLS_TARGET
                verdicts[result.name]["calls"] = calls_ok
                line += f"calls {calls_ratio:.2f} x {reference.name} {_verdict(calls_ok)}"
            else:
                line += "calls not measured"
            target_lines.append(line)
    targets = f"cold start <= {COLD_START_TARGET:.2f} x reference, calls <= {CALLS_TARGET:.2f} x reference"
    lines += ["", f"targets: {targets}"]
    lines += target_lines
    notes = []
    for result in results:
        slowest = max((s.seconds for s in result.shutdowns), default=0.0)
        unclean = sum(1 for s in result.shutdowns if s.killed or s.returncode != 0)
        notes.append(
            f"- {result.name}: slowest exit after stdin closed {slowest * 1e3:.0f} ms; "
            f"unclean exits {unclean}/{len(result.shutdowns)}; "
            f"non-reply messages skipped {result.skipped_messages}"
        )
    lines += ["", "shutdown and noise:", *notes]
    return "\n".join(lines) + "\n", verdicts


def to_json(
    results: list[ServerResult],
    reference: ServerResult,
    verdicts: dict[str, dict[str, bool]],
    args: JSONObject,
) -> JSONObject:
    """Machine-readable results, with raw cold starts so later runs can be compared properly."""
    servers = []
    for result in results:
        entry: JSONObject = {
            "name": result.name,
            "argv": result.argv,
            "server_info": result.server_info,
            "protocol_version": result.protocol_version,
            "cold_start_ms": {
                "median": result.cold_start_median * 1e3,
                "min": min(result.cold_starts_s) * 1e3,
                "samples": [s * 1e3 for s in result.cold_starts_s],
            },
            "cold_start_ratio": ratio(result.cold_start_median, reference.cold_start_median),
            "shutdowns": [
                {"ms": s.seconds * 1e3, "returncode": s.returncode, "killed": s.killed}
                for s in result.shutdowns
            ],
            "skipped_messages": result.skipped_messages,
        }
        if result.calls_s:
            entry["calls"] = {
                "count": len(result.calls_s),
                "total_s": result.calls_total,
                "mean_ms": statistics.fmean(result.calls_s) * 1e3,
                "median_ms": statistics.median(result.calls_s) * 1e3,
                "p99_ms": percentile(result.calls_s, 0.99) * 1e3,
                "min_ms": min(result.calls_s) * 1e3,
                "max_ms": max(result.calls_s) * 1e3,
            }
            entry["calls_ratio"] = ratio(result.calls_total, reference.calls_total)
        if result.name in verdicts:
            entry["targets"] = verdicts[result.name]
        servers.append(entry)
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "targets": {"cold_start_ratio_max": COLD_START_TARGET, "calls_ratio_max": CALLS_TARGET},
        "reference": reference.name,
        "settings": args,
        "servers": servers,
    }


def parse_server(spec: str) -> tuple[str, list[str]]:
    """``NAME=COMMAND`` with COMMAND split the shell way."""
    name, sep, command = spec.partition("=")
    argv = shlex.split(command)
    if not sep or not name.strip() or not argv:
        raise argparse.ArgumentTypeError(f"expected NAME=COMMAND, got {spec!r}")
    return name.strip(), argv


def main(argv: list[str] | None = None) -> int:
    """CLI entry: exit 0 when measured (or 1 with --check and a missed target), 2 when a server misbehaved."""
    parser = argparse.ArgumentParser(
        description="Benchmark stdio MCP servers: cold start (spawn → initialize) and call round trips.",
    )
    parser.add_argument(
        "--server",
        action="append",
        type=parse_server,
        metavar="NAME=COMMAND",
        help="a server to measure (repeatable); default: sysmcp (python -m sysmcp) and sdk (sdk_server.py)",
    )
    parser.add_argument("--reference", metavar="NAME", help="server the ratios divide by (default: the last)")
    parser.add_argument("--starts", type=int, default=10, metavar="K", help="timed cold starts per server")
    parser.add_argument("--calls", type=int, default=2000, metavar="N", help="timed sequential calls each")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls per server before timing")
    parser.add_argument("--block", type=int, default=100, help="calls per server before the next one's turn")
    parser.add_argument("--tool", default="disk_usage", help="tool to call (default: disk_usage)")
    parser.add_argument("--args", default='{"path": "/"}', help="tool arguments as a JSON object")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for any one reply")
    parser.add_argument("--grace", type=float, default=5.0, help="seconds to wait for exit before killing")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a server misses a target")
    args = parser.parse_args(argv)

    try:
        tool_args = json.loads(args.args)
    except ValueError as exc:
        parser.error(f"--args is not JSON: {exc}")
    if not isinstance(tool_args, dict):
        parser.error("--args must be a JSON object")
    if args.starts < 1 or args.calls < 0 or args.warmup < 0 or args.block < 1:
        parser.error("need --starts >= 1, --calls >= 0, --warmup >= 0, --block >= 1")

    servers: list[tuple[str, list[str]]] = args.server or [
        ("sysmcp", [sys.executable, "-m", "sysmcp"]),
        ("sdk", [sys.executable, str(Path(__file__).resolve().parent / "sdk_server.py")]),
    ]
    names = [name for name, _ in servers]
    if len(set(names)) != len(names):
        parser.error(f"server names must be unique: {names}")
    reference_name = args.reference or names[-1]
    if reference_name not in names:
        parser.error(f"--reference {reference_name!r} is not one of {names}")

    results = [ServerResult(name, command) for name, command in servers]
    reference = results[names.index(reference_name)]
    params: JSONObject = {"name": args.tool, "arguments": tool_args}
    try:
        run_benchmark(
            results,
            starts=args.starts,
            calls=args.calls,
            warmup=args.warmup,
            block=args.block,
            params=params,
            timeout=args.timeout,
            grace=args.grace,
        )
    except BenchError as exc:
        print(f"[bench] FAILED: {exc}", file=sys.stderr)
        return 2

    report, verdicts = render(
        results,
        reference,
        calls=args.calls,
        starts=args.starts,
        warmup=args.warmup,
        block=args.block,
        params=params,
    )
    sys.stdout.write(report)
    sys.stdout.flush()
    if args.json is not None:
        settings: JSONObject = {
            "starts": args.starts,
            "calls": args.calls,
            "warmup": args.warmup,
            "block": args.block,
            "tool": args.tool,
            "arguments": tool_args,
            "protocol_version": PROTOCOL_VERSION,
        }
        payload = to_json(results, reference, verdicts, settings)
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    missed = any(not ok for verdict in verdicts.values() for ok in verdict.values())
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
