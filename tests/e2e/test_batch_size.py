"""A 2025-03-26 batch whose replies would be huge, against the real server and its real 80 MiB cap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from sysmcp.protocol.session import MAX_RESULT, RESULT_TOO_LARGE
from tests.mcp_schema import check_server_message
from tests.wire import Wire, spawn

pytestmark = pytest.mark.anyio

LONG = "d" * 250  # long names make a long manifest from few files
FILES = 1000  # about 1 MB of manifest: 1,080 bytes a line


class BigLineWire(Wire):
    """Reads a line of many megabytes in linear time (``Wire`` re-copies its buffer for every chunk)."""

    async def read_line(self, timeout: float = 30) -> bytes:
        assert self.process.stdout is not None
        line = bytearray()
        with anyio.fail_after(timeout):  # a guard against a hang, not a timing assertion
            while not line.endswith(b"\n"):
                line += await self.process.stdout.receive(1 << 20)
        assert line.count(b"\n") == 1  # nothing else was written meanwhile
        return bytes(line)


def make_tree(root: Path) -> Path:
    deep = root / LONG / LONG / LONG
    deep.mkdir(parents=True)
    for i in range(FILES):
        (deep / f"{i:04d}{LONG}").touch()
    return root


async def test_a_batch_of_reads_over_the_cap_gets_one_line_under_it_and_errors_for_the_rest(
    tmp_path: Path,
) -> None:
    tree = make_tree(tmp_path / "tree")
    async with spawn(wire_class=BigLineWire) as wire:
        assert isinstance(wire, BigLineWire)
        await wire.initialize("2025-03-26")
        made = await wire.call("hash_tree", {"path": str(tree), "max_lines": 0})
        assert made["result"]["isError"] is False
        (uri,) = [r["uri"] for r in (await wire.request("resources/list"))["result"]["resources"]]
        one = await wire.request("resources/read", {"uri": uri}, msg_id="alone")
        size = len(json.dumps(one, separators=(",", ":"), ensure_ascii=False).encode())
        count = MAX_RESULT // size + 10  # ten replies more than the cap holds
        batch = [
            {"jsonrpc": "2.0", "id": i, "method": "resources/read", "params": {"uri": uri}}
            for i in range(count)
        ]
        await wire.send(batch)
        line = await wire.read_line()
        assert len(line) <= MAX_RESULT + 10 * 300  # the cap, and ten short errors
        replies: list[dict[str, Any]] = json.loads(line.decode("utf-8"))
        assert [r["id"] for r in replies] == list(range(count))  # answered at once: in arrival order
        full = [r for r in replies if "result" in r]
        refused = [r for r in replies if "error" in r]
        assert len(full) == count - 10 and len(refused) == 10 and refused == replies[-10:]
        assert all(r["result"] == one["result"] for r in full)
        for reply in refused:
            assert reply["error"]["code"] == RESULT_TOO_LARGE
            assert "on its own" in reply["error"]["message"]
        for reply in (full[0], *refused):
            check_server_message("2025-03-26", reply, "resources/read")
        assert (await wire.request("ping", msg_id="after"))["result"] == {}  # the session goes on
