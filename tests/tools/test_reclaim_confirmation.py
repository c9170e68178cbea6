"""Who confirms a reclaim, and what they are shown: on a client that declared elicitation only the user's
yes acts; the question and the code's text name each file, its owner and size; the plan names its files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sysmcp.reclaim import PlanRequest, build_plan
from sysmcp.reclaim._classes import RootsLayout
from sysmcp.render import human_bytes
from sysmcp.tools.reclaim import APPROVAL_FILES
from sysmcp.tools.reclaim_plan import render
from tests.profile import child_env, needs_proc, needs_xattrs
from tests.reclaim.test_reclaim import HOLDER
from tests.tools.test_reclaim_wire import duplicates, plan_of
from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio

NOBODY = 65534


def copies(base: Path, count: int, size: int = 50_000) -> list[Path]:
    """``count`` identical files, all nobody's: a copy set never spans owners, and the owner shown is
    not the server's own."""
    data = os.urandom(size)
    paths = [base / f"copy{n:02d}.bin" for n in range(count)]
    for path in paths:
        path.write_bytes(data)
    for path in paths:
        os.chown(path, NOBODY, NOBODY)
    return paths


async def ask_and_answer(wire: Any, arguments: dict[str, Any], answer: dict[str, Any]) -> tuple[str, Any]:
    """Call reclaim, answer its elicitation with ``answer`` (a result or an error), return the question
    and the call's reply."""
    msg_id = next(wire.ids)
    await wire.start_call("reclaim", arguments, msg_id=msg_id)
    asked = await wire.receive()
    assert asked["method"] == "elicitation/create", asked
    await wire.send({"jsonrpc": "2.0", "id": asked["id"], **answer})
    return str(asked["params"]["message"]), await wire.response(msg_id)


async def test_a_failed_elicitation_removes_nothing_and_hands_out_no_code(tmp_path: Path) -> None:
    _first, second, third = duplicates(tmp_path)
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize(capabilities={"elicitation": {}})
        plan = await plan_of(wire, tmp_path)
        arguments = {"plan_id": plan["plan_id"], "items": [plan["items"][0]["id"]]}
        failure = {"error": {"code": -32603, "message": "the host has no way to show a form"}}
        _question, reply = await ask_and_answer(wire, arguments, failure)
        result = reply["result"]["structuredContent"]
        assert result["status"] == "not_asked" and "confirmation_code" not in result, result
        assert "Nothing removed" in result_text(reply) and "no way to show a form" in result_text(reply)
        assert second.exists() and third.exists()


async def test_a_declined_elicitation_removes_nothing_and_hands_out_no_code(tmp_path: Path) -> None:
    _first, second, third = duplicates(tmp_path)
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize(capabilities={"elicitation": {}})
        plan = await plan_of(wire, tmp_path)
        arguments = {"plan_id": plan["plan_id"], "items": [plan["items"][0]["id"]]}
        _question, reply = await ask_and_answer(wire, arguments, {"result": {"action": "decline"}})
        result = reply["result"]["structuredContent"]
        assert result["status"] == "declined" and "confirmation_code" not in result
        assert second.exists() and third.exists()


async def test_a_code_is_refused_on_a_client_that_declared_elicitation_even_a_right_one(
    tmp_path: Path,
) -> None:
    state, data = tmp_path / "state", tmp_path / "data"
    data.mkdir()
    _first, second, third = duplicates(data)
    server = ("--state-dir", str(state), "--allow-reclaim", "--root", str(data))
    async with spawn(*server) as wire:  # a client without elicitation gets a code for the plan
        await wire.initialize()
        plan = await plan_of(wire, data)
        arguments = {"plan_id": plan["plan_id"], "items": [plan["items"][0]["id"]]}
        ask = await wire.call("reclaim", arguments)
        code = ask["result"]["structuredContent"]["confirmation_code"]
    async with spawn(*server) as wire:  # a client that can ask its user: the code confirms nothing
        await wire.initialize(capabilities={"elicitation": {}})
        refused = await wire.call("reclaim", {**arguments, "confirm": code})
        assert refused["result"]["isError"], result_text(refused)
        assert "declared elicitation" in result_text(refused) and "nothing removed" in result_text(refused)
        assert second.exists() and third.exists()


