"""Command line: ``sysmcp`` serves MCP on stdio; ``sysmcp call`` is a tiny client for trying tools."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence

from sysmcp.cli.options import ROOTS_ENV, build_parser, fleet_options, plain_serve_args
from sysmcp.cli.snapshot import configure_history
from sysmcp.cli.stdout import writing
from sysmcp.logconfig import configure

__all__ = ["ROOTS_ENV", "build_parser", "main", "plain_serve_args"]


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(given) if given else plain_serve_args()
    if args.command not in (None, "serve"):  # a server does both in serve()
        gc.enable()  # off since __main__
        configure(args.log_level)  # stdout is the answer, or trace's client's wire: logs go to stderr
    roots = [*(args.root or []), *getattr(args, "more_roots", [])]
    if not roots and os.environ.get(ROOTS_ENV):
        roots = [r for r in os.environ[ROOTS_ENV].split(os.pathsep) if r]
        if not roots:  # set, yet naming nothing: refuse rather than silently serve the whole filesystem
            print(f"sysmcp: ${ROOTS_ENV} is set but names no directory", file=sys.stderr)
            return 2
    if args.command == "trace":
        from sysmcp.cli.trace import run_trace

        return run_trace(args.server_command, args.output)
    configure_history(args)  # on unless --no-history: the server's tools record as they answer
    if args.command in ("snapshot", "history"):
        from sysmcp.cli.snapshot import run as run_snapshot

        return writing(args.command, lambda: run_snapshot(args, roots))
    if args.command == "call":
        from sysmcp.cli.call import run_command

        return writing("call", lambda: run_command(args, roots))
    try:
        fleet = fleet_options(args)
    except (OSError, ValueError) as exc:  # a malformed inventory names its line; never half a fleet
        print(f"sysmcp: {exc}", file=sys.stderr)
        return 2
    from sysmcp.cli.serve import serve

    return serve(args.log_level, roots, fleet, allow_reclaim=args.allow_reclaim)
