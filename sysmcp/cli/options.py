"""The command line's options and parsers, and what they configure (the fleet, the roots' variable)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:  # argparse is imported only for a command line that has something to parse
    import argparse

from sysmcp import __version__
from sysmcp.cli.snapshot import add_commands, history_options
from sysmcp.logconfig import LEVELS

ROOTS_ENV = "SYSMCP_ROOTS"


def _parser_class() -> type[argparse.ArgumentParser]:
    """An ``ArgumentParser`` whose usage errors are one line: what is wrong, and where the help is.

    argparse prints the whole usage (a dozen lines of options) before the line that matters; a
    subparser is built from its parent's class, so every subcommand says it the same way.
    """
    import argparse

    class OneLineErrors(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            self.exit(2, f"{self.prog}: {message} (see: {self.prog} --help)\n")

    return OneLineErrors


def _options(parser: argparse.ArgumentParser, *, roots: bool, subcommand: bool, reclaim: bool = True) -> None:
    """``--log-level`` (and ``--root``) for the top level and again for each subcommand.

    A subcommand's copies have no default (``SUPPRESS``), so ``sysmcp serve --root /srv`` and
    ``sysmcp --root /srv serve`` mean the same, and an option given before the subcommand is kept.
    Roots given on both sides add up: the subcommand's go to ``more_roots`` (argparse would let them
    replace the others).
    """
    import argparse

    parser.add_argument(
        "--log-level",
        type=str.lower,
        choices=LEVELS,
        default=argparse.SUPPRESS if subcommand else "warning",
        help="level of the JSON logs on stderr (default: warning)",
    )
    if roots and reclaim:  # only where a server is started: serve, call
        parser.add_argument(
            "--allow-reclaim",
            action="store_true",
            default=argparse.SUPPRESS if subcommand else False,
            help="also serve the reclaim tool, which removes files of a reviewed reclaim plan after the "
            "user confirms (default: nothing sysmcp serves writes anything)",
        )
    if roots:
        parser.add_argument(
            "--root",
            action="append",
            dest="more_roots" if subcommand else "root",
            metavar="PATH",
            default=argparse.SUPPRESS if subcommand else None,
            help=f"confine every tool to PATH (repeatable; also ${ROOTS_ENV}, colon-separated). "
            "Default: whole filesystem",
        )


#: The fleet's options besides ``--host``: (flags, type, metavar, help); each one's ``dest`` is argparse's,
#: from its first flag (``fleet_dest``). ``sysmcp call`` passes each one given on to the server it spawns.
FLEET_OPTIONS: tuple[tuple[tuple[str, ...], Callable[[str], Any], str, str], ...] = (
    (
        ("--inventory",),
        str,
        "FILE",
        "the hosts: an Ansible inventory (INI, YAML, or ansible-inventory --list JSON), an ssh_config "
        "(its Host names), or a list of names",
    ),
    (
        ("--inventory-command",),
        str,
        "CMD",
        "a command printing ansible-inventory --list JSON (a dynamic inventory), run once at start",
    ),
    (("--ssh-config",), str, "FILE", "passed to every ssh as -F FILE"),
    (
        ("--remote-command",),
        str,
        "CMD",
        "what ssh runs on each host (default: uvx sysmcp; a host's sysmcp_command wins)",
    ),
    (("--fleet-concurrency", "--fleet-forks"), int, "N", "hosts asked at once (default 64)"),
    (
        ("--fleet-deadline",),
        float,
        "SECONDS",
        "answer by then with the hosts that answered, naming the others pending (default 25)",
    ),
    (
        ("--jump-handshakes",),
        int,
        "N",
        "new ssh handshakes at once through one jump host (default 10, as sshd's MaxStartups)",
    ),
    (("--connect-timeout",), float, "SECONDS", "per-host time to connect and initialize (default 10)"),
    (
        ("--fleet-memory",),
        int,
        "MIB",
        "memory the hosts' answers in flight and kept for the merge may take in all (default 512, or an "
        "eighth of RAM if less)",
    ),
)


def fleet_dest(flags: tuple[str, ...]) -> str:
    """An option's attribute, as argparse names it: ``--fleet-concurrency`` → ``fleet_concurrency``."""
    return flags[0].removeprefix("--").replace("-", "_")


def _fleet_options(parser: argparse.ArgumentParser, *, subcommand: bool) -> None:
    """The fleet: the operator's hosts and how to reach them (never the model's choice)."""
    import argparse

    default = argparse.SUPPRESS if subcommand else None
    fleet = parser.add_argument_group("fleet (answer for many hosts over ssh)")
    fleet.add_argument(
        "--host",
        action="append",
        dest="more_hosts" if subcommand else "host",
        metavar="NAME",
        default=default,
        help="a host the tools may run on (repeatable; also $SYSMCP_HOSTS, comma- or colon-separated)",
    )
    for flags, kind, metavar, text in FLEET_OPTIONS:
        fleet.add_argument(*flags, type=kind, metavar=metavar, default=default, help=text)
    fleet.add_argument(  # sysmcp call's to its server: the command already run once, its output kept
        "--inventory-output", metavar="FILE", default=default, help=argparse.SUPPRESS
    )


