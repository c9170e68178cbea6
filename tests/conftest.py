from __future__ import annotations

import pytest

from tests.profile import apply_to_this_process

apply_to_this_process()  # SYSMCP_TEST_PROFILE=posix: the portable profile, before any test imports sysmcp


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
