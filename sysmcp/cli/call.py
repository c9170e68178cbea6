"""``sysmcp call``: spawn sysmcp, call one tool, print the answer, exit as the tool it replaces would.

It is the CLI's client, so it may write to stdout. Exit statuses follow the commands an admin would
otherwise run (``EXIT_CODES_HELP`` lists them, as ``sysmcp call --help`` shows them); a server that
stops before answering passes its own status on.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import stat
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

import anyio
from anyio.abc import Process

from sysmcp import __version__
from sysmcp.cli.options import FLEET_OPTIONS, InventoryRead, build_parser, fleet_dest, fleet_options
from sysmcp.cli.outfile import make_directory, names_a_directory, open_output, reach, split
from sysmcp.cli.stdout import EXIT_PIPE, find_inside, silence_stdout
from sysmcp.engine.paths import printable_text
from sysmcp.protocol.client import ClientSession, NotMcp, PeerGone, ProgressCallback, RemoteError, connect
from sysmcp.protocol.failures import META_REFUSED, ArgumentError
from sysmcp.protocol.lifecycle import LEGACY_VERSIONS, Features, features_of
from sysmcp.render import plural

if TYPE_CHECKING:
    import argparse

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3  # a true but incomplete result: the time budget ran out before the work was done
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, as a shell reports a command stopped by Ctrl-C
INTERRUPT_GRACE = 2.0  # seconds the server has to wind down after the cancellation before it is killed

EXIT_CODES_HELP = """\
exit status:
  0    success
  1    the tool found a problem: file_sha256 MISMATCH, verify_checksums not all OK,
       hash_tree or dir_usage with unreadable files or directories (as sha256sum and
       du; the result is still printed), a disk_health device or array failing, or a
       tool error
       with hosts=: a host without a result, or a host's result that would exit 1
  2    usage error, refused before any work: unknown tool, a bad, missing, repeated
       or relative argument, a path outside --root, an unknown host, an -o FILE
       that cannot be written
  3    partial result: the time budget ran out or the work was cut short first
       (what is printed is true but incomplete; the reason goes to stderr too
       when stdout is not a terminal)
  129  hung up (SIGHUP: the terminal closed, an ssh session dropped): cancelled on
       the server too
  130  interrupted (Ctrl-C): the call is cancelled on the server
  141  stdout closed early (e.g. `| head`), quietly
  143  terminated (SIGTERM: kill, timeout, systemd): cancelled on the server too"""

#: One example command line per tool, shown by ``sysmcp call TOOL --help``.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "disk_usage": (
        "sysmcp call disk_usage",
        "sysmcp call disk_usage path=/var",
        "sysmcp call --inventory hosts.ini disk_usage hosts=all",
    ),
    "dir_usage": (
        "sysmcp call dir_usage path=/var/log top_n=10",
        "sysmcp call dir_usage path=/ min_size=100M",
    ),
    "file_sha256": (
        "sysmcp call file_sha256 path=/srv/iso/debian.iso",
        "sysmcp call file_sha256 path=/srv/iso/debian.iso expected=sha256:<64 hex digits>",
    ),
    "hash_tree": ("sysmcp call hash_tree path=/srv/www -o SHA256SUMS",),
    "verify_checksums": (
        "sysmcp call verify_checksums manifest=/srv/www/SHA256SUMS",
        "sysmcp call verify_checksums manifest=/srv/www/SHA256SUMS report_new=true",
    ),
    "find_duplicates": ("sysmcp call find_duplicates path=/home min_size=1M",),
    "deleted_open_files": ("sysmcp call deleted_open_files", "sysmcp call deleted_open_files path=/var"),
    "disk_io": ("sysmcp call disk_io", "sysmcp call disk_io sample_s=10 top_n=3"),
    "disk_health": ("sysmcp call disk_health", "sysmcp call disk_health timeout_s=5"),
    "reclaim_plan": ("sysmcp call reclaim_plan", "sysmcp call reclaim_plan path=/var -o plan.sh"),
    "reclaim": ("sysmcp call --allow-reclaim reclaim plan_id=<plan_id> 'items=[\"<item id>\"]'",),
}


def exit_status(tool: str, result: dict[str, Any]) -> int:
    """0, 1 or 3 for a tool's result, as the command it replaces would exit (sha256sum -c, du, …).

    A problem found (1) outranks a partial result (3): a MISMATCH seen before the budget ran out stays one.
    """
    if result.get("isError"):
        refused = (result.get("_meta") or {}).get(META_REFUSED)
        return EXIT_USAGE if refused else EXIT_PROBLEM
    data = result.get("structuredContent")
    if not isinstance(data, dict):
        return EXIT_OK
    if isinstance(data.get("hosts"), list) and "view" in data:  # a fleet answer: judge every host
        statuses = {EXIT_OK}
        for entry in data["hosts"]:
            if not isinstance(entry, dict) or entry.get("status") != "ok":
                return EXIT_PROBLEM
            statuses.add(exit_status(tool, {"structuredContent": entry.get("result")}))
        return EXIT_PROBLEM if EXIT_PROBLEM in statuses else max(statuses)
    partial = data.get("complete") is False or _walk_stopped(data) is not None
    if tool == "file_sha256" and data.get("match") is False:
        return EXIT_PROBLEM
    if tool == "verify_checksums" and data.get("all_ok") is False:
        bad = sum(data.get(key) or 0 for key in ("failed", "missing", "unreadable", "improperly_formatted"))
        if bad or not partial:
            return EXIT_PROBLEM
    if tool == "disk_health" and any(
        row.get("verdict") == "failing"
        for key in ("devices", "arrays", "btrfs")
        for row in data.get(key) or []
    ):
        return EXIT_PROBLEM  # a failing disk, as smartctl's exit status flags one
    if tool in ("hash_tree", "dir_usage"):  # as du and sha256sum exit 1 on what they could not read
        skipped = data.get("skipped")
        said = skipped if isinstance(skipped, dict) else {}
        unreadable_dirs = said.get("unreadable", 0) + said.get("filesystem_error", 0)
        if data.get("unreadable_count", 0) or unreadable_dirs:
            return EXIT_PROBLEM
    return EXIT_PARTIAL if partial else EXIT_OK


def _walk_stopped(data: dict[str, Any]) -> dict[str, Any] | None:
    """container_usage's walk of its data root when it stopped early: the one answer whose partial part
    is nested (the engine's figures are whole)."""
    walked = data.get("reconciliation")
    return walked if isinstance(walked, dict) and walked.get("complete") is False else None


#: what_changed's ``stopped_reason`` is a choice, not words as the other tools' are: said in words here.
STOPPED_WORDS = {
    "time_budget": "comparing the two snapshots ran out of time",
    "scan_stopped": "the scan made now stopped at its time budget",
    "snapshot_pruned": "a prune deleted a snapshot as it was compared",
}


def partial_reason(result: dict[str, Any]) -> str:
    """Why a partial result stopped, for the one line on stderr: the ``reason`` of an answer that is not
    complete (``what_changed``'s words), else its ``stopped_reason`` (``STOPPED_WORDS`` for a choice)."""
    data = result.get("structuredContent")
    reasons = []
    if isinstance(data, dict):
        entries = [e.get("result") for e in data.get("hosts", []) if isinstance(e, dict)] or [data]
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            entry = _walk_stopped(entry) or entry
            words = entry.get("reason") if entry.get("complete") is False else None
            why = words if isinstance(words, str) and words else entry.get("stopped_reason")
            if why:
                reasons.append(STOPPED_WORDS.get(str(why), str(why)))
    return "; ".join(dict.fromkeys(reasons)) or "stopped early"


#: Arguments that name a file on the server's host: refused here when relative (the server would).
PATH_ARGUMENTS = ("path", "base_dir", "manifest")


def relative_path_argument(arguments: dict[str, Any]) -> str | None:
    """The first path argument that is relative (``path=usr``), or None. A manifest given as text
    (it has spaces or lines) or as a URI is not a path."""
    for key in PATH_ARGUMENTS:
        value = arguments.get(key)
        if not isinstance(value, str) or not value or "://" in value:
            continue
        if key == "manifest" and any(ch.isspace() for ch in value):
            continue
        if not os.path.isabs(os.path.expanduser(value)):
            return f"{key}={value!r} is relative: give an absolute path (e.g. {key}=$PWD/{value})"
    return None


def check_output(path: str, *, directory: bool = False) -> str | None:
    """Why ``-o path`` cannot be written, checked before any work (None: it can be).

    ``directory``: a fleet call, which saves one file per host in ``path`` (an existing directory, or
    one it makes).

    A new file is not created yet (a refused call leaves nothing behind); an existing regular file (or
    link) is opened as it will be written (``open_output``: never through a link another user may have
    planted) without emptying it, and given a zero-byte write, which a read-only procfs file
    (``/proc/version``) refuses. Devices and pipes (``-o /dev/stdout``) are taken as given.
    """
    parent, name = split(path)
    if not directory and names_a_directory(name):  # 'new/' too: the kernel opens no file by it
        return f"-o {path}: is a directory; give a file name"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):  # a dangling link: open_output says whether it may be followed
            st = os.lstat(path)
        elif not os.path.isdir(parent):
            return f"-o {path}: no such directory: {parent}"
        elif not os.access(parent, os.W_OK | os.X_OK):
            return f"-o {path}: cannot create a file in {parent}"
        else:
            return _reached(path, parent)
    except OSError as exc:
        return f"-o {path}: {exc.strerror or exc}"
    if directory:
        if not os.path.isdir(path):
            return f"-o {path}: a fleet call saves one file per host: give a directory"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"-o {path}: cannot create a file in it"
        return _reached(path, os.path.join(os.getcwd(), path))
    if stat.S_ISDIR(st.st_mode):
        return f"-o {path}: is a directory; give a file name"
    if not stat.S_ISREG(st.st_mode) and not os.path.islink(path):
        return None
    try:
        fd = open_output(path, create=False)
        try:
            os.write(fd, b"")
        finally:
            os.close(fd)
    except OSError as exc:
        return f"-o {path}: cannot be written: {exc.strerror or exc}"
    return None


