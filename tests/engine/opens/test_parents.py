"""``Parents``: the parent directories of many paths, reached without following a symlink and kept
open for the next path, per thread; ``close`` closes every thread's."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from sysmcp.engine.opens import Parents


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
