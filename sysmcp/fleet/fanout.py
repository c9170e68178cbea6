"""One tool call on many hosts: bounded parallel calls through the pool, each ending as a ``HostOutcome``.

A host that hangs costs the call at most the connect timeout plus the call timeout, and every other
host's answer still arrives. The whole call answers by the fleet deadline at the latest: the hosts
still connecting or running then are named ``pending`` with their state, and a connection under way
goes on in the pool, so the next call finds it open. When the whole call is cancelled, every remote request still running is
told (``notifications/cancelled``, sent by the client session); the sessions stay open for the next call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import anyio

from sysmcp.fleet import links
from sysmcp.fleet.inventory import Inventory
from sysmcp.fleet.pool import HostFailure, SessionPool, log
from sysmcp.fleet.ssh import bounded
from sysmcp.protocol.client import PeerGone, ProgressCallback, RemoteError
from sysmcp.protocol.context import RequestContext
from sysmcp.protocol.failures import ToolError
from sysmcp.protocol.framing import encode
from sysmcp.render import plural
from sysmcp.tools.merging import HostOutcome, names_held, tally
from sysmcp.tools.registry import Tool

READ_TIMEOUT = 30.0  # seconds a host may take to hand over one stored result
DEFAULT_CONCURRENCY = 64  # sessions at once: ClusterShell's fan-out
DEFAULT_DEADLINE = 25.0  # seconds the whole fan-out may take: within an MCP host's patience
DEADLINE_MARGIN = 5.0  # seconds past a timeout_s the model gave, for its hosts' partial answers to arrive
PROGRESS_STEPS = 100  # progress notifications a fan-out sends at most (one per host up to 100 hosts)
DEFAULT_BUDGET = 120.0  # seconds a tool without a time budget of its own gets on each host
CALL_MARGIN = 15.0  # seconds on top of a tool's budget: hand-over, the remote's own slack

Report = Callable[[Sequence[HostOutcome], int], Awaitable[None]]


def call_timeout(input_schema: dict[str, Any], arguments: dict[str, Any]) -> float:
    """The tool's own budget (its ``timeout_s`` argument or that argument's default) plus a margin."""
    budget = arguments.get("timeout_s")
    if not isinstance(budget, (int, float)):
        budget = input_schema.get("properties", {}).get("timeout_s", {}).get("default", DEFAULT_BUDGET)
    return float(budget) + CALL_MARGIN


def pending_reason(state: str, deadline: float) -> str:
    """Why a host has no answer at the deadline, by what it was doing then."""
    doing = {
        "queued": "still waiting for a free session slot",
        "connecting": "still connecting (its connection goes on: the next call may find it open)",
        "running": "still running the tool (it was told to stop)",
    }[state]
    return f"{doing} at the fleet deadline of {deadline:g} s"


def progress_message(finished: Sequence[HostOutcome], asked: int) -> str:
    """``12 of 40 hosts answered, 1 unreachable`` while the others are still working."""
    text = tally(finished)
    head, _, rest = text.partition(" hosts answered")
    answered = head.split(" of ")[0]
    return f"{answered} of {plural(asked, 'host')} answered{rest}"


def _relay(progress: ProgressCallback) -> ProgressCallback:
    """A host's progress passed on with its message one bounded, printable line: a host's words must
    not drive the terminal that shows them (``sysmcp call`` prints progress there)."""

    async def relay(done: float, total: float | None, message: str | None) -> None:
        await progress(done, total, None if message is None else bounded(message))

    return relay


@dataclass
class Fleet:
    inventory: Inventory
    pool: SessionPool
    concurrency: int = DEFAULT_CONCURRENCY
    deadline: float = DEFAULT_DEADLINE

    # -- what the server asks of a fleet (gateway.FleetCaller) ----------------------------------

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

        linked = links.linked_arguments(arguments)
        texts: dict[str, str] = {}
        for name, (origin, uri) in linked.items():
            if any(host != origin for host in hosts):
                texts[name] = await self._inline(name, origin, uri)
        budget = arguments.get("timeout_s")  # the model asked for a longer run: the deadline grants it
        deadline = self.deadline
        if isinstance(budget, (int, float)) and not isinstance(budget, bool):
            deadline = max(deadline, float(budget) + DEADLINE_MARGIN)
        return await self.fan_out(
            tool.name,
            arguments,
            hosts,
            linked=(linked, texts),
            deadline=deadline,
            timeout=call_timeout(tool.input_schema, arguments),
            report=report if len(hosts) > 1 else None,
            remote_progress=ctx.progress,
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
        linked: tuple[dict[str, tuple[str, str]], dict[str, str]] = ({}, {}),
        deadline: float | None = None,
    ) -> list[HostOutcome]:
        """``tool(arguments)`` on each host (already resolved), in inventory order. ``report`` hears
        as hosts finish (after each of the first hundred, then every hundredth of the fleet);
        ``remote_progress`` gets the remote tool's own progress (one host only); ``linked`` (from
        ``call``) gives each host its own form of arguments that are gateway links. At ``deadline``
        (default: the fleet's) the hosts not finished are ``pending``.

        Each answer kept for the merge is charged to the pool's memory budget (``LineBudget``) as a line
        still arriving is, by the bytes of its line, until the call returns: the merge follows with no
        wait between, so nothing else is read meanwhile. Past the budget, lines still arriving are
        refused before answers kept, and an answer finding no room beside those kept before it is its
        host's error, in the budget's words (``LineBudget.keep``)."""
        outcomes: dict[str, HostOutcome] = {}
        finished: list[str] = []
        budget = self.pool.line_budget
        kept: dict[str, object] = {}  # host → its answer's holder of the budget, until the call returns
        states: dict[str, str] = {}  # host → queued, connecting, running (until it finishes)
        limiter = anyio.CapacityLimiter(max(1, self.concurrency))
        forward = _relay(remote_progress) if remote_progress is not None and len(hosts) == 1 else None
        step = max(1, -(-len(hosts) // PROGRESS_STEPS))
        limit = self.deadline if deadline is None else deadline
        started = anyio.current_time()

        def refuse(name: str) -> Callable[[str], None]:
            def refused(reason: str) -> None:
                outcomes[name] = replace(
                    outcomes[name], status="remote_error", result=None, text="", reason=reason
                )

            return refused

        async def one(name: str) -> None:
            states[name] = "queued"
            size = 0
            async with limiter:
                given = links.for_host(arguments, name, *linked)
                try:
                    outcome, size = await self._one(name, tool, given, timeout, forward, states)
                except RecursionError:
                    # Parsed (the decoder nests as deep as Python lets it) but too deep to walk for its links.
                    log.warning("a host's answer is nested too deeply to read", host=name)
                    reason = "sysmcp could not read its answer: it is too large/complex (nested too deeply)"
                    outcome = HostOutcome(name, "remote_error", anyio.current_time() - started, reason=reason)
                except Exception as exc:
                    # An answer in no shape read here (content null, say): this host's failure, not the call's.
                    log.exception("a host's answer could not be read", host=name)
                    reason = bounded(f"sysmcp could not read its answer ({type(exc).__name__}: {exc})")
                    outcome = HostOutcome(name, "remote_error", anyio.current_time() - started, reason=reason)
            states.pop(name, None)
            outcomes[name] = outcome
            if outcome.ok:
                budget.keep(kept.setdefault(name, object()), size, refuse(name), host=name)
            finished.append(name)
            if report is not None and (len(finished) % step == 0 or len(finished) == len(hosts)):
                await report([outcomes[done] for done in finished], len(hosts))

        try:
            with anyio.move_on_after(limit):
                async with anyio.create_task_group() as group:
                    for name in hosts:
                        group.start_soon(one, name)
        finally:
            for holder in kept.values():
                budget.release(holder)
        waited = anyio.current_time() - started
        for name in hosts:
            if name not in outcomes:
                state = states.get(name, "queued")
                outcomes[name] = HostOutcome(name, "pending", waited, reason=pending_reason(state, limit))
        return [outcomes[name] for name in hosts]

    async def _one(
        self,
        name: str,
        tool: str,
        arguments: dict[str, Any],
        timeout: float,
        on_progress: ProgressCallback | None,
        states: dict[str, str],
    ) -> tuple[HostOutcome, int]:
        """The host's outcome, and the bytes of the answer's line (0 for no answer)."""
        started = anyio.current_time()
        reconnected = False

        def outcome(status: str, size: int = 0, **fields: Any) -> tuple[HostOutcome, int]:
            took = anyio.current_time() - started
            return HostOutcome(name, status, took, reconnected=reconnected, **fields), size

        while True:
            states[name] = "connecting"
            try:
                session = await self.pool.session(name)
            except HostFailure as failure:
                return outcome(failure.status, reason=failure.reason, bastion=failure.bastion)
            # A host whose earlier session had ended (found dead now, or dying under this call): a new
            # handshake, which a warm call should not need. Counted, so the answer says so. A session
            # that was still starting at the last call's connect timeout is its first, not a reconnection.
            reconnected = reconnected or (session.number > 1 and session.calls == 0)
            states[name] = "running"
            session.calls += 1
            try:
                with anyio.fail_after(timeout):
                    answer = await session.client.reply(
                        "tools/call", {"name": tool, "arguments": arguments}, on_progress=on_progress
                    )
            except TimeoutError:
                # The remote was told to stop (notifications/cancelled); the session stays for reuse.
                return outcome("timeout", reason=f"no answer within {timeout:g} s")
            except RemoteError as exc:
                # An older sysmcp that does not know this tool or argument: its answer, not our crash.
                return outcome("tool_error", reason=bounded(f"{exc.message} ({exc.code})"))
            except PeerGone:
                ended = await session.failure()
                await self.pool.discard(session)
                if session.calls > 1 and not session.client.ended_here:
                    log.debug("a reused session had ended", host=name, reason=ended.reason)
                    # A reused session had died since its last call (its ssh killed, the connection
                    # dropped): every tool is read-only and idempotent, so ask once more on a new one,
                    # whose first call this is. One this side ended at its answer (too long, past the
                    # gateway's memory) did not die: asked again, it would answer the same.
                    continue
                status = ended.status if ended.status != "no_sysmcp" else "unreachable"
                return outcome(status, reason=bounded(f"the session ended mid-call: {ended.reason}"))
            finally:  # however it ended (the fleet deadline too): no stalled line is kept for ever
                self.pool.settle(session)
            break
        reply = answer.result or {}
        text = "\n".join(
            str(block.get("text", ""))
            for block in reply.get("content", [])
            if isinstance(block, dict) and block.get("type") == "text"
        )
        text = links.to_gateway(name, text)  # an error's words too: no host points at another's results
        if reply.get("isError"):
            # Its words are its reason, one bounded line, all a merge shows of an error: its whole text
            # is not kept for the merge, where the memory budget charges only the answers that are ok.
            return outcome("tool_error", reason=bounded(text or "the remote tool reported an error"))
        structured = reply.get("structuredContent")
        # Its names as the host's result held them: a name that is not UTF-8 is its bytes again (its
        # exact_bytes undone), so the merge shows it as the host would, and the gateway's answer lists it.
        result = links.to_gateway(name, names_held(structured)) if isinstance(structured, dict) else None
        return outcome("ok", answer.size, result=result, text=text)

    # -- a host's stored results ---------------------------------------------------------------

    async def read_resource(self, host: str, uri: str) -> dict[str, Any]:
        """``resources/read`` of ``uri`` on ``host``'s open session: its stored results live only there.
        ``LookupError`` (a sentence) when the host, its session or the result is gone."""
        if host not in self.inventory.hosts:
            raise LookupError(f"there is no host {host!r} in the inventory")
        session = self.pool.live(host)
        if session is None:
            raise LookupError(
                f"the session to {host} that made this result has ended, and the result with it: "
                "call the tool on that host again"
            )
        try:
            with anyio.fail_after(READ_TIMEOUT):
                return await session.client.request("resources/read", {"uri": uri})
        except TimeoutError:
            raise LookupError(f"{host} did not hand the result over within {READ_TIMEOUT:g} s") from None
        except RemoteError as exc:  # its words, one bounded printable line: they become the gateway's own
            raise LookupError(
                f"{host} no longer has it ({bounded(exc.message)}): its store keeps the newest results "
                "only; call the tool on that host again"
            ) from None
        except PeerGone:
            raise LookupError(f"the session to {host} ended while reading it") from None
        finally:
            self.pool.settle(session)

    async def localise(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Arguments for a tool run on the gateway itself: each host link replaced by its text."""
        given = dict(arguments)
        for name, (origin, uri) in links.linked_arguments(arguments).items():
            given[name] = await self._inline(name, origin, uri, where="here")
        return given

    async def _inline(self, argument: str, host: str, uri: str, where: str = "to the other hosts") -> str:
        """The text behind another host's link, for the hosts that cannot read it themselves."""
        try:
            reply = await self.read_resource(host, uri)
        except LookupError as exc:
            raise ToolError(f"Cannot pass {argument} {where}: {exc}.") from None
        contents = reply.get("contents")
        first = contents[0] if isinstance(contents, list) and contents else None
        text = first.get("text") if isinstance(first, dict) else None
        if not isinstance(text, str):
            raise ToolError(f"Cannot pass {argument} {where}: {host} returned no text for it.")
        # Measured as a request carries it: a control character is six bytes there (\u0001), and a
        # line past the remote's cap is refused without an id, leaving its call waiting for the deadline.
        if (size := len(encode(text))) > links.MAX_INLINE:
            raise ToolError(
                f"Cannot pass {argument} {where}: the result behind it is {size:,} bytes as a request "
                f"carries it, more than the {links.MAX_INLINE:,} one request may carry. Ask {host} alone, "
                "or narrow the call that made it."
            )
        return text


__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_DEADLINE",
    "Fleet",
    "call_timeout",
    "pending_reason",
    "progress_message",
]
