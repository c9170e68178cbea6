"""reclaim in a fleet: a host acts only when its own remote command carries --allow-reclaim.

Real sshd hosts on loopback (tests.fleet.lab), each with its own files behind the same path. The
model names hosts, never commands: the gateway's flag lists the tool, each host's own flag decides.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.lab import SHARED, Lab, unavailable
from tests.wire import result_text, spawn

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CONNECT_TIMEOUT = 8.0  # a remote sysmcp starts a Python: seconds on a loaded machine
COPY = "the same bytes in two files\n" * 400
DUPLICATES = {"dups/a.txt": COPY, "dups/b.txt": COPY}


def by_host(reply: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["host"]: entry for entry in reply["result"]["structuredContent"]["hosts"]}


def left(lab: Lab, host: str) -> list[str]:
    return sorted(p.name for p in (lab.base / host / SHARED / "dups").iterdir())


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    if unavailable() is not None:
        pytest.skip(str(unavailable()))
    made = Lab(tmp_path)
    yield made
    made.close()


async def test_reclaim_acts_only_on_the_host_whose_own_command_allows_it(lab: Lab, tmp_path: Path) -> None:
    for name, flags in (("allows", ["--allow-reclaim"]), ("readonly", [])):
        state = ["--state-dir", str(tmp_path / f"{name}-state")]
        lab.add(name, files=DUPLICATES, sysmcp_args=[*flags, *state])
    lab.inventory()
    path = str(lab.base / SHARED / "dups")
    async with spawn(*lab.gateway_args(CONNECT_TIMEOUT)) as wire:  # the gateway itself read-only
        await wire.initialize()
        listed = await wire.request("tools/list", {})
        assert "reclaim" not in [tool["name"] for tool in listed["result"]["tools"]]
        unknown = await wire.call("reclaim", {"plan_id": "x", "items": ["y"], "hosts": ["allows"]})
        assert unknown["error"]["code"] == -32602
    async with spawn(*lab.gateway_args(CONNECT_TIMEOUT), "--allow-reclaim") as wire:
        await wire.initialize()
        planned = await wire.call("reclaim_plan", {"path": path, "classes": ["duplicate"], "hosts": ["all"]})
        plans = {host: entry["result"] for host, entry in by_host(planned).items()}
        assert all(len(plan["items"]) == 1 for plan in plans.values()), result_text(planned)

        def asked(host: str, **extra: str) -> dict[str, Any]:
            plan = plans[host]
            return {
                "plan_id": plan["plan_id"],
                "items": [plan["items"][0]["id"]],
                "hosts": [host],
                **extra,
            }

        ask = by_host(await wire.call("reclaim", asked("allows")))["allows"]
        assert ask["status"] == "ok" and ask["result"]["status"] == "confirmation_needed", ask
        code = ask["result"]["confirmation_code"]
        done = by_host(await wire.call("reclaim", asked("allows", confirm=code)))["allows"]
        assert done["status"] == "ok" and done["result"]["status"] == "done", done
        assert done["result"]["items"][0]["files_done"] == 1
        refused = by_host(await wire.call("reclaim", asked("readonly")))["readonly"]
        assert refused["status"] == "tool_error" and "reclaim" in refused["reason"], refused
        await wire.close_stdin()
        await wire.wait_exit(15)
    assert len(left(lab, "allows")) == 1 and left(lab, "readonly") == ["a.txt", "b.txt"]
