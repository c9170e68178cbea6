"""safeopen.read_small_regular_at: one read between a look and one fstat, with open_regular_at's guarantees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sysmcp.engine.opens import FileSwap, NotRegularFile, read_small_regular_at


def test_a_small_file_is_read_whole_and_its_fstat_matches_the_look(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"hello")
    looked = os.stat(path)
    buffer = bytearray(64)
    count, after, failure = read_small_regular_at(os.fsencode(path), looked, buffer)
    assert (count, bytes(buffer[:count]), failure) == (5, b"hello", None)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (looked.st_ino, 5, looked.st_mtime_ns)


def test_another_file_swapped_in_after_the_look_is_refused(tmp_path: Path) -> None:
    path, other = tmp_path / "f", tmp_path / "g"
    path.write_bytes(b"one")
    other.write_bytes(b"two")
    looked = os.stat(path)
    os.replace(other, path)
    with pytest.raises(FileSwap):
        read_small_regular_at(os.fsencode(path), looked, bytearray(64))


def test_a_symlink_swapped_in_is_refused_unless_symlinks_are_followed(tmp_path: Path) -> None:
    path, target = tmp_path / "f", tmp_path / "target"
    path.write_bytes(b"one")
    target.write_bytes(b"two")
    looked = os.stat(path)
    path.unlink()
    path.symlink_to(target)
    with pytest.raises(FileSwap):
        read_small_regular_at(os.fsencode(path), looked, bytearray(64))
    with pytest.raises(FileSwap):  # followed, it leads to another file than the one looked at
        read_small_regular_at(os.fsencode(path), looked, bytearray(64), follow_symlinks=True)
    assert (
        read_small_regular_at(os.fsencode(path), os.stat(path), bytearray(64), follow_symlinks=True)[0] == 3
    )


def test_a_fifo_swapped_in_neither_blocks_nor_passes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one")
    looked = os.stat(path)
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(NotRegularFile):
        read_small_regular_at(os.fsencode(path), looked, bytearray(64))
    with pytest.raises(NotRegularFile):  # looked at as what it is: refused before any open
        read_small_regular_at(os.fsencode(path), os.stat(path), bytearray(64))
