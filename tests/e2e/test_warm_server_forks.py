"""One server, every many-file tool twice, after blake3 has spread a big file over its thread pool.

Why: blake3's multithreaded hashing (``max_threads=AUTO``) starts rayon's global pool in the server the
first time a big file is hashed; a worker forked later inherits that pool without its threads, and a
threaded hash in it waited forever (find_duplicates' second call came back PARTIAL after its whole
budget, missing duplicates). A fresh server per call never saw it: this test keeps one server warm.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from tests.wire import Wire, result_text, spawn

pytestmark = pytest.mark.anyio

MIB = 1 << 20
PAIRS = 40  # pairs of 4 MiB+ files: above the threaded-hash size and, together, above the parallel bytes
BUDGET_S = 30  # the tools' own budget: a stuck worker would make the call PARTIAL at this point
ANSWER_S = 60  # and the test's bound on each answer


def build(root: Path) -> tuple[Path, Path]:
    """Pairs of big sparse files (free on disk, read as zeros) of distinct sizes, and small files."""
    big = root / "big"
    big.mkdir()
    for k in range(PAIRS):
        for copy in ("a", "b"):
            with open(big / f"{k:02d}{copy}", "wb") as out:
                out.truncate(4 * MIB + k * 4096)
    small = root / "small"
    small.mkdir()
    lines = []
    for k in range(200):
        data = f"file {k % 50}\n".encode()  # 50 contents, 4 copies each
        (small / f"s{k:03d}").write_bytes(data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  small/s{k:03d}\n")
    manifest = root / "small.sha256"
    manifest.write_text("".join(lines))
    return big, manifest


async def call(wire: Wire, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    reply = await wire.response(await _start(wire, tool, arguments), timeout=ANSWER_S)
    text = result_text(reply)
    assert not reply["result"].get("isError"), text
    assert "PARTIAL" not in text, text
    structured: dict[str, Any] = reply["result"]["structuredContent"]
    return structured


async def _start(wire: Wire, tool: str, arguments: dict[str, Any]) -> int:
    msg_id = next(wire.ids)
    await wire.start_call(tool, arguments, msg_id=msg_id)
    return msg_id


async def test_every_many_file_tool_answers_complete_twice_in_one_warm_server(tmp_path: Path) -> None:
    big, manifest = build(tmp_path)
    async with spawn() as wire:
        await wire.initialize()
        for _ in range(2):
            found = await call(wire, "find_duplicates", {"path": str(tmp_path), "timeout_s": BUDGET_S})
            assert found["complete"] is True
            assert found["groups_found"] == PAIRS + 50  # every big pair, every small content
            tree = await call(
                wire, "hash_tree", {"path": str(big), "algorithm": "blake3", "timeout_s": BUDGET_S}
            )
            assert tree["files"] == 2 * PAIRS
            checked = await call(wire, "verify_checksums", {"manifest": str(manifest)})
            assert checked["ok"] == 200 and checked["all_ok"] is True
            usage = await call(wire, "dir_usage", {"path": str(tmp_path)})
            assert usage["complete"] is True
