"""Reclaim plans across server processes (the history store), --no-history, roots over a kept plan, the log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sysmcp.history.store import Store
from sysmcp.reclaim import read_log
from tests.profile import child_env, needs_xattrs
from tests.tools.test_reclaim_wire import duplicates, plan_of
from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio


async def confirmed(wire: Any, plan_id: str, items: list[str]) -> dict[str, Any]:
    """The two-call flow: ask for the code, then act with it."""
    ask = await wire.call("reclaim", {"plan_id": plan_id, "items": items})
    assert not ask["result"].get("isError"), result_text(ask)
    code = ask["result"]["structuredContent"]["confirmation_code"]
    done = await wire.call("reclaim", {"plan_id": plan_id, "items": items, "confirm": code})
    assert not done["result"].get("isError"), result_text(done)
    reply: dict[str, Any] = done
    return reply


async def test_a_second_server_process_applies_the_plan_the_first_one_kept(tmp_path: Path) -> None:
    state = tmp_path / "state"
    data = tmp_path / "data"
    data.mkdir()
    first, second, third = duplicates(data)
    async with spawn("--state-dir", str(state), "--allow-reclaim", "--root", str(data)) as wire:
        await wire.initialize()
        plan = await plan_of(wire, data)
        assert plan["kept"] == "history" and plan["kept_note"] is None
        (item,) = plan["items"]
        ask = await wire.call("reclaim", {"plan_id": plan["plan_id"], "items": [item["id"]]})
        code = ask["result"]["structuredContent"]["confirmation_code"]
    (data / "new").write_bytes(third.read_bytes())
    os.replace(data / "new", third)  # between the two servers: same name and content, another inode
    async with spawn("--state-dir", str(state), "--allow-reclaim", "--root", str(data)) as wire:
        await wire.initialize()  # another process: the code the first one gave is good here too
        done = await wire.call(
            "reclaim", {"plan_id": plan["plan_id"], "items": [item["id"]], "confirm": code}
        )
        assert not done["result"].get("isError"), result_text(done)
        result = done["result"]["structuredContent"]
        assert result["items"][0]["skipped"] == [{"path": str(third), "reason": "changed"}]
        assert first.exists() and not second.exists() and third.exists()
        assert "logged in the history store" in result_text(done)
    listing = subprocess.run(
        [sys.executable, "-m", "sysmcp", "history", "--reclaim", "--state-dir", str(state)],
        capture_output=True,
        check=True,
        env=child_env(os.environ),
        timeout=120,
    )
    lines = listing.stdout.decode().splitlines()
    rows = [line for line in lines if plan["plan_id"] in line]
    assert len(rows) == 2, lines
    assert any("done" in row and row.endswith(f"  {second}  (kept copy: {first})") for row in rows)
    assert any(
        "skipped (changed)" in row and row.endswith(f"  {third}  (kept copy: {first})") for row in rows
    )
    assert lines[-1].startswith("2 actions, ")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    confined = subprocess.run(  # --root confines the log as it confines live answers
        [
            sys.executable,
            "-m",
            "sysmcp",
            "history",
            "--reclaim",
            "--state-dir",
            str(state),
            "--root",
            str(elsewhere),
        ],
        capture_output=True,
        check=True,
        env=child_env(os.environ),
        timeout=120,
    )
    assert confined.stdout.decode().splitlines()[-1].startswith("0 actions, ")
    assert str(second) not in confined.stdout.decode()


async def test_without_history_the_plan_lives_only_as_long_as_the_server(tmp_path: Path) -> None:
    duplicates(tmp_path)
    async with spawn("--no-history", "--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize()
        reply = await wire.call("reclaim_plan", {"path": str(tmp_path), "classes": ["duplicate"]})
        plan = reply["result"]["structuredContent"]
        assert plan["kept"] == "memory" and plan["kept_note"] == "history is off"
        assert "lives only as long as this server" in result_text(reply)
        done = await confirmed(wire, plan["plan_id"], [plan["items"][0]["id"]])
        assert "logged on stderr only: history is off" in result_text(done)
    async with spawn("--no-history", "--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize()
        gone = await wire.call("reclaim", {"plan_id": plan["plan_id"], "items": [plan["items"][0]["id"]]})
        assert gone["result"]["isError"] and "no reclaim plan" in result_text(gone)


@needs_xattrs
async def test_a_plan_kept_by_an_unconfined_server_cannot_reach_outside_a_confined_ones_roots(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    data = os.urandom(100_000)
    for path in (inside / "a.bin", inside / "b.bin", outside / "c.bin"):
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
    async with spawn("--state-dir", str(state)) as wire:  # no --root: the whole machine
        await wire.initialize()
        reply = await wire.call("reclaim_plan", {"path": str(tmp_path), "classes": ["duplicate"]})
        plan = reply["result"]["structuredContent"]
        (item,) = plan["items"]
        assert item["files"] == 2
    async with spawn("--state-dir", str(state), "--allow-reclaim", "--root", str(inside)) as wire:
        await wire.initialize()
        for chosen in (item["id"], item["link_id"]):
            refused = await wire.call("reclaim", {"plan_id": plan["plan_id"], "items": [chosen]})
            assert refused["result"]["isError"], result_text(refused)
            assert "outside the roots" in result_text(refused)
            assert str(outside) not in result_text(refused)  # the refusal names nothing outside
    assert all(p.read_bytes() == data for p in (inside / "a.bin", inside / "b.bin", outside / "c.bin"))


@needs_xattrs
async def test_duplicates_become_hard_links_over_the_wire(tmp_path: Path) -> None:
    first, second, third = duplicates(tmp_path)
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize()
        plan = await plan_of(wire, tmp_path)
        (item,) = plan["items"]
        assert item["link_id"] == item["id"] + ":link"
        kept = Path(item["kept_copy"])
        ask = await wire.call("reclaim", {"plan_id": plan["plan_id"], "items": [item["link_id"]]})
        assert "by hard links to" in result_text(ask) and str(kept) in result_text(ask)
        done = await confirmed(wire, plan["plan_id"], [item["link_id"]])
        result = done["result"]["structuredContent"]
        assert result["items"][0]["action"] == "link" and result["items"][0]["files_done"] == 2
        inodes = {os.lstat(p).st_ino for p in (first, second, third)}
        assert len(inodes) == 1 and os.lstat(kept).st_nlink == 3


def test_sysmcp_call_passes_state_dir_and_no_history_to_its_server_so_a_plan_outlives_it(
    tmp_path: Path,
) -> None:
    """Each ``sysmcp call`` is a server of its own: the plan, and the code, must come through the store."""
    state, data = tmp_path / "state", tmp_path / "data"
    data.mkdir()
    _first, second, third = duplicates(data)

    def call(*args: str, top: tuple[str, ...] = ("--state-dir", str(state))) -> Any:
        argv = [sys.executable, "-m", "sysmcp", *top, "call", "--root", str(data), "--json", *args]
        done = subprocess.run(argv, capture_output=True, check=False, env=child_env(os.environ), timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    plan = call("reclaim_plan", f"path={data}", 'classes=["duplicate"]')
    assert plan["kept"] == "history"
    chosen = f'items=["{plan["items"][0]["id"]}"]'
    code = call("--allow-reclaim", "reclaim", f"plan_id={plan['plan_id']}", chosen)["confirmation_code"]
    done = call("--allow-reclaim", "reclaim", f"plan_id={plan['plan_id']}", chosen, f"confirm={code}")
    assert done["status"] == "done" and not second.exists() and not third.exists()
    assert [r.path for r in read_log(Store.open(state))][-2:] == [str(second), str(third)]
    off = call("reclaim_plan", f"path={data}", top=("--state-dir", str(state), "--no-history"))
    assert off["kept"] == "memory"
