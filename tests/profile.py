"""The portable profile (tests/posix_profile) as the test suite uses it: one switch, one directory.

``SYSMCP_TEST_PROFILE=posix uv run pytest …`` runs the tests as sysmcp would run on macOS: this
process gets the profile before any test imports sysmcp (tests/conftest.py), and every Python it
starts gets it through ``PYTHONPATH`` (``child_env``; tests/wire.py's ``spawn`` uses it).
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

PROFILE_ENV = "SYSMCP_TEST_PROFILE"
PROFILE_DIR = Path(__file__).parent / "posix_profile"
UNDER_POSIX_PROFILE = os.environ.get(PROFILE_ENV) == "posix"

needs_proc = pytest.mark.skipif(
    UNDER_POSIX_PROFILE, reason="needs /proc, which the portable profile hides from sysmcp (macOS has none)"
)
needs_xattrs = pytest.mark.skipif(
    UNDER_POSIX_PROFILE,
    reason="reclaim's :link: the portable profile, like macOS, cannot compare ACLs, so no copy is linked",
)
needs_fork = pytest.mark.skipif(
    UNDER_POSIX_PROFILE, reason="forked scan workers: the portable profile, like macOS, walks in one process"
)


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the profile first on PYTHONPATH when the run is under the profile."""
    full = dict(env)
    if not UNDER_POSIX_PROFILE:
        return full
    paths = [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(PROFILE_DIR)]
    full["PYTHONPATH"] = os.pathsep.join([str(PROFILE_DIR), *paths])
    full[PROFILE_ENV] = "posix"
    return full


def apply_to_this_process() -> None:
    """Under the profile: apply it here (unless PYTHONPATH already did) and pass it on to children."""
    if not UNDER_POSIX_PROFILE:
        return
    os.environ.update(child_env(os.environ))
    if not getattr(sys.modules.get("sitecustomize"), "ACTIVE", False):
        runpy.run_path(str(PROFILE_DIR / "sitecustomize.py"), run_name="posix_profile")
