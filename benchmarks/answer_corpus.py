"""Thousands of tool calls over fixed trees, answered by a real server, kept to compare two versions.

Why: a change that should alter no answer (a refactor, a move of walls) is proved by asking both
versions the same questions and comparing every reply: ``tools/list`` (default and with reclaim) and
each call's text, ``isError`` and structured content. The calls go over the wire (``python -m sysmcp``
on stdio), so any two versions can be compared whatever their insides.

    uv run python benchmarks/answer_corpus.py build /work/answers/tree
    uv run python benchmarks/answer_corpus.py capture /work/answers/tree before.jsonl --python /work/before/.venv/bin/python
    uv run python benchmarks/answer_corpus.py capture /work/answers/tree after.jsonl
    uv run python benchmarks/answer_corpus.py compare before.jsonl after.jsonl

What varies between two runs of the same version is masked before anything is kept: seconds taken,
times and ages, random plan ids and codes, and the figures of the live system (disk_usage, disk_io,
deleted_open_files, disk_health, container_usage: their numbers, not their words). The trees' files
carry fixed modification times, so ages and ``modified_within`` answers are stable too.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import itertools
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PROTOCOL = "2025-11-25"
FIXED_MTIME = 1_700_000_000  # 2023-11-14: ages measured from it change by a day a day
#: Answers about the live system (what_changed: its filesystem growth is the disk's, now).
LIVE_TOOLS = {"disk_usage", "disk_io", "deleted_open_files", "disk_health", "container_usage", "what_changed"}


# -- the trees --------------------------------------------------------------------------------


def build(base: Path) -> None:
    """Deterministic trees under ``base``: varied sizes, copies, links, odd names, manifests."""
    if base.exists():
        raise SystemExit(f"{base} exists: build into a new directory")
    rng = random.Random(7)
    base.mkdir(parents=True)
    content: dict[int, bytes] = {}
    for top in range(4):
        for sub in range(5):
            directory = base / f"d{top}" / f"s{sub}"
            directory.mkdir(parents=True)
            for index in range(12):
                size = rng.choice([0, 1, 100, 4095, 4096, 4097, 10_000, 65_536, 300_000])
                key = rng.randrange(6)  # few distinct contents per size: duplicates on purpose
                data = content.setdefault(key * 1_000_003 + size, rng.randbytes(size))
                extension = rng.choice([".log", ".txt", ".bin", "", ".tar.gz"])
                (directory / f"f{index}{extension}").write_bytes(data)
            if sub == 0:
                os.link(
                    directory / "f0.log" if (directory / "f0.log").exists() else next(directory.iterdir()),
                    directory / "hardlink",
                )
                (directory / "symlink").symlink_to("s0-missing-target")
                (directory / "loop").symlink_to("loop")
            if sub == 1:
                with open(directory / "sparse.img", "wb") as handle:
                    handle.truncate(50 << 20)
                    handle.seek(10 << 20)
                    handle.write(b"x" * 4096)
    odd = base / "odd names"
    odd.mkdir()
    for name in ("with space", "tab\there", "new\nline", "ünïcödé", "-dash", "quote'\"", "back\\slash"):
        (odd / name).write_bytes(name.encode() * 100)
    (odd / "latin1-\xe9".encode("latin-1").decode("utf-8", "surrogateescape")).write_bytes(b"latin")
    os.mkfifo(odd / "fifo")
    locked = base / "locked"
    locked.mkdir()
    (locked / "secret").write_bytes(b"s" * 5000)
    locked.chmod(0)
    _manifests(base)
    locked.chmod(0o700)
    for path in sorted(base.rglob("*"), reverse=True):
        os.utime(path, (FIXED_MTIME, FIXED_MTIME + len(path.name) * 3600), follow_symlinks=False)
    os.utime(base, (FIXED_MTIME, FIXED_MTIME))
    locked.chmod(0)


def _manifests(base: Path) -> None:
    """Manifests for verify_checksums: all good, some bad, missing, malformed, bsd style, md5."""
    manifests = base / "manifests"
    manifests.mkdir()
    files = sorted(p for p in (base / "d0").rglob("*") if p.is_file() and not p.is_symlink())
    good = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(base)}" for p in files]
    (manifests / "good.sha256").write_text("\n".join(good) + "\n")
    bad = list(good)
    bad[0] = "0" * 64 + bad[0][64:]
    bad[1] = "1" * 64 + "  d0/does-not-exist"
    bad.insert(2, "not a checksum line")
    (manifests / "bad.sha256").write_text("\n".join(bad) + "\n")
    bsd = [
        f"SHA256 ({p.relative_to(base)}) = {hashlib.sha256(p.read_bytes()).hexdigest()}" for p in files[:10]
    ]
    (manifests / "bsd.sha256").write_text("\n".join(bsd) + "\n")
    md5 = [f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.relative_to(base)}" for p in files[:10]]
    (manifests / "sums.md5").write_text("\n".join(md5) + "\n")
    (manifests / "empty.sha256").write_text("")
    (manifests / "garbage.sha256").write_bytes(b"\x00\xff" * 100)


# -- the calls --------------------------------------------------------------------------------


def calls(base: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (tool, arguments) pair asked, in a fixed order."""
    directories = [base, *sorted(p for p in base.rglob("*") if p.is_dir() and not p.is_symlink())]
    files = sorted(p for p in base.rglob("*") if p.is_file() or p.is_symlink())
    outside = [
        "/",
        "/etc",
        "/nonexistent",
        "relative/path",
        str(base / "nope"),
        str(base / "odd names" / "fifo"),
    ]
    for directory in [*directories, *map(Path, outside)]:
        path = str(directory)
        for show, sort_by, top_n in itertools.product(
            ("both", "files", "directories", "extensions", "all"), ("disk", "apparent"), (1, 5)
        ):
            yield "dir_usage", {"path": path, "show": show, "sort_by": sort_by, "top_n": top_n}
        for extra in (
            {"max_depth": 3},
            {"min_size": "4K"},
            {"min_size": 100_000, "show": "files"},
            {"exclude": ["*.log"]},
            {"exclude": "s1"},
            {"modified_within": "100000d"},
            {"modified_before": "2000-01-01"},
            {"one_file_system": False},
        ):
            yield "dir_usage", {"path": path, **extra}
        for algorithm, form in itertools.product(("sha256", "md5", "blake3"), ("gnu", "bsd")):
            yield "hash_tree", {"path": path, "algorithm": algorithm, "format": form, "max_lines": 20}
        yield "hash_tree", {"path": path, "max_lines": 0}
        yield "hash_tree", {"path": path, "exclude": ["*.bin"]}
        for min_size, top_n in itertools.product((1, 4096, 100_000), (1, 10)):
            yield "find_duplicates", {"path": path, "min_size": min_size, "top_n": top_n}
        yield "reclaim_plan", {"path": path, "classes": ["duplicate"], "duplicates": True}
        yield "reclaim_plan", {"path": path}
        yield "deleted_open_files", {"path": path}
    for file in [*files, *map(Path, outside)]:
        yield "file_sha256", {"path": str(file)}
        yield "file_sha256", {"path": str(file), "expected": "a" * 64}
    manifests = sorted((base / "manifests").iterdir())
    for manifest, algorithm, report_new, max_listed in itertools.product(
        manifests, ("auto", "sha256", "md5"), (False, True), (1, 50)
    ):
        yield (
            "verify_checksums",
            {
                "manifest": str(manifest),
                "base_dir": str(base),
                "algorithm": algorithm,
                "report_new": report_new,
                "max_listed": max_listed,
            },
        )
    for path in (str(base), str(base / "d0"), "/nonexistent"):
        yield "disk_usage", {"path": path}
        for unit in ("percent", "mb", "human", "bytes"):
            yield "disk_usage", {"path": path, "unit": unit, "all": True}
    yield "disk_usage", {}
    yield "disk_io", {"sample_s": 0.1}
    yield "disk_health", {"timeout_s": 5}
    yield "container_usage", {"socket": str(base / "no.sock"), "timeout_s": 0.5}
    for directory in directories[:6]:
        for since in ("24h", "100000d", "1h"):
            yield "what_changed", {"path": str(directory), "since": since}
    yield from (
        ("dir_usage", {}),
        ("dir_usage", {"path": str(base), "top_n": 0}),
        ("dir_usage", {"path": str(base), "show": "nope"}),
        ("dir_usage", {"path": str(base), "min_size": "12Q"}),
        ("dir_usage", {"path": str(base), "unknown": 1}),
        ("hash_tree", {"path": str(base), "algorithm": "crc32"}),
        ("file_sha256", {"path": str(base), "expected": "xyz"}),
        ("verify_checksums", {"manifest": str(base / "nope")}),
        ("find_duplicates", {"path": str(base), "min_size": 0}),
        ("reclaim_plan", {"path": str(base), "classes": ["nope"]}),
        ("reclaim", {"plan_id": "nope", "items": ["x"]}),
        ("what_changed", {"path": str(base), "since": "yesterday-ish"}),
        ("no_such_tool", {}),
    )


