"""Hosts behind a bastion (tests/fleet/lab.py ``Bastion``): reached only through it, by ProxyJump
from the inventory's ``ansible_ssh_common_args``; with the bastion down every host behind it is
``unreachable`` with one reason, at once."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator

import pytest

from sysmcp.fleet.fanout import Fleet
from sysmcp.fleet.inventory import parse_ini
from sysmcp.fleet.pool import SessionPool, private_control_dir
from sysmcp.fleet.ssh import SshSettings
from sysmcp.tools.merging import default_merge
from tests.fleet.lab import Bastion, Lab, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

# A guard: a loaded machine (CI under a CPU hog) took more than 20 s to start sshd -i and sysmcp.
CONNECT_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Bastion]]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    for tool in ("ip", "nsenter"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install iproute2 util-linux): no hidden network")
    lab = Lab(tmp_path_factory.mktemp("bastion"))
    try:
        bastion = lab.bastion()
        for name in ("inner1", "inner2", "inner3"):
            lab.add(name, behind=bastion)
        lab.add("outer")
        lab.inventory({"inner": ["inner1", "inner2", "inner3"]})
        yield lab, bastion
    finally:
        lab.close()


def pool(lab: Lab) -> tuple[Fleet, SessionPool]:
    inventory = parse_ini((lab.base / "hosts.ini").read_text())
    control = private_control_dir()  # short: a ControlPath must fit a socket address
    settings = SshSettings(
        control_dir=control, config_file=str(lab.ssh_config), connect_timeout=CONNECT_TIMEOUT
    )
    made = SessionPool(inventory, settings)
    return Fleet(inventory, made, deadline=60), made


def test_a_host_behind_the_bastion_refuses_a_direct_connection(lab: tuple[Lab, Bastion]) -> None:
    inner = lab[0].hosts["inner1"]
    done = subprocess.run(
        [
            "ssh",
            "-F",
            str(lab[0].ssh_config),
            "-o",
            "BatchMode=yes",
            "-p",
            str(inner.port),
            inner.address,
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 255 and "Connection refused" in done.stderr


async def test_hosts_behind_the_bastion_answer_through_proxyjump(
    lab: tuple[Lab, Bastion],
) -> None:
    fleet, sessions = pool(lab[0])
    names = ["inner1", "inner2", "inner3", "outer"]
    async with sessions.open():
        outcomes = await fleet.fan_out("disk_usage", {}, names, timeout=120)
    assert [(o.host, o.status) for o in outcomes] == [(n, "ok") for n in names], [o.reason for o in outcomes]
    assert fleet.inventory.hosts["inner1"].jump == lab[1].jump


async def test_with_the_bastion_down_the_answer_names_the_bastion_once_as_the_cause(
    lab: tuple[Lab, Bastion],
) -> None:
    lab[1].down()
    fleet, sessions = pool(lab[0])
    async with sessions.open():
        outcomes = await fleet.fan_out("disk_usage", {}, ["inner1", "inner2", "inner3"], timeout=120)
    assert {o.status for o in outcomes} == {"unreachable"}
    assert len({o.reason for o in outcomes}) == 1
    assert outcomes[0].reason.startswith(f"bastion {lab[1].address} refused: "), outcomes[0].reason
    assert all(o.seconds < CONNECT_TIMEOUT for o in outcomes)  # refused at once, not timed out
    text = default_merge(outcomes, {}).text
    said = f"  {outcomes[0].reason}; 3 hosts behind it unreachable: inner1, inner2, inner3"
    assert said in text and text.count(outcomes[0].reason) == 1, text  # the cause once, not per host


@pytest.mark.parametrize(
    ("reason", "bastion"),
    [
        ("kex_exchange_identification: Connection closed by remote host", True),
        ("ssh: connect to host 127.0.3.21 port 22: Connection refused", True),
        ("root@jump1: Permission denied (publickey).", True),
        ("root@inner1: Permission denied (publickey).", False),  # the bastion let us through
        ("channel 0: open failed: connect failed: Connection refused", False),
        ("stdio forwarding failed", False),
    ],
)
def test_a_failure_past_the_bastion_is_the_hosts_own(reason: str, bastion: bool) -> None:
    from sysmcp.fleet.pool import at_bastion

    assert at_bastion(reason, "jump1") is bastion


async def test_a_host_that_accepts_tcp_and_never_speaks_ssh_times_out_alone(lab: tuple[Lab, Bastion]) -> None:
    silent = socket.create_server(("127.0.0.250", 0))  # accepts (the kernel's backlog), never a byte
    port = silent.getsockname()[1]
    try:
        inventory = parse_ini(f"silent ansible_host=127.0.0.250 ansible_port={port}\n")
        settings = SshSettings(
            control_dir=private_control_dir(), config_file=str(lab[0].ssh_config), connect_timeout=3
        )
        async with SessionPool(inventory, settings).open() as sessions:
            (outcome,) = await Fleet(inventory, sessions).fan_out("disk_usage", {}, ["silent"], timeout=60)
    finally:
        silent.close()
    assert outcome.status == "timeout" and "3 s" in outcome.reason


def test_a_bastion_in_the_inventory_is_named_with_its_address() -> None:
    inventory = parse_ini(
        "jump1 ansible_host=127.0.3.21\ninner1 ansible_ssh_common_args='-J root@jump1:22'\n"
    )
    made = SessionPool(inventory, SshSettings(control_dir=private_control_dir()))
    said = made._behind("root@jump1:22", "kex_exchange_identification: Connection closed by remote host")
    assert said == (
        "bastion jump1 (127.0.3.21) refused: kex_exchange_identification: Connection closed by remote host",
        "jump1",
    )
