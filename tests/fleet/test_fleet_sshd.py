"""The fleet end to end: the real sysmcp, real ssh, real sshd hosts on loopback, real remote sysmcp.

One lab for the module: six healthy hosts (the same file on four, a different one on the fifth,
none on the sixth), a refused port, a SIGSTOPped sshd, a host without sysmcp, a changed host key
and a host that rejects our key.
"""

from __future__ import annotations

import hashlib
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from tests.fleet.lab import OWNER, SHARED, Lab, ssh_processes, unavailable
from tests.wire import result_text, spawn

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# The remote sysmcp starts a Python: on a loaded 2-core machine that took more than 8 s.
CONNECT_TIMEOUT = 20.0
HEALTHY = [f"web{i}" for i in range(1, 7)]
BROKEN = {
    "refused": "unreachable",
    "stopped": "timeout",
    "nosysmcp": "no_sysmcp",
    "newkey": "host_key_mismatch",
    "rejects": "auth_failed",
}
CONF = "etc/app.conf"
SAME, OTHER = "listen 80;\n", "listen 8080;\n"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    lab = Lab(tmp_path_factory.mktemp("fleet"))
    try:
        for name in HEALTHY[:4]:
            lab.add(name, files={CONF: SAME})
        lab.add(HEALTHY[4], files={CONF: OTHER})
        lab.add(HEALTHY[5], files={"etc/other.conf": SAME})
        lab.add("refused", start=False, group="broken")
        lab.add("stopped", group="broken")
        lab.stop_responding("stopped")
        lab.add("nosysmcp", command="exec no-such-sysmcp", group="broken")
        lab.add("newkey", known_key=False, group="broken")
        lab.add("rejects", accepts_key=False, group="broken")
        lab.inventory({"web": HEALTHY, "broken": list(BROKEN), "everything:children": ["web", "broken"]})
        yield lab
    finally:
        lab.close()


#: This module's servers mark their ssh processes (which inherit it), so that a check counts only them and
#: not the ssh of another test or run on the same machine.
ME = uuid.uuid4().hex
MINE = {OWNER: ME}


def server_args(lab: Lab) -> list[str]:
    return lab.gateway_args(CONNECT_TIMEOUT)


def by_host(reply: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["host"]: entry for entry in reply["result"]["structuredContent"]["hosts"]}


async def test_one_fan_out_gives_every_host_its_status_within_the_timeout(lab: Lab) -> None:
    path = str(lab.base / SHARED / CONF)
    before = set(ssh_processes(ME))  # another test's masters, should one have been killed mid-way
    async with spawn(*server_args(lab), env=MINE) as wire:
        await wire.initialize()
        started = anyio.current_time()
        reply = await wire.call("file_sha256", {"path": path, "hosts": ["all"]}, progress="p", msg_id=1)
        elapsed = anyio.current_time() - started
        assert elapsed < CONNECT_TIMEOUT + 5  # the hung host cost at most its connect timeout
        result = reply["result"]
        assert result["isError"] is False
        hosts = by_host(reply)
        assert list(hosts) == [*HEALTHY, *BROKEN]  # inventory order, one entry each
        same = hashlib.sha256(SAME.encode()).hexdigest()
        for name in HEALTHY[:4]:
            assert hosts[name]["status"] == "ok" and hosts[name]["result"]["sha256"] == same
        assert hosts["web5"]["status"] == "ok", hosts["web5"]
        assert hosts["web5"]["result"]["sha256"] == hashlib.sha256(OTHER.encode()).hexdigest()
        assert hosts["web6"]["status"] == "tool_error" and "No such file" in hosts["web6"]["reason"]
        for name, status in BROKEN.items():
            assert hosts[name]["status"] == status, hosts[name]
            assert "reason" in hosts[name] and "\n" not in hosts[name]["reason"]
        assert "Permission denied" in hosts["rejects"]["reason"]
        assert "CHANGED" in hosts["newkey"]["reason"]
        text = result_text(reply)
        assert text.startswith("6 of 11 hosts answered, 1 unreachable, 1 auth_failed, 1 host_key_mismatch")
        progress = [n["params"] for n in wire.notifications if n["method"] == "notifications/progress"]
        assert progress[-1]["progress"] == 11 and progress[-1]["total"] == 11
        assert "hosts answered" in progress[-1]["message"]
        await wire.close_stdin()
        assert await wire.wait_exit(15) == 0
    assert set(ssh_processes(ME)) - before == set()


