"""reclaim: act on chosen items of a reviewed reclaim plan — the one tool that writes, and only opt-in.

Listed only when the server was started with ``--allow-reclaim`` (``sysmcp.tools.served_tools``):
without the flag it does not exist, and a call to it is an unknown tool like any other. A human stays in the loop:
through elicitation when the client declared it (form mode: one yes/no question naming every file acted
on, with its owner and size, at most ``APPROVAL_FILES`` of them: the act is limited to the files named,
and the question says how many are left for a later call), and then only the user's yes acts: a question
that fails or times out gives no code, and a code sent by such a client is refused. Other clients get two
calls, the first returning the same list and a confirmation code bound to the plan, the exact item list
and their bytes, the second carrying it (the client's own tool-approval prompt is then the human in the
loop). The engine re-checks every file at the moment of acting and skips any that
changed; every action is logged on stderr and in the history store; the answer gives bytes freed,
measured, against planned. A call cancelled part way gets no reply (MCP), so the next call on the plan
says what the earlier one did, and never acts again on a file it did.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal, cast

from sysmcp.engine.calls import Cancel, Progress
from sysmcp.engine.faults import NotFound, Refused
from sysmcp.engine.paths import escaped, shell_word, within_roots
from sysmcp.history import state
from sysmcp.logconfig import get_logger, lines_lost, logs_at
from sysmcp.protocol.context import ClientDeclined
from sysmcp.reclaim import (
    LINK,
    ActionLog,
    ApplyRequest,
    FileResult,
    Item,
    ItemResult,
    LogRecord,
    Plan,
    PlannedFile,
    apply_items,
    choose,
    confirmation_code,
    outside_roots,
    plan_log,
)
from sysmcp.render import human_bytes, more_not_shown, plural
from sysmcp.tools import reclaim_plan
from sysmcp.tools import schemas as js
from sysmcp.tools.registry import Tool, ToolContext, ToolOutput
from sysmcp.tools.typed import ABSENT, Open, Opt, prop, result

log = get_logger("sysmcp.reclaim")

#: Keys the confirmation codes of a plan made without its own secret; never leaves the process.
SECRET = secrets.token_bytes(32)
ELICIT_TIMEOUT = 600.0  # seconds a person has to answer the question
#: Files one approval names, each with its owner and size: a call acts on these alone (never on a file the
#: person was not shown), and the rest of the chosen items wait for another call.
APPROVAL_FILES = 100
SKIPS_SHOWN = 10
#: What each plan's reclaims did in this process, newest plans last: the history store's log when history
#: is off or could not take it (a cancelled call is answered by the next one).
ACTED: dict[str, list[LogRecord]] = {}
ACTED_PLANS = 32
_ACTED_LOCK = threading.Lock()  # workers of two reclaims of one plan may finish at once

INPUT_SCHEMA: dict[str, Any] = js.arguments(
    {
        "plan_id": js.string(minLength=1),
        "items": js.typed(
            "array",
            f"Item ids; a duplicate's id + '{LINK}' hard-links its copies instead.",
            items=js.string(minLength=1),
            minItems=1,
            uniqueItems=True,
        ),
        "confirm": js.string("The code the first call returned."),
    },
    required=("plan_id", "items"),
)


@result
class Skip(Open):
    path: str = prop()
    reason: str = prop("Why the file was left alone (changed, replaced, a symlink, outside the roots).")


@result
class ItemReport(Open):
    id: str = prop("The item id.")
    action: Opt[Literal["delete", "truncate", "link"]] = prop()
    planned_bytes: int = prop("Bytes this item was planned to free.")
    freed_bytes: int = prop("Bytes measured freed for this item.")
    files_done: int = prop("Files acted on.")
    skipped: list[Skip] = prop("The files left alone, each with why.")
    files_left: Opt[int] = prop(
        "Files of this item beyond what one approval names: not acted on; call reclaim again for them.",
        default=ABSENT,
    )


@result
class ReclaimAnswer:
    status: Literal["done", "confirmation_needed", "declined", "not_asked"] = prop(
        "done, confirmation_needed (call again with the code), declined (the user said no) or not_asked (the "
        "client declared elicitation but the question failed or timed out: nothing removed)."
    )
    plan_id: str = prop("The plan acted on.")
    planned_bytes: int = prop("Bytes the chosen items were planned to free.")
    freed_bytes: Opt[int] = prop("Measured: statvfs before and after each file.", default=ABSENT)
    confirmation_code: Opt[str] = prop(
        "Give it back in confirm= to act on exactly these items.", default=ABSENT
    )
    items: Opt[list[ItemReport]] = prop("Per chosen item: what was done.", default=ABSENT)
    files_left: Opt[int] = prop(
        "Files of the chosen items beyond what one approval names: not acted on; call reclaim again for them.",
        default=ABSENT,
    )
    done_before: Opt[int] = prop(
        "Files of the chosen items an earlier reclaim of this plan already acted on (perhaps cancelled part "
        "way): not acted on again.",
        default=ABSENT,
    )


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
    "owner": "its owner changed since the plan, so it is not touched",
    "writable_by_others": "others may write it (its mode, its ACL or a group its owner shares), so it is not made "
    "one file with the kept copy: they could then write every name's content through the kept copy's",
    "not_regular": "not a regular file now (a FIFO, a device or a directory), so it is not opened",
    "cancelled": "the call was cancelled while it was set aside, so it stays",
    "mounted": "something is mounted on it now, so it is left alone",
    "mapped": "a process has it mapped into memory now, and emptying it would kill that process (SIGBUS): "
    "restart the process instead",
    "maps_unreadable": "some process's memory maps may not be read by this server (another user's: run it as "
    "root; or the host's, where it runs in a container's PID namespace; or hidden by /proc's hidepid), and one that has it mapped would be "
    "killed by emptying it (SIGBUS), so it is left alone: restart the holder instead",
    "hard_linked": "it has another name (a hard link) now, and emptying it would empty that file too",
    "immutable": "marked immutable since the plan (lsattr shows i; chattr +i), so it is never touched",
    "append_only": "marked append-only since the plan (lsattr shows a; chattr +a), so it is never touched",
    "directory_immutable": "its directory {directory} is marked immutable (lsattr -d shows i), so no name in "
    "it can be removed or replaced: to free it, run chattr -i {directory_word} and reclaim again, or leave it",
    "directory_append_only": "its directory {directory} is marked append-only (lsattr -d shows a), so no name "
    "in it can be removed or replaced: to free it, run chattr -a {directory_word} and reclaim again, or leave it",
}
#: What was done to the files of an item, by its action.
DONE = {"delete": "removed", "truncate": "emptied", "link": "linked"}


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
    outside = outside_roots(choose(plan, chosen), _allowed(ctx))
    if outside:
        raise Refused(
            f"plan {plan.id} names {plural(len(outside), 'file')} outside the roots this server is confined to "
            "(not named here); nothing removed"
        )
    return plan, chosen


def _listing(plan: Plan, chosen: list[str], waiting: dict[str, int] | None = None) -> tuple[str, int]:
    """The question a person answers: each chosen item, what is done to it, and every file it acts on
    (escaped) with its owner and size; an item none of whose files this approval names says so, and how
    many of its files wait (``waiting``: per item id, its files beyond what one approval names)."""
    waiting = waiting or {}
    picked = choose(plan, chosen)
    total = sum(item.bytes for item, _action in picked)
    acting = sum(1 for item, _action in picked if item.entries)
    lines = [f"Free {human_bytes(total)} in {plural(acting, 'item')} of plan {plan.id}?"]
    for item, action in picked:
        wait = waiting.get(item.id, 0)
        if not item.entries:
            lines.append(f"  {item.id}: {_idle(wait)}")
            continue
        files = plural(len(item.entries), "file")
        if action == "link" and item.keep is not None:
            what = f"replace {files} by hard links to the kept copy"
            cost = "the names stay, but a change through one name then shows in every one"
        else:
            what, cost = f"{action} {files}", item.cost
        more = f" ({wait:,} more of its files wait for another call)" if wait else ""
        lines.append(f"  {item.id}: {what}{more}, {human_bytes(item.bytes)} — {cost}")
        lines += _named(item, "      ")
        lines += [f"      note: {note}" for note in _caveat(item)]
    return "\n".join(lines), total


def _idle(wait: int) -> str:
    """Why a chosen item has no file acted on by this call: its files wait for another, or an earlier
    reclaim of the plan did them all."""
    if wait:
        return (
            f"not acted on by this call: its {plural(wait, 'file')} wait for another call (one approval names "
            f"{APPROVAL_FILES:,} files at most)"
        )
    return "nothing left to do: an earlier reclaim of this plan acted on each of its files"


def _named(item: Item, indent: str) -> list[str]:
    """Every file of the item, each with its owner and size, under the directory they share when it is
    not ``/``; then its kept copy."""
    paths = [entry.path for entry in item.entries]
    top = (os.path.commonpath(paths) if len(paths) > 1 else os.path.dirname(paths[0])) if paths else b"/"
    if item.held or top == b"/":
        return reclaim_plan.path_lines(item, len(paths), indent)
    lines = [f"{indent}in {escaped(top)}/:"]
    lines += [f"{indent}  {reclaim_plan.file_line(e, e.path[len(top) + 1 :])}" for e in item.entries]
    return lines + reclaim_plan.path_lines(replace(item, entries=()), 0, indent)


def _earlier(plan_id: str) -> list[LogRecord]:
    """What earlier reclaims of the plan did: the history store's log and this process's, oldest first."""
    store = state.active()
    kept = plan_log(store, plan_id) if store is not None else []
    with _ACTED_LOCK:
        here = set(ACTED.get(plan_id, ()))
    return sorted(here | set(kept), key=lambda record: record.time)  # of two equal, this process's


def _relinked(plan: Plan, earlier: list[LogRecord]) -> frozenset[tuple[int, int]]:
    """The inodes (device, inode) an earlier reclaim of the plan moved the ctime of: a file it removed or
    linked (its other names), the kept copy of an item it linked (each link a name more), a file it had
    set aside when cancelled and put back. The next call must not take that for a change, or an item cut
    by one approval (or a cancellation) could never be finished."""
    by_name = {
        (item.id, entry.path): (entry.identity.dev, entry.identity.ino)
        for item in plan.items
        for entry in item.entries
    }
    moved: set[tuple[int, int]] = set()
    for record in earlier:
        if not record.vouched:  # a row of the store without its MAC: not sysmcp's word
            continue
        key = by_name.get((record.item, os.fsencode(record.path)))
        if key is None:
            continue
        if record.outcome == "done" or record.reason == "cancelled":
            moved.add(key)
        item = plan.item(record.item)
        if (
            record.outcome == "done"
            and record.action == "link"
            and item is not None
            and item.keep is not None
        ):
            moved.add((item.keep.identity.dev, item.keep.identity.ino))
    return frozenset(moved)


def _approved(plan: Plan, chosen: list[str], earlier: list[LogRecord]) -> tuple[Plan, dict[str, int]]:
    """The plan as one approval names it: each chosen item's files but those an earlier reclaim of the
    plan did, the first ``APPROVAL_FILES`` of them in all; and, per item id, how many of its files that
    leaves for another call (an item past the first ``APPROVAL_FILES`` keeps no file: it is not acted on)."""
    done = {(record.item, os.fsencode(record.path)) for record in earlier if record.outcome == "done"}
    room, waiting, cut = APPROVAL_FILES, {}, {}
    for item, _action in choose(plan, chosen):
        todo = [entry for entry in item.entries if (item.id, entry.path) not in done]
        named = todo[:room]
        room = room - len(named)
        if len(todo) > len(named):
            waiting[item.id] = len(todo) - len(named)
        if len(named) < len(item.entries):  # its bytes: each named inode once, at most the item's
            disk = {(e.identity.dev, e.identity.ino): e.identity.disk for e in named}
            cut[item.id] = replace(item, entries=tuple(named), bytes=min(item.bytes, sum(disk.values())))
    return replace(plan, items=tuple(cut.get(item.id, item) for item in plan.items)), waiting


def _question(
    plan: Plan, chosen: list[str], waiting: dict[str, int], earlier: list[LogRecord]
) -> tuple[str, int]:
    """The listing, then what an earlier reclaim of the plan did and what this approval leaves out."""
    question, total = _listing(plan, chosen, waiting)
    named = sum(len(item.entries) for item, _action in choose(plan, chosen))
    lines = [question, *_before(earlier, chosen)]
    if waiting:
        lines.append(_left(sum(waiting.values()), acted=False, named=named))
    return "\n".join(lines), total


def _left(left: int, *, acted: bool, named: int = 0) -> str:
    """What one approval leaves out: files of the chosen items beyond ``APPROVAL_FILES``."""
    then = "were not acted on" if acted else "stay"
    only = "" if acted else f"Only these {plural(named, 'file')} are acted on: "
    return (
        f"{only}the other {plural(left, 'file')} of these items {then} (one approval names "
        f"{APPROVAL_FILES:,} at most): call reclaim again with the same plan and items for them."
    )


def _before(earlier: list[LogRecord], chosen: list[str]) -> list[str]:
    """What an earlier reclaim of the plan did to the chosen items' files, and whether it was stopped."""
    bases = {item_id.removesuffix(LINK) for item_id in chosen}
    done = [record for record in earlier if record.outcome == "done" and record.item in bases]
    stopped = [str(record.reason) for record in earlier if record.outcome == "stopped"]
    if not done and not stopped:
        return []
    how = f" ({'; '.join(stopped)})" if stopped else ""
    if not done:
        return [f"An earlier reclaim of this plan{how} acted on none of these items' files."]
    lines = [
        f"An earlier reclaim of this plan{how} acted on {plural(len(done), 'file')} of these items, "
        "which are not acted on again:"
    ]
    lines += [f"  {DONE.get(r.action, 'done')}: {escaped(os.fsencode(r.path))}" for r in done[:SKIPS_SHOWN]]
    if len(done) > SKIPS_SHOWN:
        lines.append(f"  {more_not_shown(len(done) - SKIPS_SHOWN, 'file')} (sysmcp history --reclaim)")
    return lines