def named_under(text: str, base: Path, names: list[str]) -> list[str]:
    """Which of ``names`` the text names, with owner and size, under the line 'in BASE/:'."""
    assert f"in {base}/:" in text, text
    return [name for name in names if f"  {name}  (nobody, {human_bytes(50_000)})" in text]


async def test_the_question_names_every_file_acted_on_with_its_owner_and_size_under_their_directory(
    tmp_path: Path,
) -> None:
    paths = copies(tmp_path, 9)  # one kept, eight to remove: every one named, no link to follow
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize(capabilities={"elicitation": {}})
        plan = await plan_of(wire, tmp_path)
        (item,) = plan["items"]
        kept = Path(item["kept_copy"])
        extras = [p.name for p in paths if p != kept]
        arguments = {"plan_id": plan["plan_id"], "items": [item["id"]]}
        question, reply = await ask_and_answer(wire, arguments, {"result": {"action": "cancel"}})
        assert named_under(question, tmp_path, extras) == extras, question
        assert (
            f"kept copy: {kept}  (nobody" in question
            and "more" not in question
            and "sysmcp://" not in question
        )
        assert reply["result"]["structuredContent"]["status"] == "declined"


async def test_a_choice_of_more_files_than_one_approval_names_acts_on_the_named_ones_alone(
    tmp_path: Path,
) -> None:
    """Never a file the person was not shown: the question names APPROVAL_FILES, says how many stay, and
    only those named go; the next call names and acts on the rest, and says what the first one did."""
    paths = copies(tmp_path, APPROVAL_FILES + 4)  # one kept, APPROVAL_FILES + 3 to remove
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize(capabilities={"elicitation": {}})
        plan = await plan_of(wire, tmp_path)
        (item,) = plan["items"]
        extras = [p.name for p in paths if str(p) != item["kept_copy"]]
        arguments = {"plan_id": plan["plan_id"], "items": [item["id"]]}
        yes = {"result": {"action": "accept", "content": {"confirm": True}}}
        question, reply = await ask_and_answer(wire, arguments, yes)
        shown = named_under(question, tmp_path, extras)
        assert len(shown) == APPROVAL_FILES, question
        assert f"the other 3 files of these items stay (one approval names {APPROVAL_FILES}" in question
        result = reply["result"]["structuredContent"]
        assert result["files_left"] == 3 and result["items"][0]["files_done"] == APPROVAL_FILES, result
        assert {p.name for p in paths if p.exists()} == {
            Path(item["kept_copy"]).name,
            *set(extras) - set(shown),
        }
        assert "3 files of these items were not acted on" in result_text(reply)

        question, reply = await ask_and_answer(wire, arguments, yes)
        assert named_under(question, tmp_path, extras) == sorted(set(extras) - set(shown)), question
        assert f"An earlier reclaim of this plan acted on {APPROVAL_FILES} files of these items" in question
        result = reply["result"]["structuredContent"]
        assert result["done_before"] == APPROVAL_FILES and "files_left" not in result, result
        assert result["items"][0]["files_done"] == 3 and result["items"][0]["skipped"] == [], result
        assert [p.name for p in paths if p.exists()] == [Path(item["kept_copy"]).name]


