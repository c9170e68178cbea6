"""reclaim_plan: "what can I delete?" — a read-only plan, largest first, kept for ``reclaim`` and as a script.

The engine (``sysmcp.reclaim._plan``) finds and counts; this module reads the arguments, applies the
roots, words the plan, keeps it (``PLANS``: the server's plan store) and offers it as a shell script
to review (a resource link, so ``sysmcp call reclaim_plan … -o plan.sh`` writes it).
"""

from __future__ import annotations

import base64
import functools
import os
import pwd
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, cast

from sysmcp.engine.calls import Cancel, Progress, never_cancelled, no_progress
from sysmcp.engine.paths import escaped, one_line
from sysmcp.history import state
from sysmcp.protocol.failures import ToolError
from sysmcp.reclaim import (
    CLASSES,
    LINK,
    PLAN_TTL_S,
    Durability,
    Item,
    Plan,
    PlanKeeper,
    PlannedFile,
    PlanRequest,
    build_plan,
    render_script,
)
from sysmcp.render import and_more, human_bytes, more_not_shown, plural
from sysmcp.tools import schemas as js
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput, with_link
from sysmcp.tools.typed import ABSENT, Open, Opt, prop, result
from sysmcp.tools.walking import require_directory

#: Plans between this call and ``reclaim``: in the history store when there is one (a later server
#: process can apply them), else in this process's memory.
PLANS = PlanKeeper(state.active, state.now)

CLASS_NAMES = [*CLASSES, "duplicate"]
ITEMS_SHOWN = 20
PLAN_PATHS_SHOWN = 3  # paths of each item in the plan's text
HOLDERS_SHOWN = 3
DUPLICATES_TIMEOUT_S = 60.0

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "path": js.path_argument("Only under this directory. Omit: everywhere."),
        "classes": js.typed(
            "array",
            "Only these. Default: all but duplicate.",
            items=js.string(enum=CLASS_NAMES),
            uniqueItems=True,
        ),
        "duplicates": js.boolean("Also duplicates under path (slow).", default=False),
    },
    required=None,
)


@result
class PlanItem(Open):
    """One item of the plan as the answer shows it (every property is always there; the duplicates'
    own ones only on a duplicate)."""

    id: str = prop("The item id to name in reclaim.")
    klass: str = prop(
        "The kind of reclaimable space (apt cache, rotated logs, trash, duplicates, ...).", name="class"
    )
    bytes: int = prop("Disk bytes removing it would free (blocks, not sizes).")
    shared_bytes: Opt[int] = prop("Bytes of files whose other hard links stay.")
    files: int = prop()
    paths: Opt[list[str]] = prop("The first few paths.")
    command: Opt[str | None] = prop("The vendor's own command, if any.")
    cost: str = prop("What deleting it costs the user.")
    safety: Literal["regenerable cache", "review", "risky"] = prop("regenerable cache, review, or risky.")
    method: str = prop("How the figure was obtained.")
    action: Literal["delete", "truncate", "command"] = prop(
        "What reclaim would do: remove, truncate, or run the vendor command."
    )
    note: Opt[str | None] = prop("A caveat worth reading before acting.")
    holders: Opt[list[dict[str, Any]]] = prop()
    kept_copy: Opt[str] = prop("Duplicates: the copy that stays.")
    kept_owner: Opt[str] = prop("Duplicates: who owns the kept copy.")
    owners: Opt[list[str]] = prop("Duplicates: who owns the extra copies (always the kept copy's owner).")
    no_link: Opt[str | None] = prop(
        "Duplicates: why the copies cannot become hard links to the kept copy (another filesystem, owner, "
        "group, mode, ACL or extended attribute)."
    )
    link_id: Opt[str] = prop(
        "Duplicates: the id to name in reclaim to replace the copies by hard links to the kept copy instead "
        "of removing them."
    )


@result
class ReclaimPlan:
    plan_id: str = prop("The id to give reclaim (with --allow-reclaim) or to find this plan again.")
    path: str = prop()
    total_bytes: int = prop("Disk bytes all the items together could free.")
    items: list[PlanItem] = prop("What could be freed, largest first.")
    complete: bool = prop(
        "False when the search for duplicates stopped early (its deadline, no descriptor left): duplicates "
        "not confirmed by then are not in the plan."
    )
    stopped_reason: str | None = prop("Why the search for duplicates stopped early; null when complete.")
    script: Opt[str | None] = prop("sysmcp:// URI of the plan as a shell script.")
    kept: Opt[Literal["history", "memory"]] = prop(
        "Where the plan is kept: the history store (survives a restart) or this server's memory."
    )
    kept_note: Opt[str | None] = prop(
        "Why the plan is kept only in memory (history off, the store busy or unwritable); null when kept."
    )
    checked: Opt[list[str]] = prop("The classes looked for (those with no item had nothing to free).")
    protected_files: Opt[int] = prop(
        "Files left out because they, or their directory (for a removal), are marked immutable or "
        "append-only (chattr +i/+a): never acted on.",
        default=ABSENT,
    )