def _reached(path: str, directory: str) -> str | None:
    """Why ``-o path`` cannot be written in ``directory`` (a link another user may have planted on the
    way: ``outfile.reach``), or None."""
    try:
        reach(directory).close()
    except OSError as exc:
        return f"-o {path}: cannot be written: {exc.strerror or exc}"
    return None


# -- help ---------------------------------------------------------------------------------------


def _tools(allow_reclaim: bool = False) -> dict[str, Any]:
    """The tools a server started with (or without) ``--allow-reclaim`` serves, by name, in its order."""
    from sysmcp.tools import served_tools
    from sysmcp.tools.registry import Registry

    return {tool.name: tool for tool in Registry(served_tools(allow_reclaim))}


def _summary(description: str) -> str:
    """A description's first sentence."""
    first = description.split(". ")[0].split(": ")[0].rstrip(".")
    for stop in (" (", ", "):
        if len(first) > 60:
            first = first.split(stop)[0]
    return first


def tools_overview() -> str:
    """The tools, one line each, for ``sysmcp call --help`` and ``sysmcp call`` without a tool."""
    tools = _tools()
    width = max(map(len, tools))
    lines = [f"  {name:<{width}}  {_summary(tool.description)}" for name, tool in tools.items()]
    return "tools (sysmcp call TOOL --help for a tool's arguments):\n" + "\n".join(lines)


