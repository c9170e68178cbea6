"""One tool call on many hosts: bounded parallel calls through the pool, each ending as a ``HostOutcome``.

A host that hangs costs the call at most the connect timeout plus the call timeout, and every other
host's answer still arrives. When the whole call is cancelled, every remote request still running is
told (``notifications/cancelled``, sent by the client session); the sessions stay open for the next call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from sysmcp.fleet.inventory import Inventory
from sysmcp.fleet.pool import HostFailure, Pool
from sysmcp.fleet.ssh import bounded
from sysmcp.protocol.client import PeerGone, ProgressCallback, RemoteError
from sysmcp.protocol.context import RequestContext
from sysmcp.tools.merging import HostOutcome, tally
from sysmcp.tools.registry import Tool

DEFAULT_CONCURRENCY = 16
DEFAULT_BUDGET = 120.0  # seconds a tool without a time budget of its own gets on each host
CALL_MARGIN = 15.0  # seconds on top of a tool's budget: hand-over, the remote's own slack

Report = Callable[[Sequence[HostOutcome], int], Awaitable[None]]


def call_timeout(input_schema: dict[str, Any], arguments: dict[str, Any]) -> float:
    """The tool's own budget (its ``timeout_s`` argument or that argument's default) plus a margin."""
    budget = arguments.get("timeout_s")
    if not isinstance(budget, (int, float)):
        budget = input_schema.get("properties", {}).get("timeout_s", {}).get("default", DEFAULT_BUDGET)
    return float(budget) + CALL_MARGIN


def progress_message(finished: Sequence[HostOutcome], asked: int) -> str:
    """``12 of 40 hosts answered, 1 unreachable`` while the others are still working."""
    text = tally(finished)
    head, _, rest = text.partition(" hosts answered")
    answered = head.split(" of ")[0]
    return f"{answered} of {asked} hosts answered{rest}"


@dataclass
class Fleet:
    inventory: Inventory
    pool: Pool
    concurrency: int = DEFAULT_CONCURRENCY

    # -- what the server asks of a fleet (server.FleetCaller) ----------------------------------

    @property
    def host_names(self) -> list[str]:
        return list(self.inventory.hosts)

    @property
    def groups(self) -> dict[str, int]:
        return {name: len(self.inventory.groups[name]) for name in self.inventory.group_names}

    def resolve(self, names: list[str]) -> list[str]:
        return self.inventory.resolve(names)

    async def call(
        self, tool: Tool, arguments: dict[str, Any], hosts: list[str], ctx: RequestContext
    ) -> list[HostOutcome]:
        """One MCP call fanned out, reporting hosts answered as progress (and, for one host, the
        remote tool's own progress)."""

        async def report(finished: Sequence[HostOutcome], asked: int) -> None:
            await ctx.progress(len(finished), asked, progress_message(finished, asked), final=True)

        async def remote(done: float, total: float | None, message: str | None) -> None:
            await ctx.progress(done, total, message)

        return await self.fan_out(
            tool.name,
            arguments,
            hosts,
            timeout=call_timeout(tool.input_schema, arguments),
            report=report if len(hosts) > 1 else None,
            remote_progress=remote,
        )

    async def fan_out(
        self,
        tool: str,
        arguments: dict[str, Any],
        hosts: Sequence[str],
        *,
        timeout: float,
        report: Report | None = None,
        remote_progress: ProgressCallback | None = None,
    ) -> list[HostOutcome]:
        """``tool(arguments)`` on each host (already resolved), in inventory order. ``report`` hears
        after each host; ``remote_progress`` gets the remote tool's own progress (one host only)."""
        outcomes: dict[str, HostOutcome] = {}
        finished: list[HostOutcome] = []
        limiter = anyio.CapacityLimiter(max(1, self.concurrency))
        forward = remote_progress if len(hosts) == 1 else None

        async def one(name: str) -> None:
            async with limiter:
                outcome = await self._one(name, tool, arguments, timeout, forward)
            outcomes[name] = outcome
            finished.append(outcome)
            if report is not None:
                await report(finished, len(hosts))

        async with anyio.create_task_group() as group:
            for name in hosts:
                group.start_soon(one, name)
        return [outcomes[name] for name in hosts]

    async def _one(
        self,
        name: str,
        tool: str,
        arguments: dict[str, Any],
        timeout: float,
        on_progress: ProgressCallback | None,
    ) -> HostOutcome:
        started = anyio.current_time()

        def outcome(status: str, **fields: Any) -> HostOutcome:
            return HostOutcome(name, status, anyio.current_time() - started, **fields)

        while True:
            try:
                session = await self.pool.session(name)
            except HostFailure as failure:
                return outcome(failure.status, reason=failure.reason)
            session.calls += 1
            try:
                with anyio.fail_after(timeout):
                    reply = await session.client.call_tool(tool, arguments, on_progress=on_progress)
            except TimeoutError:
                # The remote was told to stop (notifications/cancelled); the session stays for reuse.
                return outcome("timeout", reason=f"no answer within {timeout:g} s")
            except RemoteError as exc:
                # An older sysmcp that does not know this tool or argument: its answer, not our crash.
                return outcome("tool_error", reason=bounded(f"{exc.message} ({exc.code})"))
            except PeerGone:
                ended = await session.failure()
                await self.pool.discard(session)
                if session.calls > 1:
                    # A reused session had died since its last call (its ssh killed, the connection
                    # dropped): every tool is read-only and idempotent, so ask once more on a new one,
                    # whose first call this is.
                    continue
                status = ended.status if ended.status != "no_sysmcp" else "unreachable"
                return outcome(status, reason=bounded(f"the session ended mid-call: {ended.reason}"))
            break
        text = "\n".join(
            str(block.get("text", ""))
            for block in reply.get("content", [])
            if isinstance(block, dict) and block.get("type") == "text"
        )
        if reply.get("isError"):
            return outcome(
                "tool_error", text=text, reason=bounded(text or "the remote tool reported an error")
            )
        structured = reply.get("structuredContent")
        return outcome("ok", result=structured if isinstance(structured, dict) else None, text=text)


__all__ = ["DEFAULT_CONCURRENCY", "Fleet", "call_timeout", "progress_message"]
