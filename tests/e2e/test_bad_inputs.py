"""Bad inputs through the real process over real pipes: each gets a clear error (an ``isError`` result for
a tool's argument, a JSON-RPC error for a protocol fault), never -32603, and the server keeps serving.

The values here are the ones JSON allows but the system cannot take: a lone surrogate (``"\\ud800"``,
which no file name can hold), a NUL byte, numbers too big for a float; and a directory the server may
not search, which root never meets but a user's server does (root without its DAC capabilities stands
in for that user here); and a launcher that closed stdin, stdout or stderr.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.security.test_client_roots import spawn_roots
from tests.wire import SERVER, Wire, read_stderr, result_text, spawn

pytestmark = pytest.mark.anyio


async def still_serving(wire: Wire) -> str:
    """The server answers a ping, then exits cleanly at end of input; its stderr, for a look."""
    assert (await wire.request("ping"))["result"] == {}
    await wire.close_stdin()
    assert await wire.wait_exit() == 0
    return await read_stderr(wire.process)


def refused(reply: dict[str, Any], *fragments: str) -> None:
    assert "error" not in reply, reply  # above all never -32603, the answer to our own bug
    assert reply["result"]["isError"] is True, reply
    text = result_text(reply)
    assert all(fragment in text for fragment in fragments), text


async def test_arguments_the_system_cannot_take_are_error_results_naming_the_argument(tmp_path: Path) -> None:
    too_big = "9" * 320 + ".5"  # a size whose float is infinite
    async with spawn("--allow-reclaim") as wire:
        await wire.initialize()
        for tool, arguments, fragments in (
            ("dir_usage", {"path": str(tmp_path), "min_size": too_big}, ["'min_size' must be a size"]),
            ("find_duplicates", {"path": str(tmp_path), "min_size": "1" + too_big}, ["'min_size'"]),
            ("dir_usage", {"path": str(tmp_path), "modified_within": 10**400}, ["'modified_within' must be"]),
            (
                "dir_usage",
                {"path": str(tmp_path), "modified_before": -(10**400)},
                ["'modified_before' must be"],
            ),
            ("container_usage", {"socket": "/run/\ud800.sock", "walk": False}, ["/run/"]),
            ("reclaim", {"plan_id": "\ud800", "items": ["a"]}, ["no reclaim plan"]),
        ):
            refused(await wire.call(tool, arguments), *fragments)
        assert "Traceback" not in await still_serving(wire)


@pytest.mark.parametrize("value", ["/tm\x00p/x", "/\ud800/x"], ids=["NUL", "lone-surrogate"])
async def test_completing_a_path_no_file_can_have_offers_nothing(value: str) -> None:
    async with spawn() as wire:
        await wire.initialize()
        reply = await wire.request(
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "disk_full_triage"},
                "argument": {"name": "path", "value": value},
            },
        )
        assert reply["result"]["completion"] == {"values": [], "total": 0, "hasMore": False}, reply
        assert "Traceback" not in await still_serving(wire)


async def test_a_client_root_no_file_can_have_is_ignored_and_the_server_keeps_serving(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    async with spawn_roots() as wire:
        await wire.initialize("2025-11-25", {"roots": {"listChanged": True}})
        msg_id = await wire.expect_roots_request()
        roots = [{"uri": "file:///\ud800"}, {"uri": tmp_path.as_uri()}]
        await wire.send({"jsonrpc": "2.0", "id": msg_id, "result": {"roots": roots}})
        inside = await wire.call("file_sha256", {"path": str(tmp_path / "f")})
        assert inside["result"]["isError"] is False, inside  # the usable root narrows the scope
        outside = await wire.call("file_sha256", {"path": "/etc/hostname"})
        assert "outside the client's roots" in result_text(outside)
        assert "Traceback" not in await still_serving(wire)


@pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("setpriv") is None,
    reason="needs Linux capabilities and setpriv(1)",
)
async def test_a_directory_the_server_may_not_search_is_refused_naming_where_access_stops(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to drop its DAC capabilities (a user's server meets this as itself)")
    locked = tmp_path / "locked"
    (locked / "inner").mkdir(parents=True)
    os.chown(locked, 65534, 65534)  # nobody's, 0700: root without CAP_DAC_* may not search it
    locked.chmod(0o700)
    as_a_user = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *SERVER]
    inner = str(locked / "inner")
    async with spawn(command=as_a_user) as wire:
        await wire.initialize()
        for tool, arguments in (
            ("dir_usage", {"path": inner}),
            ("find_duplicates", {"path": inner}),
            ("what_changed", {"path": inner}),
            ("reclaim_plan", {"path": inner}),
            ("verify_checksums", {"manifest": "0" * 64 + "  x\n", "base_dir": inner}),
            ("verify_checksums", {"manifest": f"{inner}/SHA256SUMS"}),
        ):
            refused(
                await wire.call(tool, arguments),
                f"Permission denied: {inner}",
                f"(no search permission on {locked})",
            )
        assert "Traceback" not in await still_serving(wire)


LAUNCH = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "dir_usage", "arguments": {"path": "/nonexistent"}},
    },
]


@pytest.mark.parametrize("closed", [0, 1, 2], ids=["stdin", "stdout", "stderr"])
def test_a_standard_descriptor_closed_by_the_launcher_puts_nothing_but_replies_on_the_wire(
    closed: int,
) -> None:
    done = subprocess.run(
        [*SERVER, "--log-level", "debug"],  # log lines aplenty: none may reach stdout
        input=b"".join(json.dumps(message).encode() + b"\n" for message in LAUNCH),
        capture_output=True,
        timeout=60,
        preexec_fn=lambda: os.close(closed),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert b"Traceback" not in done.stderr
    # Every line a JSON-RPC reply (a log line has no id); a closed stdin is an empty input, so no word.
    replies = [json.loads(line)["id"] for line in done.stdout.splitlines()]
    assert replies == {0: [], 1: [], 2: [1, 2]}[closed], done.stdout[:2000]