def _kind(spec: dict[str, Any]) -> str:
    """What a value may be, from its schema: ``integer 1..100``, ``array of a|b``, ``string/number``."""
    if "enum" in spec:
        return "|".join(map(str, spec["enum"]))
    kind = spec.get("type", "value")
    kinds = [kind] if isinstance(kind, str) else list(kind)
    items = spec.get("items")
    text = "/".join(f"array of {_kind(items)}" if k == "array" and items else str(k) for k in kinds)
    low, high = spec.get("minimum"), spec.get("maximum")
    if low is not None or high is not None:
        text += f" {'' if low is None else low}..{'' if high is None else high}"
    return text


def tool_help(name: str, *, allow_reclaim: bool = False) -> str:
    """``sysmcp call TOOL --help``: what the tool does, its arguments, examples."""
    tool = _tools(allow_reclaim)[name]
    width = min(shutil.get_terminal_size((100, 24)).columns, 100)
    schema = tool.input_schema
    required = set(schema.get("required", ()))
    out = [f"usage: sysmcp call {name} [KEY=VALUE ...] [--json] [-o FILE]", ""]
    out += textwrap.wrap(tool.description, width)
    out += ["", "arguments:"]
    for key, spec in schema.get("properties", {}).items():
        default = f"default: {json.dumps(spec['default'])}" if "default" in spec else ""
        note = "required" if key in required else default
        out.append(f"  {key}=<{_kind(spec)}>" + (f"  ({note})" if note else ""))
        out += textwrap.wrap(
            spec.get("description", ""), width, initial_indent="      ", subsequent_indent="      "
        )
    out += ["", "examples:"]
    out += [f"  {line}" for line in EXAMPLES.get(name, (_example(name, schema),))]
    out += ["", EXIT_CODES_HELP]
    return "\n".join(out)


def _example(name: str, schema: dict[str, Any]) -> str:
    """An example for a tool without a written one: its required arguments with placeholders."""
    required = schema.get("required", ())
    return " ".join(["sysmcp call", name, *(f"{key}=<{key}>" for key in required)])


def fleet_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """``hosts=web1,db`` as the list the server wants (``hosts='["web1","db"]'`` is one already)."""
    hosts = arguments.get("hosts")
    if isinstance(hosts, str):
        return {**arguments, "hosts": [name.strip() for name in hosts.split(",") if name.strip()]}
    return arguments


def check_call(
    tool: str, arguments: dict[str, Any], *, fleet: bool = False, allow_reclaim: bool = False
) -> str | None:
    """A usage problem with the tool or its arguments (checked here, before starting a server), or None.

    With a fleet configured ``hosts`` is checked as the fleet's argument; which hosts it names is the
    server's to say (it has the inventory).
    """
    from sysmcp.fleet.schema import hosts_property
    from sysmcp.tools.arguments import validate_arguments

    tools = _tools(allow_reclaim)
    if tool not in tools:
        return _unknown_tool(tool, tools)
    schema = tools[tool].input_schema
    if "hosts" in arguments and not fleet:
        return "hosts= needs a fleet: give --host NAME (repeatable) or --inventory FILE"
    if "hosts" in arguments:
        schema = {**schema, "properties": {**schema.get("properties", {}), "hosts": hosts_property(0)}}
    try:
        validate_arguments(schema, arguments)
    except ArgumentError as exc:
        return f"{exc.message} (see: sysmcp call {tool} --help)"
    return relative_path_argument(arguments)


def _unknown_tool(tool: str, tools: dict[str, Any]) -> str:
    """Why ``tool`` is not among ``tools``: a tool served only with ``--allow-reclaim`` says so."""
    if tool in _tools(allow_reclaim=True):
        return f"{tool} is served only with --allow-reclaim: sysmcp call --allow-reclaim {tool} …"
    return f"unknown tool {tool!r}; tools: {', '.join(tools)}"


# -- progress -----------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