async def test_the_drift_verdict_names_the_odd_host_and_the_one_without_the_file(lab: Lab) -> None:
    path = str(lab.base / SHARED / CONF)
    async with spawn(*server_args(lab), env=MINE) as wire:
        await wire.initialize()
        reply = await wire.call("file_sha256", {"path": path, "hosts": ["web"]})
        view = reply["result"]["structuredContent"]["view"]
        assert view["verdict"] == "drift"
        assert [group["hosts"] for group in view["digests"]] == [HEALTHY[:4], ["web5"]]
        assert view["missing"] == ["web6"]
        text = result_text(reply)
        assert "web5" in text and "web6" in text
        await wire.close_stdin()
        await wire.wait_exit(15)


async def test_a_hosts_manifest_is_read_through_the_gateway_and_checked_on_other_hosts(lab: Lab) -> None:
    """hash_tree on web1, its full manifest read through the gateway, then checked on web1 and web5."""
    root = str(lab.base / SHARED)
    digest = hashlib.sha256(SAME.encode()).hexdigest()
    async with spawn(*server_args(lab), env=MINE) as wire:
        await wire.initialize()
        made = await wire.call("hash_tree", {"path": root, "hosts": ["web1"]})
        uri = made["result"]["structuredContent"]["hosts"][0]["result"]["manifest_uri"]
        assert uri.startswith("sysmcp://hosts/web1/results/"), uri
        read = await wire.request("resources/read", {"uri": uri})
        assert read["result"]["contents"][0]["uri"] == uri
        assert read["result"]["contents"][0]["text"] == f"{digest}  {CONF}\n"
        checked = await wire.call(
            "verify_checksums", {"manifest": uri, "base_dir": root, "hosts": ["web1", "web5", "web6"]}
        )
        hosts = by_host(checked)
        assert hosts["web1"]["status"] == "ok" and hosts["web1"]["result"]["all_ok"] is True
        assert hosts["web5"]["status"] == "ok" and hosts["web5"]["result"]["all_ok"] is False
        assert hosts["web5"]["result"]["failed"] == 1
        assert hosts["web6"]["result"]["all_ok"] is False  # web6 lacks the file
        gone = await wire.request("resources/read", {"uri": uri.replace("/results/", "/results/9")})
        assert gone["error"]["code"] == -32002 and "web1 no longer has it" in gone["error"]["message"]
        await wire.close_stdin()
        await wire.wait_exit(15)


async def test_after_a_cancelled_fan_out_the_next_call_reuses_the_sessions(lab: Lab) -> None:
    before = set(ssh_processes(ME))
    async with spawn(*server_args(lab), env=MINE) as wire:
        await wire.initialize()
        warm = await wire.call("disk_usage", {"path": "/", "hosts": ["web"]})
        assert all(entry["status"] == "ok" for entry in by_host(warm).values())
        web = [f" -- {lab.hosts[name].address} " for name in HEALTHY]  # ssh is given each host's address
        sessions = {
            p for p in set(ssh_processes(ME)) - before if any(a in p for a in web)
        }  # the session clients
        assert len(sessions) == len(HEALTHY)
        # The stopped host keeps this fan-out waiting; the healthy hosts answer at once. Cancel it.
        await wire.start_call("disk_usage", {"path": "/", "hosts": ["web", "stopped"]}, msg_id=9, progress=9)
        while not any(
            n["method"] == "notifications/progress" and n["params"]["progress"] >= len(HEALTHY)
            for n in wire.notifications
        ):
            message = await wire.receive(timeout=CONNECT_TIMEOUT + 5)
            assert "id" not in message or "method" in message, message
            wire.notifications.append(message)
        await wire.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9, "reason": "t"}}
        )
        # The cancelled call gets no response: the next answer is the ping's.
        pong = await wire.request("ping", msg_id="after-cancel")
        assert pong["result"] == {}
        again = await wire.call("disk_usage", {"path": "/", "hosts": ["web"]})
        assert all(entry["status"] == "ok" for entry in by_host(again).values())
        assert {
            p for p in set(ssh_processes(ME)) - before if any(a in p for a in web)
        } == sessions  # the same ssh processes: no host was reconnected
        await wire.close_stdin()
        await wire.wait_exit(15)
    assert set(ssh_processes(ME)) - before == set()


