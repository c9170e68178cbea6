"""The one small registry through which tools plug into the server.

A tool module declares a ``TOOL = Tool(...)``: name, schemas and handler side by side. The server
never needs to know more about a tool than this record.
"""

from __future__ import annotations

import base64
import functools
import importlib
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio

from sysmcp.engine.calls import Cancel, Progress
from sysmcp.engine.faults import EngineError
from sysmcp.engine.paths import PathPolicy, display, echo, in_json
from sysmcp.protocol.context import Describe, Meter, RequestContext
from sysmcp.protocol.failures import ToolError, invalid_params
from sysmcp.protocol.lifecycle import Features
from sysmcp.protocol.threads import run_in_thread
from sysmcp.results import ResultStore, StoredResult, TooLarge
from sysmcp.tools.descriptions import described
from sysmcp.tools.errors import as_tool_error
from sysmcp.tools.schemas import with_exact_bytes
from sysmcp.tools.typed import schema_of, to_json

T = TypeVar("T")
R = TypeVar("R")

RESOLVE_TIMEOUT = 5.0  # seconds a path argument may take to resolve, as disk_usage gives each mount


#: What an answer links to: a full result kept in the server's result store, as the store keeps it.
ResourceLink = StoredResult


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a handler returns: text for people and models, structured data for programs, and the typed
    result (``sysmcp.tools.typed``) the structured data was made from, for the fleet merge and history."""

    text: str
    structured: dict[str, Any]
    is_error: bool = False
    links: tuple[ResourceLink, ...] = ()
    result: Any = None

    @classmethod
    def typed(cls, text: str, result: Any, links: tuple[ResourceLink, ...] = ()) -> ToolOutput:
        """The answer ``text`` with the typed ``result`` and the structured data made from it (a name the
        result holds as ``os.fsdecode`` made it given as ``display`` shows it: ``in_json``)."""
        structured: dict[str, Any] = in_json(to_json(result))  # type: ignore[assignment]
        return cls(text, structured, links=links, result=result)

    @classmethod
    def of(
        cls, result: Any, render: Callable[[Any], str], links: tuple[ResourceLink, ...] = ()
    ) -> ToolOutput:
        return cls.typed(render(result), result, links)


@dataclass
class ToolContext:
    """What a handler gets: the request's protocol context plus the server's shared services."""

    request: RequestContext
    paths: PathPolicy
    results: ResultStore
    #: The names of the tools this server serves (``reclaim`` only with --allow-reclaim), for advice.
    served: tuple[str, ...] = ()

    async def resolve(self, raw: str, check: Callable[[Path], None] | None = None) -> Path:
        """``paths.resolve(raw)``, then ``check(path)``, in a thread and within ``RESOLVE_TIMEOUT``:
        resolving looks at every component of the path, and one on a hung network mount must block a
        thread for a while, never the event loop, and never the call for ever."""

        def work(value: str) -> Path:
            path = self.paths.resolve(value)
            if check is not None:
                check(path)
            return path

        with anyio.move_on_after(RESOLVE_TIMEOUT):
            try:
                return await run_in_thread(work, raw, None)
            except EngineError as refused:  # words here, so a handler may catch ToolError
                raise as_tool_error(refused) from None
        raise ToolError(
            f"path {echo(raw)} could not be looked at within {RESOLVE_TIMEOUT:g} s: a filesystem on the way "
            "does not answer (a hung network mount?)"
        )

    async def run_in_worker(self, work: Callable[[Meter], T], *, describe: Describe | None = None) -> T:
        return await self.request.run_in_worker(work, describe=describe)

    async def run_engine(
        self, run: Callable[[R, Progress, Cancel], T], request: R, *, describe: Describe | None = None
    ) -> T:
        """``run(request, progress, cancel)`` in a worker thread, its progress sent to the client as it
        goes (``describe`` words it) and its ``cancel`` raising once the call is cancelled."""
        return await self.run_in_worker(
            lambda meter: run(request, meter.report, meter.cancel), describe=describe
        )

    def keep(
        self, name: str, text: str, *, description: str, mime_type: str = "text/plain"
    ) -> ResourceLink | str:
        """Store a result too big to inline: the link a ``ToolOutput`` carries to it, or, for a result
        too big even to keep, a sentence saying so for the answer's text."""
        try:
            return self.results.put(
                name, text, description=description, mime_type=mime_type, scope=self.paths.allowed
            )
        except TooLarge as exc:
            return exc.reason

    def keep_linked(
        self, name: str, text: str, *, description: str, label: str, mime_type: str = "text/plain"
    ) -> tuple[str, tuple[ResourceLink, ...]]:
        """``keep`` for an answer: the line its text ends with ('<label>: <uri>', or why the full
        result was not kept) and the links its ``ToolOutput`` carries."""
        link = self.keep(name, text, description=description, mime_type=mime_type)
        return with_link("", link, f"{label}: {{}}", f"{label}: not kept, {{}}")


def with_link(
    text: str, link: ResourceLink | str, kept: str, not_kept: str
) -> tuple[str, tuple[ResourceLink, ...]]:
    """An answer cut short, ending in a line about its full listing (``ToolContext.keep``'s result):
    ``kept`` with the link's URI for its ``{}``, or ``not_kept`` with the reason; and the links to send."""
    if isinstance(link, str):
        return f"{text}\n{not_kept.format(link)}", ()
    return f"{text}\n{kept.format(link.uri)}", (link,)