PATHS_SHOWN = 5


def duplicate_groups(
    roots: Sequence[Path], progress: Progress = no_progress, cancel: Cancel = never_cancelled
) -> list[list[tuple[bytes, os.stat_result]]]:
    """``duplicate_search``'s groups, whether or not the search ran to its end."""
    return duplicate_search(roots, progress, cancel)[0]


def duplicate_search(
    roots: Sequence[Path], progress: Progress = no_progress, cancel: Cancel = never_cancelled
) -> tuple[list[list[tuple[bytes, os.stat_result]]], str | None]:
    """The one adapter to ``find_duplicates``: its groups over every one of ``roots`` (a copy under one
    and a copy under another are duplicates) as absolute paths, each with what its open descriptor was
    when its bytes were hashed (the plan's identity of it, not a later look); and why the search stopped
    early, if it did (its deadline, no descriptor left), so a plan never reads as "no duplicates" then."""
    from sysmcp.engine.duplicates import DuplicatesRequest, find_duplicates
    from sysmcp.engine.walk import WalkOptions

    first, *more = [os.fsencode(root) for root in roots]
    request = DuplicatesRequest(
        first, WalkOptions(one_file_system=True), timeout_s=DUPLICATES_TIMEOUT_S, more_roots=tuple(more)
    )
    search = find_duplicates(request, progress, cancel)
    joined = request.base.rstrip(b"/") + b"/"
    groups = [
        [(joined + os.fsencode(c.relative), st) for c in group.copies if (st := c.stat()) is not None]
        for group in search.groups
    ]
    return groups, search.stopped


def item_view(item: Item) -> PlanItem:
    keep = item.keep
    return PlanItem(
        id=item.id,
        klass=item.klass,
        bytes=item.bytes,
        shared_bytes=item.shared,
        files=len(item.entries),
        paths=[os.fsdecode(e.path) for e in item.entries[:PATHS_SHOWN]],  # shown by in_json
        command=item.command,
        cost=item.cost,
        safety=cast(Any, item.safety),
        method=item.method,
        action=cast(Any, item.action),
        note=item.note,
        holders=[holder_view(h) for h in item.holders],
        kept_copy=os.fsdecode(keep.path) if keep else ABSENT,
        kept_owner=owner(keep.identity.uid) if keep else ABSENT,
        owners=sorted({owner(e.identity.uid) for e in item.entries}) if keep else ABSENT,
        no_link=item.no_link,
        link_id=item.id + LINK if item.linkable else ABSENT,
    )


def holder_view(holder: dict[str, object]) -> dict[str, object]:
    """A deleted-open file's holder as the answer gives it: the name the file had as ``os.fsdecode``
    made it (``in_json`` shows it). A plan kept by an older sysmcp held it as ``display``'s form with
    its bytes in base64 beside it (``file_bytes``): that is read back to the same name."""
    if not isinstance(holder.get("file_bytes"), str):
        return dict(holder)
    given = {key: value for key, value in holder.items() if key != "file_bytes"}
    given["file"] = os.fsdecode(base64.b64decode(str(holder["file_bytes"])))
    return given


