"""Find (or install, once, under ~/.cache) Node >= 22.19 and npm packages for the interop tests.

The tests that need them skip with the reason when npm or the network is unavailable; installs are
bounded by timeouts and cached, so only the first run on a machine pays for them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

CACHE = Path(os.environ.get("SYSMCP_INTEROP_CACHE", Path.home() / ".cache" / "sysmcp-interop"))
MIN_NODE = (22, 19)
INSTALL_TIMEOUT = 300


class Unavailable(Exception):
    """Why a Node tool cannot be used here (the test skips with this text)."""


def _version(node: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.match(r"v(\d+)\.(\d+)", out.strip())
    return (int(found[1]), int(found[2])) if found else None


def _npm_install(prefix: Path, spec: str, path: str | None = None) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable("npm is not installed")
    prefix.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if path:
        env["PATH"] = path
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), spec],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        raise Unavailable(f"npm install {spec} took over {INSTALL_TIMEOUT} s") from exc
    if done.returncode != 0:
        raise Unavailable(f"npm install {spec} failed: {done.stderr.strip()[-300:]}")


def node22() -> Path:
    """A node binary >= 22.19: the system's if new enough, else npm's ``node@22`` under the cache."""
    system = shutil.which("node")
    if system and (_version(system) or (0, 0)) >= MIN_NODE:
        return Path(system)
    cached = CACHE / "node22" / "node_modules" / ".bin" / "node"
    if not cached.exists():
        _npm_install(CACHE / "node22", "node@22")
    if not cached.exists() or (_version(str(cached)) or (0, 0)) < MIN_NODE:
        raise Unavailable("could not get Node >= 22.19 (npm package node@22)")
    return cached


def node_path() -> str:
    """A PATH whose first ``node`` is >= 22.19."""
    return f"{node22().parent}{os.pathsep}{os.environ.get('PATH', '')}"


def npm_bin(package: str, version: str, binary: str) -> Path:
    """The executable ``binary`` of npm ``package@version``, installed under the cache on first use.

    Versions are pinned: what the tests expect (a baseline of failures, CLI flags) belongs to one.
    """
    prefix = CACHE / f"{package.strip('@').replace('/', '-')}-{version}"
    executable = prefix / "node_modules" / ".bin" / binary
    if not executable.exists():
        _npm_install(prefix, f"{package}@{version}", node_path())
    if not executable.exists():
        raise Unavailable(f"{package} installed but has no {binary!r} executable")
    return executable


def npm_package(package: str, version: str) -> Path:
    """The install prefix of npm library ``package@version`` (no executable), installed on first use.

    Scripts ``require`` it from ``prefix/node_modules``; npm 11 runs no install scripts by default,
    and these packages need none.
    """
    prefix = CACHE / f"{package.strip('@').replace('/', '-')}-{version}"
    manifest = prefix / "node_modules" / package / "package.json"
    if not manifest.exists():
        _npm_install(prefix, f"{package}@{version}", node_path())
    if not manifest.exists():
        raise Unavailable(f"npm install {package}@{version} left no {manifest}")
    return prefix
