"""The pool without sshd: what it does when ssh itself cannot run."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from sysmcp.fleet import pool as pool_module
from sysmcp.fleet.fanout import Fleet
from sysmcp.fleet.inventory import from_names, parse_ini
from sysmcp.fleet.pool import HostFailure, SessionPool
from sysmcp.fleet.ssh import SshSettings
from tests.fleet.test_fanout_scale import stub_program

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


async def test_a_host_ansible_reaches_without_ssh_is_refused_in_words_not_dialled(tmp_path: Path) -> None:
    """``ansible_connection=local`` (``localhost`` in many inventories), winrm, docker: Ansible reaches
    them without ssh, and sysmcp started ssh to their names all the same (answered by whatever that
    name reached). Each is refused saying why; ``local`` is not run here either: an inventory names no
    command this machine runs, and a sysmcp started here would not be bound by the gateway's --root."""
    inventory = parse_ini(
        "here ansible_connection=local sysmcp_command='touch /tmp/never'\n"
        "win ansible_connection=winrm\n"
        "box ansible_connection=community.docker.docker\n"
        "ssh1 ansible_connection=ansible.builtin.ssh\n"
    )
    assert inventory.hosts["ssh1"].connection is None and inventory.hosts["here"].connection == "local"
    control = tmp_path / "control"
    control.mkdir(mode=0o700)
    starts = tmp_path / "starts"
    settings = SshSettings(control_dir=str(control), program=stub_program(tmp_path), connect_timeout=60)
    pool = SessionPool(inventory, settings)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STUB_STARTS", str(starts))
        async with pool.open():
            outcomes = await Fleet(inventory, pool).fan_out(
                "x", {}, ["here", "win", "box", "ssh1"], timeout=60
            )
    by_host = {o.host: o for o in outcomes}
    assert by_host["ssh1"].status == "ok", by_host["ssh1"]
    assert by_host["here"].status == "unreachable" and "ask without hosts" in by_host["here"].reason
    for name, connection in (("win", "winrm"), ("box", "community.docker.docker")):
        assert by_host[name].status == "unreachable"
        assert f"ansible_connection {connection} is not ssh" in by_host[name].reason
    assert starts.read_text().split() == ["ssh1"]  # no ssh was started for the others


async def test_a_host_whose_ssh_config_ssh_cannot_print_in_time_is_not_dialled(tmp_path: Path) -> None:
    """Whether the operator's config says ``StrictHostKeyChecking no`` is asked of ``ssh -G``; one that
    did not answer in time (a slow ``Match exec``) was taken as "it does not", and the session went on
    with the config's ``no``: a changed host key was accepted. Not knowing, the host is not dialled."""
    inventory = from_names(["ok1"])
    control = tmp_path / "control"
    control.mkdir(mode=0o700)
    starts, asked = tmp_path / "starts", tmp_path / "asked"
    program = tmp_path / "ssh-slow-config"
    program.write_text(
        "#!/bin/sh\n"
        f'for word; do [ "$word" = -G ] && echo $$ > {asked} && exec sleep 600; done\n'
        f'exec {stub_program(tmp_path)} "$@"\n'
    )
    program.chmod(0o755)
    settings = SshSettings(control_dir=str(control), program=str(program), connect_timeout=0.5)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STUB_STARTS", str(starts))
        env.setattr(pool_module, "SLOW_START", 0.5)  # an opening's time, 120 s, for this test 0.5 s
        async with SessionPool(inventory, settings).open() as pool:
            # the opening itself (a call stops waiting for it at the same connect timeout, and leaves it
            # going on in the background for the next call)
            with pytest.raises(HostFailure) as failed:
                await pool._open(inventory.hosts["ok1"])
    assert failed.value.status == "timeout", failed.value
    assert "ssh -G" in failed.value.reason and "host key" in failed.value.reason
    assert not starts.exists()  # no session was started
    assert not psutil.pid_exists(int(asked.read_text()))  # and the ssh -G asked is ended
