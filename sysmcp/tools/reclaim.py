"""reclaim: act on chosen items of a reviewed reclaim plan — the one tool that writes, and only opt-in.

Listed only when the server was started with ``--allow-reclaim`` (``sysmcp.tools.served_tools``):
without the flag it does not exist, and a call to it is an unknown tool like any other. A human stays in the loop:
through elicitation when the client declared it (form mode: one yes/no question naming each item's first
files, their owners and sizes, every file behind a link), and then only the user's yes acts: a question
that fails or times out gives no code, and a code sent by such a client is refused. Other clients get two
calls, the first returning the same list and a confirmation code bound to the plan, the exact item list
and their bytes, the second carrying it (the client's own tool-approval prompt is then the human in the
loop). The engine re-checks every file at the moment of acting and skips any that
changed; every action is logged on stderr; the answer gives bytes freed, measured, against planned.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from sysmcp.engine.errors import NotFound, Refused
from sysmcp.engine.paths import display, escaped, exact_bytes, is_within
from sysmcp.history import state
from sysmcp.logconfig import get_logger
from sysmcp.protocol.context import ClientDeclined
from sysmcp.reclaim import (
    LINK,
    ActionLog,
    Applied,
    Entry,
    Item,
    LogRecord,
    Outcome,
    Plan,
    apply_items,
    choose,
    confirmation_code,
    outside_roots,
)
from sysmcp.render import human_bytes, plural
from sysmcp.tools import reclaim_plan
from sysmcp.tools.descriptions import describe_paths
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput

log = get_logger("sysmcp.reclaim")

#: Keys the confirmation codes of a plan made without its own secret; never leaves the process.
SECRET = secrets.token_bytes(32)
ELICIT_TIMEOUT = 600.0  # seconds a person has to answer the question
PATHS_ASKED = 5  # files of each item named in the question (all of them behind a link)
SKIPS_SHOWN = 10

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "plan_id": {"type": "string", "minLength": 1},
        "items": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
            "uniqueItems": True,
            "description": f"Item ids; a duplicate's id + '{LINK}' hard-links its copies instead.",
        },
        "confirm": {"type": "string", "description": "The code the first call returned."},
    },
    "required": ["plan_id", "items"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["done", "confirmation_needed", "declined", "not_asked"]},
        "plan_id": {"type": "string"},
        "planned_bytes": {"type": "integer"},
        "freed_bytes": {"type": "integer", "description": "Measured: statvfs before and after each file."},
        "confirmation_code": {"type": "string"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "action": {"type": "string", "enum": ["delete", "truncate", "link"]},
                    "planned_bytes": {"type": "integer"},
                    "freed_bytes": {"type": "integer"},
                    "files_done": {"type": "integer"},
                    "skipped": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "path": {"type": "string"},
                                "path_bytes": {"type": "string"},
                                "reason": {"type": "string"},
                            },
                            "required": ["path", "reason"],
                        },
                    },
                },
                "required": ["id", "planned_bytes", "freed_bytes", "files_done", "skipped"],
            },
        },
    },
    "required": ["status", "plan_id", "planned_bytes"],
    "additionalProperties": False,
}

REASONS = {
    "changed": "changed since the plan",
    "symlink": "a symbolic link is there now",
    "gone": "gone already",
    "outside": "outside the allowed roots",
    "keep_changed": "the kept copy changed since the plan, so this copy stays",
    "other_filesystem": "on another filesystem than the kept copy",
    "linked": "already a hard link to the kept copy",
    "unverified": "after the rename the name does not lead to the kept copy",
    "differs": "its bytes are no longer the kept copy's, so it is not a duplicate any more",
    "keep_gone": "the kept copy is gone, so this may be the last copy",
    "attributes": "its owner, group, mode, ACLs or extended attributes differ from the kept copy's",
}


async def _plan(args: dict[str, Any], ctx: ToolContext) -> tuple[Plan, list[str]]:
    """The kept plan and the chosen ids, refused whole if an item names a file outside the roots in
    force (a plan kept by an unconfined server must not reach beyond this one's roots)."""
    try:
        plan = await ctx.run_in_worker(lambda meter: reclaim_plan.PLANS.get(args["plan_id"]))
    except NotFound as exc:
        raise NotFound(
            f"{exc.detail} (gone with a restart when history is off; make one with reclaim_plan)"
        ) from None
    except Refused as exc:
        if exc.reason != "expired":
            raise
        raise Refused(
            f"{exc.detail}; nothing removed: make a new plan with reclaim_plan and review it"
        ) from None
    chosen = list(dict.fromkeys(args["items"]))
    # kept copies too: a duplicate goes only if its kept copy stays, and that must be inside the roots
    outside = outside_roots(plan, chosen, _allowed(ctx))
    if outside:
        raise Refused(
            f"plan {plan.id} names {plural(len(outside), 'file')} outside the roots this server is confined to "
            f"(such as {escaped(outside[0])}); nothing removed"
        )
    return plan, chosen


def _listing(plan: Plan, chosen: list[str], shown: int) -> tuple[str, int]:
    """The question a person answers: each chosen item, what is done to it, and its first ``shown``
    files (escaped) with their owners and sizes; ``shown`` large enough is the full list."""
    picked = choose(plan, chosen)
    total = sum(item.bytes for item, _action in picked)
    lines = [f"Free {human_bytes(total)} in {plural(len(picked), 'item')} of plan {plan.id}?"]
    for item, action in picked:
        files = plural(len(item.entries), "file")
        if action == "link" and item.keep is not None:
            what = f"replace {files} by hard links to the kept copy"
            cost = "the names stay, but a change through one name then shows in every one"
        else:
            what, cost = f"{action} {files}", item.cost
        lines.append(f"  {item.id}: {what}, {human_bytes(item.bytes)} — {cost}")
        lines += reclaim_plan.path_lines(item, shown, "      ")
    return "\n".join(lines), total


def _question(plan: Plan, chosen: list[str], ctx: ToolContext) -> tuple[str, int, tuple[ResourceLink, ...]]:
    """The listing with the first paths of each item, and every path behind a link when some are cut."""
    question, total = _listing(plan, chosen, PATHS_ASKED)
    longest = max(len(item.entries) for item, _action in choose(plan, chosen))
    if longest <= PATHS_ASKED:
        return question, total, ()
    full, _total = _listing(plan, chosen, longest)
    line, links = ctx.keep_linked(
        f"reclaim-{plan.id}-files.txt",
        full + "\n",
        description=f"Every file the chosen items of reclaim plan {plan.id} would act on",
        label="Every file, with its owner and size",
    )
    return question + line, total, links


async def _confirmed(
    args: dict[str, Any], ctx: ToolContext, plan: Plan, chosen: list[str]
) -> ToolOutput | None:
    """None when the person said yes (or the code is right); else the answer to give instead of acting.

    A client that declared elicitation is asked, and only its user's yes confirms: no code is handed out
    to it, whatever happens to the question, and a code it sends is refused (a model must not confirm
    alone what the user can be asked). Other clients get the two-call code flow."""
    if ctx.request.can_elicit():
        if "confirm" in args:
            raise Refused(
                "this client can ask the user directly (it declared elicitation), so only the user's answer "
                "confirms, never a code; nothing removed: call reclaim again without 'confirm'"
            )
        return await _ask_user(ctx, plan, chosen)
    code = confirmation_code(plan.secret or SECRET, plan, chosen)
    given = args.get("confirm")
    if given is None:
        question, total, links = _question(plan, chosen, ctx)
        base = {"plan_id": plan.id, "planned_bytes": total}
        return ToolOutput(
            f"{question}\nNothing removed yet. Show this list to the user; if they agree, call reclaim again "
            f"with the same plan_id and items and confirm={code!r}.",
            {"status": "confirmation_needed", "confirmation_code": code, **base},
            links=links,
        )
    if not secrets.compare_digest(str(given), code):
        raise Refused(
            "the confirmation code does not match this plan and exactly these items; nothing removed "
            "(call reclaim without 'confirm' to get the code for this list)"
        )
    return None


async def _ask_user(ctx: ToolContext, plan: Plan, chosen: list[str]) -> ToolOutput | None:
    """Elicitation: None on the user's yes; else the answer that says nothing was removed, and why."""
    question, total, links = _question(plan, chosen, ctx)
    base = {"plan_id": plan.id, "planned_bytes": total}
    schema = {
        "type": "object",
        "properties": {"confirm": {"type": "boolean", "title": "Yes, remove these files"}},
        "required": ["confirm"],
    }
    try:
        answer = await ctx.request.ask(
            "elicitation/create", {"message": question, "requestedSchema": schema}, ELICIT_TIMEOUT
        )
    except ClientDeclined as exc:
        log.warning("elicitation failed; nothing removed", plan=plan.id, reason=str(exc))
        return ToolOutput(
            f"Nothing removed: the user could not be asked ({exc}). This client declared elicitation, so "
            "only the user's yes confirms and no confirmation code is given; try again when they can answer.",
            {"status": "not_asked", **base},
            links=links,
        )
    content = answer.get("content")
    if answer.get("action") == "accept" and isinstance(content, dict) and content.get("confirm") is True:
        return None
    return ToolOutput(
        f"Nothing removed: the user did not confirm ({answer.get('action', 'no answer')}).",
        {"status": "declined", **base},
        links=links,
    )


def _allowed(ctx: ToolContext) -> Any:
    roots = ctx.paths.allowed

    def allowed(path: bytes) -> bool:
        return roots is None or any(is_within(Path(os.fsdecode(path)), root) for root in roots)

    return allowed


def _logger(plan: Plan, actions: ActionLog) -> Any:
    """Each action on stderr (at warning: shown at the default level) and in the history store."""

    def told(item: Item, entry: Entry, action: str, outcome: Outcome) -> None:
        path = os.fsdecode(entry.path)
        planned, freed = entry.identity.disk, outcome.freed
        log.warning(
            "reclaim done" if outcome.done else "reclaim skipped",
            plan=plan.id,
            item=item.id,
            action=action,
            path=path,
            reason=outcome.reason,
            planned=planned,
            freed=freed,
        )
        done = "done" if outcome.done else "skipped"
        actions.record(
            LogRecord(state.now(), plan.id, item.id, path, action, done, outcome.reason, planned, freed)
        )

    return told


def _skip_view(outcome: Outcome) -> dict[str, Any]:
    exact = exact_bytes(outcome.path)
    view = {"path": display(outcome.path), "reason": outcome.reason or ""}
    return view if exact is None else {**view, "path_bytes": exact}


def render(plan: Plan, results: list[Applied]) -> tuple[str, dict[str, Any]]:
    planned = sum(a.item.bytes for a in results)
    freed = sum(a.freed for a in results)
    lines = [
        f"Reclaim of plan {plan.id}: {human_bytes(freed)} freed (measured), {human_bytes(planned)} planned."
    ]
    items: list[dict[str, Any]] = []
    for applied in results:
        done = sum(1 for o in applied.outcomes if o.done)
        skipped = [o for o in applied.outcomes if not o.done]
        lines.append(
            f"  {applied.item.id}: {plural(done, 'file')} {'linked' if applied.action == 'link' else 'done'}, "
            f"{human_bytes(applied.freed)} freed of "
            f"{human_bytes(applied.item.bytes)} planned" + (f"; {len(skipped):,} skipped" if skipped else "")
        )
        for outcome in skipped[:SKIPS_SHOWN]:
            reason = REASONS.get(outcome.reason or "", outcome.reason or "")
            lines.append(f"      skipped {escaped(outcome.path)}: {reason}")
        if len(skipped) > SKIPS_SHOWN:
            lines.append(f"      … and {len(skipped) - SKIPS_SHOWN} more not shown")
        items.append(
            {
                "id": applied.item.id,
                "action": applied.action,
                "planned_bytes": applied.item.bytes,
                "freed_bytes": applied.freed,
                "files_done": done,
                "skipped": [_skip_view(o) for o in skipped],
            }
        )
    structured = {
        "status": "done",
        "plan_id": plan.id,
        "planned_bytes": planned,
        "freed_bytes": freed,
        "items": items,
    }
    return "\n".join(lines), structured


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    plan, chosen = await _plan(args, ctx)
    refusal = await _confirmed(args, ctx, plan, chosen)
    if refusal is not None:
        return refusal
    allowed = _allowed(ctx)
    log.warning("reclaim starting", plan=plan.id, items=chosen)

    def work(meter: Any) -> tuple[list[Applied], ActionLog]:
        actions = ActionLog(state.active(), state.now)  # in the worker: the store opens off the event loop
        try:
            done = apply_items(plan, chosen, allowed, log=_logger(plan, actions), checkpoint=meter.checkpoint)
            return done, actions
        finally:
            actions.flush()  # what was done before a cancellation is logged too

    results, actions = await ctx.run_in_worker(work)
    text, structured = render(plan, results)
    if actions.failure is None:
        text += "\nEach action is logged in the history store (sysmcp history --reclaim) and on stderr."
    else:
        text += f"\nEach action is logged on stderr only: {actions.failure}."
    return ToolOutput(text, structured)


#: Descriptions of the output fields the schema above writes compactly (dotted paths; ``[]``: an array's items).
FIELD_WORDS: dict[str, str] = {
    "status": "done, confirmation_needed (call again with the code), declined (the user said no) or "
    "not_asked (the client declared elicitation but the question failed or timed out: nothing removed).",
    "plan_id": "The plan acted on.",
    "planned_bytes": "Bytes the chosen items were planned to free.",
    "confirmation_code": "Give it back in confirm= to act on exactly these items.",
    "items": "Per chosen item: what was done.",
    "items[].id": "The item id.",
    "items[].planned_bytes": "Bytes this item was planned to free.",
    "items[].freed_bytes": "Bytes measured freed for this item.",
    "items[].files_done": "Files acted on.",
    "items[].skipped[].path_bytes": "The path's exact bytes in base64, when they are not UTF-8 (then "
    "'path' shows them as \\xNN).",
    "items[].skipped[].reason": "Why the file was left alone (changed, replaced, a symlink, outside the roots).",
}


TOOL = Tool(
    name="reclaim",
    title="Reclaim space (removes files)",
    description=(
        "Removes the files of chosen items of a reclaim_plan, re-checking each at the moment of acting. Asks "
        "the user first: through the client's elicitation when it has it (then only the user's answer "
        "confirms), else the first call returns the list and a code for a second call (show the user the list). "
        "Reports bytes freed against planned."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=describe_paths(OUTPUT_SCHEMA, FIELD_WORDS),
    handler=handle,
    annotations={
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
        "openWorldHint": False,
    },
)