async def test_an_item_past_what_one_approval_names_is_said_to_wait_and_is_not_touched(
    tmp_path: Path,
) -> None:
    """Two items, the first filling the approval: the second is not 'delete 0 files, 0 B' in the question,
    nor '0 files removed' in the answer, but said to wait with its count, and none of its files go."""
    big, small = tmp_path / "big", tmp_path / "small"
    big.mkdir()
    small.mkdir()
    copies(big, APPROVAL_FILES + 2, size=60_000)  # one kept, APPROVAL_FILES + 1 to remove: the larger item
    waiting = copies(small, 3)  # one kept, two to remove
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize(capabilities={"elicitation": {}})
        plan = await plan_of(wire, tmp_path)
        first, second = plan["items"]
        assert first["kept_copy"].startswith(str(big)), plan
        arguments = {"plan_id": plan["plan_id"], "items": [first["id"], second["id"]]}
        yes = {"result": {"action": "accept", "content": {"confirm": True}}}
        question, reply = await ask_and_answer(wire, arguments, yes)
        assert " 0 files" not in question and "0 B" not in question, question
        assert f"in 1 item of plan {plan['plan_id']}" in question, question
        assert f"{first['id']}: delete {APPROVAL_FILES} files (1 more of its files wait" in question, question
        assert f"{second['id']}: not acted on by this call: its 2 files wait for another call" in question
        assert str(small) not in question, question  # not one of its files, nor its kept copy, is named
        result = reply["result"]["structuredContent"]
        assert [i["files_done"] for i in result["items"]] == [APPROVAL_FILES, 0], result
        assert [i.get("files_left") for i in result["items"]] == [1, 2] and result["files_left"] == 3, result
        text = result_text(reply)
        assert ": 0 files removed" not in text, text
        assert f"{second['id']}: not acted on by this call: its 2 files wait for another call" in text, text
        assert all(p.exists() for p in waiting)

        question, reply = await ask_and_answer(wire, arguments, yes)
        assert f"{second['id']}: delete 2 files" in question and f"in {small}/:" in question, question
        assert reply["result"]["structuredContent"]["items"][1]["files_done"] == 2
        assert sum(p.exists() for p in waiting) == 1


async def test_a_code_confirms_only_the_files_its_first_call_named(tmp_path: Path) -> None:
    """The client without elicitation: the code is bound to the files named, so the second call acts on
    those alone, and the same code given again (the rest of the items now named) is refused."""
    paths = copies(tmp_path, APPROVAL_FILES + 4)
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize()
        plan = await plan_of(wire, tmp_path)
        (item,) = plan["items"]
        arguments = {"plan_id": plan["plan_id"], "items": [item["id"]]}
        ask = await wire.call("reclaim", arguments)
        extras = [p.name for p in paths if str(p) != item["kept_copy"]]
        shown = named_under(result_text(ask), tmp_path, extras)
        assert len(shown) == APPROVAL_FILES and ask["result"]["structuredContent"]["files_left"] == 3
        code = ask["result"]["structuredContent"]["confirmation_code"]
        done = await wire.call("reclaim", {**arguments, "confirm": code})
        assert done["result"]["structuredContent"]["items"][0]["files_done"] == APPROVAL_FILES
        assert not any((tmp_path / name).exists() for name in shown)
        again = await wire.call("reclaim", {**arguments, "confirm": code})
        assert again["result"]["isError"] and "does not match" in result_text(again), result_text(again)
        assert sum(p.exists() for p in paths) == 4


async def test_the_first_call_of_the_code_flow_names_each_file_its_owner_and_size(tmp_path: Path) -> None:
    paths = copies(tmp_path, 3)
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize()
        plan = await plan_of(wire, tmp_path)
        (item,) = plan["items"]
        ask = await wire.call("reclaim", {"plan_id": plan["plan_id"], "items": [item["id"]]})
        text = result_text(ask)
        extras = [p.name for p in paths if str(p) != item["kept_copy"]]
        assert named_under(text, tmp_path, extras) == extras, text
        assert f"kept copy: {item['kept_copy']}" in text and "2 files" in text


def test_the_plan_text_names_each_items_first_files_and_their_owners(tmp_path: Path) -> None:
    paths = copies(tmp_path, 6)
    request = PlanRequest(
        layout=RootsLayout(homes=()),
        classes=("duplicate",),
        scope=(os.fsencode(tmp_path),),
        duplicates=[[os.fsencode(p) for p in paths]],
    )
    text = render(build_plan(request), str(tmp_path))
    assert (
        f"{paths[1]}  (nobody, " in text
        and f"{paths[2]}  (nobody, " in text
        and f"{paths[3]}  (nobody, " in text
    )
    assert "… and 2 more" in text and f"kept copy: {paths[0]}  (nobody, " in text
    assert f"{paths[4]}  (" not in text  # bounded: three paths an item


