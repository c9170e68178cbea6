"""The largest text answer each tool gives, on the largest inputs this machine has: held to 40,000 characters.

A host pays for every character of an answer (Claude Code warns at 10,000 tokens of tool output and cuts at
25,000), so every answer is bounded: lists are cut at their ``top_n`` and the rest linked as a
``sysmcp://`` resource, and the server cuts any text still over 40,000 characters at a line, saying what
it left out and linking the whole (``server.ANSWER_BUDGET``). This measures each tool's own text at the
argument values that make it longest, in process (the handlers as the server runs them, before that
cut), and the fleet merges (each tool's ``merge`` and the fleet's line budget) with many hosts:

    uv run python benchmarks/corpus.py /tmp/budget/million --kind small      # once: 1,000,000 files
    uv run python benchmarks/answer_budget.py --tree /tmp/budget/million --work /tmp/budget/work

``--tree`` is the big tree (dir_usage, find_duplicates, hash_tree, verify_checksums with every file
failing); ``/`` is walked too (dir_usage, disk_usage explain); ``--work`` gets a tree with thousands of
changed directories for what_changed (sparse files: little disk). Heavy: run it once, not in CI; the
test with small worst-shape inputs is tests/test_answer_budget.py.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sysmcp.engine.paths import PathPolicy
from sysmcp.history import state
from sysmcp.protocol.context import RequestContext
from sysmcp.results import ResultStore
from sysmcp.tools import ALL_TOOLS
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.merging import HostOutcome, bound, default_merge
from sysmcp.tools.registry import Tool, ToolContext

BUDGET = 40_000
TOOLS = {tool.name: tool for tool in ALL_TOOLS}


class Quiet:
    async def notify(self, method: str, params: dict[str, Any]) -> None:
        return None


async def answer(tool: Tool, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    ctx = ToolContext(RequestContext(1, "tools/call", Quiet()), PathPolicy(), ResultStore())
    output = await tool.handler(validate_arguments(tool.input_schema, args), ctx)
    return output.text, output.structured


def changed_tree(work: Path, directories: int) -> Path:
    """``directories`` directories each with one sparse 2 MiB file (over the history's 1 MiB resolution)."""
    root = work / "changing"
    for i in range(directories):
        d = root / f"d{i:05}-{'x' * 40}"
        d.mkdir(parents=True, exist_ok=True)
        with open(d / "data.bin", "wb") as handle:
            handle.truncate(2 << 20)
    return root


def grow(root: Path) -> None:
    for d in root.iterdir():
        with open(d / "data.bin", "r+b") as handle:
            handle.truncate(5 << 20)
        with open(d / "new.bin", "wb") as handle:
            handle.truncate(3 << 20)


def failing_manifest(tree: Path, path: Path) -> int:
    """A sha512 manifest of every file under ``tree`` with a wrong digest each: every file FAILS."""
    lines = 0
    with open(path, "w", encoding="utf-8") as out:
        for top, _dirs, files in os.walk(tree):
            for name in files:
                rel = os.path.relpath(os.path.join(top, name), tree)
                out.write(f"{'0' * 128}  {rel}\n")
                lines += 1
    return lines


def fleet_outcomes(tool: Tool, structured: dict[str, Any], text: str, hosts: int) -> list[HostOutcome]:
    """``hosts`` hosts answering with this answer, each a little different (its own host name in paths)."""
    return [HostOutcome(f"host-{i:03}.example.internal", "ok", 0.5, structured, text) for i in range(hosts)]


async def measure(
    cases: Sequence[tuple[str, str, dict[str, Any]]], hosts: int
) -> list[tuple[str, str, int, float]]:
    rows = []
    for name, label, args in cases:
        started = time.perf_counter()
        text, structured = await answer(TOOLS[name], args)
        rows.append((name, label, len(text), time.perf_counter() - started))
        print(f"{name:<20} {label:<50} {len(text):>8,} chars  {rows[-1][3]:7.1f} s", file=sys.stderr)
        merge = TOOLS[name].merge or default_merge
        merged, _full = bound(merge(fleet_outcomes(TOOLS[name], structured, text, hosts), args))
        rows.append((name, f"fleet of {hosts}: {label}", len(merged.text), 0.0))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tree", type=Path, required=True, help="the big tree (benchmarks/corpus.py --kind small)"
    )
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "answer-budget")
    parser.add_argument("--directories", type=int, default=3000, help="changed directories for what_changed")
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=120.0, help="timeout_s of the walking calls")
    options = parser.parse_args(argv)
    work: Path = options.work
    work.mkdir(parents=True, exist_ok=True)
    state.configure(work / "state")
    tree, t = str(options.tree), options.timeout
    manifest = work / "SHA512SUMS"
    if not manifest.exists():
        failing_manifest(options.tree, manifest)
    changing = changed_tree(work, options.directories)
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("disk_usage", "every mount, all, bytes", {"all": True, "unit": "bytes"}),
        ("disk_usage", "explain /", {"path": "/", "explain": True, "timeout_s": t}),
        (
            "dir_usage",
            "/ all lists, top 50, depth 1000",
            {"path": "/", "top_n": 50, "show": "all", "max_depth": 1000, "timeout_s": t},
        ),
        (
            "dir_usage",
            "tree, all lists, top 50, depth 1000",
            {"path": tree, "top_n": 50, "show": "all", "max_depth": 1000, "timeout_s": t},
        ),
        ("file_sha256", "one file, expected wrong", {"path": str(manifest), "expected": "0" * 64}),
        ("find_duplicates", "tree, top 50", {"path": tree, "top_n": 50, "timeout_s": t}),
        (
            "hash_tree",
            "tree, sha512 bsd, max_lines 1000",
            {"path": tree, "algorithm": "sha512", "format": "bsd", "max_lines": 1000, "timeout_s": t},
        ),
        (
            "verify_checksums",
            "every file FAILED, max_listed 1000",
            {
                "manifest": str(manifest),
                "base_dir": tree,
                "max_listed": 1000,
                "report_new": True,
                "timeout_s": t,
            },
        ),
        ("deleted_open_files", "top 100", {"top_n": 100}),
        ("disk_io", "top 50", {"sample_s": 1, "top_n": 50}),
        ("reclaim_plan", "/, every class but duplicate", {}),
    ]
    rows = asyncio.run(measure(cases, options.hosts))
    asyncio.run(answer(TOOLS["what_changed"], {"path": str(changing), "timeout_s": t}))
    grow(changing)
    state.configure(work / "state", clock=lambda: time.time() + 600)  # the snapshot is stale: scan afresh
    rows += asyncio.run(
        measure(
            [
                (
                    "what_changed",
                    f"{options.directories:,} changed directories, top 50",
                    {"path": str(changing), "since": "last", "top_n": 50, "timeout_s": t},
                )
            ],
            options.hosts,
        )
    )
    print("| tool | case | characters (the tool's own text) |\n|---|---|---|")
    for name, label, size, _ in rows:
        over = " (over: the server cuts it to 40,000 and links the whole)" if size > BUDGET else ""
        print(f"| {name} | {label} | {size:,}{over} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