def _caveat(item: Item) -> list[str]:
    """An emptied log's note: when it grows again, and what bounds it for good (escaped: it names a
    container)."""
    return [escaped(item.note)] if item.emptied and item.note else []


def _after(item: Item) -> list[str]:
    """The lines under an item in the answer: a duplicate's kept copy (every file removed or linked had
    its bytes), a log's caveat."""
    kept = [f"kept copy: {escaped(item.keep.path)}"] if item.keep is not None else []
    return kept + [f"note: {note}" for note in _caveat(item)]


async def _confirmed(
    args: dict[str, Any], ctx: ToolContext, plan: Plan, chosen: list[str], question: str, told: ReclaimAnswer
) -> ToolOutput | None:
    """None when the person said yes to ``question`` (or the code is right); else the answer to give
    instead of acting.

    A client that declared elicitation is asked, and only its user's yes confirms: no code is handed out
    to it, whatever happens to the question, and a code it sends is refused (a model must not confirm
    alone what the user can be asked). Other clients get the two-call code flow, the code bound to the
    very files the question names."""
    if ctx.request.can_elicit():
        if "confirm" in args:
            raise Refused(
                "this client can ask the user directly (it declared elicitation), so only the user's answer "
                "confirms, never a code; nothing removed: call reclaim again without 'confirm'"
            )
        return await _ask_user(ctx, plan, question, told)
    code = confirmation_code(plan.secret or SECRET, plan, chosen)
    given = args.get("confirm")
    if given is None:
        return ToolOutput.typed(
            f"{question}\nNothing removed yet. Show this list to the user; if they agree, call reclaim again "
            f"with the same plan_id and items and confirm={code!r}.",
            replace(told, status="confirmation_needed", confirmation_code=code),
        )
    if not secrets.compare_digest(str(given), code):
        raise Refused(
            "the confirmation code does not match this plan and exactly these items and files; nothing removed "
            "(call reclaim without 'confirm' to get the code for this list)"
        )
    return None


