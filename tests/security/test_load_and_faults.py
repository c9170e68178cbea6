"""Load it holds, and faults it survives: the real process over real pipes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from sysmcp.engine.paths import real_root
from tests.mcp_schema import check_server_message
from tests.security.test_wire_fuzz import check_output
from tests.wire import SERVER, Wire, read_stderr, result_text, spawn

INIT_PARAMS = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "t", "version": "0"},
}

pytestmark = pytest.mark.anyio

FILES = 3000


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    base = real_root(tmp_path) / "tree"
    for d in range(30):
        sub = base / f"d{d:02}"
        sub.mkdir(parents=True)
        for f in range(FILES // 30):
            (sub / f"f{f:03}").write_bytes(b"x" * (d * 100 + f))
    return base


def files_seen(structured: dict[str, Any]) -> int:
    """dir_usage's file count, wherever its output schema keeps it."""
    count: int = structured.get("totals", structured)["files"]
    return count


def entries_skipped(structured: dict[str, Any]) -> int:
    skipped = structured["skipped"]
    return sum(skipped.values()) if isinstance(skipped, dict) else int(skipped)


def vm_hwm_kib(pid: int) -> int:
    """Peak resident memory of a process, from the kernel's own book-keeping."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.slow
async def test_200_concurrent_calls_mixed_with_pings_are_all_answered_in_bounded_memory(tree: Path) -> None:
    blob = tree / "d01" / "f007"
    digest = hashlib.sha256(blob.read_bytes()).hexdigest()
    expected: dict[str, Any] = {}
    lines = []
    for i in range(200):
        kind = ("dir_usage", "file_sha256", "disk_usage")[i % 3]
        arguments: dict[str, Any] = {"path": str(blob if kind == "file_sha256" else tree)}
        lines.append(
            {
                "jsonrpc": "2.0",
                "id": f"call-{i}",
                "method": "tools/call",
                "params": {"name": kind, "arguments": arguments},
            }
        )
        expected[f"call-{i}"] = kind
        lines.append({"jsonrpc": "2.0", "id": f"ping-{i}", "method": "ping"})
    async with spawn() as wire:
        await wire.initialize()
        for message in lines:
            await wire.send(message)
        # Read raw lines with their arrival times; schema checks come after, so they cannot skew timing.
        arrivals: list[tuple[float, dict[str, Any]]] = []
        replies: dict[Any, dict[str, Any]] = {}
        buffer = b""
        started = probe_latency = None
        calls_left = 0
        assert wire.process.stdout is not None
        with anyio.fail_after(60):
            while len(replies) < 401:
                buffer += await wire.process.stdout.receive()
                now = anyio.current_time()
                *complete, buffer = buffer.split(b"\n")
                for line in complete:
                    message = json.loads(line)
                    arrivals.append((now, message))
                    if "id" not in message:  # notifications/resources/list_changed for a stored result
                        continue
                    replies[message["id"]] = message
                    if started is None and str(message.get("id")).startswith("call-"):
                        started = anyio.current_time()  # scans are running: now probe with a ping
                        await wire.send({"jsonrpc": "2.0", "id": "probe", "method": "ping"})
                    if message.get("id") == "probe" and started is not None:
                        probe_latency = now - started
                        calls_left = sum(1 for i in range(200) if f"call-{i}" not in replies)
        peak = vm_hwm_kib(wire.process.pid)
    for _, message in arrivals:
        if "id" in message:
            method = "tools/call" if str(message["id"]).startswith("call-") else "ping"
            check_server_message(wire.version, message, method)
    print(f"probe ping {probe_latency}, calls still unanswered then {calls_left}, peak RSS {peak} KiB")
    assert (
        probe_latency is not None and probe_latency < 1.0
    )  # generous: it is milliseconds unless the box is swamped
    assert calls_left > 0, "the ping was answered only after every scan finished"
    for i in range(200):
        reply = replies[f"call-{i}"]["result"]
        assert not reply["isError"], reply
        if expected[f"call-{i}"] == "dir_usage":
            assert files_seen(reply["structuredContent"]) == FILES
        elif expected[f"call-{i}"] == "file_sha256":
            assert reply["structuredContent"]["sha256"] == digest
        assert replies[f"ping-{i}"]["result"] == {}
    assert peak < 300 * 1024, f"peak RSS {peak} KiB"


async def first_progress(wire: Any, msg_id: Any) -> None:
    """Wait until the call has demonstrably started working (its first progress notification)."""
    while True:
        message = await wire.receive()
        if message.get("method") == "notifications/progress":
            return
        assert message.get("id") != msg_id, f"the call finished before the fault could be injected: {message}"


async def start_long_scan(wire: Any, path: str = "/") -> None:
    await wire.start_call("dir_usage", {"path": path}, msg_id=1, progress="t")
    await first_progress(wire, 1)


def assert_clean_exit(stdout: bytes, stderr: str) -> None:
    check_output(stdout)  # every byte on stdout still a JSON-RPC line
    assert "Traceback" not in stderr, stderr[-2000:]


async def test_client_closing_stdin_mid_call_makes_the_server_exit_cleanly_and_quickly() -> None:
    async with spawn() as wire:
        await wire.initialize()
        await start_long_scan(wire)
        started = anyio.current_time()
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
        assert anyio.current_time() - started < 3
        rest = await wire.drain_stdout()
        assert_clean_exit(rest, await read_stderr(wire.process))


async def test_client_that_stops_reading_makes_the_server_exit_cleanly_and_quickly() -> None:
    # Our own pipe for the server's stdout, so closing our end really breaks it (anyio only marks EOF).
    read_end, write_end = os.pipe()
    process = await anyio.open_process([*SERVER], stdout=write_end)
    os.close(write_end)
    try:
        wire = Wire(process, "2025-11-25")
        await wire.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INIT_PARAMS})
        await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await wire.start_call("dir_usage", {"path": "/"}, msg_id=1, progress="t")
        seen = b""
        with anyio.fail_after(10):
            while b"notifications/progress" not in seen:  # the scan is running
                await anyio.wait_readable(read_end)
                seen += os.read(read_end, 1 << 16)
        os.close(read_end)  # the pipe breaks: the next progress notification gets EPIPE
        read_end = -1
        started = anyio.current_time()
        with anyio.fail_after(5):
            code = await process.wait()
        assert anyio.current_time() - started < 3
        assert code == 0
        assert "Traceback" not in await read_stderr(process)
    finally:
        if read_end >= 0:
            os.close(read_end)
        if process.returncode is None:
            process.kill()
            await process.wait()
        for stream in (process.stdin, process.stderr):
            if stream is not None:
                await stream.aclose()


async def test_files_vanishing_mid_scan_leave_a_completed_call(tree: Path) -> None:
    async with spawn() as wire:
        await wire.initialize()
        await wire.start_call("dir_usage", {"path": str(tree)}, msg_id=1, progress="t")
        remover = threading.Thread(target=shutil.rmtree, args=(tree,), kwargs={"ignore_errors": True})
        remover.start()  # races the scan on purpose; whatever it wins, the call must complete
        reply = await wire.response(1, timeout=30)
        remover.join()
        result = reply["result"]
        assert "isError" in result and result_text(reply)
        assert (await wire.request("ping"))["result"] == {}


async def test_a_file_shrinking_mid_hash_leaves_a_completed_call(tmp_path: Path) -> None:
    big = real_root(tmp_path) / "big.bin"
    with big.open("wb") as handle:
        handle.truncate(512 << 20)  # sparse: cheap to make, takes a moment to hash
    async with spawn() as wire:
        await wire.initialize()
        await wire.start_call("file_sha256", {"path": str(big)}, msg_id=1, progress=1)
        os.truncate(big, 1 << 20)
        reply = await wire.response(1, timeout=30)
        assert result_text(reply)  # a digest of what was read, or a per-file error: either way an answer
        assert (await wire.request("ping"))["result"] == {}


# -- real permission failures: root ignores modes, so the server drops to nobody -------------------

# Every module the server may import later is imported first, while still root: after the drop, the
# checkout (with its .venv) and the interpreter's own library may be unreadable (a clone under a
# mode-0700 directory, root's home), and anyio and sysmcp import some modules lazily. Walking the
# packages whole keeps that true whatever they import lazily next; a module that cannot be imported
# here (trio's backend, pytest's plugin) is one the server does not use.
DROP_PRIVILEGES = """
import importlib, os, pkgutil, sys
import shutil, argparse, gettext, hashlib, heapq, stat, errno, json, urllib.parse, asyncio, signal, selectors
import concurrent.futures.thread
for name in ("anyio", "sysmcp", "structlog", "psutil", "blake3"):
    package = importlib.import_module(name)
    for module in pkgutil.walk_packages(getattr(package, "__path__", []), name + "."):
        try:
            importlib.import_module(module.name)
        except Exception:
            pass
