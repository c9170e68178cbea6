"""Fleet answers: one outcome per host in, one merged ``ToolOutput`` out, with no I/O.

A tool's ``merge`` sits beside its handler and renders its fleet view from ``HostOutcome`` records;
tools without one get ``default_merge``. Merges are pure functions of the outcomes, so their tests feed
outcomes and need no ssh. The fleet package builds the outcomes; tools never import it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from sysmcp.engine.paths import exact_names, in_json, one_line, printable_text
from sysmcp.render import and_more, plural
from sysmcp.tools.registry import ToolOutput
from sysmcp.tools.typed import from_json

T = TypeVar("T")

STATUSES = (
    "ok",
    "tool_error",
    "unreachable",
    "auth_failed",
    "host_key_mismatch",
    "no_sysmcp",  # the remote command was not found
    "remote_error",  # the remote command started and failed (its first lines say why)
    "timeout",
    "cancelled",
    "pending",  # still connecting or running when the fleet deadline passed
)
ANSWERED = frozenset({"ok", "tool_error"})  # the remote sysmcp answered (an isError answer is an answer)
LINE_BUDGET = 80  # lines of merged text; past it the full per-host results are one resource link
#: Characters of merged text as sent (escaped), below the server's answer budget (40,000): a fleet answer
#: cut here is never cut again by the server, whose cut would add lines past ``LINE_BUDGET``.
TEXT_BUDGET = 32_000
#: A cut text's line wider than ``TEXT_BUDGET // LINES_IN_CHARS`` characters is shortened: a cut text
#: holds at least this many such lines.
LINES_IN_CHARS = 8
LINES_PER_HOST = 6  # lines of each host's own text in a per-host summary
HOSTS_NAMED = 8  # host names spelled out in one line of a group; the count is always given
#: What differs between hosts giving the same answer: timings, rates, and each host's own result links.
#: A number is tried from its first digit only: from every digit, a host's long run of digits took
#: the gateway's event loop for minutes (quadratic backtracking).
_VOLATILE = re.compile(
    r"\b\d+(?:\.\d+)? ?(?:ms|s)\b|(?<!\d)\d+(?:\.\d+)? ?[KMGTPE]?i?B/s|sysmcp://hosts/[^/\s]+/"
)
#: Characters of a host's text read to show its first lines, and the longest text whose timings are
#: taken out to compare it: a sysmcp's text is at most ~40,000 characters (the server's answer budget).
#: A host's 27 MB text (as much as the hosts' share lets through) took the merge, on the gateway's event
#: loop, 5.5 s and 640 MiB, to show six lines.
TEXT_READ = 1 << 20
#: What ``str.splitlines`` ends a line at ("\r\n" is one end).
_LINE_ENDS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@dataclass(frozen=True, slots=True)
class HostOutcome:
    """What one host said: ``result`` (its structured content) and ``text`` when it answered ok, else the
    status and a one-line ``reason`` (a tool error's words too)."""

    host: str
    status: str
    seconds: float
    result: dict[str, Any] | None = None
    text: str = ""
    reason: str = ""
    reconnected: bool = False  # asked before, its session had ended: a new ssh handshake this time
    #: The jump host that failed, when the fleet's pool found the failure at it: set only for a host the
    #: inventory puts behind one, never read from a host's words.
    bastion: str | None = None

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


# -- pieces every merge uses -----------------------------------------------------------------------


def answered(outcomes: Sequence[HostOutcome]) -> int:
    return sum(1 for o in outcomes if o.status in ANSWERED)


def tally(outcomes: Sequence[HostOutcome]) -> str:
    """``12 of 40 hosts answered, 1 unreachable, 2 timeout`` — also the fan-out's progress message."""
    counts = Counter(o.status for o in outcomes if o.status not in ANSWERED)
    parts = [f"{n} {status}" for status in STATUSES if (n := counts.get(status))]
    again = sum(1 for o in outcomes if o.reconnected)
    if again:  # a warm call that had to open sessions again: why it took as long as a cold one
        parts.append(f"{again} reconnected (their sessions had ended since the last call)")
    return ", ".join([f"{answered(outcomes)} of {plural(len(outcomes), 'host')} answered", *parts])


def host_list(hosts: Sequence[str]) -> str:
    """``web01, web02, web03 … and 184 more``: a group's hosts in one bounded line."""
    shown = ", ".join(hosts[:HOSTS_NAMED])
    return shown + (f" {and_more(len(hosts) - HOSTS_NAMED)}" if len(hosts) > HOSTS_NAMED else "")


def grouped(items: Sequence[tuple[Any, str]]) -> list[tuple[Any, list[str]]]:
    """``(key, host)`` pairs grouped by key: the smallest groups (the outliers) first, then by first
    appearance, so the one odd host is read before the 187 that agree."""
    groups: dict[Any, list[str]] = {}
    for key, host in items:
        groups.setdefault(key, []).append(host)
    return sorted(groups.items(), key=lambda item: len(item[1]))  # stable: first seen wins a tie


def failure_lines(outcomes: Sequence[HostOutcome]) -> list[str]:
    """Hosts without an answer (and tool errors) under their heading (``failure_groups``)."""
    lines = [line for line, _ in failure_groups(outcomes)]
    return ["Hosts without a result:", *lines] if lines else []


def failure_groups(outcomes: Sequence[HostOutcome]) -> list[tuple[str, int]]:
    """Hosts without an answer (and tool errors), one line per status and reason, with how many hosts
    each line names: a host alone is named with its reason; hosts sharing one (a bastion down, a
    deadline) are one counted line. Only an outcome the pool marked as its bastion's failure
    (``bastion``) leads a line with its reason: a reason's words, which a host's stderr can choose,
    never do. Each line stays one line (``one_line``): a reason forges no other host's line."""
    groups = []
    failed = [((o.status, o.reason, o.bastion is not None), o.host) for o in outcomes if not o.ok]
    for (status, reason, at_bastion), hosts in grouped(failed):
        if at_bastion:  # the cause once, then whom it cut off
            line = f"  {reason}; {plural(len(hosts), 'host')} behind it {status}: {host_list(hosts)}"
        elif len(hosts) == 1:
            line = f"  {hosts[0]}: {status} — {reason}"
        else:
            line = f"  {plural(len(hosts), 'host')} {status} — {reason}: {host_list(hosts)}"
        groups.append((one_line(line), len(hosts)))
    return groups


def names_held(structured: dict[str, Any]) -> dict[str, Any]:
    """A host's structured content with its names as the host's result held them: each listed in its
    ``exact_bytes`` its bytes again (``os.fsdecode``'s form), so a merge shows it as the host would and
    the fleet's answer (``structured``) lists it in its own ``exact_bytes``."""
    held: dict[str, Any] = exact_names(structured)  # type: ignore[assignment]
    return held


def typed_results(outcomes: Sequence[HostOutcome], cls: type[T]) -> list[tuple[str, T]]:
    """Each host that answered, and its result read back as ``cls`` (``from_json``: a host whose
    result is not in this version's shape, or that gave none, text only, raises one of ``UNREADABLE``)."""
    return [(o.host, from_json(cls, o.result)) for o in outcomes if o.ok]


def structured(outcomes: Sequence[HostOutcome], view: dict[str, Any]) -> dict[str, Any]:
    """The fleet's structured content: each host's result and the view holding names as the hosts'
    results held them (their ``exact_bytes`` undone at the fan-out), shown as a tool's own (``in_json``):
    one ``exact_bytes`` for the whole answer."""
    data = {
        "hosts": [o.entry() for o in outcomes],
        "asked": len(outcomes),
        "answered": answered(outcomes),
        "pending": sum(1 for o in outcomes if o.status == "pending"),
        "view": view,
    }
    return in_json(data)  # type: ignore[return-value]


def fleet_output(outcomes: Sequence[HostOutcome], body: Sequence[str], view: dict[str, Any]) -> ToolOutput:
    """Text (tally, the view's lines, the failures) and structured content; isError only if no host
    answered. Each line of ``body`` stays one line, whatever a host's result put in it (a file name
    with a newline, an ESC): escaped as a tool escapes words (``one_line``), it forges no other
    host's line and cannot drive the terminal that shows it. The names in ``body`` are escaped
    already (``escaped``): a backslash stays as it is, not escaped twice."""
    lines = [one_line(line) for line in body]
    text = "\n".join([tally(outcomes) + ".", *lines, *failure_lines(outcomes)]).rstrip()
    return ToolOutput(text, structured(outcomes, view), is_error=answered(outcomes) == 0)


def _host_lines(outcome: HostOutcome) -> list[str]:
    """One host's own answer: its name, its time and the first lines of its text."""
    return [f"== {outcome.host} ({outcome.seconds:.2f} s)", *summary_lines(outcome)]


def summary_lines(outcome: HostOutcome) -> list[str]:
    """The first ``LINES_PER_HOST`` lines of the host's text and how many more it has, read from its
    first ``TEXT_READ`` characters and counted without splitting the rest."""
    lines = outcome.text[:TEXT_READ].splitlines()
    shown = [f"    {one_line(line)}" for line in lines[:LINES_PER_HOST]]  # its names escaped by the host
    if (count := line_count(outcome.text)) > LINES_PER_HOST:
        shown.append(f"    … {plural(count - LINES_PER_HOST, 'more line')} (in this host's result)")
    return shown


def line_count(text: str) -> int:
    """``len(text.splitlines())``, without making the lines."""
    ends = sum(text.count(end) for end in _LINE_ENDS) - text.count("\r\n")
    return ends + (1 if text and text[-1] not in _LINE_ENDS else 0)


def same_answer(text: str) -> str:
    """What two hosts' texts share when they gave the same answer: the text without its timings,
    rates and host links. A text longer than any sysmcp writes (``TEXT_READ``) is compared whole."""
    return _VOLATILE.sub("…", text) if len(text) <= TEXT_READ else text


def summary_merge(note: str | None = None) -> Merge:
    """Per-host summaries, hosts with the same answer as one group (``187 hosts, same answer``), the
    outliers first."""

    def merge(outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
        body = [note] if note else []
        ok = {o.host: o for o in outcomes if o.ok}
        groups = grouped([(same_answer(o.text), o.host) for o in ok.values()])
        for _, hosts in groups:
            first = ok[hosts[0]]
            body += (
                _host_lines(first)
                if len(hosts) == 1
                else [
                    f"== {plural(len(hosts), 'host')}, same answer: {host_list(hosts)} (as {first.host} says it)",
                    *summary_lines(first),
                ]
            )
        view: dict[str, Any] = {
            "summaries": [{"host": o.host, "text": o.text} for o in ok.values()],
            "groups": [{"count": len(hosts), "hosts": hosts} for _, hosts in groups],
        }
        if note:
            view["note"] = note
        return fleet_output(outcomes, body, view)

    return merge


default_merge: Merge = summary_merge()


#: What reading a host's result may raise when it is not in this version's shape: a field missing
#: (``from_json``'s ValueError), of another type than declared, or a number no float holds (10**4000).
UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, ArithmeticError)


def merge_readable(merge: Merge, outcomes: Sequence[HostOutcome], arguments: dict[str, Any]) -> ToolOutput:
    """``merge`` over the hosts whose results it reads. A host whose result lacks a field the merge
    needs, or of another type (an older sysmcp: ``UNREADABLE``) is left out of the merged view and
    shown as the default merge shows it, its own text, under a line naming such hosts: one old host
    must not fail the whole call."""
    try:
        return merge(outcomes, arguments)
    except UNREADABLE:
        unread = [o for o in outcomes if o.ok and not _reads(merge, o, arguments)]
        if not unread:
            raise
    readable = [o for o in outcomes if o not in unread]
    output = merge(readable, arguments)
    whose = "Its" if len(unread) == 1 else "Their"
    lines = [
        f"{plural(len(unread), 'host')} answered in a shape this sysmcp does not read (an older sysmcp?), "
        f"not in the view above: {host_list([o.host for o in unread])}. {whose} own text:"
    ]
    for outcome in unread:
        lines += _host_lines(outcome)
    body = output.text.split("\n")[1:]  # after the tally line, which counts every host again below
    failures = failure_lines(outcomes)  # the same hosts as the merge's own (unread hosts answered)
    if failures and body[-len(failures) :] == failures:
        body = body[: -len(failures)]
    return replace(
        output,
        text="\n".join([tally(outcomes) + ".", *body, *lines, *failures]),
        structured=structured(outcomes, exact_names(output.structured)["view"]),  # type: ignore[index]
        is_error=answered(outcomes) == 0,
    )


def _reads(merge: Merge, outcome: HostOutcome, arguments: dict[str, Any]) -> bool:
    try:
        merge([outcome], arguments)
    except UNREADABLE:
        return False
    return True


def bound(
    output: ToolOutput,
    budget: int = LINE_BUDGET,
    chars: int = TEXT_BUDGET,
    failures: Sequence[tuple[str, int]] = (),
) -> tuple[ToolOutput, str | None]:
    """The output with its text cut to ``budget`` lines and ``chars`` characters as sent, and the full
    text when it was cut (for the caller to keep as a resource: merges stay pure). A cut text ends in
    the line counting what it left out and leaves one line of the budget free: the line (or the link)
    that says where the whole text went, which the caller adds. In a cut text a line wider than an
    eighth of ``chars`` is shortened (``_shortened``).

    ``failures`` are the merge's ``failure_groups``, which its text ends with (``fleet_output``): a cut
    keeps the tally, then them, then the other lines from the top while they fit, in the text's order;
    past the bounds it keeps as many of them as fit and a line counting the hosts left unnamed. Why:
    they came last and were cut first, so with many hosts answering a failed host was only counted in
    the tally, never named, while healthy hosts' lines were shown."""
    lines = output.text.splitlines()
    sizes = [len(printable_text(line)) + 1 for line in lines]
    if len(lines) <= budget and sum(sizes) <= chars:
        return output, None
    width = chars // LINES_IN_CHARS
    tail = _failure_tail(output.text, failures)
    head = lines[: len(lines) - len(tail)] if tail else lines
    kept = [_shortened(line, width) for line in head]
    failed = [(_shortened(line, width), hosts) for line, hosts in tail]
    room = _Room(budget - 2, chars)  # the line counting what was left out is the last of budget - 1
    first = kept[:1] if room.take(kept[:1]) else []  # the tally: every host counted, once
    named, unnamed = _failures_within(failed, room)
    shown = len(first)
    while shown < len(kept) and room.take(kept[shown : shown + 1]):
        shown += 1
    if left_out := len(kept) - shown + unnamed:
        last = f"… {plural(left_out, 'more line')} not shown."
    else:  # only lines too wide were cut, each saying so
        cut = sum(a != b for a, b in zip([*kept, *named], lines, strict=True))
        last = f"… every line is shown, {plural(cut, 'line')} shortened."
    text = [*kept[:shown], *named, last]
    return ToolOutput("\n".join(text), output.structured, output.is_error, output.links), output.text


#: Characters held back for the line counting the failed hosts a cut text leaves unnamed.
_COUNT_LINE = 80


@dataclass(slots=True)
class _Room:
    """What is left of a cut text's lines and characters (as sent) while lines are taken in rank order."""

    lines: int
    chars: int

    def take(self, lines: Sequence[str], spare: int = 0) -> bool:
        """Take ``lines`` if they fit with ``spare`` lines (of at most a short line's size) left over."""
        size = sum(len(printable_text(line)) + 1 for line in lines)
        if len(lines) + spare > self.lines or size + spare * _COUNT_LINE > self.chars:
            return False
        self.lines -= len(lines)
        self.chars -= size
        return True


def _failure_tail(text: str, failures: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """The failures section's lines, each with the hosts it names (its heading none), when ``text``
    ends with it; else none: a text not made by ``fleet_output`` is cut as it comes."""
    if not failures:
        return []
    tail = [("Hosts without a result:", 0), *failures]
    ending = "\n".join(line for line, _ in tail).rstrip()
    if not (text == ending or text.endswith("\n" + ending)):
        return []
    return [(line, hosts) for (_, hosts), line in zip(tail, ending.split("\n"), strict=True)]


def _failures_within(failed: list[tuple[str, int]], room: _Room) -> tuple[list[str], int]:
    """The failures' heading and lines that fit in ``room`` and how many of them do not: when not all
    fit, the last line shown counts the hosts the shown lines leave unnamed."""
    lines = [line for line, _ in failed]
    if room.take(lines):
        return lines, 0
    shown = 0
    while shown < len(lines) and room.take(lines[shown : shown + 1], spare=1):
        shown += 1
    unnamed = sum(hosts for _, hosts in failed[shown:])
    count = f"  … {plural(unnamed, 'more host')} without a result, named in the full text"
    named = [*lines[:shown], count] if room.take([count]) else lines[:shown]  # held back by ``spare``
    return named, len(lines) - shown


def _shortened(line: str, width: int) -> str:
    """``line`` kept to ``width`` characters as sent (escaped) and the words saying how many more it had.
    Why: a cut text stops at its first line that does not fit, and one host's line of a megabyte would
    take every line after it out of the answer, the hosts without a result named below included."""
    sent = len(printable_text(line))
    if sent <= width:
        return line
    low, high = 0, width  # the longest start whose escaped form fits: each character is one or more sent
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if len(printable_text(line[:middle])) <= width else (low, middle - 1)
    keep = low
    return f"{line[:keep]} … ({plural(sent - len(printable_text(line[:keep])), 'more character')} not shown)"
