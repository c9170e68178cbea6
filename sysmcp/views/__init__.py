"""MCP Apps views (``io.modelcontextprotocol/ui``, SEP-1865 of 2026-01-26): ``ui://`` HTML resources.

A view is one self-contained HTML document shipped as package data. Its sources are kept as a page
plus the pieces every page shares (``head.html``, the document's head up to the page's own style,
named on the page's first line with its title; ``body.html``, from the end of that style to the page's
``#app``; ``common.css``; ``bridge.js``: the view side of the postMessage protocol); :func:`html`
inlines them, so what a host reads is one file that fetches nothing.

Views are offered only to clients that declare the extension with our mime type: legacy clients in
``initialize``'s ``capabilities.extensions``, 2026-07-28 clients in each request's envelope. Every
other client sees no view: the same tools and answers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sysmcp import __version__

EXTENSION = "io.modelcontextprotocol/ui"
MIME_TYPE = "text/html;profile=mcp-app"
#: The version of the structured-content contract the views read (docs: sysmcp/views/CONTRACT.md).
CONTRACT_VERSION = 1

#: Placeholders in a page's source, each replaced by a shared file (kept out of the HTML source so
#: every page speaks the protocol through the same code).
_INLINED = {
    "/*@common.css@*/": "common.css",
    "<!--@body.html@-->\n": "body.html",
    "/*@bridge.js@*/": "bridge.js",
}


@dataclass(frozen=True, slots=True)
class View:
    name: str  # its page is <name>.html in this package
    title: str
    description: str

    @property
    def uri(self) -> str:
        return f"ui://sysmcp/{self.name}"

    def resource(self, *, titles: bool) -> dict[str, Any]:
        """The ``resources/list`` entry (``title`` only where the version has it)."""
        entry = {"uri": self.uri, "name": self.name, "description": self.description, "mimeType": MIME_TYPE}
        if titles:
            entry["title"] = self.title
        return entry

    def contents(self) -> dict[str, Any]:
        """The one ``resources/read`` content: the HTML, and the resource metadata the spec defines
        (no domains at all: the view needs none, so the host's restrictive default CSP applies)."""
        return {
            "uri": self.uri,
            "mimeType": MIME_TYPE,
            "text": html(self.uri),
            "_meta": {"ui": {"csp": {}, "prefersBorder": True}},
        }


DIR_USAGE = View(
    name="dir-usage",
    title="Directory usage treemap",
    description="A squarified treemap of a dir_usage result: directories by disk bytes, their largest "
    "files, a breadcrumb; click (or Enter) on a directory to look inside it.",
)
DISKS = View(
    name="disks",
    title="Filesystems",
    description="One bar per filesystem (space and inodes) of a disk_usage result, fullest first, with the "
    "90 % line; per host for fleet results.",
)

CONTAINERS = View(
    name="containers",
    title="Container storage",
    description="One stacked bar of a container_usage result: image layers, writable layers, volumes, build "
    "cache, log files and what the data root holds beyond the engine's figures, each with its counts.",
)

HEALTH = View(
    name="health",
    title="Disk health",
    description="One row per device of a disk_health result with its verdict (ok, watch, failing, unknown), "
    "model and failure-predicting counters, then md arrays (degraded, rebuilding with progress) and btrfs error counters.",
)

VIEWS: dict[str, View] = {view.uri: view for view in (DIR_USAGE, DISKS, CONTAINERS, HEALTH)}


@functools.cache
def html(uri: str) -> str:
    """The served document of a view: its page with the shared CSS and JS inlined, read once."""
    from importlib import resources  # here: it imports tempfile, shutil …, which a start needs not

    view = VIEWS[uri]
    folder = resources.files(__name__)
    first, _, page = folder.joinpath(f"{view.name}.html").read_text(encoding="utf-8").partition("\n")
    title = first.removeprefix("<!--@head: ").removesuffix("@-->")  # the page's first line names it
    text = folder.joinpath("head.html").read_text(encoding="utf-8").replace("@TITLE@", title) + page
    for marker, name in _INLINED.items():
        text = text.replace(marker, folder.joinpath(name).read_text(encoding="utf-8"))
    return text.replace("@SYSMCP_VERSION@", __version__)


def accepts_views(capabilities: dict[str, Any]) -> bool:
    """Whether client capabilities declare the MCP Apps extension with the HTML mime type we serve."""
    extensions = capabilities.get("extensions")
    settings = extensions.get(EXTENSION) if isinstance(extensions, dict) else None
    if not isinstance(settings, dict):
        return False
    mime_types = settings.get("mimeTypes")
    return isinstance(mime_types, list) and MIME_TYPE in mime_types


def server_extension() -> dict[str, Any]:
    """What the server advertises under ``capabilities.extensions``."""
    return {EXTENSION: {"mimeTypes": [MIME_TYPE]}}
