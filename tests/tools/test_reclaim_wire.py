"""reclaim_plan and the opt-in reclaim over the real wire: listing, the flag, confirmation, elicitation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.profile import child_env
from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio


def duplicates(base: Path) -> tuple[Path, Path, Path]:
    data = os.urandom(200_000)
    paths = (base / "a.bin", base / "b.bin", base / "c.bin")
    for path in paths:
        path.write_bytes(data)
    return paths


async def plan_of(wire: Any, base: Path) -> dict[str, Any]:
    reply = await wire.call("reclaim_plan", {"path": str(base), "classes": ["duplicate"]})
    assert not reply["result"].get("isError"), result_text(reply)
    structured: dict[str, Any] = reply["result"]["structuredContent"]
    return structured


async def test_without_the_flag_reclaim_is_not_listed_and_a_call_is_an_unknown_tool(tmp_path: Path) -> None:
    async with spawn("--root", str(tmp_path)) as wire:
        await wire.initialize()
        listed = await wire.request("tools/list", {})
        names = [tool["name"] for tool in listed["result"]["tools"]]
        assert "reclaim_plan" in names and "reclaim" not in names
        plan_tool = next(tool for tool in listed["result"]["tools"] if tool["name"] == "reclaim_plan")
        assert plan_tool["annotations"]["readOnlyHint"] is True
        reply = await wire.call("reclaim", {"plan_id": "x", "items": ["y"]})
        assert reply["error"]["code"] == -32602 and "unknown tool 'reclaim'" in reply["error"]["message"]
        unknown = await wire.call("no_such_tool", {})
        assert unknown["error"]["code"] == reply["error"]["code"]


async def test_reclaim_plan_names_the_duplicates_and_keeps_a_script(tmp_path: Path) -> None:
    first, second, third = duplicates(tmp_path)
    async with spawn("--root", str(tmp_path)) as wire:
        await wire.initialize()
        plan = await plan_of(wire, tmp_path)
        (item,) = plan["items"]
        assert item["class"] == "duplicate" and item["files"] == 2
        assert item["bytes"] == 2 * os.lstat(first).st_blocks * 512
        assert plan["script"] is not None
        read = await wire.request("resources/read", {"uri": plan["script"]})
        script = read["result"]["contents"][0]["text"]
        assert script.startswith("#!/bin/sh") and f"dupf '{second}'" in script and f"dupf '{third}'" in script
        assert subprocess.run(["sh", "-n"], input=script.encode(), check=False).returncode == 0


async def test_with_the_flag_the_confirmation_code_flow_acts_and_a_wrong_code_is_refused(
    tmp_path: Path,
) -> None:
    first, second, third = duplicates(tmp_path)
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize()
        listed = await wire.request("tools/list", {})
        tool = next(t for t in listed["result"]["tools"] if t["name"] == "reclaim")
        assert tool["annotations"]["destructiveHint"] is True and tool["annotations"]["readOnlyHint"] is False
        plan = await plan_of(wire, tmp_path)
        item_id = plan["items"][0]["id"]
        ask = await wire.call("reclaim", {"plan_id": plan["plan_id"], "items": [item_id]})
        asked = ask["result"]["structuredContent"]
        assert (
            asked["status"] == "confirmation_needed" and asked["planned_bytes"] == plan["items"][0]["bytes"]
        )
        assert second.exists() and third.exists()
        wrong = await wire.call(
            "reclaim",
            {
                "plan_id": plan["plan_id"],
                "items": [item_id],
                "confirm": "0" * len(asked["confirmation_code"]),
            },
        )
        assert wrong["result"]["isError"] and "does not match" in result_text(wrong)
        assert second.exists() and third.exists()
        done = await wire.call(
            "reclaim", {"plan_id": plan["plan_id"], "items": [item_id], "confirm": asked["confirmation_code"]}
        )
        result = done["result"]["structuredContent"]
        assert result["status"] == "done", result_text(done)
        assert first.exists() and not second.exists() and not third.exists()
        assert result["items"][0]["files_done"] == 2 and result["items"][0]["skipped"] == []
        told = result_text(done)  # what went and what stayed, in words
        assert f"{item_id}: 2 files removed" in told and f"      kept copy: {first}" in told.splitlines()
        assert told.splitlines()[1].startswith("Each action is logged in the history store")


async def test_reclaim_skips_a_file_replaced_after_the_plan(tmp_path: Path) -> None:
    _first, second, third = duplicates(tmp_path)
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize()
        plan = await plan_of(wire, tmp_path)
        item_id = plan["items"][0]["id"]
        (tmp_path / "new").write_bytes(third.read_bytes())
        os.replace(tmp_path / "new", third)  # same name, same content, another inode
        ask = await wire.call("reclaim", {"plan_id": plan["plan_id"], "items": [item_id]})
        code = ask["result"]["structuredContent"]["confirmation_code"]
        done = await wire.call("reclaim", {"plan_id": plan["plan_id"], "items": [item_id], "confirm": code})
        result = done["result"]["structuredContent"]
        assert result["items"][0]["skipped"] == [{"path": str(third), "reason": "changed"}]
        assert not second.exists() and third.exists()
        assert "changed since the plan" in result_text(done)


async def test_a_client_with_elicitation_is_asked_and_its_no_removes_nothing_its_yes_removes(
    tmp_path: Path,
) -> None:
    _first, second, _third = duplicates(tmp_path)
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize(capabilities={"elicitation": {}})
        plan = await plan_of(wire, tmp_path)
        item_id = plan["items"][0]["id"]
        for answer, status in (
            ({"action": "decline"}, "declined"),
            ({"action": "accept", "content": {"confirm": True}}, "done"),
        ):
            msg_id = next(wire.ids)
            await wire.start_call("reclaim", {"plan_id": plan["plan_id"], "items": [item_id]}, msg_id=msg_id)
            asked = await wire.receive()
            assert asked["method"] == "elicitation/create", asked
            assert item_id in asked["params"]["message"]
            await wire.send({"jsonrpc": "2.0", "id": asked["id"], "result": answer})
            reply = await wire.response(msg_id)
            assert reply["result"]["structuredContent"]["status"] == status, result_text(reply)
            assert second.exists() is (status == "declined")


def test_sysmcp_call_writes_the_plan_script_with_o(tmp_path: Path) -> None:
    duplicates(tmp_path)
    out = tmp_path / "plan.sh"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sysmcp",
            "call",
            "--root",
            str(tmp_path),
            "reclaim_plan",
            f"path={tmp_path}",
            'classes=["duplicate"]',
            "-o",
            str(out),
        ],
        capture_output=True,
        check=False,
        env=child_env(os.environ),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    script = out.read_text()
    assert script.startswith("#!/bin/sh")
    dry = subprocess.run(["sh", str(out)], capture_output=True, check=True)
    assert dry.stdout.count(b"would remove: ") == 2


async def test_under_root_the_plan_lists_nothing_outside_the_roots(tmp_path: Path) -> None:
    inside = tmp_path / "srv"
    inside.mkdir()
    async with spawn("--root", str(inside)) as wire:
        await wire.initialize()
        reply = await wire.call("reclaim_plan", {})
        plan = reply["result"]["structuredContent"]
        assert plan["path"] == str(inside)
        assert all(p.startswith(f"{inside}/") for item in plan["items"] for p in item["paths"])
        refused = await wire.call("reclaim_plan", {"path": "/var"})
        assert refused["result"]["isError"] and "outside" in result_text(refused)


def test_sysmcp_call_forwards_allow_reclaim_and_without_it_says_reclaim_needs_it(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "sysmcp", "call", "--root", str(tmp_path)]
    args = ["reclaim", "plan_id=nope", 'items=["x"]']
    without = subprocess.run(
        [*base, *args], capture_output=True, check=False, env=child_env(os.environ), timeout=120
    )
    assert without.returncode == 2 and b"reclaim is served only with --allow-reclaim" in without.stderr
    allowed = subprocess.run(
        [*base, "--allow-reclaim", *args],
        capture_output=True,
        check=False,
        env=child_env(os.environ),
        timeout=120,
    )
    assert allowed.returncode == 1 and b"nope" in allowed.stdout + allowed.stderr