import sysmcp.cli
os.setgroups([]); os.setgid(65534); os.setuid(65534)
sys.exit(sysmcp.cli.main(sys.argv[1:]))
"""


@pytest.fixture
def shared_tree() -> Iterator[Path]:
    """A tree nobody can traverse (under /tmp, not the root-only pytest tmp dir) with a root-only corner."""
    base = Path(tempfile.mkdtemp(prefix="sysmcp-perm-"))
    try:
        base.chmod(0o755)
        (base / "open.txt").write_text("anyone")
        (base / "private").mkdir(mode=0o700)
        (base / "private" / "hidden.txt").write_text("root only")
        (base / "secret.txt").write_text("root only")
        (base / "secret.txt").chmod(0o600)
        yield real_root(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to uid 65534")
async def test_unreadable_files_and_directories_get_a_per_file_outcome(shared_tree: Path) -> None:
    async with spawn(command=[sys.executable, "-c", DROP_PRIVILEGES]) as wire:
        await wire.initialize()
        hashed = await wire.call("file_sha256", {"path": str(shared_tree / "secret.txt")})
        assert hashed["result"]["isError"] and "Permission denied" in result_text(hashed)
        assert f"(no read permission on {shared_tree / 'secret.txt'})" in result_text(hashed)
        hidden = await wire.call("file_sha256", {"path": str(shared_tree / "private" / "hidden.txt")})
        assert f"(no search permission on {shared_tree / 'private'})" in result_text(hidden)
        closed = await wire.call("dir_usage", {"path": str(shared_tree / "private")})
        assert f"(no read permission on {shared_tree / 'private'})" in result_text(closed)
        scanned = await wire.call("dir_usage", {"path": str(shared_tree)})
        assert not scanned["result"]["isError"]
        assert entries_skipped(scanned["result"]["structuredContent"]) >= 1
        assert (await wire.request("ping"))["result"] == {}


# -- logs -----------------------------------------------------------------------------------------


async def test_logs_carry_no_contents_no_secrets_and_no_paths_below_debug(tmp_path: Path) -> None:
    marked = real_root(tmp_path) / "path-marker-e7c1"
    marked.mkdir()
    (marked / "file.txt").write_text("content-marker-93ab")
    secret = "secret-marker-5d20"
    async with spawn("--log-level", "info", env={"SYSMCP_TEST_TOKEN": secret, "API_KEY": secret}) as wire:
        await wire.initialize()
        await wire.call("file_sha256", {"path": str(marked / "file.txt")})
        await wire.call("dir_usage", {"path": str(marked)})
        await wire.call("file_sha256", {"path": str(marked / "missing")})
        await wire.call("disk_usage", {"path": str(marked)})
        await wire.send(b"\xff not json " + secret.encode() + b"\n")
        await wire.receive()
        await wire.close_stdin()
        await wire.wait_exit()
        logs = await read_stderr(wire.process)
    assert "initialized" in logs  # the log is on, at info
    for marker in ("content-marker-93ab", secret, "path-marker-e7c1"):
        assert marker not in logs, f"{marker} leaked into the logs"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to uid 65534")
async def test_unreadable_directories_are_named_not_only_counted(shared_tree: Path) -> None:
    for i in range(7):
        (shared_tree / f"locked{i}").mkdir(mode=0o700)
    async with spawn(command=[sys.executable, "-c", DROP_PRIVILEGES]) as wire:
        await wire.initialize()
        for tool in ("dir_usage", "hash_tree", "find_duplicates"):
            reply = await wire.call(tool, {"path": str(shared_tree)})
            text = result_text(reply)
            named = re.findall(
                rf"{re.escape(str(shared_tree))}/(\w+)", text.split("permission denied on ")[-1]
            )
            assert len(named) == 5 and set(named) <= {"private", *(f"locked{i}" for i in range(7))}, text
            assert "and 3 more" in text, text