async def _ask_user(ctx: ToolContext, plan: Plan, question: str, told: ReclaimAnswer) -> ToolOutput | None:
    """Elicitation: None on the user's yes; else the answer that says nothing was removed, and why."""
    schema = {
        "type": "object",
        "properties": {"confirm": {"type": "boolean", "title": "Yes, act on these files"}},
        "required": ["confirm"],
    }
    try:
        answer = await ctx.request.ask(
            "elicitation/create", {"message": question, "requestedSchema": schema}, ELICIT_TIMEOUT
        )
    except ClientDeclined as exc:
        log.warning("elicitation failed; nothing removed", plan=plan.id, reason=str(exc))
        return ToolOutput.typed(
            f"Nothing removed: the user could not be asked ({exc}). This client declared elicitation, so "
            "only the user's yes confirms and no confirmation code is given; try again when they can answer.",
            replace(told, status="not_asked"),
        )
    content = answer.get("content")
    if answer.get("action") == "accept" and isinstance(content, dict) and content.get("confirm") is True:
        return None
    return ToolOutput.typed(
        f"Nothing removed: the user did not confirm ({answer.get('action', 'no answer')}).",
        replace(told, status="declined"),
    )


def _allowed(ctx: ToolContext) -> Callable[[bytes], bool]:
    roots = ctx.paths.allowed
    return lambda path: within_roots(os.fsdecode(path), roots)