@dataclass
class ProgressLine:
    """Progress on stderr: on a terminal one line rewritten in place, else one plain line per update."""

    stream: TextIO
    tty: bool
    clock: Callable[[], float] = time.monotonic
    _first: tuple[float, float] | None = None  # (time, done) of the first update, for the rate
    _shown: bool = False

    def update(self, done: float, total: float | None, message: str | None) -> None:
        now = self.clock()
        if self._first is None:
            self._first = (now, done)
        if message is None and not total and not done:
            return  # a bare "progress: 0" says nothing
        text = message or (f"{done:,.0f} of {total:,.0f} done" if total else f"{done:,.0f} done")
        if total:
            text += f"  {100 * min(done / total, 1.0):.0f}%"
            started, done0 = self._first
            rate = (done - done0) / (now - started) if now > started else 0.0
            if rate > 0 and done < total:
                text += f"  ETA {_duration((total - done) / rate)}"
        if self.tty:
            columns = shutil.get_terminal_size((80, 24)).columns
            self.stream.write("\r\x1b[K" + on_terminal(text, self.stream)[: max(columns - 1, 10)])
            self._shown = True
        else:
            self.stream.write(f"progress: {text}\n")
        self.stream.flush()

    def clear(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False


# -- the call -----------------------------------------------------------------------------------


class Interrupted(Exception):
    """Ctrl-C (or SIGTERM, SIGHUP) arrived; the call in flight was cancelled on the server."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.status = 128 + signum  # 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP: as a shell reports them


@dataclass
class CallOptions:
    raw: bool = False
    version: str = "2025-11-25"
    server_args: Sequence[str] = ()
    json_output: bool = False
    output: str | None = None
    # With hosts configured (--host, --inventory, $SYSMCP_HOSTS), hosts= is allowed: the fleet's host
    # resolution (raises ValueError naming unknown hosts), to refuse hosts=nosuch here.
    resolve_hosts: Callable[[list[str]], object] | None = None


class CallFailed(Exception):
    """The call ended here without an answer, the server still running or never started (its
    interpreter could not be run, or this side ended the session at a line longer, or of more JSON
    values, than any answer): the line to say."""


class ServerStopped(Exception):
    """The server ended before answering; its own exit status is passed on (its words are on stderr)."""

    def __init__(self, status: int | None) -> None:
        super().__init__(status)
        self.status = status


def show_wire(direction: str, line: bytes) -> None:
    """``--raw``: every line on the wire, on stdout, marked with its direction."""
    arrow = "→ " if direction == "sent" else "← "
    print(json_on_terminal(arrow + line.decode("utf-8", "replace").rstrip("\n")), flush=True)


async def _call(tool: str, arguments: dict[str, Any], options: CallOptions) -> int:
    # Ctrl-C, SIGTERM and SIGHUP (the terminal closed, an ssh session dropped) are taken for the whole
    # call, the server's end included: Python's default handler would raise KeyboardInterrupt inside
    # the event loop, and a SIGHUP would end the process with the inventory's private copy left behind.
    interrupts = Interrupts()
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with anyio.create_task_group() as watching:

            async def watch_signals() -> None:
                async for signum in signals:
                    interrupts.take(signum)

            watching.start_soon(watch_signals)
            try:
                reply = await _run_server(tool, arguments, options, interrupts)
            finally:
                watching.cancel_scope.cancel()
    if interrupts.signals:
        raise Interrupted(interrupts.signals[0])
    return _report(tool, reply, options)


@dataclass
class Interrupts:
    """Ctrl-C, SIGTERM and SIGHUP during a call. The first cancels the conversation (the request is then
    cancelled on the server) or, the answer in, stops waiting for the server to wind down at its own
    pace: either way the server gets ``INTERRUPT_GRACE`` to end. A second kills it at once: the admin
    is not kept waiting."""

    conversation: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    conversation_over: bool = False
    server: Process | None = None
    #: The wait for the server to end (``_stop``), while it runs.
    winding_down: anyio.CancelScope | None = None
    signals: list[int] = field(default_factory=list)

    def take(self, signum: int) -> None:
        self.signals.append(signum)
        if len(self.signals) > 1:
            if self.server is not None and self.server.returncode is None:
                self.server.kill()
        elif not self.conversation_over:
            self.conversation.cancel()
        elif self.winding_down is not None:
            self.winding_down.deadline = min(
                self.winding_down.deadline, anyio.current_time() + INTERRUPT_GRACE
            )


async def _run_server(
    tool: str, arguments: dict[str, Any], options: CallOptions, interrupts: Interrupts
) -> dict[str, Any]:
    """Start the server, converse with it (unless interrupted) and see it end: its answer, shaped as
    ``_converse`` says (``{}`` when interrupted)."""
    command = [sys.executable, "-m", "sysmcp", *options.server_args]
    progress = ProgressLine(sys.stderr, sys.stderr.isatty())

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        if not options.raw:  # raw shows the notifications themselves
            progress.update(done, total, message)

    # A session of its own: Ctrl-C on the terminal reaches this process only, which then cancels the
    # call on the server the protocol's way instead of the server dying of the same signal. Its stderr
    # is this one's: its words when it refuses to start, its logs at the --log-level asked for.
    try:
        started = await anyio.open_process(command, stderr=None, start_new_session=True)
    except OSError as exc:  # the interpreter cannot be run (not executable by this user, gone)
        raise CallFailed(f"cannot start the server ({command[0]}: {exc.strerror or exc})") from None
    interrupts.server = started
    async with started as process:
        assert process.stdin is not None and process.stdout is not None
        reply: dict[str, Any] = {}
        # The reader outlives the call's scope, so a cancelled request can still tell the server.
        async with connect(process.stdin, process.stdout, name="sysmcp") as session:
            if options.raw:
                session.on_wire = show_wire
            session.cancel_reason = "interrupted by the user"
            with interrupts.conversation:
                try:
                    reply = await _converse(session, tool, arguments, options, on_progress)
                except PeerGone:
                    progress.clear()
                    if session.ended_here:
                        raise CallFailed(f"its answer could not be read: {session.closed_reason}") from None
                    with anyio.move_on_after(INTERRUPT_GRACE):
                        await process.wait()
                    raise ServerStopped(process.returncode) from None
            interrupts.conversation_over = True
        progress.clear()
        # After an answer the server winds down at its own pace (a fleet's sessions and ssh masters
        # end, the state database checkpoints); only an interrupted call is cut short.
        await _stop(process, interrupts)
    return reply


async def _converse(
    session: ClientSession,
    tool: str,
    arguments: dict[str, Any],
    options: CallOptions,
    on_progress: ProgressCallback,
) -> dict[str, Any]:
    """Handshake, the call, and (with ``--output``) the full result behind its link, while the server lives.

    The answer is a JSON-RPC reply's shape: ``{"result": …}`` or ``{"error": {"code", "message"}}``.
    """
    try:
        await session.initialize(
            version=options.version, client_info={"name": "sysmcp-call", "version": __version__}
        )
    except (RemoteError, NotMcp) as exc:
        detail = exc.message if isinstance(exc, RemoteError) else str(exc)
        return {"error": {"message": f"initialize failed: {detail}"}}
    try:
        result = await session.call_tool(tool, arguments, on_progress=on_progress)
    except RemoteError as exc:
        return {"error": {"code": exc.code, "message": exc.message}}
    reply: dict[str, Any] = {"result": result}
    if options.output and "hosts" in arguments:
        reply["_per_host"] = await _per_host(session, result)
    elif options.output:
        uris = _links(result)
        texts = [await _read_text(session, uri) for uri in uris]
        reply["_full"] = (uris, "".join(text for text in texts if text is not None))
    return reply


async def _per_host(session: ClientSession, result: dict[str, Any]) -> dict[str, str]:
    """Each answering host's full result (``-o DIR`` with ``hosts``): the texts behind its own links
    (read through the gateway while the server lives), else (no link, or none readable any more) its
    structured answer. File name → text."""
    from sysmcp.fleet.per_host import file_name, free_name, host_exact_bytes, host_links, structured_text

    files: dict[str, str] = {}
    data = result.get("structuredContent")
    entries = data.get("hosts") if isinstance(data, dict) else None
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        host = entry.get("host") if isinstance(entry, dict) and entry.get("status") == "ok" else None
        if not isinstance(host, str):
            continue
        read = 0
        for uri in host_links(host, entry.get("result")):
            text = await _read_text(session, uri)
            if text is not None:
                files[free_name(files, file_name(host, uri))] = text
                read += 1
        if not read:  # no link, or none readable any more: its structured answer, never nothing
            exact = host_exact_bytes(data, index) if isinstance(data, dict) else {}
            files[free_name(files, file_name(host, None))] = structured_text(entry, exact)
    return files


async def _read_text(session: ClientSession, uri: str) -> str | None:
    """The text behind a link while the server lives; None when it is gone."""
    try:
        read = await session.request("resources/read", {"uri": uri})
    except RemoteError:
        return None
    return "".join(str(c.get("text", "")) for c in read.get("contents", []))


async def _stop(process: Process, interrupts: Interrupts) -> None:
    """Close the server's input and wait for it to exit; interrupted (the session has sent
    notifications/cancelled, or the admin will not wait), kill it if it is still there
    ``INTERRUPT_GRACE`` seconds later."""
    with anyio.CancelScope(shield=True) as waiting:
        interrupts.winding_down = waiting
        if interrupts.signals:
            waiting.deadline = anyio.current_time() + INTERRUPT_GRACE
        try:
            assert process.stdin is not None
            await process.stdin.aclose()
            await process.wait()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError):
            pass
        finally:
            interrupts.winding_down = None
    if process.returncode is None:
        process.kill()


def _report(tool: str, reply: dict[str, Any], options: CallOptions) -> int:
    if "error" in reply:
        error = reply["error"]
        print(on_terminal(f"sysmcp call: {error.get('message')}", sys.stderr), file=sys.stderr)
        return EXIT_USAGE if error.get("code") == -32602 else EXIT_PROBLEM
    result: dict[str, Any] = reply.get("result", {})
    texts = [b["text"] for b in result.get("content", []) if b.get("type") == "text"]
    if options.output is not None and "_per_host" in reply:
        if not _save_per_host(options.output, reply["_per_host"]):
            return EXIT_PROBLEM
    elif options.output is not None and not result.get("isError"):  # an error is no result to save
        uris, full = reply.get("_full", ([], ""))
        if not uris:  # nothing was too big to inline: the answer is the full result
            full = json.dumps(result.get("structuredContent"), indent=2) + "\n" if options.json_output else ""
            full = full or "\n".join(texts) + "\n"
        replacing = ", replacing the file there" if os.path.isfile(options.output) else ""
        try:
            with open(open_output(options.output), "w", encoding="utf-8") as handle:
                handle.write(full)
        except OSError as exc:  # checked before the call; the disk may still fill or the path change since
            print(f"sysmcp call: -o {options.output}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_PROBLEM
        what, described = saved_what(result, uris, options.json_output)
        said = f"sysmcp call: saved {what} to {options.output} ({len(full.encode()):,} bytes{replacing})"
        print(on_terminal(said + (f": {described}" if described else ""), sys.stderr), file=sys.stderr)
    status = exit_status(tool, result)
    if status == EXIT_PARTIAL and not sys.stdout.isatty():  # the PARTIAL line may be in a file, unseen
        said = f"PARTIAL RESULT ({partial_reason(result)}): exit {EXIT_PARTIAL}"  # a fleet host's words too
        print(on_terminal(f"sysmcp call: {said}", sys.stderr), file=sys.stderr)
    if options.raw:
        return status
    if options.json_output and not result.get("isError"):
        print(json_on_terminal(json.dumps(result.get("structuredContent"), indent=2, ensure_ascii=False)))
    else:
        stream = sys.stderr if result.get("isError") else sys.stdout
        for text in texts:
            print(on_terminal(without_links(text, _links(result), options.output), stream), file=stream)
    sys.stdout.flush()
    return status


def on_terminal(text: str, stream: TextIO) -> str:
    """``text`` as a terminal should show it: every control character but newline and tab escaped
    (``\\033``), as ``ls`` shows names on a terminal, so a file's name can neither drive the terminal
    nor rewrite lines. The server escapes its answers so already; this holds for an answer that did
    not pass it (a fleet host running an older sysmcp). Off a terminal the text is written as it came."""
    if text.isprintable() or not stream.isatty():
        return text
    return printable_text(text)


def json_on_terminal(text: str) -> str:
    """``--json`` as a terminal should show it: each character that is not printable (only a string can
    hold one) as its ``\\uXXXX`` escape, which is the same JSON, so a name's right-to-left override
    (U+202E) or C1 control cannot reorder or drive what the operator reads. Off a terminal, as it is."""
    if not sys.stdout.isatty() or text.replace("\n", "").isprintable():
        return text
    return "".join(c if c.isprintable() or c == "\n" else json.dumps(c)[1:-1] for c in text)


def _links(result: dict[str, Any]) -> list[str]:
    """The URIs of a result's ``resource_link`` blocks, in order."""
    return [b["uri"] for b in result.get("content", []) if b.get("type") == "resource_link"]


