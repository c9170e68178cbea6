"""disk_usage explain on real ext4, xfs and btrfs filesystems, each planted with every kind of used
byte (tests/tools/explain_scenario.py), in a private mount namespace of its own: every part is found
within 1 % of what was planted and at most 2 % of used (or 16 MiB) is left unexplained."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.profile import UNDER_POSIX_PROFILE

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]
MKFS = {"ext4": "mkfs.ext4", "xfs": "mkfs.xfs", "btrfs": "mkfs.btrfs"}

pytestmark = [
    pytest.mark.skipif(
        UNDER_POSIX_PROFILE, reason="loop devices and mount namespaces are Linux's (macOS has neither)"
    ),
    pytest.mark.skipif(
        not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root: loop devices, mounts"
    ),
    pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) from util-linux"),
]

_ANSWERS: dict[str, dict[str, Any]] = {}


def scenario(kind: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The planted filesystem's answers (made once per filesystem type for all the tests)."""
    if kind in _ANSWERS:
        return _ANSWERS[kind]
    if shutil.which(MKFS[kind]) is None:
        pytest.skip(
            f"{MKFS[kind]} is not installed (Debian: {'btrfs-progs' if kind == 'btrfs' else kind + 'progs'})"
        )
    work = Path(tempfile.mkdtemp(prefix=f"sysmcp-explain-{kind}-"))  # not under pytest's 0700 base:
    os.chmod(work, 0o755)  # the unprivileged scan must reach the mount point
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    done = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            sys.executable,
            "-m",
            "tests.tools.explain_scenario",
            kind,
            str(work),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0 and "loop" in done.stderr and "mount" in done.stderr:
        pytest.skip(f"no loop device here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    _ANSWERS[kind] = json.loads(done.stdout.strip().splitlines()[-1])
    return _ANSWERS[kind]


def near(found: int, planted: int, share: float = 0.01) -> bool:
    return abs(found - planted) <= share * planted


@pytest.fixture(scope="module", params=["ext4", "xfs", "btrfs"])
def answer(request: pytest.FixtureRequest) -> dict[str, Any]:
    return scenario(request.param, request)


def test_every_part_is_found_and_little_is_left_unexplained(answer: dict[str, Any]) -> None:
    planted, data, text = answer["planted"], answer["root"]["structured"]["explain"], answer["root"]["text"]
    used = data["used_bytes"]
    assert near(data["files"]["bytes"], planted["visible"] + planted["secret"]), (data["files"], text)
    assert near(data["deleted_open"]["bytes"], planted["deleted"]), text
    (held,) = data["deleted_open"]["files"]
    assert held["path"].endswith("/app.log") and held["holders"][0]["pid"] == answer["holder"]
    hidden = data["hidden_under_mounts"]
    assert hidden["checked"] and near(hidden["bytes"], planted["hidden"]), text
    assert hidden["places"][0]["mount_point"].endswith("/under")
    if "snapshot" in planted:
        assert near(data["snapshots"]["bytes"], planted["snapshot"]), text
        assert [item["name"] for item in data["snapshots"]["items"]] == ["snap"]
    assert data["unreadable_directories"]["count"] == 0
    assert abs(data["remainder"]["bytes"]) <= max(0.02 * used, 16 * MiB), text
    assert text.startswith("Of ") and "held open by python" in text, text


def test_a_scan_without_root_names_the_unreadable_directory_and_checks_no_mounts(
    answer: dict[str, Any],
) -> None:
    nobody = answer["nobody"]
    assert "error" not in nobody, nobody
    data, text = nobody["structured"]["explain"], nobody["text"]
    unreadable = data["unreadable_directories"]
    assert any(name.endswith("/secret") for name in unreadable["named"]), text  # ext4: lost+found too
    assert unreadable["count"] == len(unreadable["named"]) == (2 if "lost+found" in text else 1), text
    assert unreadable["upper_bound_bytes"] >= answer["planted"]["secret"]
    assert near(data["files"]["bytes"], answer["planted"]["visible"]), text
    hidden = data["hidden_under_mounts"]
    assert not hidden["checked"] and hidden["reason"] == "needs root" and hidden["bytes"] == 0
    assert "not checked (needs root)" in text
    assert data["deleted_open"]["processes_unreadable"] >= 1  # the holder is root's


def test_with_roots_only_what_is_inside_them_is_named(answer: dict[str, Any]) -> None:
    root, confined = answer["root"]["structured"], answer["confined"]["structured"]
    data = confined["explain"]
    assert data["used_bytes"] == root["explain"]["used_bytes"]  # df's figures are still given
    assert data["deleted_open"]["files"] == [] and data["deleted_open"]["not_named"] == 1
    assert data["hidden_under_mounts"]["places"] == []
    assert "app.log" not in answer["confined"]["text"] and "/under" not in answer["confined"]["text"]
