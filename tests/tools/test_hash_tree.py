"""hash_tree through the real server: manifests the real tools accept, walk rules, bounds, cancellation."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.wire import Wire, result_text, spawn

pytestmark = pytest.mark.anyio

AWKWARD = [
    b"plain",
    b"with space",
    b"new\nline",
    b"back\\slash",
    b"carriage\rreturn",
    b"tab\there",
    b"-dash",
    b"*star",
    b" lead space",
    b"a) = b",
    "日本.txt".encode(),
]


def build(root: Path) -> dict[bytes, bytes]:
    """Odd names in a nested tree, plus things a hash must not touch: a FIFO, a symlink, a dangling one."""
    contents: dict[bytes, bytes] = {}
    (root / "sub" / "deeper").mkdir(parents=True)
    for i, name in enumerate(AWKWARD):
        for folder in (b"", b"sub/deeper/"):
            relative = folder + name
            data = os.urandom(i * 1000 + 1)
            with open(os.fsencode(root) + b"/" + relative, "wb") as out:
                out.write(data)
            contents[relative] = data
    os.mkfifo(root / "sub" / "fifo")
    (root / "link").symlink_to(root / "plain")
    (root / "dangling").symlink_to(root / "nowhere")
    return contents


async def manifest_of(wire: Wire, arguments: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    with anyio.fail_after(30):  # the FIFO in the tree would hang a walker that opened it
        reply = await wire.call("hash_tree", arguments)
    assert reply["result"]["isError"] is False, result_text(reply)
    structured = reply["result"]["structuredContent"]
    links = [c for c in reply["result"]["content"] if c["type"] == "resource_link"]
    assert [link["uri"] for link in links] == [structured["manifest_uri"]]
    read = await wire.request("resources/read", {"uri": structured["manifest_uri"]})
    return structured, read["result"]["contents"][0]["text"].encode()


TOOLS = [("sha256", "sha256sum"), ("md5", "md5sum"), ("blake2b", "b2sum")]
if shutil.which("b3sum"):
    TOOLS.append(("blake3", "b3sum"))


async def test_manifests_check_clean_with_the_real_tools_in_both_formats(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    contents = build(tree)
    async with spawn() as wire:
        await wire.initialize()
        for algorithm, tool in TOOLS:
            for style in ("gnu", "bsd") if algorithm != "blake3" else ("gnu",):
                structured, manifest = await manifest_of(
                    wire, {"path": str(tree), "algorithm": algorithm, "format": style}
                )
                assert structured["files"] == len(contents)
                assert structured["skipped"] == {"special_file": 1, "symlink": 2}  # both said, neither hashed
                saved = tmp_path / f"{algorithm}-{style}.sums"
                saved.write_bytes(manifest)
                strict = [] if tool == "b3sum" else ["--strict"]
                done = subprocess.run(
                    [tool, "-c", *strict, str(saved)], cwd=tree, capture_output=True, check=False
                )
                assert done.returncode == 0, (algorithm, style, done.stdout, done.stderr)
                assert done.stdout.count(b": OK") == len(contents)


async def test_the_manifest_is_sorted_relative_and_equal_to_hashlib(tmp_path: Path) -> None:
    contents = build(tmp_path)
    async with spawn() as wire:
        await wire.initialize()
        structured, manifest = await manifest_of(wire, {"path": str(tmp_path), "max_lines": 1000})
    expected = subprocess.run(
        ["sha256sum", "--", *sorted(contents)], cwd=tmp_path, capture_output=True, check=True
    ).stdout
    assert manifest == expected  # byte for byte what sha256sum prints for the sorted names
    assert structured["total_bytes"] == sum(len(d) for d in contents.values())
    assert structured["base_dir"] == str(tmp_path) and structured["lines_not_shown"] == 0
    assert b"link" not in manifest and b"dangling" not in manifest and b"fifo" not in manifest


async def test_one_file_gives_a_one_line_manifest_relative_to_its_directory(tmp_path: Path) -> None:
    target = tmp_path / "image.iso"
    target.write_bytes(b"iso")
    async with spawn() as wire:
        await wire.initialize()
        structured, manifest = await manifest_of(wire, {"path": str(target), "algorithm": "sha1"})
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        with anyio.fail_after(5):
            refused = await wire.call("hash_tree", {"path": str(fifo)})
    assert manifest == f"{hashlib.sha1(b'iso').hexdigest()}  image.iso\n".encode()
    assert structured["base_dir"] == str(tmp_path)
    assert refused["result"]["isError"] is True and "FIFO" in result_text(refused)


async def test_a_big_tree_is_summarised_inline_and_whole_in_the_resource(tmp_path: Path) -> None:
    for d in range(10):
        folder = tmp_path / f"d{d}"
        folder.mkdir()
        for f in range(40):
            (folder / f"f{f:02d}").write_bytes(f"{d}/{f}".encode())
    async with spawn() as wire:
        await wire.initialize()
        structured, manifest = await manifest_of(
            wire, {"path": str(tmp_path), "max_lines": 5, "exclude": ["d9", "*/f3?"]}
        )
    lines = manifest.decode().splitlines()
    assert len(lines) == structured["files"] == 9 * 30
    assert structured["lines"] == lines[:5] and structured["lines_not_shown"] == len(lines) - 5
    assert [line.split("  ", 1)[1] for line in lines] == sorted(line.split("  ", 1)[1] for line in lines)
    assert structured["skipped"]["excluded"] == 1 + 9 * 10


async def test_progress_says_the_bytes_hashed_with_throughput(tmp_path: Path) -> None:
    with (tmp_path / "big").open("wb") as out:
        out.truncate(300 << 20)
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("hash_tree", {"path": str(tmp_path), "algorithm": "blake3"}, progress=7)
    assert reply["result"]["structuredContent"]["files"] == 1
    progress = [n["params"] for n in wire.notifications if n["method"] == "notifications/progress"]
    assert progress and all(p["progressToken"] == 7 for p in progress)
    assert progress[-1]["message"].startswith("300.0 MiB hashed at")
    values = [p["progress"] for p in progress]
    assert values == sorted(set(values))


async def test_a_cancelled_hash_tree_gets_no_response_and_the_server_keeps_serving(tmp_path: Path) -> None:
    for i in range(4):
        with (tmp_path / f"huge{i}").open("wb") as out:
            out.truncate(16 << 30)  # 64 GiB of holes in all: only a cancel ends this soon
    async with spawn() as wire:
        await wire.initialize()
        await wire.start_call("hash_tree", {"path": str(tmp_path)}, msg_id="tree", progress=1)
        assert (await wire.receive())["method"] == "notifications/progress"
        await wire.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "tree"}}
        )
        await wire.send({"jsonrpc": "2.0", "id": "after", "method": "ping"})
        with anyio.fail_after(5):
            while (message := await wire.receive()).get("id") != "after":
                assert message.get("id") != "tree"
        small = tmp_path.parent / f"{tmp_path.name}-small"
        small.mkdir()
        (small / "x").write_bytes(b"x")
        with anyio.fail_after(10):  # the hashing threads let go of both cores: this answers at once
            reply = await wire.call("hash_tree", {"path": str(small)})
        assert reply["result"]["structuredContent"]["files"] == 1


async def test_a_small_tree_is_said_without_a_rate_and_one_odd_name_in_the_singular(tmp_path: Path) -> None:
    """Issue 27: no 'hashed in 0.00 s (0.0 MB/s)' for a few bytes; '1 name is not valid UTF-8' (was '1 names are')."""
    (tmp_path / "a").write_bytes(b"abc")
    (Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/bad-\xff"))).write_bytes(b"xyz")
    async with spawn() as wire:
        await wire.initialize()
        text = result_text(await wire.call("hash_tree", {"path": str(tmp_path)}))
    summary = next(line for line in text.splitlines() if " manifest of " in line)
    assert "2 files, 6 B hashed in " in summary and "/s" not in summary
    assert (
        "1 name is not valid UTF-8: it appears with \\xNN escapes, so a checker would report it missing"
        in text
    )


async def test_one_file_with_a_name_that_is_not_utf8_is_counted(tmp_path: Path) -> None:
    """The one-file path counts its name as the walk counts every name (1 when not UTF-8, else 0)."""
    odd = os.fsdecode(os.fsencode(str(tmp_path)) + b"/bad-\xff")
    Path(odd).write_bytes(b"xyz")
    (tmp_path / "plain").write_bytes(b"xyz")
    async with spawn() as wire:
        await wire.initialize()
        one = await wire.call("hash_tree", {"path": odd})
        plain = await wire.call("hash_tree", {"path": str(tmp_path / "plain")})
    assert one["result"]["structuredContent"]["non_utf8_names"] == 1
    assert plain["result"]["structuredContent"]["non_utf8_names"] == 0


def test_a_baseline_names_the_files_it_could_not_read_in_words_that_agree_with_their_number() -> None:
    from sysmcp.tools.history_hooks import unread_kept

    assert unread_kept(1, 0) == [
        "1 file or directory it could not read is recorded as unreadable: once readable, what_changed says "
        "it cannot tell whether it changed."
    ]
    assert unread_kept(3, 1) == [
        "3 files or directories it could not read are recorded as unreadable: once readable, what_changed "
        "says it cannot tell whether they changed.",
        "1 more file or directory it could not read is past what a baseline records and not in it: "
        "what_changed will call it added once it can be read.",
    ]
    assert unread_kept(0, 2) == [
        "2 more files or directories it could not read are past what a baseline records and not in it: "
        "what_changed will call them added once they can be read."
    ]
    assert unread_kept(0, 0) == []


def test_a_baseline_records_every_directory_it_could_not_read_and_the_answer_still_names_five(
    tmp_path: Path,
) -> None:
    """hash_tree as root on a root-squashed export: seven directories it may not list. The answer
    names the first five (the rest counted), as any walk's does; the baseline records all seven."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("root without its read-anything capabilities needs root and setpriv")
    import sys

    from tests.profile import child_env

    tree = tmp_path / "tree"
    for n in range(7):
        (tree / f"shut{n}").mkdir(parents=True)
        (tree / f"shut{n}" / "f").write_bytes(b"x")
        os.chown(tree / f"shut{n}", 4321, 4321)
        os.chmod(tree / f"shut{n}", 0o700)
    env = child_env({**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")})
    kept = subprocess.run(
        ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-m", "sysmcp", "call",
         "hash_tree", f"path={tree}", "baseline=true"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "skipped: 7 unreadable; permission denied on " in kept.stdout, kept.stdout + kept.stderr
    assert kept.stdout.count(f"{tree}/shut") == 5 and " and 2 more\n" in kept.stdout, kept.stdout
    assert "7 files or directories it could not read are recorded as unreadable" in kept.stdout
