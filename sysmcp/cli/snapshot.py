"""``sysmcp snapshot`` and ``sysmcp history``: scheduled snapshots for cron, systemd timers and launchd.

Why a command of its own: a timer records history while no MCP client runs, so what_changed has
something to compare with the next morning. Quiet unless something fails, at idle CPU and I/O
priority, one filesystem per path by default, under a lock so two runs never overlap. Exit codes:
0 every snapshot kept, 1 some not kept or partial (for ``history``: the store could not be read), 2 bad
usage, 3 history is off, 75 another run holds the lock (EX_TEMPFAIL: try later).
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sysmcp import platform
from sysmcp.history import state

if TYPE_CHECKING:  # a bare ``sysmcp`` configures history from arguments no argparse parsed
    import argparse

    from sysmcp.history.store import Store

EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_NO_HISTORY, EXIT_LOCKED = 0, 1, 2, 3, 75
LOCK_NAME = "snapshot.lock"  # fs.statedir.LOCK_NAME: the store checks it when it opens


def history_options(parser: argparse.ArgumentParser, *, subcommand: bool) -> None:
    """``--state-dir`` and ``--no-history``, for the top level and each subcommand that records."""
    import argparse

    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        type=_named_directory,
        default=argparse.SUPPRESS if subcommand else None,
        help=f"where history is kept (also ${state.STATE_ENV}; default {platform.state_directory()})",
    )
    parser.add_argument(
        "--no-history",
        action="store_true",
        default=argparse.SUPPRESS if subcommand else False,
        help="record nothing and keep no history (what_changed then gives lower bounds only)",
    )


def _named_directory(text: str) -> str:
    """``--state-dir``'s value: an empty one (``--state-dir "$UNSET"``) is refused, not read as 'the
    default', which would record in (or list) another store than the one meant."""
    import argparse

    if not text:
        raise argparse.ArgumentTypeError("names no directory (an empty value)")
    return text


def configure_history(args: argparse.Namespace) -> None:
    """Turn history on (the default) or off for this process, from the command line."""
    if getattr(args, "no_history", False):
        state.configure(None)
        return
    chosen = getattr(args, "state_dir", None)
    state.configure(Path(chosen) if chosen else state.default_directory())


def add_commands(commands: argparse._SubParsersAction) -> list[argparse.ArgumentParser]:  # type: ignore[type-arg]
    snapshot = commands.add_parser(
        "snapshot", help="record snapshots for what_changed (for cron/systemd/launchd)"
    )
    snapshot.add_argument("paths", nargs="*", metavar="PATH", help="directories to scan (default: /)")
    snapshot.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="PATH",
        help="also keep an integrity baseline of PATH",
    )
    snapshot.add_argument(
        "--all-filesystems", action="store_true", help="descend into other filesystems (default: like du -x)"
    )
    snapshot.add_argument(
        "--timeout", type=_above_zero(float), default=300.0, metavar="S", help="per path (default 300)"
    )
    snapshot.add_argument(
        "--keep",
        default="2d,5w,52w",
        metavar="H,D,W",
        help="hourly, daily, weekly retention (default 2d,5w,52w)",
    )
    snapshot.add_argument("--max-size", default="100M", metavar="SIZE", help="size ceiling (default 100M)")
    listing = commands.add_parser("history", help="list the snapshots kept for what_changed")
    listing.add_argument("--limit", type=_above_zero(int), default=50, help="newest N (default 50)")
    listing.add_argument(
        "--reclaim",
        action="store_true",
        help="list the reclaim log instead: every file reclaim acted on or left",
    )
    return [snapshot, listing]


