"""Reclaim plans find home directories that no passwd entry names (sssd accounts, restored homes)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sysmcp.reclaim import PlanRequest, build_plan
from sysmcp.reclaim._classes import RootsLayout

NAMESPACE = textwrap.dedent(
    """
    import json, os, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", "/home"], check=True)
    for place in (".cache/pip/http", ".npm/_cacache/content", ".local/share/Trash/files"):
        os.makedirs("/home/alice/" + place)
        with open("/home/alice/" + place + "/f", "wb") as handle:
            handle.write(b"x" * 10_000)
    os.chown("/home/alice", 4242, 4242)  # an owner with no passwd entry
    from sysmcp.reclaim._plan import PlanRequest, build_plan
    from sysmcp.reclaim._classes import RootsLayout
    layout = RootsLayout(proc=b"/nonexistent", container_engines=())  # the real places of homes
    plan = build_plan(PlanRequest(scope=(b"/home",), layout=layout, classes=("language_cache", "trash")))
    print(json.dumps(sorted([item.klass, os.fsdecode(item.entries[0].path)] for item in plan.items)))
    """
)


def test_a_home_under_home_with_no_passwd_entry_gives_an_item_for_each_cache_and_the_trash() -> None:
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare to mount tmpfs over /home privately")
    if subprocess.run([unshare, "-m", "--propagation", "private", "true"], capture_output=True).returncode:
        pytest.skip("unshare -m is not permitted here")
    with pytest.raises(KeyError):
        pwd.getpwuid(4242)
    assert all(entry.pw_dir != "/home/alice" for entry in pwd.getpwall())
    repo = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [unshare, "-m", "--propagation", "private", sys.executable, "-c", NAMESPACE, repo],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout) == [
        ["language_cache", "/home/alice/.cache/pip/http/f"],
        ["language_cache", "/home/alice/.npm/_cacache/content/f"],
        ["trash", "/home/alice/.local/share/Trash/files/f"],
    ]


def test_every_directory_below_a_homes_parent_is_looked_in_once_even_through_a_symlinked_parent(
    tmp_path: Path,
) -> None:
    (tmp_path / "home/bob/.cache/uv").mkdir(parents=True)
    (tmp_path / "home/bob/.cache/uv/w").write_bytes(b"x" * 5_000)
    (tmp_path / "home/not-a-dir").write_bytes(b"")
    (tmp_path / "usr-home").symlink_to(tmp_path / "home")  # FreeBSD's /home → /usr/home, seen twice
    parents = (os.fsencode(tmp_path / "home"), os.fsencode(tmp_path / "usr-home"))
    layout = RootsLayout(home_parents=parents)
    ours = [home for home in layout.home_dirs() if home.startswith(os.fsencode(tmp_path))]
    assert ours == [os.fsencode(tmp_path / "home/bob")]
    plan = build_plan(PlanRequest(scope=(os.fsencode(tmp_path),), layout=layout, classes=("language_cache",)))
    assert [os.fsdecode(e.path) for item in plan.items for e in item.entries] == [
        str(tmp_path / "home/bob/.cache/uv/w")
    ]


def test_a_symlink_below_a_home_is_never_followed_so_nothing_beyond_it_is_planned(tmp_path: Path) -> None:
    """~/.cache or ~/.local pointing elsewhere (another disk, or files a user points at that are not
    theirs): the finders follow no symlink, so nothing beyond one is planned, under the home's scope or
    outside it. reclaim would refuse every such path anyway (no symlink on the way), so its bytes were
    never to be freed, and under --root the plan named files outside the roots."""
    home, elsewhere = tmp_path / "home/eve", tmp_path / "elsewhere"
    for place in ("pip/http", "share/Trash/files"):
        (elsewhere / place).mkdir(parents=True)
        (elsewhere / place / "not-eve's").write_bytes(b"x" * 5_000)
    home.mkdir(parents=True)
    (home / ".cache").symlink_to(elsewhere)
    (home / ".local").symlink_to(elsewhere)
    (home / "core").write_bytes(b"x" * 5_000)  # a real file of the home is still planned
    layout = RootsLayout(homes=(os.fsencode(home),), proc=b"/nonexistent", container_engines=())
    for scope in (tmp_path / "home", tmp_path):
        plan = build_plan(
            PlanRequest(
                scope=(os.fsencode(scope),), layout=layout, classes=("language_cache", "trash", "core_dump")
            )
        )
        assert [e.path for item in plan.items for e in item.entries] == [os.fsencode(home / "core")]


def test_rotated_logs_are_planned_by_their_real_paths_when_a_system_directory_above_them_is_a_symlink(
    tmp_path: Path,
) -> None:
    """macOS: /var -> /private/var (a symlink root made, above a system place, not below a home): the
    logs below are found, and planned by their real paths, the only ones reclaim acts on."""
    real = tmp_path / "private/var/log"
    real.mkdir(parents=True)
    (real / "system.log.0.gz").write_bytes(b"x" * 5_000)
    (tmp_path / "var").symlink_to("private/var")
    layout = RootsLayout(
        log=os.fsencode(tmp_path / "var/log"),
        journal=(),
        homes=(),
        proc=b"/nonexistent",
        container_engines=(),
    )
    plan = build_plan(PlanRequest(scope=(os.fsencode(tmp_path),), layout=layout, classes=("rotated_log",)))
    assert [e.path for item in plan.items for e in item.entries] == [os.fsencode(real / "system.log.0.gz")]
