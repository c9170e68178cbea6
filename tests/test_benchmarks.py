"""Every benchmark still runs: each at its smallest size, as a subprocess from the checkout, exits as it
should and prints its result table with the rows that measure sysmcp.

Issue 34 measures performance only through ``benchmarks/``, and a benchmark nobody runs rots unseen
(scan_bench's child died on a removed attribute for a whole work period). Nothing here asserts a time,
a ratio or a target: a tiny tree may miss any of them. health_bench's exit status says whether its target
was met, so for it only the table is checked. A benchmark whose component (root, sshd, dockerd, a
reference tool) cannot run here is skipped with the reason; ``.ci/run`` installs them all.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.bench_runs import Bench, run, script, without
from tests.profile import UNDER_POSIX_PROFILE
from tests.tools.docker_lab import why_not

pytestmark = [
    pytest.mark.slow,
    pytest.mark.spawns_server,  # every benchmark starts sysmcp (a server or its engine in a child)
    pytest.mark.skipif(
        UNDER_POSIX_PROFILE, reason="the benchmarks measure sysmcp on Linux and read /proc themselves"
    ),
]


def loop_fs_missing() -> str | None:
    if os.geteuid() != 0:
        return "makes and mounts a loop ext4 in a private mount namespace: needs root"
    return without("unshare", "mkfs.ext4", "mount")()


BENCHES = [
    Bench("health_bench.py --rounds 1", ["| smartctl answers |", "| smartctl hangs"], codes=(0, 1)),
    Bench(
        "reclaim_bench.py --path {tmp}/tree --rounds 1",
        ["dir_usage ", "reclaim_plan ", "reclaim_plan - dir_usage: fresh"],
        tree=True,
    ),
    Bench(
        "protocol_bench.py --starts 1 --calls 5 --warmup 1 --block 5",
        ["| sysmcp |", "| sdk |", "- sysmcp: cold start"],
    ),
    Bench(
        "scan_bench.py --root {tmp}/scan --files 200 --rounds 1",
        ["| du -s |", "| sysmcp dir_usage scan |", "| sysmcp walk_files |", "targets: sysmcp scan"],
    ),
    Bench(
        "hash_bench.py --size-mib 1 --files 100 --corpus {tmp}/hash --rounds 1 --progress-pairs 1",
        [
            "| sysmcp file_sha256 |",
            "| sysmcp hash_tree sha256 |",
            "file_sha256 vs openssl",
            "- progress ",
            "sha256 manifests agree with sha256sum's (101 lines): True",
        ],
        missing=without("openssl"),
    ),
    Bench(
        "history_bench.py --tree {tmp}/hist --files 200 --rounds 1 --store-ops 5",
        ["| reading write |", "| kv get |", "| {tmp}/hist | "],
    ),
    Bench(
        "many_files_bench.py --corpus {tmp}/corpus --workdir {tmp} --rounds 1 --mixed-files 100 --small-files 100 --dup-files 20 --server warm",
        [
            "| hash_tree sha256, 100 files (mixed), warm server |",
            "| hash_tree sha256, 100 files (small), warm server |",
            "| verify_checksums sha256, 100 files (mixed), warm server |",
            "| find_duplicates, 20 files (duplicates), warm server |",
            "| find_duplicates, 100 small files, warm server |",
            "| dir_usage {tmp}/corpus/mixed, warm server |",
            "same manifest",
            "all OK",
            "same 2 sets as jdupes -r",
        ],
        missing=without("jdupes", "sha256sum"),
    ),
    Bench(
        "answer_budget.py --tree {tmp}/tree --work {tmp}/work --directories 5 --hosts 2 --timeout 1",
        [
            "| dir_usage | tree, all lists",
            "| hash_tree | fleet of 2:",
            "| what_changed | 5 changed directories",
        ],
        tree=True,
    ),
]

LAB_BENCHES = [
    Bench(
        "accounting_bench.py --rounds 1 --files 200 --skip-slash",
        ["| loop ext4, 200-file corpus |"],
        missing=loop_fs_missing,
    ),
    Bench(
        "container_bench.py --images 2 --containers 2 --volumes 1 --rounds 1",
        ["docker system df -v", "warm container_usage ", "fresh container_usage walk=false"],
        missing=why_not,
    ),
]


@pytest.mark.parametrize("bench", BENCHES, ids=str)
def test_each_benchmark_runs_at_its_smallest_size_and_prints_its_table(bench: Bench, tmp_path: Path) -> None:
    run(bench, tmp_path)


@pytest.mark.parametrize("bench", LAB_BENCHES, ids=str)
def test_each_benchmark_on_a_lab_of_its_own_runs_at_its_smallest_size_and_prints_its_table(
    bench: Bench, tmp_path: Path
) -> None:
    run(bench, tmp_path)


def test_two_quick_captures_of_the_answer_corpus_compare_identical(tmp_path: Path) -> None:
    """answer_corpus (build, capture, compare) on a few tools: one live (disk_usage), one over the tree."""
    tree, quick = str(tmp_path / "tree"), ["--tools", "disk_usage,verify_checksums"]
    script("answer_corpus.py", "build", tree)
    script("answer_corpus.py", "capture", tree, str(tmp_path / "a.jsonl"), *quick)
    script("answer_corpus.py", "capture", tree, str(tmp_path / "b.jsonl"), *quick)
    compared = script("answer_corpus.py", "compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"))
    assert " identical, 0 different" in compared