def _above_zero(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An option's type that takes only numbers above zero: ``--timeout 0``, ``-1`` or ``nan`` would
    stop every scan at once (or never), ``--limit -1`` would list everything."""
    import argparse

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be a number above 0, got {text!r}")
        return value

    return parse


@contextlib.contextmanager
def _locked(fd: int) -> Iterator[bool]:
    """The lock file ``fd`` held (True) or held by another run (False); closed at the end."""
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


KEEP_TAKES = (
    "--keep takes H,D,W: how long to keep hourly, daily and weekly snapshots, three durations such as "
    "2d,5w,52w (s, m, h, d, w)"
)


def _retention(text: str) -> tuple[float, float, float]:
    """``--keep H,D,W`` in seconds; ValueError saying what ``--keep`` takes."""
    from sysmcp.protocol.failures import ArgumentError
    from sysmcp.tools.dir_usage import parse_duration

    try:
        seconds = [parse_duration(part.strip(), "--keep") for part in text.split(",")]
    except ArgumentError:
        seconds = []
    if len(seconds) != 3:
        raise ValueError(f"{KEEP_TAKES}; got {text!r}")
    return seconds[0], seconds[1], seconds[2]


def run(args: argparse.Namespace, roots: list[str]) -> int:
    missing = [root for root in roots if not os.path.isdir(root)]
    if missing:  # as the server refuses them: a mistyped root would list nothing, or refuse every path
        print(
            f"sysmcp {args.command}: --root must name existing directories: {', '.join(missing)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.command == "snapshot":
        try:
            hourly, daily, weekly = _retention(args.keep)
            from sysmcp.tools.arguments import size_argument, validate_arguments

            # Checked as the tools check a size, under the option's own name, which the words then say.
            schema = {"type": "object", "properties": {"--max-size": size_argument("the ceiling")}}
            ceiling = int(validate_arguments(schema, {"--max-size": args.max_size})["--max-size"])
        except Exception as exc:  # a bad --keep or --max-size: usage
            said = str(getattr(exc, "message", exc)).removeprefix("Invalid arguments: ")
            print(f"sysmcp snapshot: {said.replace(repr('--max-size'), '--max-size', 1)}", file=sys.stderr)
            return EXIT_USAGE
        targets = _targets(args, roots)
        if targets is None:  # said on stderr; no state directory, lock nor database made
            return EXIT_USAGE
        scans, baselines = targets
    if args.command == "history" and (kept := state.directory()) is not None and not _kept_there(kept):
        # A listing makes nothing: a mistyped --state-dir, or sudo's other HOME, is named, not created.
        print(f"sysmcp history: no history is kept in {kept} (nothing recorded there yet)", file=sys.stderr)
        return EXIT_OK
    store = state.active()
    if store is None:
        print(f"sysmcp {args.command}: history is off ({state.off_because()})", file=sys.stderr)
        return EXIT_NO_HISTORY
    if args.command == "history":
        listed = _reclaim_log if getattr(args, "reclaim", False) else _list
        return listed(store, args.limit, _within(roots))
    try:  # opened as every state file is (fs.statedir): no symlink followed, no FIFO waited on
        lock = store.state_dir.open(LOCK_NAME, create=True)
    except OSError as exc:
        print(f"sysmcp snapshot: history is off ({exc})", file=sys.stderr)
        return EXIT_NO_HISTORY
    with _locked(lock) as mine:
        if not mine:
            print("sysmcp snapshot: another snapshot run holds the lock; nothing done", file=sys.stderr)
            return EXIT_LOCKED
        platform.idle_priority()
        code = _record(args, scans, baselines)
        from sysmcp.history.store import Retention  # here: serving imports no sqlite3 until it records

        store.prune(Retention(hourly, daily, weekly, ceiling or 0))
    return code


def _kept_there(directory: Path) -> bool:
    """Whether ``directory`` holds a history database (or something in its place, for the store's
    checks to refuse), without making the directory or the database as opening the store would."""
    from sysmcp.history.store import DB_NAME

    try:
        os.lstat(directory / DB_NAME)
    except FileNotFoundError:
        return False
    except OSError:  # not a directory, not searchable: the store says what is wrong with it
        pass
    return True


def _targets(args: argparse.Namespace, roots: list[str]) -> tuple[list[Path], list[tuple[str, Path]]] | None:
    """The directories to scan and the paths to keep baselines of, each resolved within the roots; None,
    each refusal said on stderr, when any is refused. Why before the history store is opened: a bad
    argument changes nothing (no state directory, lock nor database made for a run that does no work)."""
    from sysmcp.engine.faults import EngineError
    from sysmcp.engine.paths import PathPolicy
    from sysmcp.protocol.failures import ToolError

    policy = PathPolicy.of_operator(roots)
    scans: list[Path] = []
    baselines: list[tuple[str, Path]] = []
    refused = False
    for raw, kind in [
        *((raw, "scan") for raw in args.paths or ["/"]),
        *((raw, "baseline") for raw in args.baseline),
    ]:
        try:
            path = policy.resolve(raw)
            _check_kind(path, raw, kind)
        except (ToolError, EngineError) as exc:
            print(f"sysmcp snapshot: {worded(exc)}", file=sys.stderr)
            refused = True
            continue
        if kind == "scan":
            scans.append(path)
        else:
            baselines.append((raw, path))
    return None if refused else (scans, baselines)


def _check_kind(path: Path, raw: str, kind: str) -> None:
    """Refuse (``ToolError``, ``WrongKind``) a path to scan that is no directory, or a baseline that is
    neither a directory nor a regular file, as the scan and the hashing would refuse it later. Looked at
    (``lstat`` of the resolved path), never opened: a FIFO is not waited on."""
    from sysmcp.engine.faults import WrongKind
    from sysmcp.engine.opens import kind as kind_of
    from sysmcp.protocol.failures import ToolError

    try:
        mode = os.stat(path, follow_symlinks=False).st_mode
    except FileNotFoundError:
        raise ToolError(f"No such file or directory: {raw}") from None
    except OSError as exc:  # a directory on the way it may not search, as another user
        raise ToolError(f"Cannot read {raw}: {exc.strerror or exc}") from None
    if kind == "scan" and not stat.S_ISDIR(mode):
        raise ToolError(f"not a directory: {raw}")
    if kind == "baseline" and not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise WrongKind(f"Cannot hash {raw}: it is {kind_of(mode)}", reason="not_tree")


def _record(args: argparse.Namespace, scans: list[Path], baselines: list[tuple[str, Path]]) -> int:
    """Each path's scan (and each baseline), one after another; the worst outcome decides the code."""
    from sysmcp.engine.faults import EngineError
    from sysmcp.engine.usage import UsageRequest, scan_usage
    from sysmcp.engine.walk import WalkOptions
    from sysmcp.protocol.failures import ToolError
    from sysmcp.tools.dir_usage import FULL_FILES
    from sysmcp.tools.history_hooks import record_baseline, recorded_scan

    options = WalkOptions(one_file_system=not args.all_filesystems)
    code = EXIT_OK
    for path in scans:
        request = UsageRequest(
            FULL_FILES, 0, 1, True, 0, args.timeout, root=os.fsencode(path), options=options
        )
        try:  # no request to cancel: the budget bounds the scan
            usage, snap, note = recorded_scan(request, scan_usage)
        except OSError as exc:
            print(f"sysmcp snapshot: cannot scan {path}: {exc.strerror or exc}", file=sys.stderr)
            code = max(code, EXIT_INCOMPLETE)
            continue
        if note or snap is None or usage.stopped:
            print(f"sysmcp snapshot: {path}: {note or usage.stopped or 'not kept'}", file=sys.stderr)
            code = max(code, EXIT_INCOMPLETE)
        _reading(path)
    for raw, path in baselines:
        from dataclasses import replace

        from sysmcp.engine.calls import never_cancelled, no_progress
        from sysmcp.engine.hashing import ALGORITHMS
        from sysmcp.history.recording import unreadable_of
        from sysmcp.tools.hash_tree import run as hash_run
        from sysmcp.tools.hash_tree import tree_request

        try:
            asked = tree_request(path, raw, ALGORITHMS["sha256"], "gnu", options, args.timeout)
            asked = replace(asked, nodes=True)  # its directories, links and special files too
            tree = hash_run(asked, no_progress, never_cancelled)  # the time budget bounds each path
        except (ToolError, EngineError) as exc:
            print(f"sysmcp snapshot: {worded(exc)}", file=sys.stderr)
            code = max(code, EXIT_INCOMPLETE)
            continue
        said = record_baseline(
            tree.base,
            bytes(tree.manifest or b""),
            "sha256",
            options,
            tree.stopped is not None,
            unreadable_of(tree),
        )
        if not said.startswith("Integrity baseline") or tree.stopped or tree.manifest is None:
            print(f"sysmcp snapshot: baseline of {path}: {said}", file=sys.stderr)
            code = max(code, EXIT_INCOMPLETE)
    return code


def _reading(path: Path) -> None:
    """A disk reading of the path's filesystem beside its scan, for the fill rate."""
    from sysmcp.history.recording import disk_reading

    store = state.active()
    if store is not None:
        with contextlib.suppress(OSError):
            store.save_readings([disk_reading(path, state.now)[0]])


def _within(roots: list[str]) -> Callable[[bytes | str], bool]:
    """Whether a stored path may be listed: with ``--root``, only one inside the roots, as what_changed
    shows history (``history.snapshots.within``)."""
    from sysmcp.engine.paths import real_root
    from sysmcp.history.snapshots import within

    return within([real_root(r) for r in roots] if roots else None)


def _list(store: Store, limit: int, shown: Callable[[bytes | str], bool]) -> int:
    from sysmcp.engine.paths import escaped
    from sysmcp.render import human_bytes

    infos = store.snapshots(limit=limit, shown=shown)
    if (unread := store.unread()) is not None:
        return _unread(unread)
    print(f"{store.path}  ({human_bytes(store.size())})")
    print(f"{'ID':>6}  {'TAKEN':19}  {'KIND':8}  {'DISK':>10}  {'ROWS':>7}  ROOT")
    for info in infos:
        taken = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.taken))
        kind = info.kind + ("*" if info.partial else "")
        size = human_bytes(info.disk)
        print(f"{info.id:>6}  {taken}  {kind:8}  {size:>10}  {info.rows:>7}  {escaped(info.series.root)}")
    if any(info.partial for info in infos):
        print("* partial: the scan stopped early")
    return EXIT_OK


