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
