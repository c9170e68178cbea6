"""The server's one door to the fleet: which calls go to hosts, the fan-out and its merged answer,
the instructions' fleet paragraph, and the gateway links (``sysmcp://hosts/…``) read through a host.

The server holds one ``FleetGateway`` when the operator configured hosts and asks it a few questions;
everything fleet-shaped (the ``hosts`` schema, outcomes, merging, the line budget) is decided here.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Protocol

from sysmcp.fleet import links
from sysmcp.fleet.schema import fleet_tools, hosts_property
from sysmcp.fleet.ssh import bounded
from sysmcp.protocol.context import RequestContext
from sysmcp.protocol.failures import ToolError
from sysmcp.protocol.framing import encode
from sysmcp.protocol.session import MAX_RESULT
from sysmcp.render import human_bytes, plural
from sysmcp.tools.merging import HostOutcome, bound, default_merge, failure_groups, merge_readable
from sysmcp.tools.registry import ResourceLink, Tool, ToolOutput

FLEET_NAMES_SHOWN = 50  # host names the instructions list; the count is always given
#: Bytes the hosts' answers may take in all: each is in the merged answer twice (its entry, the merge's
#: view) beside the text, and the whole must stay under the session's cap.
HOSTS_SHARE = MAX_RESULT // 3

#: Keeps a text as a resource (``ToolContext.keep``): its link, or a sentence saying why it could not.
Keep = Callable[..., ResourceLink | str]


class FleetCaller(Protocol):
    """What the gateway needs of a fleet (``sysmcp.fleet.fanout.Fleet``): the operator's hosts and
    groups, name resolution, and one call fanned out. The server never connects anywhere itself."""

    @property
    def host_names(self) -> list[str]: ...

    @property
    def groups(self) -> dict[str, int]: ...

    def resolve(self, names: list[str]) -> list[str]:
        """Hosts for the model's names; ``ValueError`` (its text lists the groups) for unknown ones."""
        ...

    async def call(
        self, tool: Tool, arguments: dict[str, Any], hosts: list[str], ctx: RequestContext
    ) -> list[HostOutcome]:
        """Raises ``ToolError`` for arguments it cannot hand to the hosts (a link to a result that is gone)."""
        ...

    async def read_resource(self, host: str, uri: str) -> dict[str, Any]:
        """A host's own ``resources/read`` of ``uri``; ``LookupError`` (a sentence) when it is gone."""
        ...

    async def localise(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Arguments for a tool run here: each gateway link replaced by the text behind it (``ToolError``)."""
        ...


def within_answer(outcomes: list[HostOutcome], share: int = HOSTS_SHARE) -> list[HostOutcome]:
    """The outcomes with the largest answers, if the hosts' answers are more than ``share`` in all,
    replaced by a reason until the rest fit: one host's huge answer must not make the merged answer
    too large to send, and every other host's answer lost with it."""
    # Each as JSON carries it: a control character in a text is six bytes (\u0001), not one.
    sizes = {o.host: len(encode(o.result)) + len(encode(o.text)) for o in outcomes if o.ok}
    total = sum(sizes.values())
    cut: set[str] = set()
    for host in sorted(sizes, key=lambda name: -sizes[name]):
        if total <= share:
            break
        cut.add(host)
        total -= sizes[host]

    others = len(sizes) > 1

    def reason(size: int) -> str:
        alone = "ask it alone or narrow the call" if others and size <= share else "narrow the call"
        return (
            f"its answer ({human_bytes(size)}) is too large to merge{' with the others' if others else ''}"
            f" (the hosts' answers may take {human_bytes(share)} in all): {alone}"
        )

    return [
        replace(o, status="remote_error", result=None, text="", reason=reason(sizes[o.host]))
        if o.host in cut
        else o
        for o in outcomes
    ]


class FleetGateway:
    """The fleet as the server sees it."""

    def __init__(self, fleet: FleetCaller, hosts: dict[str, Any] | None = None) -> None:
        self.fleet = fleet
        self.hosts_property = hosts or hosts_property(len(fleet.host_names))

    def tools(self, tools: Iterable[Tool]) -> list[Tool]:
        """The tools as this server lists them: each with ``hosts`` added."""
        return fleet_tools(tools, self.hosts_property)

    def instructions(self) -> str:
        """The fleet paragraph of the instructions: host count, groups, the first names."""
        names, groups = self.fleet.host_names, self.fleet.groups
        shown = ", ".join(names[:FLEET_NAMES_SHOWN])
        more = f" and {len(names) - FLEET_NAMES_SHOWN} more" if len(names) > FLEET_NAMES_SHOWN else ""
        grouped = ", ".join(f"{name} ({count})" for name, count in groups.items()) or "none"
        return (
            f"Fleet: this sysmcp also answers for {plural(len(names), 'host')} over ssh: {shown}{more}. Groups: {grouped}. "
            'Give any tool `hosts` (host names, group names, globs such as "web*", or "all") to run it on '
            "those hosts instead of this machine and get one merged answer, with a status per host (ok, "
            "tool_error, unreachable, auth_failed, host_key_mismatch, no_sysmcp, remote_error, timeout, cancelled, pending). "
            "Hosts still working at the fleet deadline are named as pending; the others' answers come at once."
        )

    @staticmethod
    def asks_hosts(arguments: object) -> bool:
        """Whether a call goes to hosts (it then waits on the network: never answered inline)."""
        return isinstance(arguments, dict) and "hosts" in arguments

    async def fan_out(
        self, tool: Tool, arguments: dict[str, Any], given: object, ctx: RequestContext, keep: Keep
    ) -> ToolOutput:
        """The same tool on the named hosts, merged by the tool's own ``merge``. Each remote's roots
        are its own (set by its remote command); the model names hosts, never commands.

        ``arguments`` are validated; only those the model gave (``given``) travel, not the defaults:
        an older remote sysmcp then refuses only an argument the model really used."""
        sent = {k: v for k, v in arguments.items() if isinstance(given, dict) and k in given and k != "hosts"}
        try:
            hosts = self.fleet.resolve(list(arguments["hosts"]))
        except ValueError as exc:
            return ToolOutput(str(exc), {}, is_error=True)
        try:
            outcomes = await self.fleet.call(tool, sent, hosts, ctx)
        except ToolError as exc:
            return ToolOutput(exc.message, {}, is_error=True)
        merged = within_answer(outcomes)
        output, full = bound(
            merge_readable(tool.merge or default_merge, merged, sent), failures=failure_groups(merged)
        )
        if full is not None:
            kept = keep(
                f"{tool.name}-fleet.json",
                json.dumps({"text": full, **output.structured}, ensure_ascii=False, indent=1),
                description=f"{tool.name} on {plural(len(hosts), 'host')}: the full merged text and every host's result",
                mime_type="application/json",
            )
            if isinstance(kept, str):
                output = replace(output, text=f"{output.text}\nThe full text: not kept, {kept}")
            else:
                output = replace(output, links=(*output.links, kept))
        return output

    async def localise(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Arguments for a tool run here, each gateway link replaced by its text (``ToolError``)."""
        if not links.linked_arguments(arguments):
            return arguments
        return await self.fleet.localise(arguments)

    async def read(self, uri: str) -> dict[str, Any] | None:
        """``resources/read`` of a gateway link through its host (None: not a gateway link;
        ``LookupError``, a sentence, when it is gone)."""
        remote = links.from_gateway(uri)
        if remote is None:
            return None
        reply = await self.fleet.read_resource(*remote)
        contents = reply.get("contents")
        if not isinstance(contents, list) or not all(isinstance(item, dict) for item in contents):
            # relayed as it came, a string's characters became its contents, a number a TypeError
            raise LookupError(
                f"{remote[0]} answered the read in no shape MCP defines "
                f"(contents: {bounded(reprlib.repr(contents), 80)})"
            )
        return {"contents": [{**item, "uri": uri} for item in contents]}


__all__ = ["FLEET_NAMES_SHOWN", "FleetCaller", "FleetGateway", "within_answer"]
