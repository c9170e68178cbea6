"""File names wherever a person reads them (the script's dry run, the plan's text, the reclaim answers,
``sysmcp history --reclaim``) are escaped in GNU ``ls -b`` style, so a name cannot forge a line or move
the cursor; JSON keeps a name that is not UTF-8 recoverable (``exact_bytes``, base64), never as lone
surrogates."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sysmcp.engine.paths import escaped
from sysmcp.history.store import Store
from sysmcp.reclaim import ActionLog, LogRecord, PlanRequest, build_plan, render_script
from sysmcp.tools.reclaim_plan import render
from tests.profile import child_env
from tests.reclaim.test_reclaim import layout, plan_of, run_script
from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio

#: A name that, printed raw, clears the line and forges a line of its own.
FORGER = b"evil\x1b[2K\rwould remove: forged.1\nwould remove: forged.1"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (b"plain name.txt", "plain name.txt"),
        (b"a\x1b[2Kb\nc\td\re", "a\\033[2Kb\\nc\\td\\re"),
        (b"back\\slash", "back\\\\slash"),
        (b"\xff\xfe.bin", "\\377\\376.bin"),
        ("été".encode(), "été"),
        ("\u202etxt.exe".encode(), "\\342\\200\\256txt.exe"),
        (b"\x7f\x01", "\\177\\001"),
    ],
)
def test_a_name_is_escaped_as_gnu_ls_b_does(raw: bytes, shown: str) -> None:
    assert escaped(raw) == shown
    assert escaped(os.fsdecode(raw)) == shown  # a name that went through os.fsdecode, the same


def test_a_name_with_esc_and_newline_cannot_forge_a_line_of_the_scripts_dry_run(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, [FORGER + b".1", b"honest.1"])
    done = run_script(render_script(plan), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert b"\x1b" not in done.stdout and b"\r" not in done.stdout
    assert [line for line in lines if line.startswith(b"would remove: ")] == [
        b"would remove: " + escaped(entry.path).encode() for item in plan.items for entry in item.entries
    ]
    assert len(lines) == 3  # two files and the summary: nothing forged
    forged = tmp_path / "var/log" / os.fsdecode(FORGER + b".1")
    assert forged.exists()  # a dry run; and --apply removes the exact name:
    applied = run_script(render_script(plan), "--apply", cwd=tmp_path)
    assert applied.returncode == 0 and not forged.exists(), applied.stdout


def test_a_name_with_esc_and_newline_cannot_forge_a_line_of_the_plan_text(tmp_path: Path) -> None:
    rotated = plan_of(tmp_path, [FORGER + b".1"])
    kept, extra = os.fsencode(tmp_path) + b"/" + FORGER, os.fsencode(tmp_path) + b"/extra"
    for path in (kept, extra):  # a duplicate whose kept copy (named in the item's note too) is the forger
        with open(path, "wb") as handle:
            handle.write(b"y" * 5000)
    request = PlanRequest(layout=layout(tmp_path), classes=("duplicate",), duplicates=[[kept, extra]])
    text = render(rotated, str(tmp_path)) + "\n" + render(build_plan(request), str(tmp_path))
    assert "\x1b" not in text and "\r" not in text
    assert not any(line.startswith("would remove") for line in text.splitlines())
    assert escaped(FORGER) in text


def test_a_name_with_esc_and_newline_cannot_forge_a_line_of_history_reclaim(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = Store.open(state)
    actions = ActionLog(store, time.time)
    path = os.fsdecode(b"/srv/" + FORGER + b"\xff")
    actions.record(LogRecord(time.time(), "p1", "duplicate-1", path, "delete", "done", None, 4096, 4096))
    assert actions.flush() is None
    listing = subprocess.run(
        [sys.executable, "-m", "sysmcp", "history", "--reclaim", "--state-dir", str(state)],
        capture_output=True,
        check=True,
        env=child_env(os.environ),
        timeout=120,
    )
    out = listing.stdout.decode()
    assert "\x1b" not in out and "\\udc" not in out
    lines = out.splitlines()
    assert len(lines) == 3 and lines[1].endswith(
        "/srv/evil\\033[2K\\rwould remove: forged.1\\nwould remove: forged.1\\377"
    )


async def test_a_name_that_is_not_utf8_round_trips_through_exact_bytes(tmp_path: Path) -> None:
    data = os.urandom(100_000)
    names = [b"\xff\xfe-a.bin", b"\xff\xfe-b.bin", b"\xff\xfe-c.bin"]
    raw_paths = [os.fsencode(tmp_path) + b"/" + name for name in names]
    for raw in raw_paths:
        with open(raw, "wb") as handle:
            handle.write(data)
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize()
        reply = await wire.call("reclaim_plan", {"path": str(tmp_path), "classes": ["duplicate"]})
        (item,) = reply["result"]["structuredContent"]["items"]
        exact = reply["result"]["structuredContent"]["exact_bytes"]
        assert {base64.b64decode(exact[f"/items/0/paths/{n}"]) for n in range(len(item["paths"]))} | {
            base64.b64decode(exact["/items/0/kept_copy"])
        } == set(raw_paths)
        assert "\\377\\376-a.bin" in result_text(reply)  # the text escapes the same name, ls -b style
        with open(raw_paths[2], "ab") as handle:  # changed since the plan: skipped, and named exactly
            handle.write(b"more")
        plan_id = reply["result"]["structuredContent"]["plan_id"]
        ask = await wire.call("reclaim", {"plan_id": plan_id, "items": [item["id"]]})
        code = ask["result"]["structuredContent"]["confirmation_code"]
        done = await wire.call("reclaim", {"plan_id": plan_id, "items": [item["id"]], "confirm": code})
        (skip,) = done["result"]["structuredContent"]["items"][0]["skipped"]
        exact = done["result"]["structuredContent"]["exact_bytes"]
        assert (
            base64.b64decode(exact["/items/0/skipped/0/path"]) == raw_paths[2] and skip["reason"] == "changed"
        )
        assert "skipped " + escaped(raw_paths[2]) in result_text(done)
        assert wire.raw_lines
        wire_text = b"\n".join(wire.raw_lines)
        assert b"\\udc" not in wire_text.lower()
        assert all(json.loads(line) for line in wire.raw_lines)


def test_a_file_left_aside_or_kept_by_a_cancellation_is_said_in_words_with_where_it_is() -> None:
    from sysmcp.tools.reclaim import ItemReport, ReclaimAnswer, Skip
    from sysmcp.tools.reclaim import render as answer_text

    left = "changed; left as .sysmcp-aside-00ff-b (its name was taken meanwhile)"
    skips = [Skip("/srv/a", "cancelled"), Skip("/srv/b", left)]
    report = ItemReport(
        id="duplicate-1", action="delete", planned_bytes=8192, freed_bytes=0, files_done=0, skipped=skips
    )
    told = answer_text(ReclaimAnswer("done", "p1", 8192, freed_bytes=0, items=[report]))
    assert "skipped /srv/a: the call was cancelled while it was set aside, so it stays" in told
    assert (
        "skipped /srv/b: changed since the plan; left as .sysmcp-aside-00ff-b (its name was taken meanwhile)"
        in told
    )
