"""One manifest entry's verdict: how it is reached for one file, and how a million of them are kept.

Why a module of its own: the short-manifest path (``hashing._verify``) and the ranges the checking
processes share (``hashing._verify_ranges``) must reach the same verdict, with the same words of detail,
for the same file; both take it from here.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from sysmcp.engine.hashing._checksums import (
    ALGORITHM_NAMES,
    ALGORITHMS,
    Algorithm,
    describe_change,
    explain,
    hash_fd,
    one_shot,
)
from sysmcp.engine.opens import Parents, kind, open_regular_at, read_small_regular_at
from sysmcp.engine.walk import OutOfDescriptors, out_of_descriptors

#: NOT_CHECKED: the time budget ran out before this entry was looked at or hashed.
Status = Literal["OK", "FAILED", "MISSING", "UNREADABLE", "NOT_CHECKED"]


@dataclass(slots=True)
class EntryVerdict:
    status: Status
    detail: str = ""
    algorithm: str = ""


# Every entry's verdict is one byte (``Verdicts``): OK and FAILED carry their algorithm's number.
_VERDICT_ALGORITHMS: tuple[str, ...] = (*ALGORITHM_NAMES, *(f"blake2b-{bits}" for bits in range(8, 512, 8)))
ALGORITHM_CODE = {name: code for code, name in enumerate(_VERDICT_ALGORITHMS)}
FAILED_CODE = 100  # plus the algorithm's number
MISSING_CODE, UNREADABLE_CODE, NOT_CHECKED_CODE = 250, 251, 252
_DECODED: dict[int, EntryVerdict] = {
    **{code: EntryVerdict("OK", algorithm=name) for code, name in enumerate(_VERDICT_ALGORITHMS)},
    **{
        FAILED_CODE + code: EntryVerdict("FAILED", algorithm=name)
        for code, name in enumerate(_VERDICT_ALGORITHMS)
    },
    MISSING_CODE: EntryVerdict("MISSING"),
    NOT_CHECKED_CODE: EntryVerdict("NOT_CHECKED", "the time budget ran out first"),
}


@dataclass(slots=True, eq=False)
class Verdicts:
    """Every entry's verdict, in manifest order: one byte each, UNREADABLE details aside.

    Why: a million entries cost a megabyte here, where a list of verdicts costs eight, and the
    forked checking processes send their parts back as plain bytes.
    """

    codes: bytearray = field(default_factory=bytearray)
    details: dict[int, str] = field(default_factory=dict)  # entry index → an UNREADABLE verdict's words

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, index: int) -> EntryVerdict:
        code = self.codes[index]  # an index out of range raises as a list's does
        if code == UNREADABLE_CODE:
            return EntryVerdict("UNREADABLE", self.details.get(index % len(self.codes), "unreadable"))
        return _DECODED[code]

    def __iter__(self) -> Iterator[EntryVerdict]:
        return map(self.__getitem__, range(len(self.codes)))

    def put(self, index: int, code: int, detail: str = "") -> None:
        """Entry ``index``'s verdict, by its code (an UNREADABLE one with its detail)."""
        self.codes[index] = code
        if detail:
            self.details[index] = detail

    def tally(self) -> tuple[Counter[Status], Counter[str]]:
        """Entries per status, and entries checked (OK or FAILED) per algorithm, in one pass."""
        statuses: Counter[Status] = Counter()
        algorithms: Counter[str] = Counter()
        for code, count in Counter(self.codes).items():
            statuses[_DECODED[code].status if code != UNREADABLE_CODE else "UNREADABLE"] += count
            if code < MISSING_CODE:
                algorithms[_DECODED[code].algorithm] += count
        return statuses, algorithms


@dataclass
class Verification:
    """What the check found. The entries' names are not kept (a million names would be most of the
    memory): ``names()`` reads them again from the manifest while it is open (``before_close``).
    """

    checked: Verdicts = field(default_factory=Verdicts)
    bad_lines: list[int] = field(default_factory=list)  # line numbers, 1-based: the first MAX_BAD_LINES_KEPT
    bad_count: int = 0
    names: Callable[[], Iterator[bytes]] = lambda: iter(())
    new: list[bytes] | None = None
    walk_skipped: dict[str, int] = field(default_factory=dict)
    bytes_hashed: int = 0
    seconds: float = 0.0
    stopped: str | None = None  # why some entries were not checked (the time budget ran out)
    new_cut: bool = False  # the deadline came during the walk for new files: ``new`` may miss some
    #: The first names of each non-OK list.
    listed: dict[Status, list[tuple[bytes, EntryVerdict]]] | None = None
    listed_limit: int = 0
    cut: bool = False  # a list is longer than listed_limit, or entries were not checked: a full report helps

    @property
    def entries(self) -> int:
        return len(self.checked)


def known_algorithm(
    candidates: tuple[Algorithm, ...], settled: dict[int, str], length: int
) -> Algorithm | None:
    """The one algorithm a digest of ``length`` hex digits is checked with, if known yet: its only
    candidate, or the one an earlier match settled that length on."""
    if len(candidates) == 1:
        return candidates[0]
    name = settled.get(length)
    return None if name is None else ALGORITHMS[name]


def blamed_code(candidates: tuple[Algorithm, ...]) -> int:
    """The FAILED code of a digest no candidate matched: under the line's own first candidate."""
    return FAILED_CODE + ALGORITHM_CODE[candidates[0].name]


