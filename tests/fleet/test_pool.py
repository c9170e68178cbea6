"""The pool without sshd: what it does when ssh itself cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from sysmcp.fleet.fanout import Fleet
from sysmcp.fleet.inventory import from_names
from sysmcp.fleet.pool import SessionPool
from sysmcp.fleet.ssh import SshSettings

pytestmark = pytest.mark.anyio


async def test_a_missing_ssh_program_is_each_hosts_failure_not_the_calls(tmp_path: Path) -> None:
    inventory = from_names(["web1", "web2"])
    control = tmp_path / "control"
    control.mkdir(mode=0o700)
    pool = SessionPool(
        inventory, SshSettings(control_dir=str(control), program=str(tmp_path / "no-ssh-here"))
    )
    async with pool.open():
        outcomes = await Fleet(inventory, pool).fan_out("disk_usage", {}, ["web1", "web2"], timeout=5)
    assert [(o.host, o.status) for o in outcomes] == [("web1", "unreachable"), ("web2", "unreachable")]
    assert "cannot start" in outcomes[0].reason and "\n" not in outcomes[0].reason
    assert not control.exists()  # the private control directory goes with the pool