@functools.lru_cache(maxsize=256)
def owner(uid: int) -> str:
    """The user name of ``uid``, or the number when no account has it."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)


def file_line(entry: PlannedFile, name: bytes | None = None) -> str:
    shown = escaped(entry.path if name is None else name)
    return f"{shown}  ({owner(entry.identity.uid)}, {human_bytes(entry.identity.size)})"


def path_lines(item: Item, shown: int, indent: str) -> list[str]:
    """For a person to see what goes: the item's first ``shown`` paths (escaped), each with its owner and
    size, then '… and N more'; a duplicate's kept copy and its owner; a deleted-open file's old name and
    who holds it (its entry is only a /proc/PID/fd link)."""
    if item.held:
        lines = []
        for holder in item.holders[:HOLDERS_SHOWN]:
            name = escaped(str(holder_view(holder).get("file", "?")))
            command = escaped(str(holder["command"]))
            lines.append(
                f"{indent}deleted file {name}, held by pid {holder['pid']} ({command}) on fd {holder['fd']}"
            )
        if len(item.holders) > HOLDERS_SHOWN:
            lines.append(f"{indent}… and {plural(len(item.holders) - HOLDERS_SHOWN, 'more holder')}")
        return lines + [f"{indent}through {file_line(entry)}" for entry in item.entries[:shown]]
    lines = [indent + file_line(entry) for entry in item.entries[:shown]]
    if len(item.entries) > shown:
        lines.append(f"{indent}{and_more(len(item.entries) - shown)}")
    if item.keep is not None:
        lines.append(f"{indent}kept copy: {file_line(item.keep)}")
    return lines


def protected_lines(plan: Plan) -> list[str]:
    """The files left out because someone marked them to stay (immutable or append-only), the first few
    by name: a person wondering why a log is not in the plan reads why."""
    if not plan.protected:
        return []
    lines = [
        f"{plural(len(plan.protected), 'file')} left out: marked immutable or append-only, or in a directory "
        "so marked (lsattr shows i or a; chattr +i/+a), so sysmcp never removes, empties or replaces them "
        "(chattr -i/-a first, then plan again, if they should go):"
    ]
    lines += [f"  {escaped(path)}" for path in plan.protected[:PLAN_PATHS_SHOWN]]
    if len(plan.protected) > PLAN_PATHS_SHOWN:
        lines.append(f"  {and_more(len(plan.protected) - PLAN_PATHS_SHOWN)}")
    return lines


def render(plan: Plan, shown: str, *, reclaim_served: bool = False) -> str:
    if not plan.items:
        nothing = f"Reclaim plan {plan.id} for {shown}: nothing found to free."
        return "\n".join([nothing, *protected_lines(plan)])
    lines = [f"Reclaim plan {plan.id} for {shown}: {human_bytes(plan.bytes)} could be freed, largest first."]
    for item in plan.items[:ITEMS_SHOWN]:
        files = plural(len(item.entries), "file") if item.entries else "—"
        lines.append(f"  {item.id:<28} {human_bytes(item.bytes):>10}  {item.safety:<17} {files}")
        lines += path_lines(item, PLAN_PATHS_SHOWN, "      ")
        lines.append(f"      cost: {item.cost}")
        if item.command:
            lines.append(f"      vendor command: {one_line(item.command)}")  # its words: shell_word's
        if item.note:  # may name a file (a kept copy) or a process: escaped like every name
            lines.append(f"      note: {escaped(item.note)}")
        if item.linkable:
            lines.append(f"      to hard-link instead of removing, name {item.id}{LINK} in reclaim")
        if item.shared:
            lines.append(
                f"      {human_bytes(item.shared)} more are hard-linked elsewhere and would stay in use"
            )
    if len(plan.items) > ITEMS_SHOWN:
        more = more_not_shown(len(plan.items) - ITEMS_SHOWN, "item")
        lines.append(f"  {more} (every item is in the structured result and in the script)")
    lines += protected_lines(plan)
    lines.append(
        "Nothing was removed. Review the script (dry run by default), or call reclaim with this plan_id and "
        "the item ids (the user confirms the exact list first)."
        if reclaim_served
        else "Nothing was removed. Review the script (dry run by default), or, on a server started with "
        "--allow-reclaim, call reclaim with this plan_id and the item ids."
    )
    return "\n".join(lines)


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    paths = ctx.paths.allowed
    if "path" in args or not paths:  # else the whole machine, as far as the roots let us see
        path = await ctx.resolve(args.get("path", "/"), lambda found: require_directory(found, str(found)))
        refuse_pseudo(path)
        paths = [path]
    shown = ", ".join(escaped(str(root)) for root in paths)
    wanted = args.get("classes")
    looked = [name for name in CLASS_NAMES if name in (CLASSES if wanted is None else wanted)]
    if args.get("duplicates") and "duplicate" not in looked:
        looked.append("duplicate")
    duplicates, stopped = (
        await ctx.run_engine(duplicate_search, paths) if "duplicate" in looked else ([], None)
    )
    scope = tuple(os.fsencode(root) for root in paths)
    request = PlanRequest(scope, classes=None if wanted is None else tuple(wanted), duplicates=duplicates)
    plan = await ctx.run_engine(build_plan, request)
    kept = await ctx.run_in_worker(lambda meter: PLANS.put(plan))  # compress and write: off the loop
    text = (
        partial_words(stopped)
        + render(plan, shown, reclaim_served="reclaim" in ctx.served)
        + "\n"
        + checked_words(plan, looked, stopped)
    )
    if plan.items:  # an empty plan is nothing to keep talking about
        text += kept_words(kept)
    text = text.rstrip("\n")
    link = ctx.keep(  # an empty plan too: ``-o plan.sh`` then saves a script that says so, not this text
        f"reclaim-plan-{plan.id}.sh",
        render_script(plan) if plan.items else nothing_to_do(plan),
        description=f"Reclaim plan {plan.id} as a POSIX shell script (dry run unless --apply)",
        mime_type="text/x-shellscript",
    )
    empty = "" if plan.items else " (it has nothing to do)"
    text, links = with_link(text, link, f"The plan as a script{empty}: {{}}", "The script: not kept, {}")
    answer = ReclaimPlan(
        plan_id=plan.id,
        path=shown,
        total_bytes=plan.bytes,
        items=[item_view(item) for item in plan.items],
        complete=stopped is None,
        stopped_reason=stopped,
        script=links[0].uri if links else None,
        kept="history" if kept.durable else "memory",
        kept_note=None if kept.durable else kept.reason,
        checked=looked,
        protected_files=len(plan.protected) or ABSENT,
    )
    return ToolOutput.typed(text, answer, links)


def refuse_pseudo(path: Path) -> None:
    """A kernel or virtual filesystem (/proc, /sys, /dev's devtmpfs) stores no files to free: say so,
    rather than "nothing found to free". Memory filesystems (tmpfs) hold real files and are planned."""
    from sysmcp.engine.mounts import default_partitions

    mount = default_partitions()().holding(str(path))
    if mount is not None and mount.pseudo and mount.fs_type not in ("tmpfs", "ramfs"):
        raise ToolError(
            f"{escaped(str(path))} is on {escaped(mount.fs_type)} (mounted at {escaped(mount.mount_point)}), a "
            "pseudo filesystem: the kernel's "
            "interface, not stored files, so there is nothing there to free. Give a directory on a disk, or "
            "omit path for the whole machine."
        )


def partial_words(duplicates_stopped: str | None) -> str:
    """The first line of a plan whose search for duplicates stopped early, as every partial answer starts:
    the plan holds what it found, not all there is."""
    if not duplicates_stopped:
        return ""
    return (
        f"PARTIAL RESULT: the search for duplicates stopped early ({duplicates_stopped}); duplicates not "
        "confirmed by then are not in this plan.\n"
    )


def checked_words(plan: Plan, looked: list[str], duplicates_stopped: str | None = None) -> str:
    """The classes looked for with nothing found, so that "none" never reads as "not checked" (nor
    duplicates, when their search stopped early: ``partial_words`` says so)."""
    found = {item.klass for item in plan.items}
    empty = [
        name for name in looked if name not in found and not (name == "duplicate" and duplicates_stopped)
    ]
    if "deleted_open" in empty and os.geteuid() != 0:  # only this user's processes could be read
        empty[empty.index("deleted_open")] = (
            "deleted_open (among this user's processes: other users' need root)"
        )
    return f"Checked, nothing found: {', '.join(empty)}.\n" if empty else ""


def nothing_to_do(plan: Plan) -> str:
    """The script of an empty plan: valid shell that says there is nothing to do (ASCII, no path in it)."""
    return (
        "#!/bin/sh\n"
        f"# sysmcp reclaim plan {plan.id}: nothing found to free.\n"
        f"echo 'sysmcp reclaim plan {plan.id}: nothing found to free, nothing to do.'\n"
    )


def kept_words(kept: Durability) -> str:
    hours = f"{PLAN_TTL_S / 3600:.0f} h"
    if kept.durable:
        return f"The plan is kept in the history store for {hours} (a restarted server can still apply it)."
    return (
        f"The plan lives only as long as this server ({kept.reason}), for {hours} at most: "
        "a restarted server cannot apply it."
    )


TOOL = Tool(
    name="reclaim_plan",
    title="Reclaim plan",
    description=(
        "What could be deleted to free space, largest first: package and language caches, old journals, "
        "rotated logs, core dumps, trash, container leftovers, deleted-but-open files. Per item the bytes "
        "freed, the vendor's command, its cost and safety; the plan as a script to review, with an id."
    ),
    input_schema=INPUT_SCHEMA,
    output=ReclaimPlan,
    handler=handle,
)
