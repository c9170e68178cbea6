"""A plan under a scope looks only inside it: no class lists, or looks at a file in, a place outside.

Every class's place (the package caches, the logs, the journals, the crash dumps, the homes with their
language caches and trash) is planted both inside the scope and beside it; the directories a plan lists
and the files it looks at are watched through ``os.scandir`` (a descriptor by the path ``/proc/self/fd``
gives it) and ``os.lstat`` (which still do the work).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sysmcp.engine.paths import real_root
from sysmcp.reclaim import PlanRequest, build_plan
from sysmcp.reclaim import _classes as classes
from sysmcp.reclaim._classes import RootsLayout
from tests.descriptors import counted_alone, open_descriptors

PLACES = (
    "apt/archives/x.deb",
    "log/syslog.1",
    "journal/system@1.journal",
    "crash/core.1",
    "home/ann/.cache/pip/w",
    "home/ann/.local/share/Trash/files/t",
    "home/ann/core",
)


def planted(base: Path) -> None:
    for top in ("inside", "outside"):
        for place in PLACES:
            (base / top / place).parent.mkdir(parents=True, exist_ok=True)
            (base / top / place).write_bytes(b"x" * 5000)


def layout_over(top: Path) -> RootsLayout:
    none = os.fsencode(top / ".none")
    return RootsLayout(
        apt=os.fsencode(top / "apt"),
        dnf=none,
        yum=none,
        pacman=none,
        apk=none,
        log=os.fsencode(top / "log"),
        journal=(os.fsencode(top / "journal"),),
        coredump=(os.fsencode(top / "crash"),),
        core_dirs=(os.fsencode(top),),
        homes=None,
        home_parents=(os.fsencode(top / "home"),),
        proc=none,
        container_engines=(),
    )


@pytest.fixture
def looked_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, bytes]]]:
    """Every directory listed and every path lstat'ed, as the real calls still run."""
    seen: list[tuple[str, bytes]] = []
    real_scandir, real_lstat = os.scandir, os.lstat

    def scandir(path: Any) -> Any:
        listed = (
            os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else path
        )  # a descriptor's path
        seen.append(("scandir", os.fsencode(listed)))
        return real_scandir(path)

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        seen.append(("lstat", os.fsencode(path)))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "lstat", lstat)
    yield seen


def outside_the_scope(seen: list[tuple[str, bytes]], places: Path, scope: bytes) -> list[tuple[str, bytes]]:
    """What was listed outside the scope, or looked at there below the places themselves (each place's
    real path is resolved, to judge it against the scope: that looks at the place's own name only).
    The scope's parents on the way down to it are not outside it."""
    top = os.fsencode(places)

    def beside(path: bytes) -> bool:
        on_the_way = path == scope or path.startswith(scope + b"/") or scope.startswith(path + b"/")
        return path.startswith(top + b"/") and not on_the_way

    def a_place(path: bytes) -> bool:
        return os.path.dirname(path) == top

    return [(call, path) for call, path in seen if beside(path) and (call == "scandir" or not a_place(path))]


def test_a_plan_under_a_scope_lists_and_looks_at_nothing_outside_it(
    tmp_path: Path, looked_at: list[tuple[str, bytes]]
) -> None:
    """The places are all below ``outside`` (the system's places, beside the root ``inside``)."""
    base = real_root(tmp_path)
    planted(base)
    scope = os.fsencode(base / "inside")
    plan = build_plan(PlanRequest(scope=(scope,), layout=layout_over(base / "outside")))
    assert plan.items == ()
    assert outside_the_scope(looked_at, base / "outside", scope) == []


def test_a_place_above_the_scope_is_looked_at_only_below_the_scope(
    tmp_path: Path, looked_at: list[tuple[str, bytes]]
) -> None:
    """The log place holds the scope (a subdirectory of the logs): only that subdirectory is walked, and
    its rotated log is planned; the one beside it is neither planned nor looked at."""
    base = real_root(tmp_path)
    planted(base)
    (base / "outside" / "log" / "app").mkdir()
    (base / "outside" / "log" / "app" / "app.log.1").write_bytes(b"x" * 5000)
    scope = os.fsencode(base / "outside" / "log" / "app")
    plan = build_plan(PlanRequest(scope=(scope,), layout=layout_over(base / "outside")))
    assert [e.path for item in plan.items for e in item.entries] == [scope + b"/app.log.1"]
    assert outside_the_scope(looked_at, base / "outside", scope) == []


def test_a_directory_swapped_for_a_symlink_while_the_plan_walks_is_not_followed(tmp_path: Path) -> None:
    """A user owns a place a class walks (their caches, their trash): after the walk looked at their
    ``sub`` and before it listed it, they put a symlink to a directory of root's in its place. The walk
    listed root's directory through it, and the plan named root's files (under the user's path, with root's
    files' identities and sizes), though the scope or ``--root`` holds neither: names and sizes from outside.
    Each directory is now opened relative to its parent's descriptor without following a symlink, and
    must be the directory looked at."""
    cache = tmp_path / "home/ann/.cache/pip"
    (cache / "sub").mkdir(parents=True)
    (cache / "sub/wheel.whl").write_bytes(b"w" * 5000)
    for name in ("a.whl", "z.whl"):
        (cache / name).write_bytes(b"x" * 5000)
    roots = tmp_path / "root-only"
    roots.mkdir()
    (roots / "secret-name.key").write_bytes(b"k" * 7000)

    def swap_when_z_is_seen(name: bytes) -> bool:
        if name == b"z.whl" and (cache / "sub").is_dir() and not (cache / "sub").is_symlink():
            (cache / "sub").rename(cache / "sub.gone")
            (cache / "sub").symlink_to(roots)
        return True

    listed = [path for path, _st in classes.regular_files([os.fsencode(cache)], swap_when_z_is_seen)]
    assert (cache / "sub").is_symlink()  # the swap happened, during the walk
    assert sorted(listed) == sorted(os.fsencode(cache / n) for n in ("a.whl", "z.whl")), listed