def build_parser() -> argparse.ArgumentParser:
    import argparse

    parser = _parser_class()(prog="sysmcp", description="A sysadmin tool server for MCP (stdio).")
    parser.add_argument("--version", action="version", version=f"sysmcp {__version__}")
    _options(parser, roots=True, subcommand=False)
    _fleet_options(parser, subcommand=False)
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", help="serve MCP on stdin/stdout (the default)")
    _options(serve, roots=True, subcommand=True)
    _fleet_options(serve, subcommand=True)
    history_options(parser, subcommand=False)
    history_options(serve, subcommand=True)
    for recording in add_commands(commands):  # snapshot, history (sysmcp/cli/snapshot.py)
        _options(recording, roots=True, subcommand=True, reclaim=False)  # they serve no tool
        history_options(recording, subcommand=True)
    call = commands.add_parser(
        "call",
        help="spawn sysmcp, call one tool, print the result",
        add_help=False,  # -h is ours: `sysmcp call TOOL --help` shows the tool's arguments
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # its epilog (the tools, the exit statuses) is added by _call_parser, for its help only
    call.add_argument(
        "-h", "--help", action="store_true", help="this help, or with TOOL that tool's arguments"
    )
    _options(call, roots=True, subcommand=True)
    _fleet_options(call, subcommand=True)  # forwarded to the server it spawns: `call … hosts=all`
    history_options(call, subcommand=True)  # forwarded too: the spawned server is the one that records
    call.add_argument("tool", nargs="?", help="tool name, e.g. disk_usage")
    call.add_argument(
        "arguments",
        nargs="*",  # made pairs by key_value once the tool is known: its error can name the tool's key
        metavar="KEY=VALUE",
        help="arguments; values are JSON if they parse",
    )
    call.add_argument("--raw", action="store_true", help="print every message on the wire, both directions")
    call.add_argument(
        "--protocol-version", default="2025-11-25", help="protocol version to request (default: 2025-11-25)"
    )
    call.add_argument(
        "--json", action="store_true", help="print the structured result (structuredContent) as JSON"
    )
    call.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="write the full result (the whole manifest or listing behind its sysmcp:// link) to FILE; "
        "with hosts=, FILE is a directory and gets each host's full result as HOST.EXT",
    )
    trace = commands.add_parser(
        "trace",
        help="run any stdio MCP server behind a proxy that records every message (sysmcp trace -- CMD …)",
    )
    _options(trace, roots=False, subcommand=True)
    trace.add_argument(
        "--output", "-o", metavar="FILE", help="write the JSON-lines record here (default: stderr)"
    )
    trace.add_argument("server_command", nargs=argparse.REMAINDER, metavar="-- COMMAND …")
    return parser


def plain_serve_args() -> Any:
    """What ``build_parser().parse_args([])`` gives, without argparse: a bare ``sysmcp`` (what every
    host of a fleet runs, once per cold call) neither imports argparse nor builds the whole command
    line's parsers for nothing to parse. tests/test_lean_start.py checks the two stay the same."""
    return SimpleNamespace(
        log_level="warning",
        allow_reclaim=False,
        root=None,
        host=None,
        **dict.fromkeys(fleet_dest(flags) for flags, *_ in FLEET_OPTIONS),
        inventory_output=None,
        command=None,
        state_dir=None,
        no_history=False,
    )


@dataclass(slots=True)
class InventoryRead:
    """What ``fleet_options`` read of the inventory: the file's content (and its form, ``sources.detect``)
    and the command's output, each read once (a file may be a pipe, ``--inventory <(cmd)``; a command
    may take a minute), so that ``sysmcp call`` hands its server those and not the file or the command
    again."""

    file_text: str | None = None
    file_kind: str | None = None
    command_output: str | None = None


def fleet_options(args: argparse.Namespace, read: InventoryRead | None = None) -> Any:
    """The operator's fleet (``FleetOptions``), or None when no host is configured; ``read`` gets what
    was read of the inventory.

    Without one nothing of the fleet is even imported: a single-host start loads none of it.
    """
    read = InventoryRead() if read is None else read
    hosts = [*(getattr(args, "host", None) or []), *getattr(args, "more_hosts", [])]
    inventory_file = getattr(args, "inventory", None)
    inventory_command = getattr(args, "inventory_command", None)
    command_output_file = getattr(args, "inventory_output", None)
    if not any(
        (hosts, inventory_file, inventory_command, command_output_file, os.environ.get("SYSMCP_HOSTS"))
    ):
        return None
    from dataclasses import fields

    from sysmcp.fleet.setup import (
        HOSTS_ENV,
        FleetOptions,
        inventory_command_output,
        load_inventory,
        read_inventory,
    )
    from sysmcp.fleet.sources import detect

    try:
        if inventory_file is not None:
            read.file_text = read_inventory(inventory_file)
            read.file_kind = detect(read.file_text, inventory_file)
        if command_output_file is not None:
            read.command_output = read_inventory(command_output_file)
        elif inventory_command is not None:
            read.command_output = inventory_command_output(inventory_command)
        inventory = load_inventory(
            hosts,
            os.environ.get(HOSTS_ENV),
            inventory_file,
            inventory_command,
            file_text=read.file_text,
            command_output=read.command_output,
        )
    except OSError as exc:
        raise OSError(f"cannot read the inventory: {exc}") from None
    if not inventory:
        if inventory_file:
            raise ValueError(f"the inventory {inventory_file} lists no host")
        return None
    given = {field.name: getattr(args, field.name, None) for field in fields(FleetOptions)[1:]}
    if any(isinstance(value, (int, float)) and not value >= 0 for value in given.values()):  # NaN too
        raise ValueError(
            "--fleet-concurrency, --connect-timeout, --fleet-deadline, --jump-handshakes and --fleet-memory "
            "must be positive (0: the default)"
        )
    if not given["ssh_config"] and read.file_kind == "ssh_config":  # its hosts need its settings
        given["ssh_config"] = inventory_file
    return FleetOptions(inventory, **{name: value for name, value in given.items() if value})  # 0: default
