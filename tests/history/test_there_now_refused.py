"""A baseline's file the tree hashed now left out is called removed only when it is gone: a directory on
the way that the filesystem refused (a FUSE daemon's own EMFILE) or that was replaced while the paths
below it were read tells nothing of the file, and it is not called removed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sysmcp.engine.opens import Parents
from sysmcp.history.compare import _there_now
from tests.engine.walk import test_refused_by_filesystem as fuse

refusing_mount = fuse.refusing_mount


def test_a_file_behind_a_directory_the_filesystem_refused_is_not_called_gone(refusing_mount: Path) -> None:
    """Looking up ``unlisted`` the FUSE daemon answers EMFILE, its own limit: nothing is known of the file."""
    with Parents() as parents:
        assert _there_now(parents, os.fsencode(refusing_mount), b"unlisted/f") == stat.S_IFREG


def test_a_file_behind_a_directory_replaced_on_the_way_is_not_called_gone(tmp_path: Path) -> None:
    """``r/a`` is closed for the bound after ``r/a/b/c/deep``, then swapped for another ``a`` that holds a
    ``shallow`` too: the file is there, and refusing to read it through another directory says nothing of it."""
    a = tmp_path / "r" / "a"
    (a / "b" / "c").mkdir(parents=True)
    (a / "b" / "c" / "deep").write_bytes(b"first a")
    (a / "shallow").write_bytes(b"first a")
    root = os.fsencode(tmp_path)
    with Parents(kept=2) as parents:
        assert _there_now(parents, root, b"r/a/b/c/deep") == stat.S_IFREG
        a.rename(a.with_name("a-before"))
        a.mkdir()
        (a / "shallow").write_bytes(b"another a")
        assert _there_now(parents, root, b"r/a/shallow") == stat.S_IFREG


def test_a_file_behind_a_symlink_or_a_file_on_the_way_is_gone(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "f").write_bytes(b"outside")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "file").write_bytes(b"not a directory")
    root = os.fsencode(tmp_path)
    with Parents() as parents:
        assert _there_now(parents, root, b"link/f") is None
        assert _there_now(parents, root, b"file/f") is None
        assert _there_now(parents, root, b"missing/f") is None
