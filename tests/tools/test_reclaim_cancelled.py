"""A reclaim cancelled part way gets no reply (MCP), so the next look at the plan says what it did: the next
reclaim of the plan names the files done and acts on the rest alone; ``sysmcp history --reclaim`` shows
the stop, and each duplicate removed with its kept copy. The cancellation comes from the client at a known file: the server runs with a test hook
(``ApplyRequest.between``) that, at that file, opens a FIFO the test reads, then waits to be cancelled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from sysmcp.reclaim import ActionLog
from sysmcp.tools.reclaim import where_logged
from tests.tools.test_reclaim_confirmation import ask_and_answer, copies
from tests.tools.test_reclaim_wire import plan_of
from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio

#: The server, with a hook at the file named by argv[1], the first time only: tell the test (FIFO argv[2]),
#: then wait for the call's cancellation (which raises here, in the worker, as ``cancel()`` would).
HOOKED = """
import os, runpy, sys, threading
import anyio.from_thread
import sysmcp.tools.reclaim as tool
from sysmcp.reclaim import ApplyRequest

stop, fifo = os.fsencode(sys.argv.pop(1)), sys.argv.pop(1)

def between(path):
    if path == stop and not os.path.exists(fifo + ".passed"):
        open(fifo + ".passed", "x").close()  # once: the next call goes through
        with open(fifo, "w"):
            pass
        while True:
            anyio.from_thread.check_cancelled()
            threading.Event().wait(0.01)

tool.ApplyRequest = lambda plan, ids, allowed, **more: ApplyRequest(plan, ids, allowed, between=between, **more)
sys.argv[0] = "sysmcp"
runpy.run_module("sysmcp", run_name="__main__")
"""


async def cancelled_at(wire: Any, arguments: dict[str, Any], fifo: Path) -> None:
    """A reclaim the user confirms, cancelled by the client once the server is at the hooked file; back
    when the server said it stopped."""
    msg_id = next(wire.ids)
    await wire.start_call("reclaim", arguments, msg_id=msg_id)
    asked = await wire.receive()
    await wire.send(
        {
            "jsonrpc": "2.0",
            "id": asked["id"],
            "result": {"action": "accept", "content": {"confirm": True}},
        }
    )
    await anyio.to_thread.run_sync(fifo.read_bytes)  # the server is at the hooked file
    await wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": msg_id}})
    assert wire.process.stderr is not None
    with anyio.fail_after(60):
        seen = b""
        while b'"reclaim stopped"' not in seen:
            seen += await wire.process.stderr.receive()


async def test_a_reclaim_cancelled_part_way_is_told_by_the_next_call_which_acts_only_on_the_rest_and_logged(
    tmp_path: Path,
) -> None:
    data, state, fifo = tmp_path / "data", tmp_path / "state", tmp_path / "at-the-third"
    data.mkdir()
    paths = copies(data, 6)  # one kept, five to remove: cancelled at the third
    os.mkfifo(fifo)
    async with spawn(
        "--state-dir",
        str(state),
        "--allow-reclaim",
        "--root",
        str(data),
        command=[sys.executable, "-c", HOOKED, str(data / "copy03.bin"), str(fifo)],
    ) as wire:
        await wire.initialize(capabilities={"elicitation": {}})
        plan = await plan_of(wire, data)
        (item,) = plan["items"]
        assert item["kept_copy"] == str(paths[0])
        arguments = {"plan_id": plan["plan_id"], "items": [item["id"]]}
        await cancelled_at(wire, arguments, fifo)
        assert [p.name for p in paths if p.exists()] == [
            "copy00.bin",
            "copy03.bin",
            "copy04.bin",
            "copy05.bin",
        ]

        question, reply = await ask_and_answer(
            wire, arguments, {"result": {"action": "accept", "content": {"confirm": True}}}
        )
        earlier = "An earlier reclaim of this plan (cancelled after 2 files) acted on 2 files of these items"
        assert earlier in question and f"removed: {data}/copy01.bin" in question, question
        assert "copy01.bin  (" not in question and "copy03.bin  (nobody" in question, question
        result = reply["result"]["structuredContent"]
        assert result["done_before"] == 2 and result["items"][0]["files_done"] == 3, result
        assert result["items"][0]["skipped"] == [] and earlier in result_text(reply), result
        assert [p.name for p in paths if p.exists()] == ["copy00.bin"]

        again = await wire.call("reclaim", arguments)  # nothing left: nothing asked, nothing done twice
        result = again["result"]["structuredContent"]
        assert result["done_before"] == 5 and result["items"][0]["files_done"] == 0, result
        assert "acted on 5 files of these items" in result_text(again)

    told = subprocess.run(
        [sys.executable, "-m", "sysmcp", "history", "--reclaim", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "stopped (cancelled after 2 files)" in told, told
    for name in ("copy01.bin", "copy02.bin", "copy03.bin", "copy05.bin"):  # each says where its bytes are
        assert f"{data}/{name}  (kept copy: {data}/copy00.bin)" in told, told


def test_the_answer_names_stderr_only_when_every_action_line_went_there() -> None:
    """A line dropped (the host not reading stderr) or below --log-level is not 'logged on stderr'."""
    logged = ActionLog(None, lambda: 0.0)
    assert where_logged(logged) == "Each action is logged on stderr only: history is off."
    told = where_logged(logged, lost=5)
    assert told.startswith("Not every action is logged: history is off, and not all on stderr: 5 log lines")
    assert "on stderr only" not in told


async def test_a_server_logging_above_warning_does_not_say_its_actions_are_on_stderr(tmp_path: Path) -> None:
    data, state = tmp_path / "data", tmp_path / "state"
    data.mkdir()
    copies(data, 2)
    server = ("--log-level", "error", "--state-dir", str(state), "--allow-reclaim", "--root", str(data))
    async with spawn(*server) as wire:
        await wire.initialize()
        plan = await plan_of(wire, data)
        arguments = {"plan_id": plan["plan_id"], "items": [plan["items"][0]["id"]]}
        code = (await wire.call("reclaim", arguments))["result"]["structuredContent"]["confirmation_code"]
        done = result_text(await wire.call("reclaim", {**arguments, "confirm": code}))
        assert done.split("\n")[1] == (
            "Each action is logged in the history store (sysmcp history --reclaim), "
            "not on stderr: --log-level is above warning."
        ), done


async def test_a_reclaim_cancelled_before_its_first_file_is_told_as_having_acted_on_none(
    tmp_path: Path,
) -> None:
    """No list that ends in a colon and names nothing: the next call says the earlier one did nothing."""
    data, fifo = tmp_path / "data", tmp_path / "at-the-first"
    data.mkdir()
    paths = copies(data, 3)
    os.mkfifo(fifo)
    server = [sys.executable, "-c", HOOKED, str(data / "copy01.bin"), str(fifo)]
    async with spawn(
        "--state-dir", str(tmp_path / "state"), "--allow-reclaim", "--root", str(data), command=server
    ) as wire:
        await wire.initialize(capabilities={"elicitation": {}})
        plan = await plan_of(wire, data)
        arguments = {"plan_id": plan["plan_id"], "items": [plan["items"][0]["id"]]}
        await cancelled_at(wire, arguments, fifo)
        assert all(p.exists() for p in paths)
        question, _reply = await ask_and_answer(wire, arguments, {"result": {"action": "cancel"}})
        assert (
            "An earlier reclaim of this plan (cancelled after 0 files) acted on none of these items' files."
            in question
        ), question
        assert "which are not acted on again" not in question, question