def _logger(plan: Plan, actions: ActionLog, run: list[LogRecord]) -> Any:
    """Each action on stderr (at warning: shown at the default level), in the history store and in
    ``run`` (this process's memory of the plan)."""

    def told(item: Item, entry: PlannedFile, action: str, outcome: FileResult) -> None:
        path = os.fsdecode(entry.path)
        planned, freed = entry.identity.disk, outcome.freed
        kept = os.fsdecode(item.keep.path) if item.keep is not None else None
        log.warning(
            "reclaim done" if outcome.done else "reclaim skipped",
            plan=plan.id,
            item=item.id,
            action=action,
            path=path,
            reason=outcome.reason,
            planned=planned,
            freed=freed,
            kept_copy=kept,
        )
        done = "done" if outcome.done else "skipped"
        record = LogRecord(
            state.now(), plan.id, item.id, path, action, done, outcome.reason, planned, freed, kept
        )
        actions.record(record)
        run.append(record)

    return told


def _skip(outcome: FileResult) -> Skip:
    return Skip(os.fsdecode(outcome.path), outcome.reason or "")  # the name itself: in_json shows it


def report(plan: Plan, results: list[ItemResult], waiting: dict[str, int] | None = None) -> ReclaimAnswer:
    """The answer's figures; ``waiting``: per item id, its files beyond what the approval named."""
    items = [
        ItemReport(
            id=done.item.id,
            action=cast(Any, done.action),
            planned_bytes=done.item.bytes,
            freed_bytes=done.freed,
            files_done=sum(1 for o in done.outcomes if o.done),
            skipped=[_skip(o) for o in done.outcomes if not o.done],
            files_left=(waiting or {}).get(done.item.id) or ABSENT,
        )
        for done in results
    ]
    planned, freed = sum(i.planned_bytes for i in items), sum(i.freed_bytes for i in items)
    return ReclaimAnswer("done", plan.id, planned, freed_bytes=freed, items=items)


