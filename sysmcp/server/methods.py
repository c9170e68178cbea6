"""The MCP method table: what each method means for sysmcp.

The session delivers parsed requests; this module applies the lifecycle rules, the negotiated
version's features, and turns tool outcomes into ``CallToolResult`` shapes.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from sysmcp import __version__
from sysmcp.engine.faults import EngineError
from sysmcp.engine.paths import PathPolicy, one_line, printable_text
from sysmcp.history import state
from sysmcp.logconfig import get_logger
from sysmcp.protocol.context import RequestContext
from sysmcp.protocol.failures import META_REFUSED, ArgumentError, ProtocolError, ToolError, invalid_params
from sysmcp.protocol.jsonrpc import ErrorCode, Notification, Request
from sysmcp.protocol.lifecycle import (
    ADVERTISED_VERSIONS,
    LOG_LEVELS,
    Features,
    Lifecycle,
    complete_result,
)
from sysmcp.protocol.threads import run_in_thread
from sysmcp.render import plural
from sysmcp.results import ResultStore, StoredResult
from sysmcp.server.roots import ClientRoots
from sysmcp.tools.arguments import validate_arguments
from sysmcp.tools.errors import as_tool_error
from sysmcp.tools.registry import LazyTool, Registry, Tool, ToolContext, ToolOutput
from sysmcp.views import VIEWS, accepts_views, server_extension

if TYPE_CHECKING:  # the fleet is imported only when the operator configured one, prompts when asked
    from sysmcp.fleet.gateway import FleetCaller, FleetGateway
    from sysmcp.server.prompts import Prompts

log = get_logger("sysmcp.server")

SERVER_NAME = "sysmcp"
SERVER_TITLE = "sysmcp — sysadmin tools"
_ICON_SVG = (  # a disk, drawn in the file itself: a data: URI reaches no network
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64"><rect x="6" y="14" width="52" height="36" rx="6" '
    'fill="#2d3e50"/><circle cx="46" cy="32" r="5" fill="#7fd17f"/><rect x="14" y="29" width="22" height="6" '
    'rx="2" fill="#c7d3df"/></svg>'
)
ICON_URI = "data:image/svg+xml;base64," + base64.b64encode(_ICON_SVG.encode()).decode()
SERVER_DETAILS = {  # 2025-11-25 on: where to read about it, and an icon that needs no network
    "description": "Read-only sysadmin tools: disk usage, checksums, duplicates, deleted files held open, I/O.",
    "websiteUrl": "https://github.com/sysmcp/sysmcp",
    "icons": [{"src": ICON_URI, "mimeType": "image/svg+xml", "sizes": ["any"]}],
}

#: Said once for every tool (the tools' own descriptions do not repeat it), then one line per tool:
#: the question it answers. ``tests/test_tool_budget.py`` holds it to 1,500 characters and every served
#: tool named once.
INSTRUCTIONS = """\
sysmcp answers questions about this machine's storage and files. For every tool:
- It is read-only: nothing is written, deleted or changed, and no file contents are returned, only \
metadata, sizes and digests.
- Paths are absolute. {scope}
- Text escapes names as ls -b does (\\\\ is one backslash); a call names a file by its structuredContent path.
- A call that stops early (timeout_s, no descriptor left) says PARTIAL first, with what it covered and left \
out; a list too long to show ends with a sysmcp:// link to all of it (resources/read).
- Long calls report progress and can be cancelled.
Which tool answers what:
- disk_usage: which filesystem is full, how fast it fills; explain=true: where df's used bytes are.
- dir_usage: what fills a directory now.
- what_changed: what grew, shrank or appeared since a time.
- deleted_open_files: space held by deleted files still open.
- disk_io: which process is writing or reading, and to which files, now.
- disk_health: is a disk failing (SMART, RAID, I/O errors).
- container_usage: what Docker or Podman holds on disk, logs included.
- reclaim_plan: what can be deleted to free space, as a plan.
- find_duplicates: identical files.
- file_sha256: one file's SHA-256.
- hash_tree: a checksum manifest of a tree.
- verify_checksums: do files still match a manifest."""


#: Characters of a tool's text answer at most (about 10,000 tokens: Claude Code warns there, and cuts at
#: 25,000). Tools bound their lists; this holds whatever their argument values give (a thousand manifest
#: lines of long names), cutting at a line and linking the whole answer. benchmarks/answer_budget.py.
ANSWER_BUDGET = 40_000

COMPLETION_TIMEOUT = 2.0  # seconds a path completion may spend listing a directory

Method = Callable[[dict[str, Any], RequestContext], Awaitable[dict[str, Any]]]

#: Methods answered from memory, never waiting on I/O or the client: the session runs them inline.
IMMEDIATE_METHODS = frozenset(
    {
        "ping",
        "initialize",
        "server/discover",
        "logging/setLevel",
        "tools/list",
        "resources/templates/list",
        "prompts/list",
    }
)
#: Answered from memory too, but under the client's roots: inline only while those are settled (a
#: fetch of new roots waits for the client's answer, which the read loop cannot read while it serves),
#: and with a fleet a read may be of a host's link, which is fetched from that host.
SCOPED_METHODS = frozenset({"resources/list", "resources/read"})


@dataclass
class Server:
    """One connection's worth of MCP state: lifecycle, log level, path policy, stored results."""

    registry: Registry
    paths: PathPolicy = field(default_factory=PathPolicy)
    results: ResultStore = field(default_factory=ResultStore)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    log_level: str = "warning"
    fleet: FleetGateway | None = None  # set when the operator configured hosts (--host, --inventory)

    def __post_init__(self) -> None:
        # Legacy clients' roots/list narrows self.paths; cli wires its peer (the session) and spawn.
        self.client_roots = ClientRoots(self.paths)
        self._methods: dict[str, Method] = {
            "initialize": self._initialize,
            "server/discover": self._discover,
            "ping": self._ping,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
            "logging/setLevel": self._set_level,
            "resources/list": self._resources_list,
            "resources/read": self._resources_read,
            "resources/templates/list": self._resource_templates_list,
            "prompts/list": self._prompts_list,
            "prompts/get": self._prompts_get,
            "completion/complete": self._complete,
        }

    @functools.cached_property
    def prompts(self) -> Prompts:
        """The prompts, made (and their module imported) when a prompt method is first asked: a
        session that only calls tools, as a fleet's remote start, never loads them."""
        from sysmcp.server.prompts import Prompts

        return Prompts()

    # -- the session's Handler protocol -----------------------------------------------------

    def batching_allowed(self) -> bool:
        return self.lifecycle.batching_allowed

    def answers_at_once(self, request: Request) -> bool:
        if request.method in IMMEDIATE_METHODS:
            return True
        if request.method in SCOPED_METHODS:
            remote = request.method == "resources/read" and self.fleet is not None
            return self.client_roots.settled and not remote
        if request.method != "tools/call" or not self.client_roots.settled:
            return False
        if self.fleet is not None and self.fleet.asks_hosts(request.params.get("arguments")):
            return False  # a fan-out waits on the network
        name = request.params.get("name")
        tool = self.registry.get(name) if isinstance(name, str) else None
        if tool is None:
            return True  # answered with an error at once
        return tool.answers_at_once is not None and tool.answers_at_once(request.params.get("arguments"))

    def admit(self, request: Request, ctx: RequestContext) -> None:
        """Decide, in arrival order, whether the request exists in its era and what that era allows."""
        if request.method not in self._methods:
            raise ProtocolError(ErrorCode.METHOD_NOT_FOUND, f"Method not found: {request.method}")
        admission = self.lifecycle.admit(request.method, request.params)
        ctx.features = admission.features
        # Modern era: logging only if this request asked for it.
        ctx.log_level = self.log_level if admission.envelope is None else admission.envelope.log_level
        ctx.client_capabilities = (
            self.lifecycle.client_capabilities
            if admission.envelope is None
            else admission.envelope.client_capabilities
        )

    async def handle_request(self, request: Request, ctx: RequestContext) -> dict[str, Any]:
        result = await self._methods[request.method](request.params, ctx)
        if not ctx.features.modern:
            return result
        return complete_result(request.method, result, self.server_info(ctx.features))

    async def handle_notification(self, notification: Notification) -> None:
        if notification.method not in ("notifications/initialized", "notifications/roots/list_changed"):
            log.debug("notification ignored", method=notification.method)
            return
        if notification.method == "notifications/initialized":
            self.lifecycle.initialized()
        if isinstance(self.lifecycle.client_capabilities.get("roots"), dict):
            self.client_roots.changed()

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def instructions(self) -> str:
        roots = self.paths.allowed
        scope = (
            "No roots are configured: the whole filesystem is in scope."
            if roots is None
            else "Only these roots are in scope: " + ", ".join(map(str, roots)) + "."
        )
        text = INSTRUCTIONS.format(scope=scope)
        if "reclaim" in self.registry.names():  # loads nothing: initialize imports no reclaim engine
            text += (
                "\n- reclaim: removes chosen items of a plan after the user confirms (the operator allowed it: "
                "the one tool that changes anything)."
            )
        if self.fleet is not None:
            text += "\n" + self.fleet.instructions()
        return text

    def capabilities(self, features: Features) -> dict[str, Any]:
        capabilities: dict[str, Any] = {
            "tools": {"listChanged": False},
            # The result store grows as tools keep full results, so the list changes: said once per
            # stored result (legacy era). 2026-07-28 delivers list_changed only on a subscriptions/listen
            # stream, which sysmcp does not offer, so there it promises nothing.
            "resources": {"subscribe": False, "listChanged": not features.modern},
            "prompts": {"listChanged": False},
        }
        if features.logging_capability:
            capabilities["logging"] = {}
        if features.completions_capability:
            capabilities["completions"] = {}
        return capabilities

    def server_info(self, features: Features) -> dict[str, Any]:
        info: dict[str, Any] = {"name": SERVER_NAME, "version": __version__}
        if features.titles:
            info["title"] = SERVER_TITLE
        if features.implementation_details:
            info.update(SERVER_DETAILS)
        return info

    async def _initialize(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        version = self.lifecycle.initialize(params)
        features = self.lifecycle.features
        log.info("initialized", protocol_version=version, client=self.lifecycle.client_info.get("name"))
        capabilities = self.capabilities(features)
        if accepts_views(self.lifecycle.client_capabilities):
            capabilities["extensions"] = server_extension()
        return {
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": self.server_info(features),
            "instructions": self.instructions,
        }

    async def _discover(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        """2026-07-28's ``server/discover``; the legacy versions are listed too, for clients that fall back."""
        return {
            "supportedVersions": list(ADVERTISED_VERSIONS),
            "capabilities": {**self.capabilities(ctx.features), "extensions": server_extension()},
            "instructions": self.instructions,
        }

    async def _ping(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        return {}

    async def _set_level(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        level = params.get("level")
        if level not in LOG_LEVELS:
            raise invalid_params(f"Invalid params: 'level' must be one of {', '.join(LOG_LEVELS)}")
        self.log_level = str(level)
        return {}

    # -- tools ------------------------------------------------------------------------------

    async def _tools_list(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        tools, next_cursor = self.registry.page(params.get("cursor"))
        views = accepts_views(ctx.client_capabilities)
        result: dict[str, Any] = {"tools": [tool.describe(ctx.features, views=views) for tool in tools]}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    async def _tools_call(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str):
            raise invalid_params("Invalid params: 'name' must be a string")
        tool = self.registry.get(name)
        if tool is None:
            known = ", ".join(self.registry.names())
            raise invalid_params(f"Invalid params: unknown tool {name!r}; known tools: {known}")
        try:
            arguments = validate_arguments(tool.input_schema, params.get("arguments"))
        except ArgumentError as exc:
            if not ctx.features.validation_errors_as_results:
                raise invalid_params(exc.message) from exc
            return self._error_result(exc.message, refused=True)
        if self.fleet is not None and self.fleet.asks_hosts(arguments):
            keep = ToolContext(ctx, self.paths, self.results).keep
            output = await self.fleet.fan_out(tool, arguments, params.get("arguments"), ctx, keep)
            return self._call_result(self._bounded(output, ctx), ctx.features)
        if self.fleet is not None:
            try:
                arguments = await self.fleet.localise(arguments)
            except ToolError as exc:
                return self._error_result(exc.message)
        await self.client_roots.current()  # never run a tool on a scope the client is still narrowing
        return await self._run_tool(tool, arguments, ctx)

    async def _run_tool(self, tool: Tool, arguments: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        # Debug lines for clients that opt in (logging/setLevel, or the 2026 per-request logLevel);
        # decided once, so a call nobody logs builds no log messages.
        debug = ctx.wants_log("debug")
        if debug:
            await ctx.log("debug", {"event": "tool started", "tool": tool.name, "arguments": arguments})
        try:
            served = tuple(self.registry.names())
            output = await tool.handler(arguments, ToolContext(ctx, self.paths, self.results, served))
        except (EngineError, ToolError) as exc:
            failure = as_tool_error(exc) if isinstance(exc, EngineError) else exc
            if debug:
                error = printable_text(failure.message)  # what a client prints as a log line
                await ctx.log("debug", {"event": "tool failed", "tool": tool.name, "error": error})
            return self._error_result(failure.message, refused=isinstance(failure, ArgumentError))
        if debug:
            await ctx.log("debug", {"event": "tool finished", "tool": tool.name, "isError": output.is_error})
        output = self._bounded(output, ctx)
        if output.links and not ctx.features.modern:  # before the result, so a list it prompts shows it
            await ctx.peer.notify("notifications/resources/list_changed", {})
        return self._call_result(output, ctx.features)

    def _bounded(self, output: ToolOutput, ctx: RequestContext) -> ToolOutput:
        """The answer, its text cut at a line within ``ANSWER_BUDGET`` when longer, saying what it left
        out and linking the whole text (kept in the result store). Escaped first (``printable_text``), so
        the budget holds for the text as sent and the whole text the link hands over, read back with
        ``resources/read``, is the same answer as escaped as the part shown."""
        text = printable_text(output.text)
        if len(text) <= ANSWER_BUDGET:
            return output
        head = text[: ANSWER_BUDGET - 400]  # room for the lines saying what was cut
        head = head[: head.rfind("\n")] if "\n" in head else head
        rest = text[len(head) :]
        note = (
            f"{head}\n… answer cut at {ANSWER_BUDGET:,} characters: {plural(rest.count(chr(10)) + 1, 'more line')} "
            f"({len(rest):,} characters) not shown."
        )
        tail, links = ToolContext(ctx, self.paths, self.results).keep_linked(
            "answer.txt", text, description="The whole text answer", label="The whole answer"
        )
        return dataclasses.replace(output, text=note + tail, links=(*output.links, *links))

    def _error_result(self, text: str, *, refused: bool = False) -> dict[str, Any]:
        """An ``isError`` result; ``refused``: the arguments were refused before any work (a bad one, a
        path outside the roots), which ``sysmcp call`` reports as a usage error (exit 2)."""
        result: dict[str, Any] = {
            "content": [{"type": "text", "text": printable_text(text)}],
            "isError": True,
        }
        if refused:
            result["_meta"] = {META_REFUSED: "arguments"}
        return result

    def _call_result(self, output: ToolOutput, features: Features) -> dict[str, Any]:
        """The ``tools/call`` result. Its text passes ``printable_text`` here, the one door every answer
        goes through: a name shown in it (a file's, a mount point's, a process's command line) may hold
        any byte but ``/`` and NUL, and whichever words forgot to escape one, no ESC, C1 control or bidi
        override reaches the model, or the terminal or page a client shows the text in."""
        content: list[dict[str, Any]] = [{"type": "text", "text": printable_text(output.text)}]
        for link in output.links:
            if features.structured_output:
                content.append({"type": "resource_link", **_resource(link)})
            else:
                content.append(
                    {
                        "type": "text",
                        "text": f"Full result: {link.uri} ({link.size} bytes; read it with resources/read)",
                    }
                )
        result: dict[str, Any] = {"content": content, "isError": output.is_error}
        if features.structured_output and not output.is_error:
            result["structuredContent"] = output.structured
        return result

    # -- resources --------------------------------------------------------------------------

    async def _resources_list(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        _one_page(params)
        views = (
            [view.resource(titles=ctx.features.titles) for view in VIEWS.values()]
            if accepts_views(ctx.client_capabilities)
            else []
        )
        await self.client_roots.current()  # a kept result is listed only while the scope covers its call's
        kept = [_resource(item) for item in self.results.list() if self.paths.covers(item.scope)]
        return {"resources": views + kept}

    async def _resources_read(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise invalid_params("Invalid params: 'uri' must be a string")
        view = VIEWS.get(uri)
        if view is not None:
            return {"contents": [view.contents()]}
        if self.fleet is not None:
            try:
                reply = await self.fleet.read(uri)
            except LookupError as exc:
                raise ProtocolError(
                    ctx.features.resource_not_found_code, f"Resource not found: {exc}", {"uri": uri}
                ) from None
            if reply is not None:
                return reply
        await self.client_roots.current()
        item = self.results.get(uri)
        if item is None or not self.paths.covers(item.scope):  # made under roots wider than these
            dropped = self.results.dropped(uri)
            said = f"Resource not found: {dropped}" if dropped else "Resource not found"
            raise ProtocolError(ctx.features.resource_not_found_code, said, {"uri": uri})
        return {"contents": [{"uri": item.uri, "mimeType": item.mime_type, "text": item.text}]}

    async def _resource_templates_list(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        _one_page(params)
        return {"resourceTemplates": []}

    # -- prompts and completion -------------------------------------------------------------

    async def _prompts_list(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        _one_page(params)
        return {"prompts": self.prompts.list(ctx.features)}

    async def _prompts_get(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        from sysmcp.server.prompts import PromptEnv

        await self.client_roots.current()  # path arguments are checked against the settled scope
        arguments: dict[str, Collection[str]] = {
            tool.name: set(tool.input_schema.get("properties", {})) for tool in self.registry
        }
        env = PromptEnv(set(arguments), arguments, self.paths, history=state.active() is not None)
        # Path arguments are resolved, which stats each component: in a thread, as for tools.
        return await run_in_thread(
            lambda _: self.prompts.get(params.get("name"), params.get("arguments"), env), None, None
        )

    async def _complete(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        """Path completion for prompt arguments that take paths; nothing to offer for anything else."""
        ref, argument = params.get("ref"), params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise invalid_params("Invalid params: 'ref' and 'argument' must be objects")
        name, value = argument.get("name"), argument.get("value")
        if not isinstance(name, str) or not isinstance(value, str):
            raise invalid_params("Invalid params: 'argument' needs string 'name' and 'value'")
        values: list[str] = []
        total = 0
        if ref.get("type") == "ref/prompt":
            from sysmcp.server.prompts import complete_path

            spec = self.prompts.find(ref.get("name")).argument(name)
            if spec is not None and spec.completes is not None:
                await self.client_roots.current()
                kind = spec.completes
                # A hung network mount must not hang the completion: give up after a moment (the
                # thread is then left behind and counted; past the bound nothing more is started).
                with anyio.move_on_after(COMPLETION_TIMEOUT), contextlib.suppress(ToolError):
                    values, total = await run_in_thread(
                        lambda _: complete_path(value, kind, self.paths), None, None
                    )
        elif ref.get("type") != "ref/resource":
            raise invalid_params("Invalid params: 'ref.type' must be 'ref/prompt' or 'ref/resource'")
        elif not isinstance(ref.get("uri"), str):
            raise invalid_params("Invalid params: 'ref.uri' must be a string (the resource template's URI)")
        return {"completion": {"values": values, "total": total, "hasMore": total > len(values)}}


def _one_page(params: dict[str, Any]) -> None:
    """A list served in one page: no cursor is ours, so any is -32602 (as ``tools/list``'s unknown ones)."""
    if params.get("cursor") is not None:
        raise invalid_params("Invalid params: unknown or expired cursor")


def _resource(item: StoredResult) -> dict[str, Any]:
    """A stored result as ``resources/list`` lists it and a ``resource_link`` points at it."""
    return {
        "uri": item.uri,
        "name": one_line(item.name),
        "description": one_line(item.description),
        "mimeType": item.mime_type,
        "size": item.size,
    }


def build_server(
    tools: Sequence[Tool | LazyTool],
    *,
    roots: Sequence[str] | None = None,
    page_size: int = 100,
    fleet: FleetCaller | None = None,
    hosts_property: dict[str, Any] | None = None,
) -> Server:
    policy = PathPolicy.of_operator(roots)
    gateway = None
    if fleet is not None:
        from sysmcp.fleet.gateway import FleetGateway

        gateway = FleetGateway(fleet, hosts_property)
        tools = gateway.tools(t.load() if isinstance(t, LazyTool) else t for t in tools)
    return Server(Registry(tools, page_size=page_size), paths=policy, fleet=gateway)