def without_links(text: str, uris: Sequence[str], saved_to: str | None = None) -> str:
    """The text with each ``sysmcp://`` link replaced by the file it was saved to (``-o``), else by
    how to keep what it points at: the link dies with the server this command started and stopped."""
    for uri in uris:
        text = text.replace(f"{uri} (resources/read)", uri).replace(uri, saved_to or KEEP_IT)
    return text


def saved_what(result: dict[str, Any], uris: Sequence[str], json_output: bool) -> tuple[str, str]:
    """What ``-o`` saved, and the links' own descriptions of it (``sha256 manifest … of 30 files``):
    never their ``sysmcp://`` URIs, which mean nothing once this command has ended."""
    if not uris:
        return ("the structured result (JSON)" if json_output else "the result"), ""
    described = [
        str(block["description"])
        for block in result.get("content", [])
        if block.get("type") == "resource_link" and block.get("uri") in uris and block.get("description")
    ]
    return "the full result", "; ".join(described)


KEEP_IT = "(not kept after this command: rerun with -o FILE to save it)"


def _save_per_host(directory: str, files: dict[str, str]) -> bool:
    """``-o DIR`` for a fleet call: one file per host in DIR (made if missing), said on stderr. False
    when one cannot be written (checked before the call, but the disk may fill since): one line names
    it and how many were written before it, which stay."""
    name, written, total, replaced = "", 0, 0, 0
    try:
        make_directory(directory)
        for name, text in files.items():
            replaced += os.path.isfile(os.path.join(directory, name))
            with open(open_output(os.path.join(directory, name)), "w", encoding="utf-8") as handle:
                handle.write(text)
            written, total = written + 1, total + len(text.encode())
    except OSError as exc:
        done = f"{written} of {plural(len(files), 'host result')} written"
        print(
            f"sysmcp call: -o {directory}: {name or directory}: {exc.strerror or exc} ({done})",
            file=sys.stderr,
        )
        return False
    print(
        f"sysmcp call: wrote {plural(len(files), 'host result')} ({plural(total, 'byte')}) to {directory}/"
        + (f", replacing {plural(replaced, 'file')} there" if replaced else ""),
        file=sys.stderr,
    )
    return True


