"""Running a reclaim scenario in a private mount namespace on a fresh tmpfs, with a second user.

``in_namespace(name, *args)`` runs ``python -m tests.security.reclaim_scenarios NAME ARGS`` under
``unshare --mount --propagation private``; there ``run`` mounts a tmpfs on a new directory, calls
the scenario with it and prints the scenario's JSON answer as the last line. Files of the second user
(``nobody``, uid 65534) are written by that user itself, through ``setpriv``. Nothing any other
process sees changes, and the tmpfs goes with the namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sysmcp.reclaim import Plan, PlanRequest, build_plan
from sysmcp.reclaim._classes import RootsLayout
from sysmcp.tools.reclaim_plan import duplicate_groups

NOBODY = 65534
REPO = str(Path(__file__).resolve().parents[2])
SCENARIOS = "tests.security.reclaim_scenarios"


def why_not() -> str | None:
    """Why these scenarios cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs and to become a second user"
    for tool in ("unshare", "setpriv"):
        if shutil.which(tool) is None:
            return f"no {tool}(1)"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
    return None if probe.returncode == 0 else "this sandbox refuses new mount namespaces"


def in_namespace(name: str, *args: str, timeout: float = 300) -> Any:
    """The JSON answer of scenario ``name``, run in its own mount namespace on a fresh tmpfs."""
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-m", SCENARIOS, name, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


def as_nobody(*argv: str) -> None:
    """Run a command as the second user (no groups, no capabilities)."""
    subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
        check=True,
        capture_output=True,
    )


def write_as_nobody(path: Path, data: bytes, mode: int) -> None:
    """``nobody`` writes ``path`` itself (its directory must let them)."""
    as_nobody(sys.executable, "-c", _WRITE, str(path), data.hex(), oct(mode))


_WRITE = "import os, sys; p = sys.argv[1]; open(p, 'wb').write(bytes.fromhex(sys.argv[2])); os.chmod(p, int(sys.argv[3], 8))"


def duplicates_plan(root: Path, scope: Sequence[Path] | None = None) -> Plan:
    """A duplicates plan the way ``reclaim_plan duplicates=true`` makes one (find_duplicates, then the plan)."""
    groups = duplicate_groups([root])
    return plan_of(groups, scope or [root], root)


def plan_of(groups: Any, scope: Sequence[Path], base: Path) -> Plan:
    request = PlanRequest(
        layout=nothing_else(base),
        scope=tuple(os.fsencode(p) for p in scope),
        classes=("duplicate",),
        duplicates=groups,
    )
    return build_plan(request)


def nothing_else(base: Path) -> RootsLayout:
    none = os.fsencode(base / ".none")
    return RootsLayout(
        apt=none,
        dnf=none,
        yum=none,
        pacman=none,
        apk=none,
        log=none,
        journal=(),
        coredump=(),
        core_dirs=(),
        homes=(),
        proc=none,
        container_engines=(),
    )


def mounted() -> Path:
    """A fresh tmpfs in this (private) mount namespace, world-traversable like /tmp."""
    top = Path(tempfile.mkdtemp(prefix="sysmcp-reclaim-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=256m", "sysmcp", str(top)], check=True)
    return top


def run(scenarios: dict[str, Any], argv: list[str]) -> None:
    """In the namespace: the scenario named first, on a fresh tmpfs, its answer as one JSON line."""
    name, *args = argv
    print(json.dumps(scenarios[name](mounted(), *args)))
