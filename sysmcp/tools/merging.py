"""Fleet answers: one outcome per host in, one merged ``ToolOutput`` out, with no I/O.

A tool's ``merge`` sits beside its handler and renders its fleet view from ``HostOutcome`` records;
tools without one get ``default_merge``. Merges are pure functions of the outcomes, so their tests feed
outcomes and need no ssh. The fleet package builds the outcomes; tools never import it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sysmcp.tools.registry import ToolOutput

STATUSES = (
    "ok",
    "tool_error",
    "unreachable",
    "auth_failed",
    "host_key_mismatch",
    "no_sysmcp",
    "timeout",
    "cancelled",
)
ANSWERED = frozenset({"ok", "tool_error"})  # the remote sysmcp answered (an isError answer is an answer)
LINE_BUDGET = 80  # lines of merged text; past it the full per-host results are one resource link
LINES_PER_HOST = 6  # lines of each host's own text in a per-host summary


@dataclass(frozen=True, slots=True)
class HostOutcome:
    """What one host said: ``result`` (its structured content) and ``text`` when it answered, else the
    status and a one-line ``reason``."""

    host: str
    status: str
    seconds: float
    result: dict[str, Any] | None = None
    text: str = ""
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def entry(self) -> dict[str, Any]:
        """The host's entry in structured content: ``{host, status, seconds, result | reason}``."""
        entry: dict[str, Any] = {"host": self.host, "status": self.status, "seconds": round(self.seconds, 3)}
        if self.ok:
            entry["result"] = self.result if self.result is not None else {"text": self.text}
        else:
            entry["reason"] = self.reason
        return entry


Merge = Callable[[Sequence[HostOutcome], dict[str, Any]], ToolOutput]

HOST_ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "host": {"type": "string"},
        "status": {"type": "string", "enum": list(STATUSES)},
        "seconds": {"type": "number"},
        "result": {"type": "object", "description": "The host's own structured answer (status ok)."},
        "reason": {"type": "string", "description": "One line: why there is no result."},
    },
    "required": ["host", "status", "seconds"],
}

FLEET_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "hosts": {"type": "array", "items": HOST_ENTRY_SCHEMA, "description": "One entry per host asked."},
        "asked": {"type": "integer"},
        "answered": {"type": "integer"},
        "view": {"type": "object", "description": "The tool's merged view across the hosts that answered."},
    },
    "required": ["hosts", "asked", "answered", "view"],
}


def hosts_property(groups: Sequence[str], count: int) -> dict[str, Any]:
    """The ``hosts`` argument every tool gains when a fleet is configured."""
    named = ", ".join(groups) if groups else "none besides all"
    return {
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "minItems": 1,
        "description": "Run on these inventory hosts instead of this machine and merge the answers: host "
        f'names, group names ({named}), shell globs over host names ("web*"), or "all" ({count} hosts). '
        "Omit for this machine.",
    }


def with_hosts(
    input_schema: dict[str, Any], output_schema: dict[str, Any], hosts: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A tool's schemas with ``hosts`` added: its own answer, or the fleet's."""
    properties = {**input_schema.get("properties", {}), "hosts": hosts}
    return {**input_schema, "properties": properties}, {
        "type": "object",
        "anyOf": [output_schema, FLEET_OUTPUT_SCHEMA],
    }


# -- pieces every merge uses -----------------------------------------------------------------------


def answered(outcomes: Sequence[HostOutcome]) -> int:
    return sum(1 for o in outcomes if o.status in ANSWERED)


def tally(outcomes: Sequence[HostOutcome]) -> str:
    """``12 of 40 hosts answered, 1 unreachable, 2 timeout`` — also the fan-out's progress message."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        if outcome.status not in ANSWERED:
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
    parts = [f"{n} {status}" for status in STATUSES if (n := counts.get(status))]
    return ", ".join([f"{answered(outcomes)} of {len(outcomes)} hosts answered", *parts])


def failure_lines(outcomes: Sequence[HostOutcome]) -> list[str]:
    """One line per host without an answer (and per tool error), naming its status and reason."""
    lines = [f"  {o.host}: {o.status} — {o.reason}" for o in outcomes if not o.ok]
    return ["Hosts without a result:", *lines] if lines else []


def structured(outcomes: Sequence[HostOutcome], view: dict[str, Any]) -> dict[str, Any]:
    return {
        "hosts": [o.entry() for o in outcomes],
        "asked": len(outcomes),
        "answered": answered(outcomes),
        "view": view,
    }


def fleet_output(outcomes: Sequence[HostOutcome], body: Sequence[str], view: dict[str, Any]) -> ToolOutput:
    """Text (tally, the view's lines, the failures) and structured content; isError only if no host
    answered."""
    text = "\n".join([tally(outcomes) + ".", *body, *failure_lines(outcomes)]).rstrip()
    return ToolOutput(text, structured(outcomes, view), is_error=answered(outcomes) == 0)


def table(rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> list[str]:
    """Columns padded to their widest cell; the ``right`` columns right-aligned (numbers)."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def summary_lines(outcome: HostOutcome, limit: int = LINES_PER_HOST) -> list[str]:
    lines = outcome.text.splitlines()
    shown = [f"    {line}" for line in lines[:limit]]
    if len(lines) > limit:
        shown.append(f"    … {len(lines) - limit} more lines (in this host's result)")
    return shown


def summary_merge(note: str | None = None) -> Merge:
    """Per-host summaries: each host's own first lines, one host after another."""

    def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
        body = [note] if note else []
        for outcome in outcomes:
            if outcome.ok:
                body.append(f"== {outcome.host} ({outcome.seconds:.2f} s)")
                body += summary_lines(outcome)
        view: dict[str, Any] = {"summaries": [{"host": o.host, "text": o.text} for o in outcomes if o.ok]}
        if note:
            view["note"] = note
        return fleet_output(outcomes, body, view)

    return merge


default_merge: Merge = summary_merge()


def bound(output: ToolOutput, budget: int = LINE_BUDGET) -> tuple[ToolOutput, str | None]:
    """The output with its text cut to ``budget`` lines, and the full text when it was cut (for the
    caller to keep as a resource: merges stay pure)."""
    lines = output.text.splitlines()
    if len(lines) <= budget:
        return output, None
    head = [*lines[: budget - 1], f"… {len(lines) - budget + 1} more lines not shown."]
    return ToolOutput("\n".join(head), output.structured, output.is_error, output.links), output.text


__all__ = [
    "ANSWERED",
    "FLEET_OUTPUT_SCHEMA",
    "STATUSES",
    "HostOutcome",
    "Merge",
    "bound",
    "default_merge",
    "fleet_output",
    "hosts_property",
    "summary_merge",
    "table",
    "tally",
    "with_hosts",
]