@needs_proc
def test_the_plan_text_names_a_deleted_open_files_name_and_its_holder(tmp_path: Path) -> None:
    name = tmp_path / "app.log"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(name), "300000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        holder.stdout.readline()
        request = PlanRequest(
            layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(os.fsencode(tmp_path),)
        )
        text = render(build_plan(request), str(tmp_path))
        assert f"deleted file {name}, held by pid {holder.pid} (python" in text, text
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


async def test_with_the_flag_the_plan_advises_calling_reclaim_without_a_condition(tmp_path: Path) -> None:
    duplicates(tmp_path)
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize()
        reply = await wire.call("reclaim_plan", {"path": str(tmp_path), "classes": ["duplicate"]})
        text = result_text(reply)
        assert "call reclaim with this plan_id" in text and "on a server started with" not in text


async def test_an_empty_plan_is_not_said_to_be_kept(tmp_path: Path) -> None:
    async with spawn("--state-dir", str(tmp_path / "state"), "--root", str(tmp_path)) as wire:
        await wire.initialize()
        nothing = await wire.call("reclaim_plan", {"path": str(tmp_path), "classes": ["duplicate"]})
        assert "nothing found to free" in result_text(nothing) and "kept" not in result_text(nothing)


def test_sysmcp_call_allow_reclaim_reclaim_help_describes_the_tool() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sysmcp", "call", "--allow-reclaim", "reclaim", "--help"],
        capture_output=True,
        check=False,
        env=child_env(os.environ),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert b"usage: sysmcp call reclaim" in done.stdout and b"plan_id=<string>" in done.stdout


@needs_xattrs
async def test_a_link_item_longer_than_one_approval_links_the_rest_in_the_next_call(tmp_path: Path) -> None:
    """Each link the first call made moved the kept copy's ctime (it gained a name): the next call on the
    same plan and items is told so by the log of the first, and links the rest, rather than finding the
    kept copy "changed" and leaving the item never to be finished."""
    paths = copies(tmp_path, APPROVAL_FILES + 4)  # one kept, APPROVAL_FILES + 3 to link
    async with spawn("--allow-reclaim", "--root", str(tmp_path)) as wire:
        await wire.initialize(capabilities={"elicitation": {}})
        plan = await plan_of(wire, tmp_path)
        (item,) = plan["items"]
        arguments = {"plan_id": plan["plan_id"], "items": [item["link_id"]]}
        yes = {"result": {"action": "accept", "content": {"confirm": True}}}
        _question, reply = await ask_and_answer(wire, arguments, yes)
        assert reply["result"]["structuredContent"]["items"][0]["files_done"] == APPROVAL_FILES, reply
        _question, reply = await ask_and_answer(wire, arguments, yes)
        result = reply["result"]["structuredContent"]
        assert result["items"][0]["files_done"] == 3 and result["items"][0]["skipped"] == [], result
        kept = os.lstat(item["kept_copy"])
        assert kept.st_nlink == len(paths) and all(os.lstat(p).st_ino == kept.st_ino for p in paths)


@needs_proc
async def test_a_kept_plan_naming_a_deleted_file_outside_the_roots_is_refused_before_it_is_named(
    tmp_path: Path,
) -> None:
    """A plan an unconfined server kept holds a deleted-open file whose name lies outside the roots of
    the server asked to act on it: refused whole, as a named file would be, and that name is never shown
    (the question would otherwise name it, with its holder)."""
    state, inside, outside = tmp_path / "state", tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    name = outside / "secret-project.log"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(name), "300000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        holder.stdout.readline()
        async with spawn("--state-dir", str(state)) as wire:
            await wire.initialize()
            reply = await wire.call("reclaim_plan", {"path": str(outside), "classes": ["deleted_open"]})
            plan = reply["result"]["structuredContent"]
            (item,) = plan["items"]
        async with spawn("--state-dir", str(state), "--allow-reclaim", "--root", str(inside)) as wire:
            await wire.initialize()
            refused = await wire.call("reclaim", {"plan_id": plan["plan_id"], "items": [item["id"]]})
            text = result_text(refused)
            assert refused["result"]["isError"] and "outside the roots" in text, text
            assert "secret-project" not in text and "nothing removed" in text, text
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