async def test_sigterm_with_sessions_open_ends_every_ssh(lab: Lab) -> None:
    before = set(ssh_processes(ME))
    async with spawn(*server_args(lab), env=MINE) as wire:
        await wire.initialize()
        await wire.call("disk_usage", {"hosts": ["web1", "web2"]})
        assert len(set(ssh_processes(ME)) - before) >= 2
        wire.process.send_signal(signal.SIGTERM)
        assert await wire.wait_exit(15) == 0
    assert set(ssh_processes(ME)) - before == set()


@pytest.mark.parametrize("setting", ["no", "off"])
async def test_a_changed_host_key_is_refused_even_where_the_ssh_config_says_no(
    lab: Lab, setting: str
) -> None:
    """``StrictHostKeyChecking no`` makes ssh go on with a host whose key changed (another machine,
    maybe): its answer was given as the host's, without a word. It is started with accept-new there,
    which still takes a host never seen (as ``no`` does) but refuses a changed key."""
    loose = lab.base / f"ssh_config_{setting}"
    loose.write_text(
        lab.ssh_config.read_text().replace("StrictHostKeyChecking yes", f"StrictHostKeyChecking {setting}")
    )
    args = [*server_args(lab)]
    args[args.index(str(lab.ssh_config))] = str(loose)
    async with spawn(*args, env=MINE) as wire:
        await wire.initialize()
        reply = await wire.call("disk_usage", {"path": "/", "hosts": ["web1", "newkey"]})
        hosts = by_host(reply)
        assert hosts["web1"]["status"] == "ok"
        assert hosts["newkey"]["status"] == "host_key_mismatch", hosts["newkey"]
        await wire.close_stdin()
        assert await wire.wait_exit(15) == 0


async def test_a_changed_host_key_is_refused_where_the_inventory_says_strict_host_key_checking_no(
    lab: Lab,
) -> None:
    """``ansible_ssh_common_args='-o StrictHostKeyChecking=no'``, as many Ansible inventories have it:
    ssh takes an option's first value, and the inventory's came before sysmcp's accept-new, so the
    changed key was taken and the other machine's answer given as the host's (status ok before the fix)."""
    inventory = lab.base / "hosts_loose.ini"
    loose = " ansible_ssh_common_args='-o StrictHostKeyChecking=no'"
    lines = (lab.base / "hosts.ini").read_text().splitlines()
    inventory.write_text(
        "".join(
            line.replace("  #", loose + "  #", 1) + "\n" if line.startswith("newkey ") else line + "\n"
            for line in lines
        )
    )
    newkey = [line for line in inventory.read_text().splitlines() if line.startswith("newkey ")]
    assert newkey and loose + "  #" in newkey[0]  # before the line's comment
    args = [*server_args(lab)]
    args[args.index(str(lab.base / "hosts.ini"))] = str(inventory)
    async with spawn(*args, env=MINE) as wire:
        await wire.initialize()
        reply = await wire.call("disk_usage", {"path": "/", "hosts": ["web1", "newkey"]})
        hosts = by_host(reply)
        assert hosts["web1"]["status"] == "ok"
        assert hosts["newkey"]["status"] == "host_key_mismatch", hosts["newkey"]
        await wire.close_stdin()
        assert await wire.wait_exit(15) == 0


async def test_unknown_hosts_are_refused_listing_the_groups(lab: Lab) -> None:
    before = set(ssh_processes(ME))
    async with spawn(*server_args(lab), env=MINE) as wire:
        await wire.initialize()
        reply = await wire.call("disk_usage", {"hosts": ["web1", "mail.example.org"]})
        assert reply["result"]["isError"] is True
        text = result_text(reply)
        assert "'mail.example.org'" in text and "web, broken, everything" in text
        listed = await wire.request("tools/list")
        for tool in listed["result"]["tools"]:
            assert tool["inputSchema"]["properties"]["hosts"]["type"] == "array"
        await wire.close_stdin()
        await wire.wait_exit(15)
    assert set(ssh_processes(ME)) - before == set()