def render(answer: ReclaimAnswer, notes: dict[str, list[str]] | None = None) -> str:
    """The answer's text; ``notes``: lines to show under an item (``_after``: a duplicate's kept copy, the
    caveat of a log its engine keeps writing)."""
    freed = 0 if answer.freed_bytes is ABSENT else answer.freed_bytes
    items = [] if answer.items is ABSENT else answer.items
    lines = [
        f"Reclaim of plan {answer.plan_id}: {human_bytes(freed)} freed (measured), "
        f"{human_bytes(answer.planned_bytes)} planned."
    ]
    for item in items:
        skipped = item.skipped
        wait = 0 if item.files_left is ABSENT else item.files_left
        if not item.files_done and not skipped:  # none of its files was in this approval
            lines.append(f"  {item.id}: {_idle(wait)}")
            continue
        lines.append(
            f"  {item.id}: {plural(item.files_done, 'file')} {DONE.get(str(item.action), 'done')}, "
            f"{human_bytes(item.freed_bytes)} freed of "
            f"{human_bytes(item.planned_bytes)} planned"
            + (f"; {len(skipped):,} skipped" if skipped else "")
            + (f"; {wait:,} more of its files wait for another call" if wait else "")
        )
        lines += [f"      {line}" for line in (notes or {}).get(item.id, [])]
        for skip in skipped[:SKIPS_SHOWN]:
            exact = os.fsencode(skip.path)
            why, left, where = skip.reason.partition("; ")  # "changed; left as .sysmcp-aside-…"
            directory = os.path.dirname(exact) or b"/"
            told = (
                REASONS.get(why, why)
                .replace("{directory_word}", shell_word(directory))  # a command to paste: the very directory
                .replace("{directory}", escaped(directory))
            )
            lines.append(f"      skipped {escaped(exact)}: {told}{left}{where}")
        if len(skipped) > SKIPS_SHOWN:
            more = more_not_shown(len(skipped) - SKIPS_SHOWN, "skipped file")
            lines.append(f"      {more} (each is in the structured result, with its reason)")
    return "\n".join(lines)


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    plan, chosen = await _plan(args, ctx)
    earlier = await ctx.run_in_worker(lambda meter: _earlier(plan.id))
    relinked = _relinked(plan, earlier)
    plan, waiting = _approved(plan, chosen, earlier)
    left = sum(waiting.values())
    question, total = _question(plan, chosen, waiting, earlier)
    bases = {item.id for item, _action in choose(plan, chosen)}
    done_before = sum(1 for record in earlier if record.outcome == "done" and record.item in bases)
    told = ReclaimAnswer("done", plan.id, total, files_left=left or ABSENT, done_before=done_before or ABSENT)
    if any(item.entries for item in plan.items if item.id in bases):  # nothing left: nothing to ask
        refusal = await _confirmed(args, ctx, plan, chosen, question, told)
        if refusal is not None:
            return refusal
    allowed = _allowed(ctx)
    log.warning("reclaim starting", plan=plan.id, items=chosen)
    lost = lines_lost()

    def work(request: ApplyRequest, progress: Progress, cancel: Cancel) -> tuple[list[ItemResult], ActionLog]:
        actions = ActionLog(state.active(), state.now)  # in the worker: the store opens off the event loop
        run: list[LogRecord] = []
        stopped = ""
        try:
            return apply_items(replace(request, log=_logger(plan, actions, run)), progress, cancel), actions
        except BaseException as exc:  # cancelled (MCP gives it no reply) or failed: the next call says so
            done = sum(1 for record in run if record.outcome == "done")
            files = plural(done, "file")
            stopped = (
                f"stopped by an error after {files}: {exc}"
                if isinstance(exc, Exception)
                else f"cancelled after {files}"
            )
            run.append(LogRecord(state.now(), plan.id, "", "", "", "stopped", stopped, 0, 0))
            actions.record(run[-1])
            raise
        finally:
            actions.flush()  # what was done before a cancellation is logged too
            with _ACTED_LOCK:
                ACTED[plan.id] = ACTED.pop(plan.id, []) + run
                while len(ACTED) > ACTED_PLANS:
                    del ACTED[next(iter(ACTED))]
            if stopped:  # last: once it is on stderr, the next call on the plan knows
                log.warning("reclaim stopped", plan=plan.id, reason=stopped)

    results, actions = await ctx.run_engine(work, ApplyRequest(plan, chosen, allowed, relinked=relinked))
    answer = replace(report(plan, results, waiting), files_left=told.files_left, done_before=told.done_before)
    head, _, rest = render(answer, {done.item.id: _after(done.item) for done in results}).partition("\n")
    tail = [*_before(earlier, chosen), *([_left(left, acted=True)] if left else [])]
    text = "\n".join([head, where_logged(actions, lines_lost() - lost), *([rest] if rest else []), *tail])
    return ToolOutput.typed(text, answer)


