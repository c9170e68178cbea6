"""The one-file hash engine: a typed request in, a digest or an ``EngineError`` with the same words out."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from sysmcp.engine.calls import never_cancelled, no_progress
from sysmcp.engine.faults import EngineError, NotFound, WrongKind
from sysmcp.engine.hashing import ALGORITHMS, CHUNK, FileHash, FileRequest, hash_file
from sysmcp.tools.errors import words


def request(path: Path | str, given: str | None = None) -> FileRequest:
    return FileRequest(os.fsencode(path), str(path), given or str(path))


def test_a_file_is_hashed_with_progress_from_its_size_to_its_end(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    content = os.urandom(2 * CHUNK + 5)
    target.write_bytes(content)
    seen: list[tuple[float, float | None]] = []
    checks: list[int] = []
    hashed = hash_file(request(target), lambda d, t: seen.append((d, t)), lambda: checks.append(1))
    assert isinstance(hashed, FileHash) and hashed.seconds >= 0
    assert hashed.digest.hexdigests["sha256"] == hashlib.sha256(content).hexdigest()
    assert hashed.digest.size == len(content) and hashed.digest.changed is None
    assert seen[0] == (0, len(content)) and seen[-1] == (len(content), len(content))
    assert len(checks) == len(seen) - 1  # after every chunk, not at the open


def test_another_algorithm_is_asked_for_in_the_request(tmp_path: Path) -> None:
    target = tmp_path / "small"
    target.write_bytes(b"abc")
    hashed = hash_file(
        FileRequest(os.fsencode(target), str(target), str(target), ALGORITHMS["md5"]),
        no_progress,
        never_cancelled,
    )
    assert hashed.digest.hexdigests == {"md5": hashlib.md5(b"abc").hexdigest()}


def refusal(path: Path | str, given: str | None = None) -> EngineError:
    with pytest.raises(EngineError) as refused:
        hash_file(request(path, given), no_progress, never_cancelled)
    return refused.value


def test_what_is_not_a_regular_file_is_refused_saying_what_it_is(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    root = refusal("/")
    assert isinstance(root, WrongKind)
    assert words(root) == "Not a regular file: / is a directory; only regular files can be hashed"
    assert (
        words(refusal(fifo))
        == f"Not a regular file: {fifo} is a FIFO (named pipe); only regular files can be hashed"
    )
    assert (
        words(refusal(tmp_path))
        == f"Not a regular file: {tmp_path} is a directory; only regular files can be hashed"
    )


def test_a_missing_file_and_a_dangling_link_say_which(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    assert isinstance(refusal(missing), NotFound)
    assert words(refusal(missing)) == f"No such file: {missing}"
    link = tmp_path / "link"
    link.symlink_to(missing)
    said = words(refusal(missing, given=str(link)))
    assert said == f"No such file: {link} is a symbolic link to {missing}, which does not exist"


def test_a_link_dangling_into_a_missing_directory_says_so_too(tmp_path: Path) -> None:
    """The path asked about is named, not only the one it resolved to, whichever part of it is gone."""
    missing = tmp_path / "no-such-dir" / "absent"
    link = tmp_path / "link"
    link.symlink_to(missing)
    said = words(refusal(missing, given=str(link)))
    assert said == f"No such file: {link} is a symbolic link to {missing}, which does not exist"


def test_a_file_swapped_for_a_symlink_is_refused_and_not_followed(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"data")
    (tmp_path / "swapped").symlink_to(tmp_path / "real")
    said = words(refusal(tmp_path / "swapped"))
    assert (
        said == f"{tmp_path / 'swapped'} was replaced by a symbolic link while it was being opened; refused"
    )