def listing_name(prefix: str, shown: str, suffix: str) -> str:
    """The name of a kept listing of the directory ``shown``: ``dir_usage-log.tsv``, ``…-root.tsv`` for /."""
    return f"{prefix}-{os.path.basename(display(shown).rstrip('/')) or 'root'}{suffix}"


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[ToolOutput]]

READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    #: The result's ``@result`` dataclass (``tools.typed``), or its schema as it is (a test double's, or
    #: a fleet's, which offers the tool's schema or the per-host one).
    output: Any
    handler: Handler
    annotations: dict[str, Any] = field(default_factory=lambda: dict(READ_ONLY))
    #: Given the raw arguments, True when the call is answered from memory or a local syscall without
    #: waiting on anything: the session then answers it at once instead of starting a task for it.
    answers_at_once: Callable[[Any], bool] | None = None
    #: The ``ui://`` resource (an MCP Apps view, sysmcp.views) that renders this tool's results.
    view: str | None = None
    #: Its fleet view: the answers of many hosts (``merging.HostOutcome``) and the arguments → one
    #: ``ToolOutput``; a pure function. None: ``merging.default_merge`` (per-host summaries).
    merge: Callable[[Sequence[Any], dict[str, Any]], ToolOutput] | None = None

    @functools.cached_property
    def output_schema(self) -> dict[str, Any]:
        """The ``outputSchema``, derived when first asked for (``tools/list``), not when the tool is
        imported: a fleet host's remote start answers one call and never lists its tools."""
        return self.output if isinstance(self.output, dict) else with_exact_bytes(schema_of(self.output))

    @functools.cached_property
    def listed_output_schema(self) -> dict[str, Any]:
        """The ``outputSchema`` as ``tools/list`` gives it: every property says what it is."""
        return described(self.output_schema)

    def describe(self, features: Features, *, views: bool = False) -> dict[str, Any]:
        """The ``tools/list`` entry, with only what the negotiated version knows; ``views`` when the
        client declared the MCP Apps extension."""
        entry: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if features.structured_output:
            entry["title"] = self.title
            entry["outputSchema"] = self.listed_output_schema
        if features.tool_annotations:
            entry["annotations"] = {"title": self.title, **self.annotations}
        if views and self.view is not None:
            entry["_meta"] = {"ui": {"resourceUri": self.view}}
        return entry


@dataclass(frozen=True, slots=True)
class LazyTool:
    """A tool known by name until it is first asked for: its module (``TOOL``) is imported then.

    Why: a session answers ``initialize`` and one ``tools/call`` (a fleet's remote start) without
    importing the other tools and their engines, which were most of the start's CPU.
    """

    name: str
    module: str

    def load(self) -> Tool:
        tool: Tool = importlib.import_module(self.module).TOOL
        if tool.name != self.name:
            raise ValueError(f"{self.module}.TOOL is {tool.name!r}, listed as {self.name!r}")
        return tool


class Registry:
    """Tools by name, in declaration order, with opaque-cursor pagination."""

    def __init__(self, tools: Iterable[Tool | LazyTool], page_size: int = 100) -> None:
        """The tools as given: with a fleet, the gateway hands over tools whose schemas already carry
        ``hosts`` (``sysmcp.fleet.schema.fleet_tools``), so nothing here knows about fleets."""
        self._tools: dict[str, Tool | LazyTool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"tool {tool.name!r} registered twice")
            self._tools[tool.name] = tool
        self.page_size = page_size

    def get(self, name: str) -> Tool | None:
        tool = self._tools.get(name)
        if isinstance(tool, LazyTool):
            tool = self._tools[name] = tool.load()
        return tool

    def names(self) -> list[str]:
        """The tools' names, loading none of them."""
        return list(self._tools)

    def __iter__(self) -> Any:
        return iter(self._loaded(self.names()))

    def __len__(self) -> int:
        return len(self._tools)

    def page(self, cursor: object) -> tuple[Sequence[Tool], str | None]:
        """One page of tools and the cursor of the next (None on the last page)."""
        start = decode_cursor(cursor, len(self._tools))
        end = start + self.page_size
        return self._loaded(self.names()[start:end]), (encode_cursor(end) if end < len(self) else None)

    def _loaded(self, names: Sequence[str]) -> list[Tool]:
        return [tool for tool in map(self.get, names) if tool is not None]


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"sysmcp:{offset}".encode()).decode("ascii")


def decode_cursor(cursor: object, limit: int) -> int:
    """Offset of a cursor we issued; anything else is the client's mistake (-32602)."""
    if cursor is None:
        return 0
    if isinstance(cursor, str):
        try:
            text = base64.urlsafe_b64decode(cursor.encode("ascii")).decode("ascii")
            offset = int(text.removeprefix("sysmcp:"))
        except ValueError:  # not base64, not ASCII, no number, or one int() refuses (over 4,300 digits)
            offset = 0
        # exactly a cursor we issue (which the prefix alone is not): no padding games, no '02', no ' 2'
        if 0 < offset <= limit and encode_cursor(offset) == cursor:
            return offset
    raise invalid_params("Invalid params: unknown or expired cursor")
