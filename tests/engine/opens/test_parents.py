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
from tests.descriptors import counted_alone, open_descriptors


def test_each_path_is_reached_in_its_own_directory_and_close_leaves_no_descriptor_of_any_thread(
    tmp_path: Path,
) -> None:
    names = ["a/b/f", "a/b/g", "a/c/f", "a/f", "e/f", "a/b/f", "top"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(name.encode())

    def look() -> list[int]:
        before = open_descriptors()
        parents = Parents()

        def look_at_all() -> None:
            for name in names:
                dir_fd, last = parents.parent(os.fsencode(tmp_path / name))
                assert (
                    os.stat(last, dir_fd=dir_fd, follow_symlinks=False).st_ino
                    == (tmp_path / name).stat().st_ino
                )

        look_at_all()
        other = threading.Thread(target=look_at_all)
        other.start()
        other.join()
        held = open_descriptors() - before
        parents.close()
        return [held, open_descriptors() - before]

    held, left_open = counted_alone(look)
    assert held > 0 and left_open == 0


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

    def look() -> list[int]:
        before = open_descriptors()
        held = 0
        with pytest.raises(LookupError), Parents() as parents:
            parents.parent(os.fsencode(tmp_path / "a" / "b" / "f"))
            held = open_descriptors() - before
            raise LookupError
        return [held, open_descriptors() - before]

    held, left_open = counted_alone(look)
    assert held > 0 and left_open == 0


def test_a_path_deeper_than_the_descriptor_limit_is_reached_holding_a_bounded_number_of_descriptors(
    deep_path: Path,
) -> None:
    levels = nest(deep_path, DEPTH)
    put(deep_path, levels[-1] + "/f", b"deepest")
    put(deep_path, levels[99] + "/g", b"shallower")

    def look() -> list[object]:
        before = open_descriptors()
        most = 0
        sizes: list[int] = []
        with Parents() as parents:
            for relative in (levels[-1] + "/f", levels[99] + "/g", levels[-1] + "/f", levels[-1] + "/h"):
                dir_fd, last = parents.parent(os.fsencode(deep_path) + b"/" + relative.encode())
                most = max(most, open_descriptors() - before)
                if last != b"h":
                    sizes.append(os.stat(last, dir_fd=dir_fd, follow_symlinks=False).st_size)
        return [most, sizes, open_descriptors() - before]

    most, sizes, left_open = counted_alone(look)
    assert 0 < most <= KEPT_LEVELS + 1  # "/" and the kept levels
    assert sizes == [7, 9, 7] and left_open == 0


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


def deep_and_shallow(tmp_path: Path) -> tuple[Path, Path, Path]:
    """``r/a/b/c/d/deep`` and ``r/a/shallow``: with two levels kept, reaching ``r/a`` again after
    ``deep`` is a re-reach by name of a level closed for the bound."""
    a = tmp_path / "r" / "a"
    deep = a / "b" / "c" / "d" / "deep"
    deep.parent.mkdir(parents=True)
    deep.write_bytes(b"first a")
    (a / "shallow").write_bytes(b"first a")
    return a, deep, a / "shallow"


def swap_for_another_directory(a: Path) -> None:
    """``a`` renamed aside and another directory put in its place, holding a ``shallow`` of its own."""
    a.rename(a.with_name("a-before"))
    (a / "b" / "c").mkdir(parents=True)
    (a / "shallow").write_bytes(b"another a")
    (a / "b" / "c" / "f").write_bytes(b"another a")


def test_a_level_swapped_for_another_directory_is_not_reached_again_in_its_place(tmp_path: Path) -> None:
    """A level closed for the bound is reached again by name: if the name now holds another directory
    (renamed in since it was first opened), its entries would be read as the first one's."""
    a, deep, shallow = deep_and_shallow(tmp_path)
    with Parents(kept=2) as parents:
        parents.parent(os.fsencode(deep))
        swap_for_another_directory(a)
        with pytest.raises(OSError) as changed:
            parents.parent(os.fsencode(shallow))
        assert changed.value.errno == errno.ESTALE
        assert "replaced" in str(changed.value)
        with pytest.raises(OSError) as again:  # every path below it, not only the first one asked for
            parents.parent(os.fsencode(a / "b" / "c" / "f"))
        assert again.value.errno == errno.ESTALE
        dir_fd, last = parents.parent(
            os.fsencode(a.with_name("a-before") / "shallow")
        )  # another path: reached
        assert os.stat(last, dir_fd=dir_fd).st_size == len(b"first a")


def test_a_level_swapped_for_a_symlink_to_another_directory_is_refused(tmp_path: Path) -> None:
    a, deep, shallow = deep_and_shallow(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "shallow").write_bytes(b"outside")
    with Parents(kept=2) as parents:
        parents.parent(os.fsencode(deep))
        a.rename(a.with_name("a-before"))
        a.symlink_to(elsewhere)
        with pytest.raises(OSError) as refused:
            parents.parent(os.fsencode(shallow))
        assert refused.value.errno == errno.ELOOP


def test_a_level_renamed_away_and_back_is_reached_again_as_the_same_directory(tmp_path: Path) -> None:
    a, deep, shallow = deep_and_shallow(tmp_path)
    with Parents(kept=2) as parents:
        parents.parent(os.fsencode(deep))
        a.rename(a.with_name("a-aside"))
        a.with_name("a-aside").rename(a)
        dir_fd, last = parents.parent(os.fsencode(shallow))
        assert os.stat(last, dir_fd=dir_fd, follow_symlinks=False).st_ino == shallow.stat().st_ino
