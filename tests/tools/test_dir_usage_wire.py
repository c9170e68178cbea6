"""dir_usage through the real server over real pipes: schema-valid results, resources, budgets, ping."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
import psutil
import pytest

from tests.profile import needs_fork
from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio


def du(root: Path, flag: str) -> int:
    return int(
        subprocess.run(["du", "-sx", flag, str(root)], capture_output=True, check=True).stdout.split()[0]
    )


def make_tree(root: Path, directories: int, files_each: int) -> None:
    for d in range(directories):
        sub = root / f"d{d:03d}"
        sub.mkdir()
        for f in range(files_each):
            (sub / f"f{f}").write_bytes(b"z" * (d * files_each + f))


async def test_dir_usage_over_the_wire_matches_du_and_links_the_full_listing(tmp_path: Path) -> None:
    make_tree(tmp_path, 12, 10)
    async with spawn() as wire:
        await wire.initialize("2025-11-25")
        reply = await wire.call("dir_usage", {"path": str(tmp_path), "top_n": 3, "sort_by": "apparent"})
        result = reply["result"]
        assert result["isError"] is False
        structured = result["structuredContent"]
        assert structured["totals"]["apparent_bytes"] == du(tmp_path, "-b")
        assert structured["totals"]["disk_bytes"] == du(tmp_path, "-B1")
        assert [r["path"] for r in structured["largest_directories"]] == [
            f"{tmp_path}/d011",
            f"{tmp_path}/d010",
            f"{tmp_path}/d009",
        ]
        assert "… and 117 more files not shown" in result_text(reply)
        links = [c for c in result["content"] if c["type"] == "resource_link"]
        assert len(links) == 1 and links[0]["uri"].startswith("sysmcp://")
        listed = await wire.request("resources/list", {})
        assert links[0]["uri"] in [r["uri"] for r in listed["result"]["resources"]]
        read = await wire.request("resources/read", {"uri": links[0]["uri"]})
        text = read["result"]["contents"][0]["text"]
        assert f"{tmp_path}/d000/f9" in text and text.count(f"{tmp_path}/d") == 12 + 120
        missing = await wire.request("resources/read", {"uri": "sysmcp://results/999/none"})
        assert "error" in missing


async def test_before_2025_06_18_the_link_is_text_and_there_is_no_structured_content(tmp_path: Path) -> None:
    make_tree(tmp_path, 8, 2)
    async with spawn() as wire:
        await wire.initialize("2025-03-26")
        reply = await wire.call("dir_usage", {"path": str(tmp_path), "top_n": 1})
        assert "structuredContent" not in reply["result"]
        assert "sysmcp://" in result_text(reply)


#: Files in the tree the smallest time budget (1 ms) is given: the walk lstats each of them in Python, a
#: microsecond or more apiece on any machine, so it cannot end within the budget and the answer is always
#: partial. (A thousand files take 1 to 2.5 ms: about one walk of them in thirty ends within it, rightly complete.)
BEYOND_A_MILLISECOND = (50, 100)


async def test_a_tiny_time_budget_returns_a_partial_result_over_the_wire(tmp_path: Path) -> None:
    directories, files_each = BEYOND_A_MILLISECOND
    make_tree(tmp_path, directories, files_each)
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("dir_usage", {"path": str(tmp_path), "timeout_s": 0.001})
        structured = reply["result"]["structuredContent"]
        assert structured["complete"] is False
        assert "time budget" in structured["stopped_reason"]
        assert result_text(reply).startswith("PARTIAL RESULT")
        assert structured["totals"]["files"] < directories * files_each


async def test_ping_is_answered_while_a_scan_runs_and_progress_counts_entries(tmp_path: Path) -> None:
    make_tree(tmp_path, 20, 100)
    async with spawn() as wire:
        await wire.initialize()
        await wire.start_call("dir_usage", {"path": str(tmp_path)}, msg_id="scan", progress=7)
        for n in range(3):
            await wire.send({"jsonrpc": "2.0", "id": f"ping{n}", "method": "ping"})
        answered: list[str] = []
        final = None
        with anyio.fail_after(30):
            while final is None or len(answered) < 3:
                message = await wire.receive()
                if message.get("id") == "scan":
                    final = message
                elif str(message.get("id", "")).startswith("ping"):
                    answered.append(message["id"])
                else:
                    wire.notifications.append(message)
        assert answered == ["ping0", "ping1", "ping2"]
        assert final["result"]["structuredContent"]["totals"]["files"] == 2000
        progress = [n["params"] for n in wire.notifications if n["method"] == "notifications/progress"]
        assert (
            progress and progress[-1]["progress"] == final["result"]["structuredContent"]["totals"]["entries"]
        )
        assert "entries scanned" in progress[-1]["message"]


async def test_errors_are_results_the_model_can_act_on(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    async with spawn() as wire:
        await wire.initialize()
        not_dir = await wire.call("dir_usage", {"path": str(tmp_path / "file")})
        assert not_dir["result"]["isError"] and "Not a directory" in result_text(not_dir)
        missing = await wire.call("dir_usage", {"path": str(tmp_path / "nope")})
        assert missing["result"]["isError"] and "No such directory" in result_text(missing)
        bad = await wire.call("dir_usage", {"path": str(tmp_path), "timeout_s": 0, "show": "everything"})
        assert bad["result"]["isError"] and "timeout_s" in result_text(bad) and "show" in result_text(bad)
    assert os.path.exists(tmp_path / "file")  # read-only


async def test_a_directory_name_with_spaces_gives_a_valid_readable_resource_uri(tmp_path: Path) -> None:
    target = tmp_path / "my dir #1"
    target.mkdir()
    make_tree(target, 3, 3)
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("dir_usage", {"path": str(target), "top_n": 1})
        (link,) = [c for c in reply["result"]["content"] if c["type"] == "resource_link"]
        assert " " not in link["uri"] and link["uri"].endswith("/dir_usage-my%20dir%20%231.tsv")
        read = await wire.request("resources/read", {"uri": link["uri"]})
        assert f"{target}/d002/f2" in read["result"]["contents"][0]["text"]


async def _children_of(pid: int, want_any: bool) -> list[int]:
    """The server's child processes, once there are some (``want_any``) or none left."""
    server = psutil.Process(pid)
    with anyio.fail_after(20):
        while bool(children := [child.pid for child in server.children()]) != want_any:
            await anyio.sleep(0.005)
    return children


@needs_fork
async def test_a_scan_shared_between_processes_equals_du_and_a_cancelled_one_leaves_no_child() -> None:
    """/usr is a real tree big enough (over 50 ms of walking) for the scan to be shared out."""
    usr = Path("/usr")
    async with spawn(env={"SYSMCP_SCAN_PROCESSES": "2"}) as wire:
        await wire.initialize()
        reply = await wire.call("dir_usage", {"path": str(usr), "timeout_s": 120})
        totals = reply["result"]["structuredContent"]["totals"]
        assert reply["result"]["structuredContent"]["complete"] is True
        assert totals["apparent_bytes"] == du(usr, "-b")
        assert totals["disk_bytes"] == du(usr, "-B1")

        await wire.start_call("dir_usage", {"path": str(usr), "timeout_s": 120}, msg_id="scan")
        walkers = await _children_of(wire.process.pid, want_any=True)
        await wire.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "scan"}}
        )
        assert await _children_of(wire.process.pid, want_any=False) == []
        assert all(not psutil.pid_exists(pid) for pid in walkers)  # killed and reaped, not orphaned
        pong = await wire.request("ping", msg_id="after")  # raises if the cancelled scan answers first
        assert pong["result"] == {}