def run_call(tool: str | None, arguments: dict[str, Any], options: CallOptions) -> int:
    if tool is None:
        return _refuse("sysmcp call: which tool?\n" + tools_overview())
    arguments = fleet_arguments(arguments)
    fleet = options.resolve_hosts is not None
    problem = check_call(tool, arguments, fleet=fleet, allow_reclaim="--allow-reclaim" in options.server_args)
    if problem is None and options.output is not None:
        problem = check_output(options.output, directory=fleet and "hosts" in arguments)
    if problem is None and options.resolve_hosts is not None and isinstance(arguments.get("hosts"), list):
        try:
            options.resolve_hosts(arguments["hosts"])
        except ValueError as exc:
            problem = str(exc)
    if problem is not None:
        return _refuse(f"sysmcp call: {problem}")
    try:
        return anyio.run(_call, tool, arguments, options)
    except BaseException as exc:  # a task group wraps what its body raised: look inside
        if find_inside(exc, BrokenPipeError) is not None:
            silence_stdout()
            return EXIT_PIPE
        interrupted = find_inside(exc, Interrupted)
        if interrupted is not None or find_inside(exc, KeyboardInterrupt) is not None:
            print("sysmcp call: interrupted; the call was cancelled on the server", file=sys.stderr)
            return interrupted.status if interrupted is not None else EXIT_INTERRUPTED
        failed = find_inside(exc, CallFailed)
        if failed is not None:
            print(f"sysmcp call: {failed}", file=sys.stderr)
            return EXIT_PROBLEM
        stopped = find_inside(exc, ServerStopped)
        if stopped is not None or find_inside(exc, PeerGone) is not None:
            status = stopped.status if stopped is not None else None
            said = f" (exit {status})" if status and status > 0 else ""
            said = f" (killed by {signal.Signals(-status).name})" if status and status < 0 else said
            print(f"sysmcp call: the server stopped before answering{said}", file=sys.stderr)
            return status if status and status > 0 else EXIT_PROBLEM
        raise


