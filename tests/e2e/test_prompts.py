"""Prompts and argument completion against the real process, in both eras."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from sysmcp.protocol.failures import ProtocolError
from sysmcp.server.prompts import parse_sha256
from tests.e2e.modern import MODERN, modern
from tests.wire import spawn

pytestmark = pytest.mark.anyio

DIGEST = hashlib.sha256(b"payload\n").hexdigest()


def prompt_text(reply: dict[str, Any]) -> str:
    messages = reply["result"]["messages"]
    assert [m["role"] for m in messages] == ["user"]
    text: str = messages[0]["content"]["text"]
    return text


def completion(prompt: str, argument: str, value: str) -> dict[str, Any]:
    return {"ref": {"type": "ref/prompt", "name": prompt}, "argument": {"name": argument, "value": value}}


async def test_prompts_are_listed_with_arguments_and_declared_in_capabilities() -> None:
    async with spawn() as wire:
        init = await wire.initialize("2025-11-25")
        assert {"prompts", "completions"} <= set(init["result"]["capabilities"])
        prompts = {p["name"]: p for p in (await wire.request("prompts/list"))["result"]["prompts"]}
        assert set(prompts) == {"disk_full_triage", "verify_download"}
        verify = prompts["verify_download"]
        assert verify["title"] == "Verify a download"
        assert {a["name"]: a["required"] for a in verify["arguments"]} == {"path": True, "digest": True}
    async with spawn() as wire:
        init = await wire.initialize("2024-11-05")
        assert "completions" not in init["result"]["capabilities"]  # the flag arrived in 2025-03-26
        for prompt in (await wire.request("prompts/list"))["result"]["prompts"]:
            assert "title" not in prompt


async def test_verify_download_names_the_file_the_digest_and_the_tool(tmp_path: Path) -> None:
    target = tmp_path / "image.iso"
    target.write_bytes(b"payload\n")
    async with spawn(version=MODERN) as wire:
        reply = await modern(
            wire,
            "prompts/get",
            {
                "name": "verify_download",
                "arguments": {"path": str(target), "digest": f"SHA256:{DIGEST.upper()}"},
            },
        )
        text = prompt_text(reply)
        assert str(target) in text and DIGEST in text and "file_sha256" in text
        assert "MATCH or MISMATCH" in text
        assert reply["result"]["resultType"] == "complete"


async def test_disk_full_triage_defaults_to_the_root_and_mentions_only_existing_tools(tmp_path: Path) -> None:
    async with spawn() as wire:
        await wire.initialize()
        tools = {t["name"] for t in (await wire.request("tools/list"))["result"]["tools"]}
        text = prompt_text(await wire.request("prompts/get", {"name": "disk_full_triage"}))
        assert "disk_usage with path=/ " in text and "dir_usage" in text
        assert ("find_duplicates" in text) == ("find_duplicates" in tools)
        assert "read-only" in text
        # The whole path: fullest filesystem → hidden space → rate and writer → new and old → duplicates.
        order = ["disk_usage", "dir_usage", "explain=true", "deleted_open_files", "sample_s=10", "disk_io"]
        order += ["modified_within"]
        order += ["modified_before", "show='all'", "find_duplicates", "Report:"]
        positions = [text.index(marker) for marker in order]
        assert positions == sorted(positions), text
    async with spawn("--root", str(tmp_path)) as wire:
        await wire.initialize()
        text = prompt_text(await wire.request("prompts/get", {"name": "disk_full_triage", "arguments": {}}))
        assert f"path={tmp_path} " in text


BAD_REQUESTS: list[tuple[str, dict[str, Any], str]] = [
    ("nope", {}, "unknown prompt"),
    ("verify_download", {"path": "/etc/hostname"}, "digest"),
    ("verify_download", {"path": "/etc/hostname", "digest": "abc"}, "64 hex digits"),
    ("verify_download", {"path": "relative", "digest": DIGEST}, "relative"),
    ("disk_full_triage", {"colour": "red"}, "colour"),
    ("disk_full_triage", {"path": 3}, "strings"),
]


async def test_bad_prompt_requests_are_invalid_params_naming_the_problem() -> None:
    async with spawn() as wire:
        await wire.initialize()
        for name, arguments, fragment in BAD_REQUESTS:
            reply = await wire.request("prompts/get", {"name": name, "arguments": arguments})
            assert reply["error"]["code"] == -32602 and fragment in reply["error"]["message"], (name, reply)


async def test_a_path_outside_the_roots_is_refused_when_the_prompt_is_fetched(tmp_path: Path) -> None:
    async with spawn("--root", str(tmp_path)) as wire:
        await wire.initialize()
        reply = await wire.request("prompts/get", {"name": "disk_full_triage", "arguments": {"path": "/etc"}})
        assert reply["error"]["code"] == -32602 and "outside" in reply["error"]["message"]


async def test_path_completion_offers_what_the_policy_allows(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    (allowed / "logs").mkdir(parents=True)
    (allowed / "latest.iso").write_bytes(b"x")
    (allowed / ".hidden").write_bytes(b"x")
    (tmp_path / "lateral").mkdir()
    async with spawn("--root", str(allowed)) as wire:
        await wire.initialize()
        files = await wire.request(
            "completion/complete", completion("verify_download", "path", f"{allowed}/l")
        )
        assert files["result"]["completion"]["values"] == [f"{allowed}/latest.iso", f"{allowed}/logs/"]
        dirs = await wire.request(
            "completion/complete", completion("disk_full_triage", "path", f"{allowed}/")
        )
        assert dirs["result"]["completion"]["values"] == [f"{allowed}/logs/"]
        above = await wire.request(
            "completion/complete", completion("disk_full_triage", "path", f"{tmp_path}/")
        )
        assert above["result"]["completion"]["values"] == [f"{allowed}/"]  # the way down, not the sibling
        empty = await wire.request("completion/complete", completion("disk_full_triage", "path", ""))
        assert empty["result"]["completion"]["values"] == [f"{allowed}/"]
        digest = await wire.request("completion/complete", completion("verify_download", "digest", "ab"))
        assert digest["result"]["completion"] == {"values": [], "total": 0, "hasMore": False}


async def test_path_completion_lists_no_directory_outside_the_roots(tmp_path: Path) -> None:
    """Completion names only what a tool could be given: an outside directory is never listed, so the
    names it holds stay hidden, even those of symlinks that lead into the root."""
    base = tmp_path.resolve()
    allowed, outside = base / "allowed", base / "outside"
    (allowed / "logs").mkdir(parents=True)
    outside.mkdir()
    (outside / "door-into-root").symlink_to(allowed)
    (outside / "down-to-base").symlink_to(base)
    (allowed / "way-out").symlink_to(outside)
    async with spawn("--root", str(allowed)) as wire:
        await wire.initialize()
        for value in (
            f"{outside}/",
            f"{outside}/d",
            f"{allowed}/../outside/",
            f"{allowed}/way-out/",
            f"{outside}/down-to-base/",
        ):
            for prompt in ("disk_full_triage", "verify_download"):
                reply = await wire.request("completion/complete", completion(prompt, "path", value))
                assert reply["result"]["completion"]["values"] == [], (prompt, value)
        inside = await wire.request(
            "completion/complete", completion("disk_full_triage", "path", f"{allowed}/")
        )
        assert inside["result"]["completion"]["values"] == [f"{allowed}/logs/"]
        above = await wire.request("completion/complete", completion("disk_full_triage", "path", f"{base}/"))
        assert above["result"]["completion"]["values"] == [f"{allowed}/"]  # the way down to the root


async def test_completion_is_capped_at_100_and_says_there_is_more(tmp_path: Path) -> None:
    for i in range(150):
        (tmp_path / f"file{i:03}").write_bytes(b"")
    async with spawn(version=MODERN) as wire:
        reply = await modern(
            wire, "completion/complete", completion("verify_download", "path", f"{tmp_path}/f")
        )
        result = reply["result"]["completion"]
        assert len(result["values"]) == 100 and result["total"] == 150 and result["hasMore"] is True
        assert reply["result"]["resultType"] == "complete"


async def test_completion_of_an_unknown_prompt_is_invalid_params() -> None:
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.request("completion/complete", completion("nope", "path", "/"))
        assert reply["error"]["code"] == -32602


@pytest.mark.parametrize("ref", [{"type": "ref/resource"}, {"type": "ref/resource", "uri": 5}])
async def test_completion_of_a_resource_reference_without_its_uri_is_invalid_params(
    ref: dict[str, Any],
) -> None:
    """It was answered with nothing to offer, as if the reference named a resource."""
    async with spawn() as wire:
        await wire.initialize()
        params = {"ref": ref, "argument": {"name": "x", "value": ""}}
        reply = await wire.request("completion/complete", params)
        assert reply["error"]["code"] == -32602 and "'ref.uri' must be a string" in reply["error"]["message"]
        fine = await wire.request(
            "completion/complete", {**params, "ref": {"type": "ref/resource", "uri": "x://y"}}
        )
        assert fine["result"]["completion"]["values"] == []


def test_published_digests_are_read_in_the_usual_shapes() -> None:
    for shown in (
        DIGEST,
        DIGEST.upper(),
        f"sha256:{DIGEST}",
        f"{DIGEST}  image.iso",
        f"SHA256 (image.iso) = {DIGEST}",
    ):
        assert parse_sha256(shown) == DIGEST
    for wrong in ("", DIGEST[:-1], DIGEST + "0", f"{DIGEST} {DIGEST}"):
        with pytest.raises(ProtocolError):
            parse_sha256(wrong)