def check_file(
    path: bytes,
    expected: str,
    candidates: tuple[Algorithm, ...],
    parents: Parents | None,
    settled: dict[int, str],
    buffer: bytearray,
    on_chunk: Callable[[int], None],
    looked: os.stat_result | None = None,
) -> tuple[int, str, int]:
    """Look at, open and hash one entry's file: its verdict's code, an UNREADABLE detail, bytes read.

    With ``parents`` (confined) nothing on the way is followed, so a directory swapped for a symlink since
    the roots were checked cannot lead out (``look``); anything but a regular file is refused before
    it is opened, and the open checks it is the file looked at. A digest length two algorithms share
    is settled by the first match; a mismatch under a settled length is tried with the other
    candidates too. ``expected`` is lowercase hex.
    """
    if looked is None:
        found = look(path, parents)
        if not isinstance(found, os.stat_result):
            return found
        looked = found
    dir_fd, last = (None, path) if parents is None else parents.parent(path)  # the one ``look`` reached
    narrowed = len(candidates) > 1 and len(expected) in settled
    trying = (ALGORITHMS[settled[len(expected)]],) if narrowed else candidates
    size = looked.st_size
    try:
        if 0 < size < len(buffer):
            # Most files: open, one read, one ``fstat``, close (``opens.read_small_regular_at``), the same
            # verdicts as the stream below with two system calls and every per-file object fewer.
            count, after, failure = read_small_regular_at(
                last, looked, buffer, dir_fd=dir_fd, follow_symlinks=dir_fd is None
            )
            if failure is not None:
                return UNREADABLE_CODE, f"read error: {explain(failure)}", 0
            unchanged = after.st_size == size and after.st_mtime_ns == looked.st_mtime_ns
            if count == size and unchanged:
                data = memoryview(buffer)[:count]
                return judge_data(data, expected, candidates, trying, settled), "", count
            if not (count < size and unchanged):
                changed = describe_change(looked, after, count) or "its contents moved while it was read"
                return UNREADABLE_CODE, f"changed while being read ({changed}); check it again", count
            # else one read gave less than a size that stayed (sysfs says 4,096): read to the end
        fd, opened = open_regular_at(last, dir_fd=dir_fd, follow_symlinks=dir_fd is None, expect=looked)
    except FileNotFoundError:
        return MISSING_CODE, "", 0
    except OSError as exc:
        if out_of_descriptors(exc):  # nothing about the file: the check stops, the rest NOT_CHECKED
            raise OutOfDescriptors(exc) from None
        return UNREADABLE_CODE, explain(exc), 0
    read = 0
    try:
        while True:
            try:
                digest = hash_fd(fd, trying, buffer, on_chunk, opened=opened)
            except OSError as exc:
                return UNREADABLE_CODE, f"read error: {explain(exc)}", read
            read += digest.size
            if digest.changed:
                return UNREADABLE_CODE, f"changed while being read ({digest.changed}); check it again", read
            for name, hexdigest in digest.hexdigests.items():
                if hexdigest == expected:
                    if len(trying) > 1:
                        settled.setdefault(len(expected), name)
                    return ALGORITHM_CODE[name], "", read
            if not narrowed:
                return blamed_code(candidates), "", read
            narrowed = False  # the settled guess failed: the other candidates (never none), from the start
            first = trying[0].name
            trying = tuple(c for c in candidates if c.name != first)
            os.lseek(fd, 0, os.SEEK_SET)
            opened = os.fstat(fd)
    finally:
        os.close(fd)


def look(path: bytes, parents: Parents | None = None) -> os.stat_result | tuple[int, str, int]:
    """``os.stat(path)`` of a regular file (following symlinks, as ``sha256sum``; with ``parents``,
    confined: its ``lstat`` relative to its directory, reached without following any), or else the
    verdict, as ``check_file`` returns it."""
    try:
        if parents is None:
            looked = os.stat(path)
        else:
            dir_fd, name = parents.parent(path)
            looked = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return MISSING_CODE, "", 0
        if out_of_descriptors(exc):  # a directory on the way (confined) could not be opened: no fact of it
            raise OutOfDescriptors(exc) from None
        return UNREADABLE_CODE, explain(exc) or "unreadable", 0
    if not stat.S_ISREG(looked.st_mode):
        return UNREADABLE_CODE, f"not a regular file: {kind(looked.st_mode)}", 0
    return looked


def judge_data(
    data: memoryview,
    expected: str,
    candidates: tuple[Algorithm, ...],
    trying: tuple[Algorithm, ...],
    settled: dict[int, str],
) -> int:
    """The verdict's code for a whole file's bytes: ``trying`` first, then the candidates a settled
    length skipped, else FAILED (``blamed_code``)."""
    for algorithm in trying:
        if one_shot(algorithm)(data).hexdigest() == expected:
            if len(trying) > 1:
                settled.setdefault(len(expected), algorithm.name)
            return ALGORITHM_CODE[algorithm.name]
    if len(trying) < len(candidates):  # a settled guess that failed: the other candidates too
        for algorithm in candidates:
            if algorithm.name != trying[0].name and one_shot(algorithm)(data).hexdigest() == expected:
                return ALGORITHM_CODE[algorithm.name]
    return blamed_code(candidates)
