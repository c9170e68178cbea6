"""A fleet of real sshd servers on loopback, for the fleet tests and the benchmark.

Each simulated host is its own ``sshd -D`` on 127.0.0.x and a free port, with its own host key, whose
``ForceCommand`` runs this checkout's sysmcp (``sys.executable -m sysmcp``) in a mount namespace of its
own (``unshare -m``), with a bind mount over one shared directory: the same path holds different
files on different hosts. Everything (keys, known_hosts, ssh_config, inventory, pid files) lives in
one temporary directory. Needs root (sshd, mounts) and unshare.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SHARED = "srv"  # the directory every host sees, each with its own contents


def unavailable() -> str | None:
    """Why real sshd hosts cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "sshd hosts need root (sshd, bind mounts in a mount namespace)"
    for tool in (SSHD, "ssh", "ssh-keygen", "unshare"):
        if shutil.which(tool) is None and not os.path.exists(tool):
            return f"{tool} is not installed (apt-get install openssh-server openssh-client util-linux)"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        return f"unshare -m does not work here: {probe.stderr.decode(errors='replace').strip()}"
    return None


def keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return Path(f"{path}.pub").read_text().strip()


def free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class SimHost:
    name: str
    address: str
    port: int
    root: Path
    process: subprocess.Popen[bytes] | None = None
    behind: Bastion | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


