"""what_changed: what grew, what shrank, since when, where the bytes went and when the disk fills.

The flow (docs/history.md): the store finds the snapshots of this path's series (host, filesystem
identity, root, scan options); when the newest is older than ``FRESH_S`` a fresh scan is made (and
leaves a snapshot); ``history.diff`` compares the two; the disk readings give the fill rate. Every
path shown passes the roots in force on read, whoever recorded the snapshot. Without a baseline the
answer says so, records one, and lists files modified since then: a lower bound.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from sysmcp.history import state
from sysmcp.history.compare import Comparison, compare
from sysmcp.history.snapshots import within
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ArgumentError
from sysmcp.render import age, plural, table
from sysmcp.tools import schemas as js
from sysmcp.tools.dir_usage import FULL_FILES, parse_duration
from sysmcp.tools.merging import HostOutcome, fleet_output
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput, listing_name
from sysmcp.tools.typed import from_json, to_json
from sysmcp.tools.walking import (
    directory_argument,
    scan_failure,
    timeout_property,
    walk_options,
    walk_properties,
)
from sysmcp.tools.what_changed_text import Fill, Share, WhatChanged, render, signed

DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 300.0

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "path": js.path_argument(),
        "since": js.string(
            "'24h', '7d', an ISO 8601 time, or 'last' (the snapshot before the newest).",
            minLength=1,
            maxLength=40,
            default="24h",
        ),
        "until": js.string("As since, not 'last'. Default: now.", minLength=1, maxLength=40),
        "top_n": js.top_n_argument(maximum=50, default=10),
        "timeout_s": timeout_property(DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S),
        **walk_properties("path"),
    }
)


def parse_when(value: str, name: str, now: float) -> float:
    """Epoch seconds of '24h' (back from now) or an ISO 8601 time; ``ArgumentError`` naming ``name``."""
    try:
        return now - parse_duration(value, name)
    except ArgumentError:
        pass
    try:
        return datetime.fromisoformat(value.strip()).timestamp()
    except ValueError:
        raise ArgumentError(
            f"Invalid arguments: {name!r} must be a duration ('24h', '7d'), an ISO 8601 time "
            f"('2026-11-30T09:00'){' or last' if name == 'since' else ''}, got {value!r}"
        ) from None


def parse_since(value: str, now: float) -> float:
    """``since`` in epoch seconds; a time in the future is refused (nothing can have changed since)."""
    since = parse_when(value, "since", now)
    if since > now:
        raise ArgumentError(
            f"Invalid arguments: 'since' is in the future ({value!r}): give a duration back from now "
            "('24h') or a past time"
        )
    return since


def comparison(
    path: Path,
    args: dict[str, Any],
    now: float,
    visible: Callable[[bytes | str], bool],
    clock: Callable[[], float] = state.now,
) -> Comparison:
    """The engine's request from validated arguments (``since`` 'last': None)."""
    since_raw: str = args["since"]
    return Comparison(
        path=os.fsencode(path),
        since=None if since_raw.strip().lower() == "last" else parse_since(since_raw, now),
        until=parse_when(args["until"], "until", now) if "until" in args else None,
        now=now,
        timeout_s=min(float(args["timeout_s"]), MAX_TIMEOUT_S),
        options=walk_options(args),
        files_kept=FULL_FILES,
        visible=visible,
        clock=clock,
    )


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    now = time.time()

    def describe(meter: Meter, elapsed: float) -> str:
        return f"{plural(int(meter.done), 'entry')} scanned"

    request = comparison(
        Path(args["path"]), args, now, within(ctx.paths.allowed)
    )  # bad arguments: refused first
    path, shown = await directory_argument(ctx, args["path"])
    request = replace(request, path=os.fsencode(path))
    try:
        found = await ctx.run_engine(compare, request, describe=describe)
    except OSError as exc:
        raise scan_failure(shown, path, exc) from None
    text, answer, full = render(shown, found, args)
    links: tuple[ResourceLink, ...] = ()
    if full is not None:
        line, links = ctx.keep_linked(
            listing_name("what_changed", shown, ".tsv"),
            full,
            description=f"Every directory that changed under {shown}",
            label="Full list of changes",
            mime_type="text/tab-separated-values",
        )
        text += line
    return ToolOutput(text, to_json(answer), links=links, result=answer)


def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
    """One table: which hosts grew most, where (each host's top directory), and their fill rates."""
    answered = [(o.host, from_json(WhatChanged, o.result)) for o in outcomes if o.ok and o.result is not None]
    answered.sort(key=lambda pair: -pair[1].total_delta_bytes)
    rows = [["HOST", "GROWTH", "WHERE", "FILL/DAY", "FULL IN"]]
    view: list[dict[str, Any]] = []
    for host, result in answered:
        share = result.attribution if isinstance(result.attribution, Share) else None
        top = share.paths[0] if share and share.paths else ""
        if not top and result.changes:
            top = result.changes[0].path
        fs = result.filesystem if isinstance(result.filesystem, Fill) else None
        to_full = fs.seconds_to_full if fs else None
        rows.append(
            [
                host,
                signed(result.total_delta_bytes) if result.comparable else "no baseline",
                top or "-",
                signed(int(fs.bytes_per_day)) if fs else "-",
                age(to_full) if to_full is not None else "-",
            ]
        )
        view.append(
            {
                "host": host,
                "total_delta_bytes": result.total_delta_bytes,
                "comparable": result.comparable,
                "where": top or None,
                "bytes_per_day": fs.bytes_per_day if fs else None,
                "seconds_to_full": to_full,
            }
        )
    body = table(rows, right=(1, 3)) if answered else []
    return fleet_output(outcomes, body, {"hosts": view})


TOOL = Tool(
    name="what_changed",
    title="What changed",
    description=(
        "What grew, shrank, appeared or disappeared under a directory since a time, from sysmcp's own earlier scans: "
        "per-directory deltas, where the growth is, the largest new files, the fill rate and time to full, "
        "and changes against a hash_tree baseline. Start here when a disk fills or something grew."
    ),
    input_schema=INPUT_SCHEMA,
    output=WhatChanged,
    handler=handle,
    merge=merge,
)