def _reclaim_log(store: Store, limit: int, shown: Callable[[bytes | str], bool]) -> int:
    """The newest actions of ``reclaim`` (``reclaim-log``), oldest first, with their bytes."""
    from sysmcp.engine.paths import escaped
    from sysmcp.reclaim import read_log
    from sysmcp.render import human_bytes, plural

    records = read_log(store, limit, shown)
    if (unread := store.unread()) is not None:
        return _unread(unread)
    print(
        f"{'TIME':19}  {'PLAN':12}  {'ITEM':22}  {'ACTION':8}  {'OUTCOME':22}  {'PLANNED':>10}  {'FREED':>10}  PATH"
    )
    for r in records:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.time))
        outcome = r.outcome + (f" ({r.reason})" if r.reason else "")
        print(
            f"{when}  {r.plan:12}  {r.item:22}  {r.action:8}  {outcome:22}  {human_bytes(r.planned):>10}  "
            f"{human_bytes(r.freed):>10}  {escaped(r.path)}" + _kept(r.kept, shown)
        )
    print(f"{plural(len(records), 'action')}, {human_bytes(sum(r.freed for r in records))} freed (measured)")
    return EXIT_OK


def _unread(reason: str) -> int:
    """An empty listing of a store that could not be read would say that nothing is kept: say why instead."""
    print(f"sysmcp history: the history store could not be read ({reason}): nothing listed", file=sys.stderr)
    return EXIT_INCOMPLETE


def _kept(kept: str | None, shown: Callable[[bytes | str], bool]) -> str:
    """A duplicate's kept copy, where the action's line names it: a run with wider roots may have kept
    a copy outside the roots in force, which the line then mentions without naming."""
    from sysmcp.engine.paths import escaped

    if kept is None:
        return ""
    return f"  (kept copy: {escaped(kept)})" if shown(kept) else "  (kept copy outside the allowed roots)"


def worded(exc: Exception) -> str:
    """The model's words for a refusal, on the command line too (``tools.errors`` for an engine's)."""
    from sysmcp.engine.faults import EngineError
    from sysmcp.tools.errors import as_tool_error

    return as_tool_error(exc).message if isinstance(exc, EngineError) else str(getattr(exc, "message", exc))
