"""reclaim_plan with no path on a server with several roots: the plan covers every root, duplicates
across and within them included."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sysmcp.reclaim import PlanRequest, build_plan
from sysmcp.reclaim._classes import RootsLayout
from tests.harness import call_tool, tool_context
from tests.tools.recorded_engine import recorded_engine

RECORDED = Path(__file__).parent / "data" / "podman-4.3.1-compat.json"  # one stopped container to prune


def write(path: Path, content: bytes, mtime: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    os.utime(path, (mtime, mtime))
    return path


@pytest.mark.anyio
async def test_duplicates_are_looked_for_across_and_within_every_root(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    old = write(first / "old.bin", b"x" * 50_000, 1_000_000)  # the oldest copy stays
    across = write(second / "copy.bin", b"x" * 50_000, 2_000_000)
    within = [write(second / name, b"y" * 70_000, 3_000_000 + i) for i, name in enumerate(["p", "q"])]
    output = await call_tool("reclaim_plan", tool_context([first, second]), classes=["duplicate"])
    items = {item["kept_copy"]: item for item in output.structured["items"]}
    assert items.keys() == {str(old), str(within[0])}, output.text
    assert items[str(old)]["paths"] == [str(across)]
    assert items[str(within[0])]["paths"] == [str(within[1])]
    assert output.structured["path"] == f"{first}, {second}"


@pytest.mark.anyio
async def test_one_root_plans_its_duplicates_with_their_paths_as_before(tmp_path: Path) -> None:
    first = tmp_path / "a"
    kept = write(first / "k", b"z" * 9000, 1_000_000)
    extra = write(first / "sub" / "e", b"z" * 9000, 2_000_000)
    output = await call_tool("reclaim_plan", tool_context([first]), classes=["duplicate"])
    [item] = output.structured["items"]
    assert (item["kept_copy"], item["paths"]) == (str(kept), [str(extra)])


@pytest.mark.parametrize("scope", [(b"/",), (b"/", b"/srv"), (b"/srv", b"/")])
def test_a_container_engines_own_command_is_planned_whenever_slash_is_one_of_the_roots(
    tmp_path: Path, scope: tuple[bytes, ...]
) -> None:
    answers = json.loads(RECORDED.read_text())
    with recorded_engine(answers, str(tmp_path / "engine.sock")):
        layout = RootsLayout(container_socket=str(tmp_path / "engine.sock"))
        plan = build_plan(PlanRequest(scope=scope, layout=layout, classes=("container",)))
    assert [(item.klass, item.action) for item in plan.items] == [("container", "command")]
