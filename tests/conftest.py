from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

import pytest

from tests import words
from tests.deep_trees import removed_after
from tests.profile import apply_to_this_process

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sysmcp.tools.registry import ToolContext
    from tests.harness import RecordingPeer

apply_to_this_process()  # SYSMCP_TEST_PROFILE=posix: the portable profile, before any test imports sysmcp
# Servers the tests start keep their history here, never in the home directory of whoever runs them.
os.environ.setdefault("SYSMCP_STATE_DIR", tempfile.mkdtemp(prefix="sysmcp-test-state-"))
words.install()  # every text answer the suite sees, checked for "1 files" at the end (tests/words.py)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def deep_path(tmp_path: Path) -> Iterator[Path]:
    """A directory for a tree nested thousands of levels deep (``tests/deep_trees.py``), removed by
    ``rm -rf`` at the end: pytest's own cleanup of ``tmp_path`` recurses and fails on such a tree."""
    with removed_after(tmp_path / "deep") as base:
        base.mkdir()
        yield base


@pytest.fixture
def peer() -> RecordingPeer:
    """A client that records every notification a call sends it (tests/harness.py)."""
    from tests.harness import RecordingPeer

    return RecordingPeer()


@pytest.fixture
def ctx(peer: RecordingPeer) -> ToolContext:
    """A tool context over the whole filesystem whose client asked for progress and records it in ``peer``."""
    from tests.harness import tool_context

    return tool_context(peer=peer, progress_token="t")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run on a count that disagrees with its noun anywhere in the texts the suite produced."""
    found = words.report()
    if found:
        from sysmcp.render import plural

        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"{plural(len(found), 'count')} disagreeing with a noun in the suite's answers:", *found]
        if reporter is not None:
            reporter.write_sep("=", "words")
            for line in lines:
                reporter.write_line(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(specname="pytest_collection_modifyitems")
def pytest_mark_what_each_test_needs(items: list[pytest.Item]) -> None:
    """``root``, ``spawns_server`` and ``interop`` from each test's source (tests/marking.py), so
    ``-m "not slow and not root and not spawns_server and not interop"`` is the quick lane."""
    from tests.marking import item_markers

    for item in items:
        if isinstance(item, pytest.Function):
            name = item.function.__qualname__.split(".")[0]
            for marker in sorted(item_markers(item.module.__name__, name, list(item.fixturenames))):
                item.add_marker(marker)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n auto`` (``--dist loadgroup`` is in addopts): each test module on one worker (its module-scoped labs start once),
    and the modules sharing a machine-wide lab on the same one, one after another (tests/scheduling.py).
    Other ``--dist`` modes as pytest-xdist has them."""
    if config.getoption("dist") != "loadgroup":
        return None
    from tests.scheduling import ByLab

    return ByLab(config, log)
