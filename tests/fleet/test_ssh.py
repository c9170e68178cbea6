"""The ssh argv for a host and what ssh's failures mean (the real ones are exercised against sshd)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import tracemalloc
from pathlib import Path

import pytest

from sysmcp.fleet.inventory import Host, parse_ini
from sysmcp.fleet.ssh import (
    SshSettings,
    accepts_changed_keys,
    bounded,
    classify,
    config_argv,
    control_argv,
    session_argv,
)

SETTINGS = SshSettings(
    control_dir="/tmp/sysmcp-ssh-x", config_file="/etc/fleet/ssh_config", connect_timeout=2.5
)


def test_session_argv_is_batch_mode_with_our_own_control_path_and_the_host_vars() -> None:
    host = Host("web1", address="10.0.0.11", port=2222, user="ops")
    argv = session_argv(SETTINGS, host)
    assert argv[:4] == ["ssh", "-T", "-F", "/etc/fleet/ssh_config"]
    options = [argv[i + 1] for i, word in enumerate(argv) if word == "-o"]
    assert "BatchMode=yes" in options and "ConnectTimeout=3" in options and "ControlMaster=auto" in options
    assert any(re.fullmatch("ControlPath=/tmp/sysmcp-ssh-x/[0-9a-f]{40}", o) for o in options)
    assert {"Port=2222", "User=ops"} <= set(options) and not any(o.startswith("HostName=") for o in options)
    assert not any("StrictHostKeyChecking" in o or "UserKnownHostsFile" in o for o in options)
    assert argv[-3:] == ["--", "10.0.0.11", "uvx sysmcp"]  # the address, as Ansible's ssh is given it


def test_a_hosts_own_command_beats_the_default() -> None:
    argv = session_argv(
        SshSettings(control_dir="/d"), Host("db1", command="/opt/sysmcp/bin/sysmcp --root /var")
    )
    assert argv[-1] == "/opt/sysmcp/bin/sysmcp --root /var" and "-F" not in argv


def test_control_argv_ends_the_master_on_our_path() -> None:
    argv = control_argv(SETTINGS, Host("web1", port=2222))
    assert argv[:3] == ["ssh", "-O", "exit"] and argv[-2:] == ["--", "web1"]
    (path,) = [word for word in argv if word.startswith("ControlPath=/tmp/sysmcp-ssh-x/")]
    assert path in argv and path in session_argv(SETTINGS, Host("web1", port=2222)) and "Port=2222" in argv


@pytest.mark.parametrize(
    ("code", "stderr", "status"),
    [
        (255, "ssh: connect to host 127.0.0.9 port 2201: Connection refused\r\n", "unreachable"),
        (255, "ssh: Could not resolve hostname nowhere: Name or service not known", "unreachable"),
        (
            255,
            "Connection timed out during banner exchange\nConnection to 127.0.0.3 port 22 timed out",
            "timeout",
        ),
        (
            255,
            "Warning: Permanently added '[127.0.0.2]:2200' (ED25519) to the list of known hosts.\n"
            "op@127.0.0.2: Permission denied (publickey).",
            "auth_failed",
        ),
        (
            255,
            "@@@@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
            "Host key verification failed.",
            "host_key_mismatch",
        ),
        (127, "bash: line 1: uvx: command not found", "no_sysmcp"),
        (127, "", "no_sysmcp"),
        (1, "", "remote_error"),
        (127, "sh: 1: exec: no-such-sysmcp: not found", "no_sysmcp"),
        (2, "/usr/bin/python3: No module named sysmcp", "remote_error"),
        (255, "", "unreachable"),
    ],
)
def test_failures_are_classified_from_exit_code_and_stderr(code: int, stderr: str, status: str) -> None:
    found, reason = classify(code, stderr)
    assert found == status
    assert "\n" not in reason and len(reason) <= 200 and "Permanently added" not in reason


@pytest.mark.parametrize("order", [1, -1])
def test_a_jump_hosts_failure_is_the_reason_whichever_of_the_two_ssh_wrote_first(order: int) -> None:
    """Behind a ProxyJump two ssh processes share stderr: the jump's says why it failed, the one
    through it only that its transport broke; the two lines come in either order."""
    jump = "kex_exchange_identification: Connection closed by remote host"
    through = "banner exchange: Connection to UNKNOWN port 65535: Broken pipe"
    assert classify(255, "\n".join([jump, through][::order])) == ("unreachable", jump)


def test_a_peer_that_is_no_mcp_server_is_a_remote_error() -> None:
    assert classify(0, "", not_mcp="it wrote 'hello'") == (
        "remote_error",
        "the remote command does not speak MCP: it wrote 'hello'",
    )


UV_FAILS = """\
  × No solution found when resolving tool dependencies:
  ╰─▶ Because sysmcp was not found in the package registry and you require sysmcp, we can
      conclude that your requirements are unsatisfiable.

