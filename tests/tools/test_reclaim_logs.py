"""reclaim on a container's log, through the real server: the question and the answer both say when the
log grows again (its container, only created, is stopped) and what bounds it for good, and the log is
emptied in place."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.reclaim.test_reclaim_logs import engine_naming
from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio


async def test_the_question_and_the_answer_say_when_the_log_grows_again_and_max_size_is_the_lasting_fix(
    tmp_path: Path,
) -> None:
    log = tmp_path / "containers" / "c1" / "c1-json.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b'{"log":"line\\n"}\n' * 4000)
    inode = log.stat().st_ino
    for socket_path in engine_naming(log, tmp_path):
        env = {"DOCKER_HOST": f"unix://{socket_path}"}
        async with spawn("--allow-reclaim", "--no-history", "--root", str(tmp_path), env=env) as wire:
            await wire.initialize()
            planned = await wire.call("reclaim_plan", {"classes": ["container"]})
            [item] = planned["result"]["structuredContent"]["items"]
            assert item["action"] == "truncate" and item["paths"] == [str(log)]
            arguments = {"plan_id": planned["result"]["structuredContent"]["plan_id"], "items": [item["id"]]}
            first = await wire.call("reclaim", arguments)
            asked = result_text(first)
            assert f"{item['id']}: truncate 1 file" in asked
            assert "note: its container is stopped: the log grows again once it is started" in asked
            assert log.stat().st_size > 0  # nothing done before the confirmation
            code = first["result"]["structuredContent"]["confirmation_code"]
            done = await wire.call("reclaim", {**arguments, "confirm": code})
    told = result_text(done)
    [report] = done["result"]["structuredContent"]["items"]
    assert report["action"] == "truncate" and report["files_done"] == 1 and report["skipped"] == []
    assert "1 file emptied" in told and "note: its container is stopped" in told
    assert "--log-opt max-size" in told
    assert (log.stat().st_ino, log.stat().st_size) == (inode, 0) and os.path.isfile(log)
