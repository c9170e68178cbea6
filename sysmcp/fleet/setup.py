"""From the operator's command line to a running fleet: the inventory loaded whole (or refused), the
ssh settings, and the pool that lives as long as the server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sysmcp.fleet.fanout import DEFAULT_CONCURRENCY, DEFAULT_DEADLINE, Fleet
from sysmcp.fleet.inventory import Inventory, from_names, merge, parse_ini, split_hosts_env
from sysmcp.fleet.pool import DEFAULT_HANDSHAKES, Pool, private_control_dir
from sysmcp.fleet.ssh import DEFAULT_CONNECT_TIMEOUT, DEFAULT_REMOTE_COMMAND, SshSettings

HOSTS_ENV = "SYSMCP_HOSTS"


@dataclass(frozen=True)
class FleetOptions:
    inventory: Inventory
    ssh_config: str | None = None
    remote_command: str = DEFAULT_REMOTE_COMMAND
    concurrency: int = DEFAULT_CONCURRENCY
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    deadline: float = DEFAULT_DEADLINE
    handshakes: int = DEFAULT_HANDSHAKES


def load_inventory(hosts: Sequence[str], env_value: str | None, inventory_file: str | None) -> Inventory:
    """``--inventory`` first (its variables win), then ``--host`` names, then ``$SYSMCP_HOSTS``.

    Raises ``InventoryError`` (with the line) for a malformed file and ``OSError`` for an unreadable one.
    """
    inventory = Inventory()
    if inventory_file is not None:
        with open(inventory_file, encoding="utf-8") as stream:
            inventory = parse_ini(stream.read(), source=inventory_file)
    if hosts:
        inventory = merge(inventory, from_names(hosts, "--host"))
    if env_value:
        inventory = merge(inventory, from_names(split_hosts_env(env_value), f"${HOSTS_ENV}"))
    return inventory


@asynccontextmanager
async def running_fleet(options: FleetOptions) -> AsyncIterator[Fleet]:
    """The fleet for the server's lifetime; at the end every ssh it started is ended."""
    settings = SshSettings(
        control_dir=private_control_dir(),
        config_file=options.ssh_config,
        remote_command=options.remote_command,
        connect_timeout=options.connect_timeout,
    )
    pool = Pool(options.inventory, settings, options.handshakes)
    async with pool.open():
        yield Fleet(options.inventory, pool, options.concurrency, options.deadline)


__all__ = ["HOSTS_ENV", "FleetOptions", "load_inventory", "running_fleet"]