# -- the wire ---------------------------------------------------------------------------------


class Server:
    """A sysmcp server on stdio, asked one request at a time."""

    def __init__(self, python: str, base: Path, state: Path, *, reclaim: bool) -> None:
        command = [python, "-m", "sysmcp", "--root", str(base)]
        if reclaim:
            command.append("--allow-reclaim")
        env = {**os.environ, "SYSMCP_STATE_DIR": str(state)}
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        self.next_id = 0
        self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "corpus", "version": "1"},
            },
        )
        self.notify("notifications/initialized")

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        self._send({"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})})

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        self._send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("the server closed its output")
            message = json.loads(line)
            if message.get("id") == self.next_id and "method" not in message:
                reply: dict[str, Any] = message
                return reply

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


# -- masking what varies ----------------------------------------------------------------------

_VARYING = [
    (re.compile(r"\b\d+(\.\d+)? ?[KMGTP]?i?B/s\b|\b\d[\d,]*(\.\d+)? (files|entries)/s\b"), "<rate>"),
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|s|seconds?|µs)\b"), "<secs>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?"), "<time>"),
    (
        re.compile(
            r"\b\d+(\.\d+)? ?(s|sec|seconds?|min|minutes?|h|hours?|days?|d|weeks?|months?|years?) ago\b"
        ),
        "<ago>",
    ),
    (re.compile(r"\b(plan|code)[-_ ]?[0-9a-f]{6,}\b", re.I), "<id>"),
    (re.compile(r"resource://\S+|sysmcp://\S+"), "<link>"),
]
_VARYING_KEYS = {
    "seconds",
    "elapsed_s",
    "scanned_at",
    "taken",
    "taken_at",
    "plan_id",
    "confirm",
    "code",
    "expires",
    "created",
    "uri",
    "age_s",
    "since",
    "until",
    "baseline_taken",
    "at",
}
_DIGITS = re.compile(r"\d+(\.\d+)?")


_LIVE_SIZES = re.compile(r"#\s?(B|[KMGTP]i?B|kB|bytes?)\b")


def masked(text: str, live: bool) -> str:
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    text = text.replace("under <secs>", "<secs>").replace(
        " (<rate>)", ""
    )  # a rate is shown for long runs only
    return _LIVE_SIZES.sub("#<size>", _DIGITS.sub("#", text)) if live else text


def masked_json(value: Any, live: bool) -> Any:
    if isinstance(value, dict):
        return {
            key: ("<varies>" if key in _VARYING_KEYS else masked_json(item, live))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [masked_json(item, live) for item in value]
    if isinstance(value, str):
        return masked(value, live)
    if live and isinstance(value, (int, float)) and not isinstance(value, bool):
        return "#"
    return value


# -- capture and compare ----------------------------------------------------------------------


def capture(base: Path, out: Path, python: str, tools: set[str] | None = None) -> None:
    started = time.perf_counter()
    count = 0
    with tempfile.TemporaryDirectory() as state, out.open("w") as sink:
        os.chmod(state, 0o700)
        for reclaim in (False, True):
            server = Server(python, base, Path(state), reclaim=reclaim)
            listed = server.request("tools/list", {})
            sink.write(
                json.dumps(
                    {"call": f"tools/list reclaim={reclaim}", "reply": listed.get("result")}, sort_keys=True
                )
                + "\n"
            )
            server.close()
        server = Server(python, base, Path(state), reclaim=True)
        for tool, arguments in calls(base):
            if tools is not None and tool not in tools:
                continue
            reply = server.request("tools/call", {"name": tool, "arguments": arguments})
            live = tool in LIVE_TOOLS
            if "result" in reply and live:  # the live system's state: only the answer's shape is stable
                result = reply["result"]
                kept = {
                    "isError": result.get("isError", False),
                    "shape": _shape(result.get("structuredContent")),
                }
            elif "result" in reply:
                result = reply["result"]
                kept = {
                    "isError": result.get("isError", False),
                    "text": [
                        masked(item.get("text", ""), live)
                        for item in result.get("content", [])
                        if item.get("type") == "text"
                    ],
                    "structured": masked_json(result.get("structuredContent"), live),
                }
            else:
                kept = {"error": masked_json(reply.get("error"), live)}
            sink.write(
                json.dumps(
                    {"call": f"{tool} {json.dumps(arguments, sort_keys=True)}", "reply": kept}, sort_keys=True
                )
                + "\n"
            )
            count += 1
        server.close()
    print(f"{count:,} calls and 2 tools/list answered in {time.perf_counter() - started:.0f} s → {out}")


def compare(first: Path, second: Path, shown: int) -> int:
    before = [json.loads(line) for line in first.read_text().splitlines()]
    after = [json.loads(line) for line in second.read_text().splitlines()]
    if [row["call"] for row in before] != [row["call"] for row in after]:
        print("the two captures asked different calls: capture both from the same tree and script")
        return 2
    differ = [(a, b) for a, b in zip(before, after, strict=True) if a["reply"] != b["reply"]]
    by_tool: dict[str, int] = {}
    for a, _ in differ:
        by_tool[a["call"].split()[0]] = by_tool.get(a["call"].split()[0], 0) + 1
    print(
        f"{len(before):,} answers compared: {len(before) - len(differ):,} identical, {len(differ):,} different {by_tool or ''}"
    )
    for a, b in differ[:shown]:
        print(f"\n== {a['call'][:200]}")
        for line in _differences(a["reply"], b["reply"], ""):
            print(line[:600])
    return 1 if differ else 0


def _shape(value: Any) -> Any:
    """The keys of JSON objects and the types of values; lists only as lists (how many items a live
    system has, and so which optional keys they carry, is not stable from one run to the next)."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    return (
        "list"
        if isinstance(value, list)
        else "number"
        if isinstance(value, (int, float)) and not isinstance(value, bool)
        else type(value).__name__
    )


def _differences(before: Any, after: Any, where: str) -> Iterator[str]:
    """Where two replies differ: the path of each differing value, and for texts the differing lines."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after)):
            yield from _differences(before.get(key, "<absent>"), after.get(key, "<absent>"), f"{where}.{key}")
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for index, (x, y) in enumerate(zip(before, after, strict=True)):
            yield from _differences(x, y, f"{where}[{index}]")
    elif isinstance(before, str) and isinstance(after, str) and "\n" in before + after:
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0):
            if not line.startswith(("---", "+++", "@@")):
                yield f"  {where}: {line}"
    elif before != after:
        yield f"  {where}: {json.dumps(before, ensure_ascii=False)} → {json.dumps(after, ensure_ascii=False)}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build").add_argument("base", type=Path)
    take = commands.add_parser("capture")
    take.add_argument("base", type=Path)
    take.add_argument("out", type=Path)
    take.add_argument("--python", default=sys.executable, help="the interpreter whose sysmcp answers")
    take.add_argument(
        "--tools",
        help="comma-separated: only these tools' calls (a quick capture; compare it with a capture of the same)",
    )
    diff = commands.add_parser("compare")
    diff.add_argument("first", type=Path)
    diff.add_argument("second", type=Path)
    diff.add_argument("--shown", type=int, default=10)
    options = parser.parse_args()
    if options.command == "build":
        build(options.base)
        return 0
    if options.command == "capture":
        tools = None if options.tools is None else set(options.tools.split(","))
        capture(options.base.resolve(), options.out, options.python, tools)
        return 0
    return compare(options.first, options.second, options.shown)


if __name__ == "__main__":
    sys.exit(main())
