"""SECURITY.md's per-tool contract under ``--root``, one test per tool, over the real server.

Tools that take paths refuse any outside the roots; tools that report system-wide facts say only what
the contract lists (the mount table holding a root, per-device and per-process I/O), and
``deleted_open_files`` names only deleted files whose former path is under a root.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sysmcp import platform
from sysmcp.engine.paths import real_root
from tests.profile import UNDER_POSIX_PROFILE
from tests.wire import Wire, result_text, spawn

pytestmark = pytest.mark.anyio

REFUSED = "outside the operator's roots"


@pytest.fixture
def base(tmp_path: Path) -> Path:
    base = real_root(tmp_path)
    for name in ("jail", "other"):
        (base / name / "d").mkdir(parents=True)
        for copy in ("x", "y"):
            (base / name / "d" / copy).write_text(f"same in {name}\n")
    return base


async def answer(wire: Wire, tool: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any], bool]:
    reply = await wire.call(tool, arguments)
    result = reply["result"]
    return result_text(reply), result.get("structuredContent", {}), bool(result.get("isError"))


@pytest.mark.parametrize(
    ("tool", "key", "target"),
    [
        ("file_sha256", "path", "d/x"),
        ("hash_tree", "path", "d"),
        ("dir_usage", "path", "d"),
        ("find_duplicates", "path", "d"),
        ("verify_checksums", "manifest", "m.sha256"),
        ("disk_usage", "path", "d"),
        ("deleted_open_files", "path", "d"),
    ],
)
async def test_a_tool_that_takes_a_path_answers_inside_the_root_and_refuses_outside(
    base: Path, tool: str, key: str, target: str
) -> None:
    for name in ("jail", "other"):
        digest = hashlib.sha256(f"same in {name}\n".encode()).hexdigest()
        (base / name / "m.sha256").write_text(f"{digest}  d/x\n")
    async with spawn("--root", str(base / "jail")) as wire:
        await wire.initialize()
        text, _, error = await answer(wire, tool, {key: str(base / "jail" / target)})
        assert not error, text
        text, structured, error = await answer(wire, tool, {key: str(base / "other" / target)})
        assert error and REFUSED in text
        assert "same in other" not in text + json.dumps(structured)


async def test_verify_checksums_entries_that_lead_outside_are_not_hashed(base: Path) -> None:
    outside = base / "other" / "d" / "x"
    digest = hashlib.sha256(outside.read_bytes()).hexdigest()
    manifest = base / "jail" / "m.sha256"
    manifest.write_text(f"{digest}  ../other/d/x\n{digest}  {outside}\n")
    async with spawn("--root", str(base / "jail")) as wire:
        await wire.initialize()
        text, structured, _ = await answer(wire, "verify_checksums", {"manifest": str(manifest)})
        assert structured["ok"] == 0 and structured["unreadable"] == 2, text
        assert text.count("outside the allowed roots") == 2


async def test_disk_usage_lists_only_the_filesystems_that_hold_a_root(base: Path) -> None:
    async with spawn("--root", str(base / "jail")) as wire:
        await wire.initialize()
        text, structured, error = await answer(wire, "disk_usage", {})
        assert not error, text
        points = [Path(fs["mount_point"]) for fs in structured["filesystems"]]
        assert points, text
        for point in points:  # the mount holding the root, or one mounted inside it
            jail = base / "jail"
            assert (
                jail.parts[: len(point.parts)] == point.parts or point.parts[: len(jail.parts)] == jail.parts
            )


async def test_disk_io_reports_devices_and_processes_and_names_no_path(base: Path) -> None:
    async with spawn("--root", str(base / "jail")) as wire:
        await wire.initialize()
        text, structured, error = await answer(wire, "disk_io", {"sample_s": 0.1})
        if not structured.get("available", True):
            pytest.skip("no per-device I/O counters on this system: nothing to report")
        assert not error, text
        device_keys = {"device", "read_bytes", "write_bytes", "read_bytes_per_s", "write_bytes_per_s"}
        device_keys |= {"read_iops", "write_iops", "busy_percent", "mount_points"}
        process_keys = {"pid", "command", "user", "bytes", "bytes_per_s"}
        for device in structured["devices"]:
            assert set(device) <= device_keys  # a kernel device name and counters: no path outside
            assert all(Path(p).is_relative_to(base / "jail") for p in device.get("mount_points", []))
        for row in structured.get("top_writers", []) + structured.get("top_readers", []):
            assert set(row) <= process_keys | {"files", "files_not_shown", "files_outside_roots"}
            # a process's pid, name and user, and the files it writes inside the roots only
            assert all(Path(f["path"]).is_relative_to(base / "jail") for f in row.get("files", []))


@pytest.fixture
def deleted_but_open(base: Path) -> Iterator[dict[str, Path]]:
    """A file under the root and one outside it, both deleted while this process holds them open."""
    held = {}
    files = []
    for name in ("jail", "other"):
        path = base / name / f"held-{name}.log"
        handle = open(path, "wb")  # noqa: SIM115 - held open past the fixture's setup on purpose
        handle.write(b"x" * 65536)
        handle.flush()
        os.unlink(path)
        held[name] = path
        files.append(handle)
    yield held
    for handle in files:
        handle.close()


@pytest.mark.skipif(
    not platform.has_proc_fd(), reason="no /proc/PID/fd here: the tool lists nothing anywhere"
)
async def test_deleted_open_files_names_only_files_under_a_root_and_counts_the_rest(
    base: Path, deleted_but_open: dict[str, Path]
) -> None:
    async with spawn("--root", str(base / "jail")) as wire:
        await wire.initialize()
        text, structured, error = await answer(wire, "deleted_open_files", {"top_n": 50})
        assert not error, text
        everything = text + json.dumps(structured)
        assert str(deleted_but_open["jail"]) in everything
        assert "held-other" not in everything
        assert structured["outside_allowed_roots"]["files"] >= 1
        assert "outside the allowed roots: not named" in text
        named = [row["path"] for row in structured["files"]]
        assert all(Path(path).is_relative_to(base / "jail") for path in named), named


async def test_disk_usage_explain_walks_only_the_roots_on_the_filesystem(base: Path) -> None:
    """explain accounts for a whole filesystem, but under a root it walks that root alone: the rest of
    the filesystem (here ``other``, beside it) is neither walked nor counted, only left in the remainder."""
    async with spawn("--no-history", "--root", str(base / "jail")) as wire:
        await wire.initialize()
        text, structured, error = await answer(
            wire, "disk_usage", {"path": str(base / "jail"), "explain": True, "timeout_s": 120}
        )
        assert not error, text
        files = structured["explain"]["files"]
        if structured["explain"]["mount_point"] == str(base / "jail"):
            pytest.skip("the root is itself a mount point here: its whole filesystem lies inside it")
        assert files["roots_walked"] == [str(base / "jail")] and files["files"] == 2, files
        assert "outside your roots or unexplained" in text
        if structured["explain"]["hidden_under_mounts"]["mount_points"]:  # all of them outside the root
            assert "outside your roots (not looked under)" in text
        # Without /proc (the portable profile, like macOS) deleted files are not looked for: no step for them.
        for step in ("dir_usage",) if UNDER_POSIX_PROFILE else ("dir_usage", "deleted_open_files"):
            assert f"{step} path={base / 'jail'}" in text, text
