from __future__ import annotations

import os
import tempfile

import pytest

from tests.profile import apply_to_this_process

apply_to_this_process()  # SYSMCP_TEST_PROFILE=posix: the portable profile, before any test imports sysmcp
# Servers the tests start keep their history here, never in the home directory of whoever runs them.
os.environ.setdefault("SYSMCP_STATE_DIR", tempfile.mkdtemp(prefix="sysmcp-test-state-"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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