hint: Packages were unavailable because the network was disabled. When the network is disabled,
registry packages may only be read from the cache.
"""


def test_a_failing_remote_start_is_a_remote_error_with_its_first_lines_not_its_last_hint() -> None:
    """A uvx that cannot resolve said "not found" in the middle: that is no missing command."""
    status, reason = classify(1, UV_FAILS)
    assert status == "remote_error"
    assert reason.startswith("the remote command exited with status 1: × No solution found")
    assert "sysmcp was not found in the package registry" in reason and "hint:" not in reason
    assert classify(127, "zsh:1: command not found: uvx")[0] == "no_sysmcp"
    assert classify(1, "Traceback (most recent call last):\n  File x\nImportError: no anyio")[1].endswith(
        "Traceback (most recent call last): / File x / ImportError: no anyio"
    )


def test_a_remote_command_that_ran_and_failed_is_its_own_error_whatever_ssh_like_words_it_wrote() -> None:
    """ssh exits 255 for its own failures: a remote command that exited otherwise wrote its own words.
    "Permission denied" from uv's cache or a sysmcp without its x bit was an ``auth_failed`` (a refused
    login), and behind a jump host the pool read it as the bastion's refusal, one line for every host."""
    uv = "error: failed to create directory `/home/op/.cache/uv`: Permission denied (os error 13)"
    for code, stderr in ((1, uv), (126, "bash: line 1: /opt/sysmcp/bin/sysmcp: Permission denied")):
        status, reason = classify(code, stderr)
        assert status == "remote_error" and reason.endswith(stderr), (code, reason)
    assert classify(-9, "Connection timed out during banner exchange")[0] == "timeout"  # killed: ssh's words


def test_reasons_are_one_bounded_line() -> None:
    assert bounded("a\nb\x1b[31m" + "x" * 500).startswith("a b [31m")
    assert len(bounded("x" * 500)) == 200


def test_a_reason_is_made_from_the_start_of_a_huge_text_only() -> None:
    """A host's 80 MiB tool error or progress message: cleaned whole, it held 800 MB (a list of every
    character) and the event loop for 12 s, to show 200 characters."""
    huge = "x" * (80 << 20)
    tracemalloc.start()
    try:
        assert bounded(huge) == "x" * 199 + "…"
        assert tracemalloc.get_traced_memory()[1] < 4 << 20
    finally:
        tracemalloc.stop()
    assert bounded("a" * 10 + " " * (80 << 20) + "b") == "a" * 10 + "…"  # cut short: said so


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
def test_ssh_reads_a_zoned_address_and_a_key_path_with_a_space_as_the_inventory_wrote_them() -> None:
    """ssh expands %-tokens in HostName and splits an -o value at spaces: fe80::1%eth0 was an unknown
    token %e, and the key file two words (both end ssh at once, exit 255)."""
    inventory = parse_ini('v6 ansible_host=fe80::1%eth0 ansible_ssh_private_key_file="/keys/my key"\n')
    argv = session_argv(SshSettings(control_dir="/tmp/x", config_file="/dev/null"), inventory.hosts["v6"])
    seen = subprocess.run(["ssh", "-G", *argv[1:-1]], capture_output=True, text=True, check=False, timeout=30)
    assert seen.returncode == 0, seen.stderr  # -G: the configuration ssh would connect with, no connection
    config = seen.stdout.splitlines()
    assert "hostname fe80::1%eth0" in config and "identityfile /keys/my key" in config


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
def test_ssh_reads_a_zoned_address_given_as_an_hostname_option_as_the_inventory_wrote_it() -> None:
    """The inventory's ssh args may give the address as -o HostName: ssh expands %-tokens there too
    (fe80::1%eth0 ended ssh with "percent_expand: unknown key %e")."""
    inventory = parse_ini("v6 ansible_ssh_common_args='-o HostName=fe80::1%eth0'\n")
    argv = session_argv(SshSettings(control_dir="/tmp/x", config_file="/dev/null"), inventory.hosts["v6"])
    seen = subprocess.run(["ssh", "-G", *argv[1:-1]], capture_output=True, text=True, check=False, timeout=30)
    assert seen.returncode == 0, seen.stderr
    assert "hostname fe80::1%eth0" in seen.stdout.splitlines()


