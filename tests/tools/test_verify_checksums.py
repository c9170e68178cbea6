"""verify_checksums through the real server: the real tools' manifests, every status, new files, bounds."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import blake3
import pytest

from sysmcp.engine.calls import never_cancelled, no_progress
from sysmcp.engine.hashing import ManifestTooLarge, Source, Verification
from sysmcp.engine.hashing import verify as check_manifest
from sysmcp.engine.hashing._manifests import MAX_MANIFEST
from sysmcp.engine.paths import PathPolicy
from sysmcp.tools import verify_checksums
from sysmcp.tools.errors import words
from tests.wire import Wire, result_text, spawn


def verified(*args: Any, **kwargs: Any) -> Verification:
    """The engine's check of a tool's request built from these arguments, outside any call."""
    return check_manifest(verify_checksums.verify_request(*args, **kwargs), no_progress, never_cancelled)


pytestmark = pytest.mark.anyio

AWKWARD = [b"plain", b"with space", b"new\nline", b"back\\slash", b"carriage\rreturn", "日本.txt".encode()]


def build(root: Path) -> list[bytes]:
    (root / "sub").mkdir()
    names = []
    for i, name in enumerate(AWKWARD):
        for folder in (b"", b"sub/"):
            with open(os.fsencode(root) + b"/" + folder + name, "wb") as out:
                out.write(os.urandom(i * 500 + 3))
            names.append(folder + name)
    return names


def tool_output(root: Path, command: list[str], names: list[bytes]) -> bytes:
    return subprocess.run([*command, *names], cwd=root, capture_output=True, check=True).stdout


async def verify(wire: Wire, arguments: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(30):
        reply = await wire.call("verify_checksums", arguments)
    assert reply["result"]["isError"] is False, result_text(reply)
    structured: dict[str, Any] = reply["result"]["structuredContent"]
    return structured


async def test_manifests_from_the_real_tools_verify_including_awkward_names(tmp_path: Path) -> None:
    names = build(tmp_path)
    commands = [
        ["sha256sum"],
        ["sha256sum", "--tag"],
        ["md5sum"],
        ["sha1sum", "--tag"],
        ["sha512sum"],
        ["b2sum"],
    ]
    if shutil.which("b3sum"):
        commands.append(["b3sum"])
    async with spawn() as wire:
        await wire.initialize()
        for command in commands:
            manifest = tmp_path / "SUMS"
            manifest.write_bytes(tool_output(tmp_path, command, names))
            result = await verify(wire, {"manifest": str(manifest)})
            assert result["all_ok"] is True, (command, result)
            assert result["ok"] == result["entries"] == len(names)
        mixed = b"".join(tool_output(tmp_path, c, names[:2]) for c in commands)  # every algorithm in one file
        result = await verify(wire, {"manifest": mixed.decode(), "base_dir": str(tmp_path)})
        assert result["all_ok"] is True and result["ok"] == 2 * len(commands)
        assert len(result["algorithms"]) == len(commands) - 1  # sha256 and sha256 --tag are one algorithm


async def test_each_status_is_reported_and_the_result_is_not_ok(tmp_path: Path) -> None:
    names = build(tmp_path)
    manifest = tmp_path / "SHA256SUMS"
    os.mkfifo(tmp_path / "fifo")
    listing = tool_output(tmp_path, ["sha256sum"], names)
    listing += f"{hashlib.sha256(b'').hexdigest()}  fifo\n".encode()  # a FIFO listed: sha256sum -c would hang
    listing += b"this line is not a checksum\n"
    manifest.write_bytes(listing)
    (tmp_path / "plain").write_bytes(b"changed")
    (tmp_path / "sub" / "with space").unlink()
    async with spawn() as wire:
        await wire.initialize()
        result = await verify(wire, {"manifest": str(manifest)})
    assert result["all_ok"] is False
    assert (result["ok"], result["failed"], result["missing"], result["unreadable"]) == (
        len(names) - 2,
        1,
        1,
        1,
    )
    assert result["failed_files"] == ["plain"] and result["missing_files"] == ["sub/with space"]
    assert result["unreadable_files"] == [
        {"path": "fifo", "error": "not a regular file: a FIFO (named pipe)"}
    ]
    assert result["improperly_formatted"] == 1 and result["improperly_formatted_lines"] == [len(names) + 2]
    assert result["new"] is None


async def test_report_new_lists_files_the_manifest_does_not_mention(tmp_path: Path) -> None:
    names = build(tmp_path)
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_bytes(tool_output(tmp_path, ["sha256sum"], names))
    (tmp_path / "sub" / "added later").write_bytes(b"new")
    (tmp_path / "sub" / "cache.tmp").write_bytes(b"noise")
    async with spawn() as wire:
        await wire.initialize()
        result = await verify(wire, {"manifest": str(manifest), "report_new": True, "exclude": ["*.tmp"]})
    assert result["all_ok"] is True  # new files are reported, they do not fail the check
    assert result["new"] == 1 and result["new_files"] == ["sub/added later"]  # SHA256SUMS itself is not new
    assert result["walk_skipped"] == {"excluded": 1}


async def test_a_hash_tree_manifest_is_audited_through_its_uri(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    names = build(tree)
    async with spawn() as wire:
        await wire.initialize()
        made = await wire.call("hash_tree", {"path": str(tree), "algorithm": "blake3"})
        uri = made["result"]["structuredContent"]["manifest_uri"]
        (tree / "plain").write_bytes(b"tampered")
        (tree / "intruder").write_bytes(b"!")
        text_only = await wire.call("verify_checksums", {"manifest": uri})
        assert text_only["result"]["isError"] is True and "base_dir" in result_text(text_only)
        result = await verify(wire, {"manifest": uri, "base_dir": str(tree), "report_new": True})
    assert result["failed_files"] == ["plain"] and result["new_files"] == ["intruder"]
    assert result["ok"] == len(names) - 1 and result["algorithms"] == {"blake3": len(names)}


async def test_long_lists_are_cut_and_the_full_report_is_a_resource(tmp_path: Path) -> None:
    digest = hashlib.sha256(b"never").hexdigest()
    text = "".join(f"{digest}  missing-{i:03d}\n" for i in range(120))
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call(
            "verify_checksums", {"manifest": text, "base_dir": str(tmp_path), "max_listed": 10}
        )
        result = reply["result"]["structuredContent"]
        assert result["missing"] == 120 and len(result["missing_files"]) == 10 and result["truncated"] is True
        assert "… and 110 more" in result_text(reply)
        read = await wire.request("resources/read", {"uri": result["report_uri"]})
    report = read["result"]["contents"][0]["text"].splitlines()
    assert len(report) == 120 and report[0] == "missing-000: MISSING"


async def test_a_manifest_without_checksum_lines_is_an_error_result(tmp_path: Path) -> None:
    bad = tmp_path / "SUMS"
    bad.write_bytes(b"# nothing here\nhello world\n")
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("verify_checksums", {"manifest": str(bad)})
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        with anyio.fail_after(5):
            as_fifo = await wire.call("verify_checksums", {"manifest": str(fifo)})
    assert reply["result"]["isError"] is True
    assert "no properly formatted checksum lines" in result_text(reply) and "1 improperly" in result_text(
        reply
    )
    assert as_fifo["result"]["isError"] is True and "FIFO" in result_text(as_fifo)


def test_a_long_manifest_mixing_sha256_and_blake3_lines_verifies_every_line(tmp_path: Path) -> None:
    # The first sha256 matches settle 64-digit lines as sha256; the blake3 lines further down still verify.
    names = [f"f{i:03d}".encode() for i in range(300)]
    for name in names:
        (tmp_path / name.decode()).write_bytes(name)
    text = b"".join(f"{hashlib.sha256(n).hexdigest()}  ".encode() + n + b"\n" for n in names)
    text += b"".join(f"{blake3.blake3(n).hexdigest()}  ".encode() + n + b"\n" for n in names[:5])
    args = {"algorithm": "auto", "report_new": False, "exclude": [], "one_file_system": True}
    result = verified(Source("(text)", data=text), os.fsencode(tmp_path), args, PathPolicy(), 1)
    assert {c.status for c in result.checked} == {"OK"}
    assert Counter(c.algorithm for c in result.checked) == {"sha256": 300, "blake3": 5}


async def test_a_cancelled_verification_gets_no_response_and_the_server_keeps_serving(tmp_path: Path) -> None:
    with (tmp_path / "huge.img").open("wb") as out:
        out.truncate(64 << 30)  # a minute of hashing: only the cancel ends this soon
    text = f"{hashlib.sha256(b'whatever').hexdigest()}  huge.img\n"
    async with spawn() as wire:
        await wire.initialize()
        await wire.start_call(
            "verify_checksums", {"manifest": text, "base_dir": str(tmp_path)}, msg_id="check", progress="v"
        )
        first = await wire.receive()
        assert first["method"] == "notifications/progress" and first["params"]["total"] == (64 << 30) + 1
        await wire.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "check"}}
        )
        await wire.send({"jsonrpc": "2.0", "id": "after", "method": "ping"})
        with anyio.fail_after(5):
            while (message := await wire.receive()).get("id") != "after":
                assert message.get("id") != "check"
        (tmp_path / "small").write_bytes(b"s")
        small = f"{hashlib.sha256(b's').hexdigest()}  small\n"
        with anyio.fail_after(10):
            result = await verify(wire, {"manifest": small, "base_dir": str(tmp_path)})
        assert result["all_ok"] is True


async def test_names_no_file_can_have_are_unreadable_entries_shown_by_their_start_so_answers_stay_bounded(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").write_bytes(b"abc")
    manifest = tmp_path / "SHA256SUMS"
    with manifest.open("w") as out:
        out.write(hashlib.sha256(b"abc").hexdigest() + "  a\n")
        for _ in range(15):  # 30 MB of names longer than PATH_MAX
            out.write("0" * 64 + "  " + "/x" * 1_000_000 + "\n")
    async with spawn() as wire:
        await wire.initialize()
        structured = await verify(wire, {"manifest": str(manifest)})  # an answer, not -32603 (over the cap)
    assert (structured["unreadable"], structured["improperly_formatted"], structured["ok"]) == (15, 0, 1)
    shown = structured["unreadable_files"][0]
    assert shown == {"path": "/x" * 100 + "…", "error": "name too long for this system"}


async def test_input_that_is_mostly_junk_is_refused_as_no_manifest(tmp_path: Path) -> None:
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_bytes(b"junk\n" * 200_000)
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.call("verify_checksums", {"manifest": str(manifest)})
        assert reply["result"]["isError"] is True
        assert "does not look like a checksum manifest" in result_text(reply)
        assert (await wire.request("ping"))["result"] == {}


def test_a_manifest_too_large_is_refused_in_sizes_the_engine_only_counts() -> None:
    """The engine states the limit in bytes; the size a person reads is the tool's (sysmcp.render)."""
    exc = ManifestTooLarge("/srv/SHA256SUMS")
    assert exc.limit == MAX_MANIFEST and "GiB" not in exc.detail
    assert words(exc) == "The manifest /srv/SHA256SUMS is larger than 1.0 GiB; split it"
