"""The markers tests/conftest.py puts on tests from their source (tests/marking.py), which the quick lane
deselects: ``uv run pytest -m "not slow and not root and not spawns_server and not interop"``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.marking import item_markers, markers

REPO = Path(__file__).resolve().parent.parent
PYTEST_COLLECT = (sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider")


def test_a_test_starting_sysmcp_through_a_local_helper_is_selected_by_its_marker() -> None:
    done = subprocess.run(
        [*PYTEST_COLLECT, "-m", "spawns_server", "tests/test_lean_start.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    selected = sorted(line.split("::")[1] for line in done.stdout.splitlines() if "::" in line)
    assert selected == [  # each calls session(), which runs SESSION: runpy.run_module("sysmcp")
        "test_a_remote_start_imports_only_the_tool_it_is_asked_for",
        "test_a_remote_start_keeps_its_disk_reading_and_leaves_the_store_merged",
        "test_the_tools_are_all_listed_and_each_loads_when_called",
    ]


def test_a_shell_line_running_sysmcp_marks_its_test_as_spawning_a_server() -> None:
    assert "spawns_server" in item_markers(
        "tests.test_cli_call", "test_a_closed_pipe_ends_the_call_quietly", []
    )


def test_markers_follow_helpers_imported_from_other_test_modules() -> None:
    assert markers("tests.wire", "spawn") == {"spawns_server"}
    assert item_markers("tests.test_log_writer", "test_an_in_memory_stream_is_written_at_once", []) == set()
    assert "root" in item_markers(
        "tests.engine.mounts.test_mounts",
        "test_the_reader_notices_a_mount_at_once_through_the_kernels_change_signal",
        [],
    )
    assert "interop" in markers("tests.interop.node", "Unavailable")


def test_a_walk_splitting_its_scanner_is_not_a_spawned_server() -> None:
    """``scanner.spawn(...)`` (a method) is not ``tests.wire.spawn(...)``."""
    assert (
        item_markers(
            "tests.engine.walk.test_walk",
            "test_a_handed_out_directory_swapped_for_a_symlink_is_not_followed",
            [],
        )
        == set()
    )


def test_a_helper_imported_in_the_tests_own_body_marks_it_as_one_imported_at_the_top_would() -> None:
    """``from tests.tools.docker_lab import running_docker`` inside the test: a real dockerd, root's."""
    assert "root" in item_markers(
        "tests.reclaim.test_reclaim_logs",
        "test_a_real_dockerd_containers_log_is_planned_emptied_and_written_again",
        [],
    )