def _refuse(text: str) -> int:
    """A usage error, refused before any work: its line on stderr, exit 2."""
    print(text, file=sys.stderr)
    return EXIT_USAGE


def run_command(args: argparse.Namespace, roots: list[str]) -> int:
    """``sysmcp call TOOL KEY=VALUE …`` parsed: the checks made before any server starts, then the call."""
    if args.help:  # on stdout: a pipe closed early (``| head``) is ``writing``'s quiet exit (141)
        known = _tools(args.allow_reclaim)
        if args.tool is None:
            sys.stdout.write(_call_parser().format_help())
        elif args.tool in known:
            sys.stdout.write(tool_help(args.tool, allow_reclaim=args.allow_reclaim) + "\n")
        else:
            return _refuse(f"sysmcp call: {_unknown_tool(args.tool, known)}")
        return EXIT_OK
    try:
        pairs = [key_value(pair, args.tool) for pair in args.arguments]
    except ValueError as exc:
        return _refuse(f"sysmcp call: {exc}")
    unusable = version_problem(args.protocol_version, raw=args.raw)
    if unusable is not None:
        return _refuse(f"sysmcp call: {unusable}")
    missing = [root for root in roots if not os.path.isdir(root)]
    if missing:  # the server would refuse them: say so before starting it
        return _refuse(f"sysmcp: --root must name existing directories: {', '.join(missing)}")
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:  # never silently the last one: path=/usr path=/etc is one mistake or the other
        return _refuse(f"sysmcp call: {', '.join(k + '=' for k in repeated)} given more than once")
    read = InventoryRead()
    try:  # the same checks the server makes, before any work: a bad inventory, then hosts=nosuch
        fleet = fleet_options(args, read)
    except (OSError, ValueError) as exc:
        return _refuse(f"sysmcp: {exc}")
    read_any = read.file_text is not None or read.command_output is not None
    private_directory = tempfile.TemporaryDirectory(prefix="sysmcp-call-") if read_any else None
    with private_directory or contextlib.nullcontext() as private:  # 0700, removed at the end
        options = CallOptions(
            raw=args.raw,
            version=args.protocol_version,
            server_args=_server_args(args, roots, _handed_inventory(read, private)),
            json_output=args.json,
            output=args.output,
            resolve_hosts=fleet.inventory.resolve if fleet is not None else None,
        )
        return run_call(args.tool, dict(pairs), options)


def _handed_inventory(read: InventoryRead, private: str | None) -> list[str]:
    """The server's inventory options: what this call read of the inventory (``fleet_options``), in
    files of its own in ``private`` (a 0700 directory that outlives the server), never the file or
    the command again. A file may be a pipe read once (``--inventory <(cmd)``) and a command may take a
    minute. A file, not a pipe the server inherits: an ssh_config inventory is every ssh's ``-F FILE``
    for as long as the server runs. Its kind, which the original's name may tell (``.json``,
    ``ssh_config``), is told again by the name of the copy."""
    handed: list[str] = []
    if private is None:
        return handed
    if read.file_text is not None:
        name = {"json": "inventory.json", "yaml": "inventory.yml", "ssh_config": "ssh_config"}.get(
            read.file_kind or "", "inventory"
        )  # "inventory": a name that tells nothing, as the original's did not (its content tells INI)
        handed += ["--inventory", _private_copy(private, name, read.file_text)]
    if read.command_output is not None:
        handed += ["--inventory-output", _private_copy(private, "inventory-output.json", read.command_output)]
    return handed


