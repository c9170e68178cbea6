"""``Parents``: the parent directories of many paths, reached without following a symlink and kept
open for the next path, per thread; ``close`` closes every thread's."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from sysmcp.engine.opens import KEPT_LEVELS, Parents
from tests.deep_trees import COMMON_LIMIT, DEPTH, nest, put, under_limit


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_each_path_is_reached_in_its_own_directory_and_close_leaves_no_descriptor_of_any_thread(
    tmp_path: Path,
) -> None:
    names = ["a/b/f", "a/b/g", "a/c/f", "a/f", "e/f", "a/b/f", "top"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(name.encode())
    before = open_descriptors()
    parents = Parents()

    def look_at_all() -> None:
        for name in names:
            dir_fd, last = parents.parent(os.fsencode(tmp_path / name))
            assert (
                os.stat(last, dir_fd=dir_fd, follow_symlinks=False).st_ino == (tmp_path / name).stat().st_ino
            )

    look_at_all()
    other = threading.Thread(target=look_at_all)
    other.start()
    other.join()
    assert open_descriptors() > before
    parents.close()
    assert open_descriptors() == before


def test_a_directory_on_the_way_that_is_a_symlink_is_refused_not_followed(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    parents = Parents()
    try:
        assert parents.parent(os.fsencode(tmp_path / "real" / "f"))[1] == b"f"
        with pytest.raises(OSError) as refused:
            parents.parent(os.fsencode(tmp_path / "link" / "f"))
        assert refused.value.errno == errno.ELOOP
    finally:
        parents.close()


def test_a_with_block_closes_every_descriptor_even_when_it_raises(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    before = open_descriptors()
    with pytest.raises(LookupError), Parents() as parents:
        parents.parent(os.fsencode(tmp_path / "a" / "b" / "f"))
        assert open_descriptors() > before
        raise LookupError
    assert open_descriptors() == before


def test_a_path_deeper_than_the_descriptor_limit_is_reached_holding_a_bounded_number_of_descriptors(
    deep_path: Path,
) -> None:
    levels = nest(deep_path, DEPTH)
    put(deep_path, levels[-1] + "/f", b"deepest")
    put(deep_path, levels[99] + "/g", b"shallower")
    before = open_descriptors()
    with Parents() as parents:
        for relative in (levels[-1] + "/f", levels[99] + "/g", levels[-1] + "/f", levels[-1] + "/h"):
            dir_fd, last = parents.parent(os.fsencode(deep_path) + b"/" + relative.encode())
            assert open_descriptors() - before <= KEPT_LEVELS + 1  # "/" and the kept levels
            if last != b"h":
                assert os.stat(last, dir_fd=dir_fd, follow_symlinks=False).st_size in (7, 9)
    assert open_descriptors() == before


def test_a_symlink_on_the_way_back_to_a_closed_level_is_refused_not_followed(deep_path: Path) -> None:
    levels = nest(deep_path / "t", 40)
    (deep_path / "elsewhere" / "x").mkdir(parents=True)
    (deep_path / "elsewhere" / "x" / "f").write_bytes(b"outside")
    with Parents(kept=4) as parents:
        parents.parent(os.fsencode(deep_path / "t") + b"/" + levels[-1].encode() + b"/f")
        # the tenth level, long closed for the bound, becomes a symlink to a directory outside
        tenth = deep_path / "t" / levels[9]
        os.rename(tenth, deep_path / "moved")
        tenth.symlink_to(deep_path / "elsewhere")
        with pytest.raises(OSError) as refused:
            parents.parent(os.fsencode(tenth / "x" / "f"))
        assert refused.value.errno == errno.ELOOP


def test_the_descriptor_limit_of_a_common_desktop_does_not_stop_a_path_thousands_of_levels_deep(
    deep_path: Path,
) -> None:
    levels = nest(deep_path, DEPTH)
    put(deep_path, levels[-1] + "/f", b"deepest")
    target = os.fsencode(deep_path) + b"/" + levels[-1].encode() + b"/f"

    def size_of_the_deepest_file() -> int:
        with Parents() as parents:
            dir_fd, last = parents.parent(target)
            return os.stat(last, dir_fd=dir_fd, follow_symlinks=False).st_size

    assert under_limit(size_of_the_deepest_file, COMMON_LIMIT) == "7"
