"""What the browser tests need: Debian's Chromium, Node, and pinned npm packages (the official
ext-apps host side, playwright-core to drive Chromium, esbuild to bundle the host side for the page).

Why playwright-core rather than raw DevTools from Python: it waits for frames, selectors and
functions inside the view's iframe, intercepts every request the page makes, exposes a host
function to the page and takes element screenshots — what the tests check — with no browser
download (it drives /usr/bin/chromium), pinned like every other npm tool here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.interop.node import CACHE, INSTALL_TIMEOUT, Unavailable

#: Pinned: the host side the tests speak to is one version of the official bridge.
PACKAGES = (
    "@modelcontextprotocol/ext-apps@2.0.4",
    "@modelcontextprotocol/client@2.4.0",
    "@modelcontextprotocol/core@2.4.0",
    "zod@4.6.7",
    "playwright-core@1.65.1",
    "esbuild@0.25.12",
)
PREFIX = CACHE / "views-host-1"
MIN_NODE = 18


def chromium() -> Path:
    for candidate in (shutil.which("chromium"), "/usr/bin/chromium", shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    raise Unavailable("Chromium is not installed (Debian package 'chromium'; .ci/run installs it)")


def node() -> Path:
    found = shutil.which("node")
    if found is None:
        raise Unavailable("node is not installed")
    out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=20).stdout
    major = int(out.strip().lstrip("v").split(".")[0] or 0)
    if major < MIN_NODE:
        raise Unavailable(f"node {out.strip()} is older than {MIN_NODE}")
    return Path(found)


def host_packages() -> Path:
    """The npm prefix with the pinned packages and ``bridge.js``, the host side bundled for a page."""
    bundle = PREFIX / "bridge.js"
    if bundle.exists():
        return PREFIX
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable("npm is not installed")
    PREFIX.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(PREFIX), *PACKAGES],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        raise Unavailable(f"npm install took over {INSTALL_TIMEOUT} s") from exc
    if done.returncode != 0:
        raise Unavailable(f"npm install failed: {done.stderr.strip()[-300:]}")
    entry = PREFIX / "entry.mjs"
    entry.write_text(
        'export { AppBridge, PostMessageTransport } from "@modelcontextprotocol/ext-apps/app-bridge";\n'
    )
    built = subprocess.run(
        [
            str(PREFIX / "node_modules" / ".bin" / "esbuild"),
            str(entry),
            "--bundle",
            "--format=esm",
            "--platform=browser",
            f"--outfile={bundle}.part",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PREFIX,
    )
    if built.returncode != 0:
        raise Unavailable(f"bundling the ext-apps host side failed: {built.stderr.strip()[-300:]}")
    os.replace(f"{bundle}.part", bundle)
    return PREFIX