class Bastion:
    """A jump host that is the only way to the hosts behind it.

    The hosts behind it run in a network namespace of their own (``unshare -n``), on that namespace's
    own loopback: from the test's namespace nothing listens at their 127.0.0.x addresses, so a direct
    connection is refused by the kernel, not by any sshd rule. The bastion's port is in the test's
    namespace; each connection to it is handed (as its stdin and stdout) to an ``sshd -i`` started
    inside the hidden namespace, so the connections it forwards for ProxyJump reach the hosts there.
    """

    def __init__(self, lab: Lab, address: str) -> None:
        self.address = address
        self.port = free_port(address)
        self.root = lab.base / f"bastion-{address}"
        self.root.mkdir()
        self.holder = subprocess.Popen(["unshare", "-n", "sleep", "infinity"], stdin=subprocess.DEVNULL)
        self.netns = f"/proc/{self.holder.pid}/ns/net"
        deadline = time.monotonic() + 10
        while os.readlink(self.netns) == os.readlink("/proc/self/ns/net"):  # unshare has not run yet
            if time.monotonic() > deadline:
                raise RuntimeError("unshare -n did not make a network namespace")
            time.sleep(0.01)
        subprocess.run([*self.enter, "ip", "link", "set", "lo", "up"], check=True)
        public = keygen(self.root / "host_key")
        lab.known_hosts.append(f"[{address}]:{self.port} {public}")
        (lab.base / "known_hosts").write_text("\n".join(lab.known_hosts) + "\n")
        (self.root / "sshd_config").write_text(
            f"HostKey {self.root / 'host_key'}\n"
            f"AuthorizedKeysFile {lab.base / 'authorized_keys'}\n"
            "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nAllowTcpForwarding yes\n"
            "LogLevel ERROR\nForceCommand /bin/false\n"  # a jump host only: no shell here
        )
        self.listener = socket.create_server((address, self.port))
        self.children: list[subprocess.Popen[bytes]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def enter(self) -> list[str]:
        return ["nsenter", f"--net={self.netns}"]

    @property
    def jump(self) -> str:
        return f"root@{self.address}:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed: the bastion is down
            with conn:
                child = subprocess.Popen(
                    [*self.enter, SSHD, "-i", "-e", "-f", str(self.root / "sshd_config")],
                    stdin=conn.fileno(),
                    stdout=conn.fileno(),
                    stderr=subprocess.DEVNULL,
                )
            self.children = [c for c in self.children if c.poll() is None] + [child]

    def down(self) -> None:
        """The bastion stops listening (its port refuses) and its open connections end."""
        with contextlib.suppress(OSError):  # wakes the accept() (a close alone would leave it listening)
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(5)
        for child in self.children:
            if child.poll() is None:
                child.kill()
                child.wait()

    def close(self) -> None:
        self.down()
        self.holder.kill()
        self.holder.wait()


@dataclass
class Lab:
    base: Path
    hosts: dict[str, SimHost] = field(default_factory=dict)
    known_hosts: list[str] = field(default_factory=list)
    inventory_lines: list[str] = field(default_factory=list)
    bastions: list[Bastion] = field(default_factory=list)
    _next_address: int = 10

    def __post_init__(self) -> None:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        (self.base / SHARED).mkdir(exist_ok=True)
        self.user_key = self.base / "id_user"
        self.user_public = keygen(self.user_key)
        self.other_public = keygen(self.base / "id_other")
        (self.base / "authorized_keys").write_text(self.user_public + "\n")
        (self.base / "other_authorized_keys").write_text(self.other_public + "\n")
        self.ssh_config = self.base / "ssh_config"
        self.ssh_config.write_text(
            "Host *\n"
            "  User root\n"
            f"  IdentityFile {self.user_key}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.base / 'known_hosts'}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
            "  UpdateHostKeys no\n"
        )

    # -- building hosts -------------------------------------------------------------------------

    def _address(self) -> str:
        self._next_address += 1
        return f"127.0.0.{self._next_address}"

    def add(
        self,
        name: str,
        *,
        files: dict[str, str] | None = None,
        command: str | None = None,
        known_key: bool = True,
        accepts_key: bool = True,
        start: bool = True,
        group: str = "healthy",
        allow_df: bool = False,
        behind: Bastion | None = None,
        sysmcp_args: Sequence[str] = (),
    ) -> SimHost:
        """A host whose shared directory holds ``files``; ``command`` replaces sysmcp (a host without
        it); ``known_key=False`` puts another key in known_hosts (a changed host key);
        ``accepts_key=False`` authorises another user key (our key is rejected); ``start=False``
        leaves the port closed (connection refused); ``allow_df`` lets ``df -P`` through (the
        benchmark's reference command); ``behind`` puts it where only that bastion reaches it;
        ``sysmcp_args`` go on the host's own sysmcp command line (``--allow-reclaim``)."""
        address = self._address()
        port = free_port(address)
        root = self.base / name
        (root / SHARED).mkdir(parents=True)
        for relative, content in (files or {}).items():
            target = root / SHARED / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        host_public = keygen(root / "host_key")
        listed = host_public if known_key else keygen(root / "impostor_key")
        self.known_hosts.append(f"[{address}]:{port} {listed}")
        (self.base / "known_hosts").write_text("\n".join(self.known_hosts) + "\n")
        if command is None:
            sysmcp = shlex.join([sys.executable, "-m", "sysmcp", *sysmcp_args])
            inner = f"mount --bind {shlex.quote(str(root / SHARED))} {shlex.quote(str(self.base / SHARED))} && exec {sysmcp}"
            command = f"exec unshare -m sh -c {shlex.quote(inner)}"
            if allow_df:  # the benchmark's reference, parallel-ssh … df -P, reaches the same hosts
                command = f'if [ "$SSH_ORIGINAL_COMMAND" = "df -P" ]; then exec df -P; fi; {command}'
        keys = self.base / ("authorized_keys" if accepts_key else "other_authorized_keys")
        config = root / "sshd_config"
        config.write_text(
            f"ListenAddress {address}:{port}\n"
            f"HostKey {root / 'host_key'}\n"
            f"PidFile {root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {keys}\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "PermitRootLogin prohibit-password\n"
            "MaxStartups 100:30:200\n"
            "MaxSessions 50\n"
            "LogLevel ERROR\n"
            f"ForceCommand {command}\n"
        )
        host = SimHost(name, address, port, root, behind=behind)
        self.hosts[name] = host
        jump = f" ansible_ssh_common_args='-J {behind.jump}'" if behind is not None else ""
        self.inventory_lines.append(f"{name} ansible_host={address} ansible_port={port}{jump}  # {group}")
        if start:
            self.start(host)
        return host

    def bastion(self) -> Bastion:
        made = Bastion(self, self._address())
        self.bastions.append(made)
        return made

    def start(self, host: SimHost) -> None:
        enter = host.behind.enter if host.behind is not None else []
        host.process = subprocess.Popen(
            [*enter, SSHD, "-D", "-e", "-f", str(host.root / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(host.root / "sshd.log", "wb"),  # noqa: SIM115 - closed with the process
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if host.process.poll() is not None:
                raise RuntimeError(f"sshd for {host.name} exited: {(host.root / 'sshd.log').read_text()}")
            if host.behind is not None:  # listening in the hidden namespace: look from there
                probe = [
                    *enter,
                    sys.executable,
                    "-c",
                    f"import socket; socket.create_connection(('{host.address}', {host.port}), 1)",
                ]
                if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
                    return
                time.sleep(0.05)
                continue
            try:
                with socket.create_connection((host.address, host.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"sshd for {host.name} did not listen within 10 s")

    def stop_responding(self, name: str) -> None:
        """SIGSTOP the host's sshd: connections are queued by the kernel and never answered."""
        os.kill(self.hosts[name].pid, signal.SIGSTOP)

    def inventory(self, groups: dict[str, list[str]] | None = None) -> Path:
        path = self.base / "hosts.ini"
        lines = ["# generated by tests.fleet.lab", *self.inventory_lines]
        for group, members in (groups or {}).items():
            lines += ["", f"[{group}]", *members]
        path.write_text("\n".join(lines) + "\n")
        return path

    def gateway_args(self, connect_timeout: float) -> list[str]:
        """The options that make a sysmcp the gateway to this lab's fleet (after ``inventory``)."""
        return [
            "--inventory",
            str(self.base / "hosts.ini"),
            "--ssh-config",
            str(self.ssh_config),
            "--connect-timeout",
            f"{connect_timeout:g}",
        ]

    def close(self) -> None:
        for bastion in self.bastions:
            bastion.close()
        for host in self.hosts.values():
            if host.process is not None and host.process.poll() is None:
                os.kill(host.pid, signal.SIGCONT)
                host.process.terminate()
                try:
                    host.process.wait(5)
                except subprocess.TimeoutExpired:
                    host.process.kill()
                    host.process.wait()


#: The environment variable that marks the ssh processes of one test's server (see ``ssh_processes``).
OWNER = "SYSMCP_TEST_OWNER"


def ssh_processes(owner: str | None = None, marker: str = "sysmcp-ssh-") -> list[str]:
    """``ps`` lines of ssh clients and masters (``ssh: PATH [mux]``) that mention ``marker``: by default
    sysmcp's private control directories, which every ssh it starts names. With ``owner``, only those
    whose environment has ``OWNER=owner``: the server's ssh processes inherit it (masters too), so a
    test counts its own server's and not another test's or another run's on the same machine."""
    listing = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in listing.splitlines():
        pid_and_args = line.split(None, 1)
        if len(pid_and_args) != 2 or pid_and_args[1].split()[0] not in ("ssh", "ssh:") or marker not in line:
            continue
        if owner is None or _environ_has(pid_and_args[0], f"{OWNER}={owner}"):
            found.append(line.strip())
    return found


def _environ_has(pid: str, setting: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return setting.encode() in environ.read().split(b"\0")
    except OSError:  # ended since ps listed it
        return False


__all__ = ["OWNER", "Bastion", "Lab", "SimHost", "ssh_processes", "unavailable"]