def test_stray_core_files_in_the_root_directory_are_still_found(tmp_path: Path) -> None:
    """``/`` is a place the plan looks in for stray core files (a daemon's working directory is ``/``,
    and ``core_pattern`` ``core`` writes there). The walk by descriptor reached each place through its
    parent (``open_parent``), which ``/`` has not: ``/`` was never listed, and a ``/core.1234`` never
    planned. Listed here through the same walk, without writing into the real ``/``: its regular files
    are those ``os.scandir('/')`` sees."""
    expected = sorted(
        os.fsencode(entry.path) for entry in os.scandir("/") if entry.is_file(follow_symlinks=False)
    )
    listed = sorted(path for path, _st in classes.regular_files([b"/"], recurse=False))
    assert listed == expected and all(path.startswith(b"/") for path in listed)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd")
def test_a_deep_tree_holds_few_descriptors_and_every_file_is_still_found(tmp_path: Path) -> None:
    """A user who owns a place a class walks (their caches) nests a directory a few thousand levels deep
    in it: the walk held one descriptor a level, so a root server's walk of it spent its descriptors
    (1024 under systemd's default soft limit) and every other call made meanwhile failed with EMFILE,
    while the walk took EMFILE for 'gone' and silently listed nothing deeper. Now it holds at most a
    budget of them, reaching a parent again through its child's '..' (the same inode, or not at all),
    and still finds every file, the ones after a deep branch included."""
    cache = tmp_path / "cache"
    deep = cache
    names = []
    for _level in range(200):
        deep = deep / "d"
        names.append(deep / "f")
    os.makedirs(deep)
    for path in names:
        path.write_bytes(b"x")
    (cache / "z").write_bytes(b"after the deep branch")
    (cache / "d/e").mkdir()
    (cache / "d/e/g").write_bytes(b"in a sibling after the deep branch")

    def walk() -> list[Any]:
        before = open_descriptors()
        most = 0

        def counting(_name: bytes) -> bool:
            nonlocal most
            most = max(most, open_descriptors() - before)
            return True

        listed = sorted(
            os.fsdecode(path) for path, _st in classes.regular_files([os.fsencode(cache)], counting)
        )
        return [listed, most, open_descriptors() - before]

    listed, most, left_open = counted_alone(walk)
    assert listed == sorted(str(p) for p in [*names, cache / "z", cache / "d/e/g"])
    assert most <= classes.WALK_DESCRIPTORS + 2, most
    assert left_open == 0


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd")
def test_a_walk_left_part_way_or_failing_part_way_closes_every_descriptor(tmp_path: Path) -> None:
    """The walk is a generator: one abandoned part way (a cancelled plan) or failing part way closes
    all it holds."""
    deep = tmp_path / "c"
    for _ in range(100):
        deep = deep / "d"
        deep.mkdir(parents=True)
        (deep / "f").write_bytes(b"x")

    def failing(name: bytes) -> bool:
        raise RuntimeError("stop")

    def walk() -> list[int]:
        before = open_descriptors()
        walk = classes._below(os.fsencode(tmp_path / "c"), None, True)  # a generator
        for _ in range(90):
            next(walk)
        held = open_descriptors() - before
        walk.close()
        abandoned = open_descriptors() - before
        with pytest.raises(RuntimeError):
            list(classes._below(os.fsencode(tmp_path / "c"), failing, True))
        return [held, abandoned, open_descriptors() - before]

    held, abandoned, failed = counted_alone(walk)
    assert held > 0 and abandoned == 0 and failed == 0


def test_a_deep_walk_whose_directory_was_moved_out_lists_nothing_where_it_went(tmp_path: Path) -> None:
    """Deeper than its descriptor budget the walk reaches a parent again through '..': the user moves a
    directory it is in out of their cache meanwhile, and that '..' leads to where it went now. It is
    not the parent listed, so nothing there is listed (and the rest of that parent is let go)."""
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.key").write_bytes(b"k" * 100)
    (outside / "sub").mkdir()
    (outside / "sub/other.key").write_bytes(b"k" * 100)
    deep = cache
    for _ in range(classes.WALK_DESCRIPTORS + 20):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "bottom").write_bytes(b"x")
    moved = cache / "d/d/d"

    def move_at_the_bottom(name: bytes) -> bool:
        if name == b"bottom":
            moved.rename(outside / "moved")
        return True

    listed = [path for path, _st in classes.regular_files([os.fsencode(cache)], move_at_the_bottom)]
    assert (outside / "moved").is_dir()
    assert [p for p in listed if b"secret" in p or b"other" in p] == [], listed
