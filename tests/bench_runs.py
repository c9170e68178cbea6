"""Running a benchmark of ``benchmarks/`` at its smallest size from a test: what it is given, what its
stdout must show, and why it cannot run here (tests/test_benchmarks.py, tests/fleet/test_fleet_benchmarks.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BOUND_S = 600  # one benchmark at its smallest size takes seconds; this only stops a hung one


@dataclass
class Bench:
    """One benchmark run: its script and arguments (``{tmp}`` is a fresh directory), the exit codes it
    may end with, what its stdout must show, and why it cannot run here (None: it can)."""

    argv: str  # as on a command line, words split at spaces
    shows: list[str]
    codes: tuple[int, ...] = (0,)
    missing: Callable[[], str | None] = lambda: None
    tree: bool = False  # {tmp}/tree made first: a few files of varied sizes for it to walk

    def __str__(self) -> str:
        """The script, and fleet_scale_bench's mode."""
        words = self.argv.split()
        return " ".join(words[:2] if words[1] in ("start", "stub", "lab") else words[:1])


def without(*tools: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        absent = [tool for tool in tools if shutil.which(tool) is None]
        return f"not installed: {', '.join(absent)}" if absent else None

    return missing


def script(name: str, *argv: str, codes: tuple[int, ...] = (0,)) -> str:
    """Run ``benchmarks/name`` from the checkout; its stdout, once it ended with one of ``codes``."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / name), *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        check=False,
    )
    said = f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert done.returncode in codes, said
    return done.stdout


def run(bench: Bench, tmp: Path) -> None:
    reason = bench.missing()
    if reason is not None:
        pytest.skip(reason)
    if bench.tree:
        for depth in range(3):
            place = tmp.joinpath("tree", *(f"d{level}" for level in range(depth)))
            place.mkdir(parents=True)
            for size in (0, 100, 5000, 70_000):
                (place / f"f{size}.dat").write_bytes(b"x" * size)
    out = script(*bench.argv.replace("{tmp}", str(tmp)).split(), codes=bench.codes)
    for shown in bench.shows:
        assert shown.replace("{tmp}", str(tmp)) in out, out[-3000:]
