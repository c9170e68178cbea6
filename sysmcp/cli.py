"""Command line: ``sysmcp`` serves MCP on stdio; ``sysmcp call`` is a tiny client for trying tools."""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NoReturn

import anyio

if TYPE_CHECKING:  # argparse is imported only for a command line that has something to parse
    import argparse

    from anyio.abc import TaskStatus

from sysmcp import __version__, platform
from sysmcp.logconfig import LEVELS, configure, drain_logs, get_logger
from sysmcp.snapshot_cli import add_commands, configure_history, history_args, history_options

ROOTS_ENV = "SYSMCP_ROOTS"

HINT = """\
sysmcp {version} speaks the Model Context Protocol on stdin/stdout; it is meant to be started by an MCP
client (Claude Desktop, Claude Code, VS Code, Cursor), not typed at. For example, in Claude Code,
from a checkout of sysmcp (plain `uvx sysmcp` once it is published on PyPI):

    claude mcp add sysmcp -- uvx --from /path/to/sysmcp sysmcp

To try a tool from this shell:

    sysmcp call disk_usage path=/
    sysmcp call dir_usage path=/var/log top_n=10

Waiting for JSON-RPC on stdin (Ctrl-D or Ctrl-C to quit).
"""


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
    fleet.add_argument(
        "--inventory",
        metavar="FILE",
        default=default,
        help="the hosts: an Ansible inventory (INI, YAML, or ansible-inventory --list JSON), an ssh_config "
        "(its Host names), or a list of names",
    )
    fleet.add_argument(
        "--inventory-command",
        metavar="CMD",
        default=default,
        help="a command printing ansible-inventory --list JSON (a dynamic inventory), run once at start",
    )
    fleet.add_argument("--ssh-config", metavar="FILE", default=default, help="passed to every ssh as -F FILE")
    fleet.add_argument(
        "--remote-command",
        metavar="CMD",
        default=default,
        help="what ssh runs on each host (default: uvx sysmcp; a host's sysmcp_command wins)",
    )
    fleet.add_argument(
        "--fleet-concurrency",
        "--fleet-forks",
        type=int,
        metavar="N",
        default=default,
        help="hosts asked at once (default 64)",
    )
    fleet.add_argument(
        "--fleet-deadline",
        type=float,
        metavar="SECONDS",
        default=default,
        help="answer by then with the hosts that answered, naming the others pending (default 25)",
    )
    fleet.add_argument(
        "--jump-handshakes",
        type=int,
        metavar="N",
        default=default,
        help="new ssh handshakes at once through one jump host (default 10, as sshd's MaxStartups)",
    )
    fleet.add_argument(
        "--connect-timeout",
        type=float,
        metavar="SECONDS",
        default=default,
        help="per-host time to connect and initialize (default 10)",
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
    for recording in add_commands(commands):  # snapshot, history (sysmcp/snapshot_cli.py)
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


def main(argv: Sequence[str] | None = None) -> int:
    if platform.is_native_windows():  # first: nothing below is meant for Windows
        print(f"sysmcp: {platform.WSL_HINT}", file=sys.stderr)
        return 2
    given = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(given) if given else plain_serve_args()
    if args.command not in (None, "serve"):
        gc.enable()  # off since __main__; a server turns it back on in serve()
    roots = [*(args.root or []), *getattr(args, "more_roots", [])]
    if not roots and os.environ.get(ROOTS_ENV):
        roots = [r for r in os.environ[ROOTS_ENV].split(os.pathsep) if r]
        if not roots:  # set, yet naming nothing: refuse rather than silently serve the whole filesystem
            print(f"sysmcp: ${ROOTS_ENV} is set but names no directory", file=sys.stderr)
            return 2
    if args.command == "trace":
        from sysmcp.trace import run_trace

        configure(args.log_level)  # the proxy's stdout is the client's wire: its logs go to stderr too
        return run_trace(args.server_command, args.output)
    if args.command in ("snapshot", "history"):
        from sysmcp.snapshot_cli import run as run_snapshot

        configure(args.log_level)
        return run_snapshot(args, roots)
    configure_history(args)  # on unless --no-history: the server's tools record as they answer
    if args.command == "call":
        from sysmcp.client import CallOptions, print_help, run_call, tool_help, tool_names

        configure(args.log_level)  # its stdout is the answer (piped to jq, say): its own logs go to stderr

        if args.help:
            if args.tool is None:
                return print_help(_call_parser().format_help())
            known = tool_names(args.allow_reclaim)
            if args.tool in known:
                return print_help(tool_help(args.tool, allow_reclaim=args.allow_reclaim) + "\n")
            else:
                print(f"sysmcp call: unknown tool {args.tool!r}; tools: {', '.join(known)}", file=sys.stderr)
                return 2
        try:
            pairs = [key_value(pair, args.tool) for pair in args.arguments]
        except ValueError as exc:
            print(f"sysmcp call: {exc}", file=sys.stderr)
            return 2
        missing = [root for root in roots if not os.path.isdir(root)]
        if missing:  # the server would refuse them: say so before starting it
            print(f"sysmcp: --root must name existing directories: {', '.join(missing)}", file=sys.stderr)
            return 2
        keys = [key for key, _ in pairs]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:  # never silently the last one: path=/usr path=/etc is one mistake or the other
            print(
                f"sysmcp call: {', '.join(k + '=' for k in repeated)} given more than once", file=sys.stderr
            )
            return 2
        try:  # the same checks the server makes, before any work: a bad inventory, then hosts=nosuch
            fleet = _fleet(args)
        except (OSError, ValueError) as exc:
            print(f"sysmcp: {exc}", file=sys.stderr)
            return 2
        options = CallOptions(
            raw=args.raw,
            version=args.protocol_version,
            server_args=[
                *_server_args(args.log_level, roots),
                *(["--allow-reclaim"] if args.allow_reclaim else []),
                *_fleet_args(args),
                *history_args(args),  # the server keeps history, not call
            ],
            fleet=any(a in ("--host", "--inventory", "--inventory-command") for a in _fleet_args(args))
            or bool(os.environ.get("SYSMCP_HOSTS")),
            json_output=args.json,
            output=args.output,
            resolve_hosts=fleet.inventory.resolve if fleet is not None else None,
        )
        return run_call(args.tool, dict(pairs), options)
    try:
        fleet = _fleet(args)
    except (OSError, ValueError) as exc:  # a malformed inventory names its line; never half a fleet
        print(f"sysmcp: {exc}", file=sys.stderr)
        return 2
    return serve(args.log_level, roots, fleet, allow_reclaim=args.allow_reclaim)


def plain_serve_args() -> Any:
    """What ``build_parser().parse_args([])`` gives, without argparse: a bare ``sysmcp`` (what every
    host of a fleet runs, once per cold call) neither imports argparse nor builds the whole command
    line's parsers for nothing to parse. tests/test_lean_start.py checks the two stay the same."""
    return SimpleNamespace(
        log_level="warning",
        allow_reclaim=False,
        root=None,
        host=None,
        inventory=None,
        inventory_command=None,
        ssh_config=None,
        remote_command=None,
        fleet_concurrency=None,
        fleet_deadline=None,
        jump_handshakes=None,
        connect_timeout=None,
        command=None,
        state_dir=None,
        no_history=False,
    )


def _fleet(args: argparse.Namespace) -> Any:
    """The operator's fleet (``FleetOptions``), or None when no host is configured.

    Without one nothing of the fleet is even imported: a single-host start stays as it was.
    """
    hosts = [*(getattr(args, "host", None) or []), *getattr(args, "more_hosts", [])]
    inventory_command = getattr(args, "inventory_command", None)
    if (
        not hosts
        and not getattr(args, "inventory", None)
        and not inventory_command
        and not os.environ.get("SYSMCP_HOSTS")
    ):
        return None
    from dataclasses import replace

    from sysmcp.fleet.inventory import InventoryError
    from sysmcp.fleet.setup import HOSTS_ENV, FleetOptions, load_inventory
    from sysmcp.fleet.sources import detect

    inventory_file = getattr(args, "inventory", None)
    try:
        inventory = load_inventory(hosts, os.environ.get(HOSTS_ENV), inventory_file, inventory_command)
    except OSError as exc:
        raise OSError(f"cannot read the inventory: {exc}") from None
    except InventoryError:
        raise
    if not inventory:
        if getattr(args, "inventory", None):
            raise ValueError(f"the inventory {args.inventory} lists no host")
        return None
    options = FleetOptions(inventory)
    concurrency = getattr(args, "fleet_concurrency", None) or options.concurrency
    timeout = getattr(args, "connect_timeout", None) or options.connect_timeout
    deadline = getattr(args, "fleet_deadline", None) or options.deadline
    handshakes = getattr(args, "jump_handshakes", None) or options.handshakes
    if min(concurrency, timeout, deadline, handshakes) <= 0:
        raise ValueError(
            "--fleet-concurrency, --connect-timeout, --fleet-deadline and --jump-handshakes must be positive"
        )
    options = replace(
        options, concurrency=concurrency, connect_timeout=timeout, deadline=deadline, handshakes=handshakes
    )
    if getattr(args, "ssh_config", None):
        options = replace(options, ssh_config=args.ssh_config)
    elif inventory_file is not None:
        with open(inventory_file, encoding="utf-8") as stream:
            if detect(stream.read(), inventory_file) == "ssh_config":  # its hosts need its settings
                options = replace(options, ssh_config=inventory_file)
    if getattr(args, "remote_command", None):
        options = replace(options, remote_command=args.remote_command)
    return options


def _call_epilog() -> str:
    from sysmcp.client import EXIT_CODES_HELP, tools_overview

    return tools_overview() + "\n\n" + EXIT_CODES_HELP


def _call_parser() -> argparse.ArgumentParser:
    """The ``call`` subparser with its epilog, for ``sysmcp call --help``. The epilog imports every tool,
    so it is never built on the way to serving: until the wire is claimed, a stray print of any thread
    would land on the client's stdout, and that window must stay short."""
    import argparse

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    call: argparse.ArgumentParser = commands.choices["call"]
    call.epilog = _call_epilog()
    return call


def _server_args(log_level: str, roots: Sequence[str]) -> list[str]:
    extra = ["--log-level", log_level]
    for root in roots:
        extra += ["--root", root]
    return extra


def _fleet_args(args: argparse.Namespace) -> list[str]:
    """The fleet options given to ``sysmcp call`` (before or after ``call``), for the server it spawns."""
    extra: list[str] = []
    for host in [*(getattr(args, "host", None) or []), *getattr(args, "more_hosts", [])]:
        extra += ["--host", host]
    for option, dest in (
        ("--inventory", "inventory"),
        ("--inventory-command", "inventory_command"),
        ("--ssh-config", "ssh_config"),
        ("--remote-command", "remote_command"),
        ("--fleet-concurrency", "fleet_concurrency"),
        ("--connect-timeout", "connect_timeout"),
        ("--fleet-deadline", "fleet_deadline"),
        ("--jump-handshakes", "jump_handshakes"),
    ):
        value = getattr(args, dest, None)
        if value is not None:
            extra += [option, str(value)]
    return extra


def serve(log_level: str, roots: Sequence[str], fleet: Any = None, *, allow_reclaim: bool = False) -> int:
    configure(log_level)
    log = get_logger("sysmcp.cli")
    lacking = platform.missing_facilities()
    if lacking:
        log.info("running with POSIX fallbacks", missing=lacking)
    missing = [root for root in roots if not os.path.isdir(root)]
    if missing:
        print(f"sysmcp: --root must name existing directories: {', '.join(missing)}", file=sys.stderr)
        return 2
    from sysmcp.protocol.stdio import FdTransport, StdioWire

    wire = StdioWire.claim()
    workers: list[threading.Thread] = []

    async def session() -> None:
        try:
            await _serve(
                FdTransport(wire.read_fd, wire.write_fd), roots, wire.interactive, fleet, allow_reclaim
            )
        finally:  # the worker threads, alive until the run ends: joined before the exit (_exit_now)
            workers.extend(threading.enumerate())

    # What the start made lives as long as the process: frozen, the collector never walks it again.
    # A gateway's start did real work (its inventory): whatever of that is garbage goes first.
    if fleet is not None:
        gc.collect()
    gc.freeze()
    gc.enable()  # __main__ turned it off for the start
    try:
        anyio.run(session)
    except KeyboardInterrupt:
        pass
    except BaseException as exc:
        if _is_broken_pipe(exc):
            log.info("client went away")
        else:
            log.exception("server stopped on an unexpected error")
            return 1
    log.info("stopped")
    _exit_now(log, workers)
    return 0  # not reached: _exit_now ends the process


def _exit_now(log: Any, workers: Sequence[threading.Thread] = ()) -> None:
    """End the process once the session is over, without the interpreter's teardown.

    Freeing every module and object at exit costs a fresh process some 15-30 ms of CPU (as much as
    a third of a fleet host's whole start, paid on every host of a cold call) and achieves nothing the
    operating system does not. What the teardown would do that matters is done here first: worker
    threads are joined (they close their history connections as they end), the main thread's
    connection is closed (the last close checkpoints SQLite's WAL), the ``atexit`` hooks run (the
    log writers' drain, ``logging.shutdown``) and stdout and stderr are flushed.

    A worker thread blocked in the kernel (a dead mount) is not waited for: Python would join it
    for ever. Then the hooks are skipped too (a stuck thread may hold a lock they take), and only the
    queued log lines are written out.
    """
    stuck = [
        t
        for t in dict.fromkeys([*workers, *threading.enumerate()])  # a worker may be ending, not yet ended
        if t is not threading.main_thread() and not t.daemon
    ]
    deadline = time.monotonic() + 0.1  # idle pool threads are on their way out: a moment for all of them
    for thread in stuck:
        thread.join(timeout=max(deadline - time.monotonic(), 0))
    stuck = [thread for thread in stuck if thread.is_alive()]
    if stuck:
        log.warning("exiting with worker threads still blocked", threads=len(stuck))
    else:
        from sysmcp.history import state

        state.release()
        atexit._run_exitfuncs()
    with contextlib.suppress(OSError, ValueError):  # a broken stderr must not keep the process from ending
        sys.stdout.flush()
        sys.stderr.flush()
    if stuck:
        drain_logs()  # the atexit hooks were skipped: the queued log lines are written here
    os._exit(0)


async def _serve(
    transport: Any, roots: Sequence[str], interactive: bool, fleet: Any = None, allow_reclaim: bool = False
) -> None:
    if fleet is None:
        await _serve_with(transport, roots, interactive, None, allow_reclaim)
        return
    from sysmcp.fleet.setup import running_fleet

    async with running_fleet(fleet) as caller:  # at its end every ssh it started is ended
        await _serve_with(transport, roots, interactive, caller, allow_reclaim)


async def _serve_with(
    transport: Any, roots: Sequence[str], interactive: bool, fleet: Any, allow_reclaim: bool = False
) -> None:
    from sysmcp.protocol.session import Session
    from sysmcp.server import build_server
    from sysmcp.tools import served_tools

    server = build_server(served_tools(allow_reclaim), roots=roots or None, fleet=fleet)
    session = Session(server, transport)
    async with anyio.create_task_group() as group:
        server.client_roots.peer, server.client_roots.spawn = session, group.start_soon

        async def stop_on_signal(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                task_status.started()
                async for _ in signals:
                    group.cancel_scope.cancel()
                    return

        await group.start(stop_on_signal)
        if interactive:  # only now, so a SIGTERM right after the hint already finds its handler
            print(HINT.format(version=__version__), file=sys.stderr, flush=True)
        await session.run()
        group.cancel_scope.cancel()


def _is_broken_pipe(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_broken_pipe(inner) for inner in exc.exceptions)
    return isinstance(exc, (BrokenPipeError, ConnectionResetError))


def key_value(pair: str, tool: str | None = None) -> tuple[str, Any]:
    """One ``key=value`` argument; a value that parses as JSON (3, true, ["a"]) is taken as JSON, else as text.

    A malformed pair raises ValueError with the one line to print (a usage error, exit 2); a bare path
    given to a tool that takes one is named as the pair it was meant to be. A value that starts like a
    JSON array or object (``[`` or ``{``) must be one: ``exclude=[".git"`` is a typo, never the literal
    pattern; quote such a literal as a JSON string (``'path="[x"'``).
    """
    key, sep, value = pair.partition("=")
    if not sep or not key:
        meant = _meant_key(pair, tool) if not sep else None
        hint = f" (did you mean {meant}={pair}?)" if meant else ""
        raise ValueError(f"expected KEY=VALUE, got {pair!r}{hint}")
    try:
        return key, json.loads(value)
    except ValueError as exc:
        if value.lstrip()[:1] in ("[", "{"):
            raise ValueError(f"{key}= starts like JSON but is not valid JSON ({exc}): {value!r}") from None
        return key, value


def _meant_key(value: str, tool: str | None) -> str | None:
    """The argument a bare path (``/var``, ``~/x``, ``./y``) was meant for: the tool's ``path``, else
    its ``manifest`` (verify_checksums)."""
    if tool is None or not value.startswith(("/", "~", ".")):
        return None
    from sysmcp.tools import ALL_TOOLS

    schema = next((t.input_schema for t in ALL_TOOLS if t.name == tool), {})
    return next((key for key in ("path", "manifest") if key in schema.get("properties", {})), None)