async def test_without_a_fleet_nothing_changes() -> None:
    async with spawn() as wire:
        init = await wire.initialize()
        assert "Fleet" not in init["result"]["instructions"]
        listed = await wire.request("tools/list")
        assert all("hosts" not in t["inputSchema"]["properties"] for t in listed["result"]["tools"])


async def test_the_instructions_name_the_groups_and_the_host_count(lab: Lab) -> None:
    async with spawn(*server_args(lab), env=MINE) as wire:
        init = await wire.initialize()
        text = init["result"]["instructions"]
        assert "11 hosts" in text and "web (6)" in text and "broken (5)" in text and "web1" in text
        await wire.close_stdin()
        assert await wire.wait_exit(15) == 0  # a pool that never connected ends cleanly too


def test_a_malformed_inventory_is_a_start_up_error_naming_the_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "hosts.ini"
    bad.write_text("[web]\nweb1\nweb2 ansible_port=http\n")
    run = subprocess.run(
        [sys.executable, "-m", "sysmcp", "--inventory", str(bad)], capture_output=True, text=True, timeout=30
    )
    assert run.returncode == 2 and f"{bad} line 3:" in run.stderr and run.stdout == ""


async def test_a_remote_that_lacks_a_tool_is_that_hosts_tool_error(tmp_path: Path) -> None:
    """An older or other MCP server on a host (here the SDK reference server, which has no hash_tree)."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    import shlex
    import sys

    lab = Lab(tmp_path)
    try:
        lab.add("current", files={"a.txt": "a"})
        sdk = Path(__file__).resolve().parents[2] / "benchmarks" / "sdk_server.py"
        lab.add("older", command=f"exec {shlex.join([sys.executable, str(sdk)])}")
        lab.inventory()
        async with spawn(*server_args(lab), env=MINE) as wire:
            await wire.initialize()
            reply = await wire.call("hash_tree", {"path": str(lab.base / SHARED), "hosts": ["all"]})
            hosts = by_host(reply)
            assert hosts["current"]["status"] == "ok" and hosts["current"]["result"]["files"] == 1
            assert hosts["older"]["status"] == "tool_error" and "hash_tree" in hosts["older"]["reason"]
            assert reply["result"]["isError"] is False
            await wire.close_stdin()
            await wire.wait_exit(15)
    finally:
        lab.close()


async def test_a_session_that_died_is_reopened_on_the_next_call(lab: Lab) -> None:
    before = set(ssh_processes(ME))
    async with spawn(*server_args(lab), env=MINE) as wire:
        await wire.initialize()
        first = await wire.call("disk_usage", {"path": "/", "hosts": ["web1"]})
        assert by_host(first)["web1"]["status"] == "ok"
        # The session's ssh is the gateway's own child (its master forked away from it, to init): other
        # runs' ssh processes on this machine, whose labs may have a web1 too, are not looked at.
        (client,) = [
            child
            for child in psutil.Process(wire.process.pid).children()
            if child.name() == "ssh" and lab.hosts["web1"].address in child.cmdline()
        ]
        client.kill()
        # That ssh is only a client of the master, which moves the session's bytes on the pipes the client
        # passed it, and ends the session when the client's control connection closes. A SIGKILLed process
        # closes it only when it next runs: until then the session still answers, and on a loaded machine a
        # call asked at once can be answered on it. So its death is waited for; the pool may or may not have
        # noticed it when the call comes, and either way the call is answered on a new session.
        await anyio.to_thread.run_sync(client.wait, CONNECT_TIMEOUT)
        again = await wire.call("disk_usage", {"path": "/", "hosts": ["web1"]})
        assert by_host(again)["web1"]["status"] == "ok"
        assert "1 of 1 host answered, 1 reconnected" in result_text(again)  # the answer says why it was slow
        third = await wire.call("disk_usage", {"path": "/", "hosts": ["web1"]})
        assert "reconnected" not in result_text(third)
        await wire.close_stdin()
        await wire.wait_exit(15)
    assert set(ssh_processes(ME)) - before == set()