def _ssh_config(argv: list[str]) -> list[str]:
    """The configuration ssh would connect with (``ssh -G``: no connection), as its lines."""
    seen = subprocess.run(["ssh", "-G", *argv[1:-1]], capture_output=True, text=True, check=False, timeout=30)
    assert seen.returncode == 0, seen.stderr
    return seen.stdout.splitlines()


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
def test_two_hosts_never_share_a_master_where_sshs_own_hash_runs_them_together() -> None:
    """ssh's %C hashes %l%h%p%r run together and leaves the jump host out: 127.0.0.1 port 2222 and
    127.0.0.12 port 222 had one control socket, as had one address behind two bastions, and the second
    host's session ran over the first one's master (the first host's sshd answered for both)."""
    inventory = parse_ini(
        "a ansible_host=127.0.0.1 ansible_port=2222\n"
        "b ansible_host=127.0.0.12 ansible_port=222\n"
        "c ansible_host=10.0.0.5 ansible_ssh_common_args='-J site1'\n"
        "d ansible_host=10.0.0.5 ansible_ssh_common_args='-J site2'\n"
    )
    settings = SshSettings(control_dir="/tmp/x", config_file="/dev/null")
    paths = {
        line
        for host in inventory.hosts.values()
        for line in _ssh_config(session_argv(settings, host))
        if line.startswith("controlpath ")
    }
    assert len(paths) == 4 and all(path.startswith("controlpath /tmp/x/") for path in paths)


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
def test_a_jump_host_reaches_ssh_as_the_inventory_wrote_it() -> None:
    """ssh expands %-tokens in ProxyJump as in HostName: a link-local bastion [fe80::1%eth0] ended ssh
    ("percent_expand: unknown key %e", exit 255), and a jump host written %h was the host itself."""
    inventory = parse_ini("v6 ansible_host=127.0.0.9 ansible_ssh_common_args='-J [fe80::1%eth0]:1'\n")
    # A short directory, as sysmcp's own is: a test's tmp_path makes the socket path past 108 bytes.
    control_dir = tempfile.mkdtemp(prefix="sysmcp-t-", dir="/tmp")
    settings = SshSettings(control_dir=control_dir, config_file="/dev/null", connect_timeout=2)
    argv = session_argv(settings, inventory.hosts["v6"])
    said: list[str] = []
    # ssh -v says the proxy command before it runs it: read up to that line, then end ssh and its proxy
    # (its own session) instead of waiting out the jump host's connect timeout.
    try:
        with subprocess.Popen(
            [argv[0], "-v", *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        ) as ssh:
            assert ssh.stderr is not None
            try:
                for line in ssh.stderr:
                    said.append(line.rstrip("\n"))
                    if "Executing proxy command" in line:
                        break
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(ssh.pid, signal.SIGKILL)
    finally:
        shutil.rmtree(control_dir)
    proxy = [line for line in said if "Executing proxy command" in line]
    assert proxy and proxy[0].endswith(" fe80::1%eth0"), "\n".join(said)


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
def test_an_ansible_host_is_where_ssh_connects_as_ansible_has_it_so_its_config_stanzas_apply(
    tmp_path: Path,
) -> None:
    """Ansible's ssh connects to ``ansible_host`` itself (``ssh … 10.9.0.5``), so the operator's
    ``Host 10.9.*`` stanza (its ProxyJump, User, IdentityFile) applies and ``Host web1`` does not. Given
    as ``-o HostName=10.9.0.5 web1`` it was the other way round: a fleet that ``ansible -m ping``
    reaches through its bastion was dialled directly, as another user, with another key."""
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host 10.9.*\n  ProxyJump jumper\n  User by-address\n  IdentityFile /keys/by-address\n"
        "Host web1\n  User by-name\n  IdentityFile /keys/by-name\n"
    )
    inventory = parse_ini(
        "web1 ansible_host=10.9.0.5\nweb2 ansible_host=10.9.0.6 ansible_user=ops ansible_port=2222\n"
    )
    settings = SshSettings(control_dir="/tmp/x", config_file=str(config))
    wanted = ("hostname ", "user ", "port ", "proxyjump ", "identityfile ")
    for host, ansible in [
        ("web1", ["ssh", "-F", str(config), "10.9.0.5", "true"]),
        ("web2", ["ssh", "-F", str(config), "-o", "User=ops", "-o", "Port=2222", "10.9.0.6", "true"]),
    ]:
        ours = [
            line
            for line in _ssh_config(session_argv(settings, inventory.hosts[host]))
            if line.startswith(wanted)
        ]
        assert ours == [line for line in _ssh_config(ansible) if line.startswith(wanted)]
        assert "proxyjump jumper" in ours


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
def test_a_host_without_an_address_is_its_own_ssh_config_alias(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host web1\n  HostName 10.9.0.7\n  User by-name\n")
    argv = session_argv(SshSettings(control_dir="/tmp/x", config_file=str(config)), Host("web1"))
    assert {"hostname 10.9.0.7", "user by-name"} <= set(_ssh_config(argv))


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
@pytest.mark.parametrize(
    ("setting", "loose"), [("no", True), ("off", True), ("yes", False), ("ask", False), ("accept-new", False)]
)
def test_an_ssh_config_that_accepts_changed_host_keys_is_told_by_ssh_itself(
    tmp_path: Path, setting: str, loose: bool
) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(f"Host 10.9.*\n  StrictHostKeyChecking {setting}\n")
    settings = SshSettings(control_dir="/tmp/x", config_file=str(config))
    host = Host("web1", address="10.9.0.5")
    seen = subprocess.run(
        config_argv(settings, host), capture_output=True, text=True, check=False, timeout=30
    )
    assert seen.returncode == 0, seen.stderr
    assert accepts_changed_keys(seen.stdout) is loose
    strict = session_argv(settings, host, refuse_changed_keys=loose)
    assert ("StrictHostKeyChecking=accept-new" in strict) is loose
    assert "stricthostkeychecking false" not in _ssh_config(strict)  # never left accepting a changed key


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
def test_an_inventorys_own_strict_host_key_checking_no_does_not_accept_a_changed_key(tmp_path: Path) -> None:
    """``ansible_ssh_common_args='-o StrictHostKeyChecking=no'`` (common in Ansible inventories) reaches
    ``ssh -G`` as it reaches the session, so ssh says ``no``; but ssh takes the first value it is given,
    and the inventory's ``-o`` came before sysmcp's ``accept-new``: the session went on with a changed key."""
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  StrictHostKeyChecking yes\n")
    settings = SshSettings(control_dir="/tmp/x", config_file=str(config))
    host = parse_ini(
        "web1 ansible_host=10.9.0.5 ansible_ssh_common_args='-o StrictHostKeyChecking=no'\n"
    ).hosts["web1"]
    seen = subprocess.run(
        config_argv(settings, host), capture_output=True, text=True, check=False, timeout=30
    )
    assert accepts_changed_keys(seen.stdout)
    strict = _ssh_config(session_argv(settings, host, refuse_changed_keys=True))
    assert "stricthostkeychecking accept-new" in strict
