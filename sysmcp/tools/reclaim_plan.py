"""reclaim_plan: "what can I delete?" — a read-only plan, largest first, kept for ``reclaim`` and as a script.

The engine (``sysmcp.fs.reclaim``) finds and counts; this module reads the arguments, applies the
roots, words the plan, keeps it (``PLANS``: the server's plan store) and offers it as a shell script
to review (a resource link, so ``sysmcp call reclaim_plan … -o plan.sh`` writes it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sysmcp.fs.reclaim import LINK, Item, Plan, PlanRequest, build_plan
from sysmcp.fs.reclaim_classes import CLASSES
from sysmcp.fs.reclaim_keep import PLAN_TTL_S, Kept, PlanKeeper
from sysmcp.fs.reclaim_script import render_script
from sysmcp.history import state
from sysmcp.protocol.context import Meter
from sysmcp.render import human_bytes, plural
from sysmcp.tools.descriptions import describe_paths
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput
from sysmcp.tools.walking import require_directory

#: Plans between this call and ``reclaim``: in the history store when there is one (a later server
#: process can apply them), else in this process's memory.
PLANS = PlanKeeper(state.active, state.now)

CLASS_NAMES = [*CLASSES, "duplicate"]
ITEMS_SHOWN = 20
DUPLICATES_TIMEOUT_S = 60.0

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "minLength": 1,
            "description": "Only items under this directory (default: the whole machine, or every root "
            "when the server is confined with --root).",
        },
        "classes": {
            "type": "array",
            "items": {"type": "string", "enum": CLASS_NAMES},
            "uniqueItems": True,
            "description": "Only these classes (default: all but duplicate, which walks 'path' and is slow).",
        },
        "duplicates": {
            "type": "boolean",
            "default": False,
            "description": "Also look for duplicate files under 'path' (a full find_duplicates walk).",
        },
    },
    "additionalProperties": False,
}

ITEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "class": {"type": "string"},
        "bytes": {"type": "integer", "description": "Disk bytes removing it would free (blocks, not sizes)."},
        "shared_bytes": {"type": "integer", "description": "Bytes of files whose other hard links stay."},
        "files": {"type": "integer"},
        "paths": {"type": "array", "items": {"type": "string"}, "description": "The first few paths."},
        "command": {"type": ["string", "null"], "description": "The vendor's own command, if any."},
        "cost": {"type": "string"},
        "safety": {"type": "string", "enum": ["regenerable cache", "review", "risky"]},
        "method": {"type": "string", "description": "How the figure was obtained."},
        "action": {"type": "string", "enum": ["delete", "truncate", "command"]},
        "note": {"type": ["string", "null"]},
        "holders": {"type": "array", "items": {"type": "object"}},
        "kept_copy": {"type": "string", "description": "Duplicates: the copy that stays."},
        "link_id": {
            "type": "string",
            "description": "Duplicates: the id to name in reclaim to replace the copies by hard links to the "
            "kept copy instead of removing them.",
        },
    },
    "required": ["id", "class", "bytes", "files", "cost", "safety", "method", "action"],
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "plan_id": {"type": "string"},
        "path": {"type": "string"},
        "total_bytes": {"type": "integer"},
        "items": {"type": "array", "items": ITEM_SCHEMA},
        "script": {"type": ["string", "null"], "description": "sysmcp:// URI of the plan as a shell script."},
        "kept": {"type": "string", "enum": ["history", "memory"]},
        "kept_note": {"type": ["string", "null"]},
    },
    "required": ["plan_id", "path", "total_bytes", "items"],
    "additionalProperties": False,
}

PATHS_SHOWN = 5


def duplicate_groups(root: Path, meter: Meter) -> list[list[bytes]]:
    """The one adapter to ``find_duplicates``: its groups as absolute paths, the kept copy first."""
    from sysmcp.fs.duplicates import DuplicatesRequest, find_duplicates
    from sysmcp.fs.walk import WalkOptions
    from sysmcp.tools.find_duplicates import meter_report

    base = os.fsencode(root)
    request = DuplicatesRequest(base, WalkOptions(one_file_system=True), timeout_s=DUPLICATES_TIMEOUT_S)
    search = find_duplicates(request, report=meter_report(meter), check_cancelled=meter.checkpoint)
    joined = base.rstrip(b"/") + b"/"
    return [[joined + os.fsencode(c.relative) for c in group.copies] for group in search.groups]


def item_view(item: Item) -> dict[str, Any]:
    paths = [os.fsdecode(e.path) for e in item.entries[:PATHS_SHOWN]]
    extra: dict[str, Any] = {}
    if item.keep is not None:
        extra["kept_copy"] = os.fsdecode(item.keep.path)
    if item.linkable:
        extra["link_id"] = item.id + LINK
    return {**item.facts(), "files": len(item.entries), "paths": paths, **extra}


def render(plan: Plan, shown: str) -> str:
    if not plan.items:
        return f"Reclaim plan {plan.id} for {shown}: nothing found to free."
    lines = [f"Reclaim plan {plan.id} for {shown}: {human_bytes(plan.bytes)} could be freed, largest first."]
    for item in plan.items[:ITEMS_SHOWN]:
        files = plural(len(item.entries), "file") if item.entries else "—"
        lines.append(f"  {item.id:<28} {human_bytes(item.bytes):>10}  {item.safety:<17} {files}")
        lines.append(f"      cost: {item.cost}")
        if item.command:
            lines.append(f"      vendor command: {item.command}")
        if item.note:
            lines.append(f"      note: {item.note}")
        if item.linkable:
            lines.append(f"      to hard-link instead of removing, name {item.id}{LINK} in reclaim")
        if item.shared:
            lines.append(
                f"      {human_bytes(item.shared)} more are hard-linked elsewhere and would stay in use"
            )
    if len(plan.items) > ITEMS_SHOWN:
        lines.append(f"  … and {len(plan.items) - ITEMS_SHOWN} more not shown")
    lines.append(
        "Nothing was removed. Review the script (dry run by default), or, on a server started with "
        "--allow-reclaim, call reclaim with this plan_id and the item ids."
    )
    return "\n".join(lines)


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    allowed = ctx.paths.allowed
    if "path" not in args and allowed is not None:  # the whole machine, as far as the roots let us see
        path = allowed[0]
        scope = tuple(os.fsencode(root) for root in allowed)
        shown = ", ".join(str(root) for root in allowed)
    else:
        path = await ctx.resolve(args.get("path", "/"), lambda found: require_directory(found, str(found)))
        scope, shown = (os.fsencode(path),), str(path)
    wanted = args.get("classes")
    duplicates: list[list[bytes]] = []
    if args.get("duplicates") or (wanted is not None and "duplicate" in wanted):
        duplicates = await ctx.run_in_worker(lambda meter: duplicate_groups(path, meter))
    request = PlanRequest(
        scope=scope,
        classes=tuple(wanted) if wanted is not None else None,
        duplicates=duplicates,
    )
    plan = await ctx.run_in_worker(lambda meter: build_plan(request, meter.checkpoint))
    kept = await ctx.run_in_worker(lambda meter: PLANS.put(plan))  # compress and write: off the loop
    text = render(plan, shown) + "\n" + kept_words(kept)
    links: tuple[ResourceLink, ...] = ()
    script_uri: str | None = None
    if plan.items:
        link = ctx.keep(
            f"reclaim-plan-{plan.id}.sh",
            render_script(plan),
            description=f"Reclaim plan {plan.id} as a POSIX shell script (dry run unless --apply)",
            mime_type="text/x-shellscript",
        )
        if isinstance(link, str):
            text += f"\nThe script: not kept, {link}"
        else:
            links, script_uri = (link,), link.uri
            text += f"\nThe plan as a script: {link.uri}"
    structured = {
        "plan_id": plan.id,
        "path": shown,
        "total_bytes": plan.bytes,
        "items": [item_view(item) for item in plan.items],
        "script": script_uri,
        "kept": "history" if kept.durable else "memory",
        "kept_note": None if kept.durable else kept.reason,
    }
    return ToolOutput(text, structured, links=links)


def kept_words(kept: Kept) -> str:
    hours = f"{PLAN_TTL_S / 3600:.0f} h"
    if kept.durable:
        return f"The plan is kept in the history store for {hours} (a restarted server can still apply it)."
    return (
        f"The plan lives only as long as this server ({kept.reason}), for {hours} at most: "
        "a restarted server cannot apply it."
    )


#: Descriptions of the output fields the schema above writes compactly (dotted paths; ``[]``: an array's items).
FIELD_WORDS: dict[str, str] = {
    "plan_id": "The id to give reclaim (with --allow-reclaim) or to find this plan again.",
    "items": "What could be freed, largest first.",
    "items[].id": "The item id to name in reclaim.",
    "items[].class": "The kind of reclaimable space (apt cache, rotated logs, trash, duplicates, ...).",
    "items[].cost": "What deleting it costs the user.",
    "items[].safety": "regenerable cache, review, or risky.",
    "items[].action": "What reclaim would do: remove, truncate, or run the vendor command.",
    "items[].note": "A caveat worth reading before acting.",
    "kept": "Where the plan is kept: the history store (survives a restart) or this server's memory.",
    "kept_note": "Why the plan is kept only in memory (history off, the store busy or unwritable); null when kept.",
}


TOOL = Tool(
    name="reclaim_plan",
    title="Reclaim plan",
    description=(
        "What could be deleted to free space, largest first: package manager caches (apt, dnf/yum, pacman, "
        "apk), language caches in home directories (pip, uv, npm, yarn, cargo, go), archived journal files, "
        "rotated logs, core dumps, trash, container build caches and dangling images, deleted files still "
        "held open, and (with duplicates=true) duplicate files. Each item: disk bytes it would free (hard "
        "links counted once, only when every link goes), the vendor's own command, what it costs, a safety "
        "level and how the figure was obtained. Read-only: nothing is removed. The plan gets an id and comes "
        "as a shell script to review (dry run by default); a server started with --allow-reclaim also has "
        "a reclaim tool that acts on chosen items of the plan."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=describe_paths(OUTPUT_SCHEMA, FIELD_WORDS),
    handler=handle,
)
