"""EMFILE or ENFILE from a filesystem (a FUSE daemon out of its own descriptors) while this process has
descriptors to spare: the directory is one the filesystem would not open, not a walk out of descriptors.
Runs against a real FUSE mount (tests/fuse_refusing.py); skipped where no Python with fusepy, /dev/fuse
or fusermount is found."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysmcp.engine.walk import Scanner, SkipCounter, SubtreeTotals, WalkOptions, out_of_descriptors
from tests.profile import UNDER_POSIX_PROFILE

SERVER = Path(__file__).parents[2] / "fuse_refusing.py"


def fusepy_python() -> str | None:
    """A Python that can import fusepy (the system's, usually: the project does not depend on it)."""
    for candidate in ("/usr/bin/python3", shutil.which("python3")):
        if (
            candidate
            and subprocess.run([candidate, "-c", "import fusepy"], capture_output=True).returncode == 0
        ):
            return candidate
    return None


@pytest.fixture
def refusing_mount(tmp_path: Path) -> Iterator[Path]:
    yield from mounted(tmp_path)


@pytest.fixture
def failing_mount(tmp_path: Path) -> Iterator[Path]:
    """The refusing filesystem with ``eio``, a directory that opens but fails (EIO) to be listed."""
    yield from mounted(tmp_path, "--eio")


def mounted(tmp_path: Path, *flags: str) -> Iterator[Path]:
    python = fusepy_python()
    unmount = shutil.which("fusermount3") or shutil.which("fusermount")
    if (
        UNDER_POSIX_PROFILE
        or python is None
        or unmount is None
        or not os.access("/dev/fuse", os.R_OK | os.W_OK)
    ):
        pytest.skip("needs /dev/fuse, fusermount and a Python with fusepy (Debian: python3-fusepy)")
    point = tmp_path / "mnt"
    point.mkdir()
    server = subprocess.Popen(
        [python, str(SERVER), str(point), *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 30)
        if not ready or server.stdout.readline() != b"ready\n":
            pytest.skip("the FUSE server did not start")
        yield point
    finally:
        subprocess.run([unmount, "-u", str(point)], capture_output=True)
        server.kill()
        server.wait(timeout=30)


def test_emfile_from_the_filesystem_is_not_this_process_out_of_descriptors(refusing_mount: Path) -> None:
    refused = refusing_mount / "busy"
    with pytest.raises(OSError) as caught:
        os.open(refused, os.O_RDONLY | os.O_DIRECTORY)
    assert caught.value.errno == 24  # EMFILE, as the daemon said it
    assert not out_of_descriptors(caught.value)


def test_a_walk_counts_the_directory_the_filesystem_refused_and_goes_on(refusing_mount: Path) -> None:
    skipped = SkipCounter()
    scanner = Scanner(os.fsencode(refusing_mount), WalkOptions(), skipped)
    totals = {e.relative: e for e in scanner.events() if isinstance(e, SubtreeTotals)}
    assert scanner.stopped is None  # not "out of file descriptors ... raise ulimit -n"
    assert skipped.as_dict() == {"filesystem_error": 1}
    assert skipped.named == []  # answers say "permission denied on" the named ones: not this one
    assert not totals[""].partial
    assert totals[""].files == 3 and totals["ok"].files == 2  # f, ok/a, ok/refused: the walk went past busy


@pytest.mark.anyio
async def test_dir_usage_says_the_filesystem_refused_a_directory_never_permission_denied_nor_a_limit(
    refusing_mount: Path,
) -> None:
    from tests.wire import result_text, spawn

    async with spawn("--no-history", "--root", str(refusing_mount)) as wire:
        await wire.initialize()
        reply = await wire.call("dir_usage", {"path": str(refusing_mount)})
    text = result_text(reply)
    assert reply["result"]["isError"] is False, text
    assert reply["result"]["structuredContent"]["complete"] is True, text
    assert reply["result"]["structuredContent"]["skipped"] == {"filesystem_error": 1}, text
    assert "1 filesystem error" in text, text
    assert "permission denied" not in text and "ulimit" not in text and "PARTIAL" not in text, text


@pytest.mark.anyio
async def test_hash_tree_says_the_filesystem_refused_a_file_not_that_the_server_ran_out(
    refusing_mount: Path,
) -> None:
    from tests.wire import result_text, spawn

    async with spawn("--no-history", "--root", str(refusing_mount)) as wire:
        await wire.initialize()
        reply = await wire.call("hash_tree", {"path": str(refusing_mount)})
    text = result_text(reply)
    structured = reply["result"]["structuredContent"]
    assert reply["result"]["isError"] is False, text
    assert structured["complete"] is True, text
    assert [entry["path"] for entry in structured["unreadable"]] == ["ok/refused"], text
    assert "the filesystem refused it" in structured["unreadable"][0]["error"], text
    assert "ulimit" not in text and "PARTIAL" not in text, text


def test_a_directory_the_filesystem_refused_is_named_apart_from_permission_denied(
    refusing_mount: Path,
) -> None:
    skipped = SkipCounter()
    list(Scanner(os.fsencode(refusing_mount), WalkOptions(), skipped).events())
    assert skipped.refused_named == ["busy"]
    assert skipped.named == []


@pytest.mark.parametrize("hash_processes", [1, 2])
def test_a_baseline_records_a_directory_the_filesystem_refused_as_not_read(
    failing_mount: Path, hash_processes: int
) -> None:
    """Its files are neither in the baseline nor called added when it is readable again: unread. ``busy``
    is refused at open (EMFILE), ``eio`` when listed (EIO); two processes: named in a child too."""
    from sysmcp.engine.calls import never_cancelled, no_progress
    from sysmcp.engine.hashing import ALGORITHMS, TreeRequest, hash_path
    from sysmcp.engine.parallel import Sharing
    from sysmcp.history.diff import diff_baselines
    from sysmcp.history.recording import baseline_of, series_of, unreadable_of

    base = os.fsencode(failing_mount)
    sharing = Sharing(processes=hash_processes, split_after_s=0)
    request = TreeRequest(base, ALGORITHMS["sha256"], "gnu", WalkOptions(), 60, 1 << 30, 10, sharing)
    tree = hash_path(request, no_progress, never_cancelled)
    assert tree.manifest is not None
    manifest = bytes(tree.manifest)
    series = series_of(base, WalkOptions())
    baseline = baseline_of(series, base, manifest, "sha256", False, 1.0, unreadable_of(tree))
    assert tree.skipped == {"filesystem_error": 2}
    assert baseline.unread[b"busy"].directory and baseline.unread[b"eio"].directory
    assert baseline.unrecorded == 0
    readable_again = baseline_of(series, base, manifest, "sha256", False, 2.0)
    readable_again.files[b"busy/b"] = readable_again.files[b"eio/c"] = readable_again.files[b"f"]
    added = diff_baselines(baseline, readable_again).added
    assert b"busy/b" not in added and b"eio/c" not in added
    removed = diff_baselines(readable_again, baseline).removed  # readable then, refused now
    assert b"busy/b" not in removed and b"eio/c" not in removed


def test_a_worker_s_refused_directories_are_merged_named_and_bounded() -> None:
    mine = SkipCounter(named=2)
    mine.refused_directory("a")
    mine.merge({"filesystem_error": 3}, (), ["a", "b", "c"])
    assert mine.refused_named == ["a", "b"]
    assert mine.as_dict() == {"filesystem_error": 4}
