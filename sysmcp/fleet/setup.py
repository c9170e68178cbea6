"""From the operator's command line to a running fleet: the inventory loaded whole (or refused), the
ssh settings, and the pool that lives as long as the server."""

from __future__ import annotations

import contextlib
import glob
import os
import resource
import shlex
import stat
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sysmcp.fleet.fanout import DEFAULT_CONCURRENCY, DEFAULT_DEADLINE, Fleet
from sysmcp.fleet.inventory import Inventory, from_names, merge, parse_ini, split_hosts_env
from sysmcp.fleet.pool import DEFAULT_HANDSHAKES, SessionPool, private_control_dir
from sysmcp.fleet.sources import detect, from_json, from_ssh_config, from_yaml
from sysmcp.fleet.ssh import DEFAULT_CONNECT_TIMEOUT, DEFAULT_REMOTE_COMMAND, SshSettings

HOSTS_ENV = "SYSMCP_HOSTS"
FDS_PER_HOST = 4  # a session's ssh: stdin, stdout and stderr pipes, and slack for a reopening
COMMAND_TIMEOUT = 120.0  # seconds an --inventory-command (a cloud plugin listing a fleet) may take


@dataclass(frozen=True)
class FleetOptions:
    """The fleet as the command line configured it; each field after the inventory is named as the
    option's ``dest`` (``--fleet-deadline`` → ``fleet_deadline``)."""

    inventory: Inventory
    ssh_config: str | None = None
    remote_command: str = DEFAULT_REMOTE_COMMAND
    fleet_concurrency: int = DEFAULT_CONCURRENCY
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    fleet_deadline: float = DEFAULT_DEADLINE
    jump_handshakes: int = DEFAULT_HANDSHAKES
    fleet_memory: int | None = None  # MiB for the hosts' answers in flight (None: ``default_line_budget``)


def parse_inventory(text: str, source: str) -> Inventory:
    """Any inventory form, told by its name and content (``sources.detect``)."""
    kind = detect(text, source)
    if kind == "ssh_config":
        return from_ssh_config(text, source, include=ssh_includes)
    readers = {"json": from_json, "yaml": from_yaml}
    return readers.get(kind, parse_ini)(text, source)


def ssh_includes(words: str) -> list[tuple[str, str]]:
    """The files an ssh_config ``Include`` names, found as ssh finds those of a user's config: ``~``
    expanded, a relative path under ~/.ssh, each glob's matches sorted, a glob matching nothing (or
    only directories) nothing. An included file that cannot be read is ``OSError``: its hosts would
    be missing without a word."""
    found: list[tuple[str, str]] = []
    for word in shlex.split(words):
        pattern = os.path.expanduser(word)
        if not os.path.isabs(pattern):
            pattern = os.path.join(os.path.expanduser("~/.ssh"), pattern)
        for path in sorted(glob.glob(pattern)):
            if not os.path.isdir(path):
                found.append((path, _included_file(path)))
    return found


def _included_file(path: str) -> str:
    """An included ssh_config file's text. A FIFO would keep start-up waiting for a writer and a
    device (``/dev/zero``) would be read until memory ran out: those are ``ValueError``. Opened
    without blocking, and told by what was opened, not by a name that could change in between."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, encoding="utf-8") as stream:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        return stream.read()


def inventory_command_output(command: str) -> str:
    """``--inventory-command``: the operator's command (``ansible-inventory -i aws_ec2.yml --list``),
    run without a shell, once; its stdout (the JSON of ``ansible-inventory --list``). ``OSError`` says
    why not."""
    argv = shlex.split(command)
    if not argv:
        raise OSError("--inventory-command is empty")
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=COMMAND_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise OSError(f"--inventory-command did not finish within {COMMAND_TIMEOUT:g} s") from None
    if done.returncode != 0:
        tail = " ".join(done.stderr.decode("utf-8", "replace").split())[-300:]
        raise OSError(f"--inventory-command exited with status {done.returncode}: {tail}")
    return done.stdout.decode("utf-8", "replace")


def command_source(command: str | None) -> str:
    """What an inventory command's output is called in what is said of it."""
    argv = shlex.split(command) if command else []
    return f"the output of {argv[0]}" if argv else "the output of the inventory command"


def load_inventory(
    hosts: Sequence[str],
    env_value: str | None,
    inventory_file: str | None,
    inventory_command: str | None = None,
    *,
    file_text: str | None = None,
    command_output: str | None = None,
) -> Inventory:
    """``--inventory`` (INI, YAML, JSON or ssh_config) and ``--inventory-command`` first (their
    variables win), then ``--host`` names, then ``$SYSMCP_HOSTS``. ``file_text`` is the file's content
    and ``command_output`` the command's, when already read: a file is read once, for it may be a pipe
    (``--inventory <(cmd)``), and a command run once (an output without a command is one's too).

    Raises ``InventoryError`` (with the line) for a malformed file and ``OSError`` for an unreadable one.
    """
    inventory = Inventory()
    if inventory_file is not None:
        if file_text is None:
            file_text = read_inventory(inventory_file)
        inventory = parse_inventory(file_text, inventory_file)
    if inventory_command is not None and command_output is None:
        command_output = inventory_command_output(inventory_command)
    if command_output is not None:
        inventory = merge(inventory, from_json(command_output, source=command_source(inventory_command)))
    if hosts:
        inventory = merge(inventory, from_names(hosts, "--host"))
    if env_value:
        inventory = merge(inventory, from_names(split_hosts_env(env_value), f"${HOSTS_ENV}"))
    return inventory


def read_inventory(path: str) -> str:
    """An inventory file's content, read once."""
    with open(path, encoding="utf-8") as stream:
        return stream.read()


def room_for_sessions(hosts: int) -> None:
    """Raise the soft open-files limit towards the hard one so every host's session fits (a soft
    limit of 1,024 would end a fleet of 300 hosts with EMFILE); never above the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FDS_PER_HOST * hosts + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):  # macOS caps it below its hard limit: keep ours
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))


@asynccontextmanager
async def running_fleet(options: FleetOptions) -> AsyncIterator[Fleet]:
    """The fleet for the server's lifetime; at the end every ssh it started is ended."""
    room_for_sessions(len(options.inventory.hosts))
    settings = SshSettings(
        control_dir=private_control_dir(),
        config_file=options.ssh_config,
        remote_command=options.remote_command,
        connect_timeout=options.connect_timeout,
    )
    budget = None if options.fleet_memory is None else options.fleet_memory << 20
    pool = SessionPool(options.inventory, settings, options.jump_handshakes, budget)
    async with pool.open():
        yield Fleet(options.inventory, pool, options.fleet_concurrency, options.fleet_deadline)


__all__ = [
    "HOSTS_ENV",
    "FleetOptions",
    "command_source",
    "inventory_command_output",
    "load_inventory",
    "parse_inventory",
    "read_inventory",
    "running_fleet",
]