def where_logged(actions: ActionLog, lost: int = 0) -> str:
    """Where the log of this call's actions went (second in the answer, so a long one never cuts it).
    stderr is named only when its lines were written: not below ``--log-level``, none ``lost`` (dropped
    while this call ran, the host not reading stderr)."""
    store = "the history store (sysmcp history --reclaim)"
    missing = (
        "not on stderr: --log-level is above warning"
        if not logs_at("warning")
        else f"not all on stderr: {plural(lost, 'log line')} dropped while it ran (the host does not read it)"
        if lost
        else None
    )
    if actions.failure is None:
        return f"Each action is logged in {store}" + (
            " and on stderr." if missing is None else f", {missing}."
        )
    if missing is not None:
        return f"Not every action is logged: {actions.failure}, and {missing}."
    if actions.unsaved < actions.recorded:
        kept = actions.recorded - actions.unsaved
        return (
            f"Each action is logged on stderr; {kept:,} of the {plural(actions.recorded, 'action')} are in "
            f"{store}, the other {actions.unsaved:,} only on stderr ({actions.failure})."
        )
    return f"Each action is logged on stderr only: {actions.failure}."


TOOL = Tool(
    name="reclaim",
    title="Reclaim space (removes files)",
    description=(
        "Removes the files of chosen items of a reclaim_plan (empties a container's log or a deleted file "
        "still open), re-checking each at the moment of acting. Asks "
        "the user first: through the client's elicitation when it has it (then only the user's answer "
        "confirms), else the first call returns the list and a code for a second call (show the user the list). "
        "Reports bytes freed against planned."
    ),
    input_schema=INPUT_SCHEMA,
    output=ReclaimAnswer,
    handler=handle,
    annotations={
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
        "openWorldHint": False,
    },
)
