"""How pytest-xdist shares the suite between workers (``-n auto``; ``--dist loadgroup`` is in addopts).

Each test module goes to one worker whole, as ``--dist loadfile`` sends it, so a module-scoped lab (a
Docker engine, a browser, sshd hosts) starts once. Modules that use a lab sharing something machine-wide
go to the same worker, one after another: real sshd hosts (``tests/fleet/lab.py``: a test checks that no
ssh of sysmcp's is left on the machine) and Node with its npm packages (``tests/interop/node.py``: one
cache, installed into on first use). pytest-xdist's own ``xdist_group`` marker would say the same, but
with pytest 9 a marked test's node id loses the group suffix that scheduler reads, so nothing is grouped.
"""

from __future__ import annotations

import functools
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

#: A module importing one of these runs on the worker of that lab's group.
SHARED_LABS = ("tests.fleet.lab", "tests.interop.node")
ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def group_of(path: str) -> str:
    """The worker group of the test module at ``path`` (relative to the checkout): its shared lab, else itself."""
    try:
        source = (ROOT / path).read_text(encoding="utf-8")
    except OSError:
        return path
    return next((lab for lab in SHARED_LABS if f"from {lab} import" in source), path)


class ByLab(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
    """``--dist loadfile``, with the modules of one shared lab as one scope."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid.split("::", 1)[0])
