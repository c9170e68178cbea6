"""Trees nested deeper than the descriptors a process may hold, under a server started with the
common soft limit of 1,024 open files: every tool that follows such a tree answers for all of it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.deep_trees import DEPTH, ONE_PROCESS, nest, put, server_with_limit
from tests.wire import result_text, spawn

pytestmark = pytest.mark.anyio

#: Every how many levels a file is put: a manifest of them all is long enough to be checked in ranges.
EVERY = 10


def deep_tree(base: Path) -> list[str]:
    """A tree ``DEPTH`` levels deep with a file every ``EVERY`` levels; its manifest lines, deepest last."""
    levels = nest(base, DEPTH)
    lines = []
    for level in range(EVERY, DEPTH + 1, EVERY):
        data = f"level {level}\n".encode()
        put(base, f"{levels[level - 1]}/f", data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  {levels[level - 1]}/f\n")
    return lines


async def test_verify_checksums_under_roots_checks_entries_deeper_than_the_descriptor_limit(
    deep_path: Path,
) -> None:
    tree = deep_path / "tree"
    lines = deep_tree(tree)
    (tree / "DEEPEST.SHA256SUMS").write_text(lines[-1])
    (tree / "ALL.SHA256SUMS").write_text("".join(lines))  # past 160 KiB: checked in ranges by children
    assert (tree / "ALL.SHA256SUMS").stat().st_size > 160 << 10
    async with spawn("--no-history", "--root", str(deep_path), command=server_with_limit()) as wire:
        await wire.initialize()
        for manifest, count in (("DEEPEST.SHA256SUMS", 1), ("ALL.SHA256SUMS", len(lines))):
            reply = await wire.call("verify_checksums", {"manifest": str(tree / manifest)})
            text = result_text(reply)
            assert reply["result"]["isError"] is False, text
            assert f"{count} OK, 0 FAILED, 0 MISSING, 0 unreadable" in text, text


#: A soft limit below the walk's own budget of descriptors (64): a walk in one process (``ONE_PROCESS``)
#: of any tree deeper runs out mid-call.
SCANT_LIMIT = 56


async def test_a_call_out_of_descriptors_is_a_marked_partial_answer_and_the_server_goes_on(
    deep_path: Path,
) -> None:
    tree = deep_path / "tree"
    levels = nest(tree, 300)
    for level in (levels[0], levels[-1]):
        put(tree, f"{level}/copy", b"the same bytes")
    (deep_path / "flat").mkdir()
    (deep_path / "flat" / "f").write_bytes(b"x")
    async with spawn(
        "--no-history", "--root", str(deep_path), command=server_with_limit(SCANT_LIMIT), env=ONE_PROCESS
    ) as wire:
        await wire.initialize()
        reply = await wire.call("dir_usage", {"path": str(tree)})
        text = result_text(reply)
        assert reply["result"]["isError"] is False, text
        assert reply["result"]["structuredContent"]["complete"] is False
        assert "PARTIAL RESULT" in text and f"limit of {SCANT_LIMIT} open files reached" in text, text
        assert "unreadable" not in text and "vanished" not in text, text
        reply = await wire.call("reclaim_plan", {"path": str(tree), "duplicates": True})
        text = result_text(reply)
        assert "the search for duplicates stopped early (out of file descriptors" in text, text
        assert "nothing found: " not in text or "duplicate" not in text.split("nothing found: ")[1], text
        reply = await wire.call("dir_usage", {"path": str(deep_path / "flat")})  # still serving, in full
        assert reply["result"]["structuredContent"]["complete"] is True, result_text(reply)


def deep_file_and_manifest(tree: Path, depth: int = 300) -> None:
    """A file ``depth`` levels below ``tree``, and ``tree/SHA256SUMS`` naming it rightly."""
    levels = nest(tree, depth)
    put(tree, f"{levels[-1]}/f", b"deep")
    (tree / "SHA256SUMS").write_text(f"{hashlib.sha256(b'deep').hexdigest()}  {levels[-1]}/f\n")


async def test_a_partial_answer_out_of_descriptors_never_asks_for_more_time(deep_path: Path) -> None:
    """A walk stopped because the server had no descriptor left says so, and nowhere that a larger
    timeout_s would help: more time would stop at the same directory."""
    tree = deep_path / "tree"
    deep_file_and_manifest(tree)
    async with spawn(
        "--no-history", "--root", str(deep_path), command=server_with_limit(SCANT_LIMIT), env=ONE_PROCESS
    ) as wire:
        await wire.initialize()
        for tool, args in (
            ("hash_tree", {"path": str(tree)}),
            ("disk_usage", {"path": str(tree), "explain": True}),
        ):
            reply = await wire.call(tool, args)
            text = result_text(reply)
            assert reply["result"]["isError"] is False, text
            assert f"limit of {SCANT_LIMIT} open files reached" in text, text
            assert "timeout_s" not in text and "time budget" not in text, text


async def test_new_files_looked_for_out_of_descriptors_are_a_partial_answer_never_all_ok(
    deep_path: Path,
) -> None:
    """verify_checksums' walk for files the manifest does not name, stopped for want of a descriptor,
    makes the answer partial: never 'ALL OK' with '0 new files' when directories were never listed."""
    tree = deep_path / "tree"
    deep_file_and_manifest(tree)
    async with spawn(
        "--no-history", "--root", str(deep_path), command=server_with_limit(SCANT_LIMIT), env=ONE_PROCESS
    ) as wire:
        await wire.initialize()
        reply = await wire.call(
            "verify_checksums", {"manifest": str(tree / "SHA256SUMS"), "report_new": True}
        )
        text = result_text(reply)
        assert reply["result"]["isError"] is False, text
        assert "PARTIAL RESULT" in text and f"limit of {SCANT_LIMIT} open files reached" in text, text
        assert "the list of new files may be short" in text and "ALL OK" not in text, text
        assert "timeout_s" not in text, text
        assert reply["result"]["structuredContent"]["complete"] is False, text


async def test_a_plan_whose_search_for_duplicates_ran_out_of_descriptors_is_not_complete(
    deep_path: Path,
) -> None:
    """reclaim_plan's structured answer says the plan is partial when its search for duplicates stopped
    early, as its text does: ``sysmcp call`` then exits 3, and 'duplicate' among the classes checked with
    no item is never read as 'nothing to free'."""
    tree = deep_path / "tree"
    levels = nest(tree, 300)
    for level in (levels[0], levels[-1]):
        put(tree, f"{level}/copy", b"the same bytes")
    async with spawn(
        "--no-history", "--root", str(deep_path), command=server_with_limit(SCANT_LIMIT), env=ONE_PROCESS
    ) as wire:
        await wire.initialize()
        reply = await wire.call("reclaim_plan", {"path": str(tree), "duplicates": True})
        text = result_text(reply)
        # Its first line, as every other tool's partial answer says it (it was a line near the end).
        first = text.split("\n")[0]
        assert first.startswith(
            "PARTIAL RESULT: the search for duplicates stopped early (out of file descriptors"
        ), text
        assert text.count("PARTIAL") == 1, text
        structured = reply["result"]["structuredContent"]
        assert structured["complete"] is False, structured
        assert structured["stopped_reason"].startswith("out of file descriptors"), structured
