"""The fleet benchmarks still run (as tests/test_benchmarks.py for the others): each at its smallest size.

Here, on the fleet lab's worker (tests/scheduling.py), because they start ssh: tests/fleet checks that no
ssh of sysmcp's is left on the machine, and must not see these.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench_runs import Bench, run, without
from tests.fleet.lab import unavailable
from tests.profile import UNDER_POSIX_PROFILE

pytestmark = [
    pytest.mark.slow,
    pytest.mark.spawns_server,
    pytest.mark.skipif(
        UNDER_POSIX_PROFILE, reason="the benchmarks measure sysmcp on Linux and read /proc themselves"
    ),
]


def fleet_lab_missing() -> str | None:
    return unavailable() or without("parallel-ssh")()


FLEET_BENCHES = [
    Bench("fleet_scale_bench.py start --warm-calls 1", ["one remote start, sysmcp"]),
    Bench(
        "fleet_scale_bench.py stub --hosts 3 --warm-calls 1",
        ["3 stub hosts", "after EOF: exit in", "after SIGTERM: exit in"],
    ),
    Bench(
        "fleet_bench.py --hosts 2 --rounds 1 --warm-calls 1",
        ['sysmcp disk_usage hosts:["all"], cold', 'sysmcp disk_usage hosts:["all"], warm'],
        missing=fleet_lab_missing,
    ),
    Bench(
        "fleet_scale_bench.py lab --hosts 2 --warm-calls 1",
        ["sysmcp dir_usage hosts=all, cold", "sysmcp dir_usage hosts=all, warm"],
        missing=fleet_lab_missing,
    ),
]


@pytest.mark.parametrize("bench", FLEET_BENCHES, ids=str)
def test_each_fleet_benchmark_runs_at_its_smallest_size_and_prints_its_table(
    bench: Bench, tmp_path: Path
) -> None:
    run(bench, tmp_path)
