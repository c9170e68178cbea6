"""A stored file looked at again now (``lstat_below``): only a name that is not there (the walk's ``GONE``)
is gone; a directory on the way replaced (ESTALE) or refused by the filesystem (tests/fuse_refusing.py)
tells nothing of the file, which a baseline then records as not read and a compare does not call removed."""

from __future__ import annotations

import errno
import os
from dataclasses import replace
from pathlib import Path

import pytest

from sysmcp.engine.opens import Parents
from sysmcp.engine.walk import WalkOptions
from sysmcp.history.compare import _look_again
from sysmcp.history.diff import ScanDiff, diff_baselines
from sysmcp.history.recording import baseline_of, lstat_below, series_of
from sysmcp.history.snapshots import DirTotals, FileRow, ScanSnapshot, Series
from tests.engine.walk import test_refused_by_filesystem as fuse

refusing_mount = fuse.refusing_mount
MiB = 1 << 20


def swapped_level(tmp_path: Path) -> tuple[Path, Parents]:
    """``a/b/c/f`` reached with two levels kept open, then ``a`` renamed away and another put in its place:
    ``a`` is reached again by name for ``a/shallow``, and is another directory (ESTALE)."""
    a = tmp_path / "a"
    (a / "b" / "c").mkdir(parents=True)
    (a / "b" / "c" / "f").write_bytes(b"first")
    (a / "shallow").write_bytes(b"first")
    parents = Parents(kept=2)
    parents.parent(os.fsencode(a / "b" / "c" / "f"))
    a.rename(tmp_path / "a-before")
    a.mkdir()
    (a / "shallow").write_bytes(b"another")
    return a, parents


def test_a_file_behind_a_replaced_directory_is_not_called_gone(tmp_path: Path) -> None:
    _, parents = swapped_level(tmp_path)
    with parents, pytest.raises(OSError) as caught:
        lstat_below(parents, os.fsencode(tmp_path), b"a/shallow")
    assert caught.value.errno == errno.ESTALE


def test_a_name_not_there_is_gone(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with Parents() as parents:
        assert lstat_below(parents, os.fsencode(tmp_path), b"missing") is None
        assert lstat_below(parents, os.fsencode(tmp_path), b"file/below") is None  # ENOTDIR
        assert lstat_below(parents, os.fsencode(tmp_path), b"../x") is None


def test_a_compare_does_not_call_a_file_it_cannot_look_at_again_removed(refusing_mount: Path) -> None:
    """Looking up ``unlisted`` the FUSE daemon answers EMFILE, its own limit: nothing is known of the file
    below it. ``f`` (4 bytes) shrank from a MiB; ``gone`` is not there."""
    snap = ScanSnapshot(Series("host", "fs", b"/", "{}"), 0.0, False, MiB, {b"": DirTotals(0, 0, 0)})
    rows = [
        FileRow(b"f", MiB, MiB, 0.0),
        FileRow(b"gone", MiB, MiB, 0.0),
        FileRow(b"unlisted/f", MiB, MiB, 0.0),
    ]
    diff = ScanDiff(True, None, snap, snap, 0.0, removed_files=rows)
    _look_again(diff, os.fsencode(refusing_mount))
    assert [row.path for row in diff.removed_files] == [b"gone"]
    assert [then.path for then, _ in diff.shrunk_files] == [b"f"]
    assert len(diff.notes) == 1 and diff.notes[0].startswith(
        "1 file gone from the largest could not be looked"
    )


def test_a_baseline_records_a_file_it_cannot_look_at_again_as_not_read(refusing_mount: Path) -> None:
    base = os.fsencode(refusing_mount)
    series = series_of(base, WalkOptions())
    manifest = b"".join(b"0" * 64 + b"  " + name + b"\n" for name in (b"f", b"gone", b"unlisted/f"))
    now = baseline_of(series, base, manifest, "sha256", False, 2.0)
    assert sorted(now.files) == [b"f"]
    assert sorted(now.unread) == [b"unlisted/f"] and not now.unread[b"unlisted/f"].directory
    before = replace(now, files={**now.files, b"unlisted/f": now.files[b"f"]}, unread={})
    diff = diff_baselines(before, now)
    assert diff.removed == [] and diff.unreadable == [b"unlisted/f"]