def _private_copy(directory: str, name: str, text: str) -> str:
    """``text`` in a new file ``name`` of ``directory``, readable by its owner only."""
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "w", encoding="utf-8") as stream:
        stream.write(text)
    return path


def version_problem(version: str, *, raw: bool) -> str | None:
    """Why the call cannot run as asked under ``version`` (None: it can).

    A server answers ``initialize`` with a version of its own choosing when it does not speak the one
    asked for, so a version without that handshake (2026-07-28) or a mistyped date would run on another,
    unsaid. The exit status and ``--json`` come from ``structuredContent``, which versions before
    2025-06-18 lack; ``--raw`` shows such a version's wire, its exit status saying only whether the tool
    failed.
    """
    if version not in LEGACY_VERSIONS:
        return (
            f"--protocol-version {version}: sysmcp call speaks {', '.join(LEGACY_VERSIONS)} "
            "(it starts with initialize)"
        )
    if not raw and not features_of(version).structured_output:
        return (
            f"--protocol-version {version}: the exit status and --json come from the structured result, "
            f"which {version} does not have: give --raw to see its wire, or "
            f"{Features.structured_output.first} or later"
        )
    return None


def _call_parser() -> argparse.ArgumentParser:
    """The ``call`` subparser with its epilog, for ``sysmcp call --help``. The epilog imports every tool,
    so it is never built on the way to serving: until the wire is claimed, a stray print of any thread
    would land on the client's stdout, and that window must stay short."""
    import argparse

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    call: argparse.ArgumentParser = commands.choices["call"]
    call.epilog = tools_overview() + "\n\n" + EXIT_CODES_HELP
    return call


def _server_args(args: argparse.Namespace, roots: list[str], inventory: list[str]) -> list[str]:
    """The options given to ``sysmcp call`` (before or after ``call``), for the server it spawns: the
    inventory as ``inventory`` (``_handed_inventory``) and not as given; history as asked, for that
    server is the process that records (``--state-dir`` absolute: it may not share this process's
    working directory). Each value is joined to its option (``--root=-data``): one that begins with a
    dash, given as the next argument, would be read by the server's parser as an option of its own."""
    given = [f"--log-level={args.log_level}", *[f"--root={root}" for root in roots]]
    if args.allow_reclaim:
        given.append("--allow-reclaim")
    for host in [*(getattr(args, "host", None) or []), *getattr(args, "more_hosts", [])]:
        given.append(f"--host={host}")
    for flags, *_ in FLEET_OPTIONS:
        value = getattr(args, fleet_dest(flags), None)
        if value is not None and flags[0] not in ("--inventory", "--inventory-command"):
            given.append(f"{flags[0]}={value}")
    given += inventory
    if args.no_history:
        given.append("--no-history")
    elif args.state_dir:
        # absolute, its '..' left for the kernel to take (after a link: where the link led)
        given.append(f"--state-dir={os.path.join(os.getcwd(), args.state_dir)}")
    return given


def key_value(pair: str, tool: str | None = None) -> tuple[str, Any]:
    """One ``key=value`` argument; a value that parses as JSON (3, true, ["a"]) is taken as JSON, else as text,
    and a key the tool takes only as text keeps a number's digits as text (``confirm=4817290356``).

    ``NaN``, ``Infinity`` and ``1e400`` are no JSON numbers: text (which the tool's schema then names).
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
        parsed = json.loads(value, parse_constant=_not_json, parse_float=_finite)
    except ValueError as exc:
        if value.lstrip()[:1] in ("[", "{"):
            raise ValueError(f"{key}= starts like JSON but is not valid JSON ({exc}): {value!r}") from None
        return key, value
    if not isinstance(parsed, (str, list, dict)) and _takes_text(key, tool):
        return key, value  # a plan id or a confirmation code of digits only: still the text it takes
    return key, parsed


def _not_json(constant: str) -> None:
    """``NaN``, ``Infinity``: Python's json reads them, JSON has no such number (nor can the wire carry one)."""
    raise ValueError(f"{constant} is not a JSON number")


def _finite(text: str) -> float:
    """A JSON number as a float, refused when it overflows to infinity (``1e400``)."""
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is out of range")
    return number


def _takes_text(key: str, tool: str | None) -> bool:
    """Whether ``tool`` takes ``key`` only as text (its schema type is "string")."""
    found = _tools(allow_reclaim=True).get(tool) if tool else None
    return found is not None and found.input_schema.get("properties", {}).get(key, {}).get("type") == "string"


def _meant_key(value: str, tool: str | None) -> str | None:
    """The argument a bare path (``/var``, ``~/x``, ``./y``) was meant for: the tool's ``path``, else
    its ``manifest`` (verify_checksums)."""
    if not value.startswith(("/", "~", ".")) or tool not in _tools():
        return None
    properties = _tools()[tool].input_schema.get("properties", {})
    return next((key for key in ("path", "manifest") if key in properties), None)
