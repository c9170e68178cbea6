"""A long manifest checked in ranges of whole lines, each parsed and checked by whichever forked
process claims it (``parallel.run_shared``), and the parts put back together in manifest order.

Why ranges: nothing per entry exists before the fork, so no process holds (or counts again) another's
entries, and the parse itself is shared out. Each process keeps one byte per entry (``verdicts``).
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sysmcp.engine.calls import Cancel, Progress
from sysmcp.engine.hashing._checksums import NAME_TOO_LONG, OPEN_AT, Algorithm, Hasher, explain, one_shot
from sysmcp.engine.hashing._dirlook import NOT_LISTED, ListedDirectory, list_for
from sysmcp.engine.hashing._manifests import (
    MAX_BAD_LINES,
    MAX_BAD_LINES_KEPT,
    BadLines,
    LineParser,
    ManifestBytes,
    NoEntries,
    NotAManifest,
    checksum_lines,
    decide_style,
    hint_order,
    lines_of,
)
from sysmcp.engine.hashing._verdicts import (
    ALGORITHM_CODE,
    MISSING_CODE,
    NOT_CHECKED_CODE,
    UNREADABLE_CODE,
    Verdicts,
    Verification,
    check_file,
    judge_data,
    known_algorithm,
)
from sysmcp.engine.hashing._verify_request import Confine, Tuning, VerifyRequest
from sysmcp.engine.opens import S_IFMT, Parents, open_parent
from sysmcp.engine.parallel import MAX_TASKS, SharedCounters, available_processes, run_shared
from sysmcp.engine.paths import too_long
from sysmcp.engine.walk import Budget, ScanStopped, join, throttled

MIN_RANGE = 4 << 10  # bytes of manifest per task, at least: a split test of a few hundred lines splits
MAX_RANGE = 256 << 10  # and at most: each task's lines are in memory at once, and the last task
# a process claims ends the run at most a few thousand entries after the other's
LIST_FROM = 8  # names of one directory in a range from which the directory is listed (dirlook)
PROGRESS_EVERY = 16  # entries between two updates of the progress counts (read every few ms)
OUTSIDE_ROOTS = "outside the allowed roots"
#: Resolutions of a name from the top that ``kernel_stop`` makes before it has looked at a directory
#: inside the roots (one per ``..`` of a name that keeps climbing above them, each of the name's whole
#: length), and what is said of a name that needs more.
MAX_ABOVE_ROOTS = 16
TOO_FAR_ABOVE = "too many '..' above the allowed roots to follow"


@dataclass(slots=True)
class RangeProgress:
    """One process's progress through its ranges: entries checked, manifest bytes read."""

    files: int = 0
    read: int = 0


@dataclass(slots=True)
class RangeWork:
    """What one process checks its ranges with (``check_plain_block``, ``check_lines``)."""

    parser: LineParser
    prefix: bytes  # the base directory, ending in '/'
    own: Callable[[], None]  # deadline, cancellation and progress, every few milliseconds
    tally: RangeProgress
    confine: Confine | None
    tuning: Tuning
    settled: dict[int, str] = field(default_factory=dict)
    buffer: bytearray = field(init=False)
    parents: Parents | None = field(init=False)  # confined: the directories on the way, never followed
    bad_seen: int = 0  # by this process: more than MAX_BAD_LINES means the whole is no manifest

    def __post_init__(self) -> None:
        self.buffer = bytearray(self.tuning.chunk)
        self.parents = Parents() if self.confine is not None else None

    def on_chunk(self, read: int) -> None:
        self.own()


@dataclass(slots=True)
class Part:
    """One range's verdicts, in order."""

    task: int
    lines: int  # of its lines done (all when ``complete``)
    complete: bool
    codes: bytes
    details: dict[int, str]  # an UNREADABLE entry's detail by its index in the range
    bad: list[int] = field(default_factory=list)  # line numbers in the range, the first MAX_BAD_LINES_KEPT
    bad_count: int = 0
    hashed: int = 0
    stopped: str | None = None

    def wire(self) -> tuple[Any, ...]:
        """As a forked process sends it back (``marshal``: builtin types only)."""
        return tuple(getattr(self, name) for name in self.__slots__)


class _GaveUp(Exception):
    """More than MAX_BAD_LINES improperly formatted lines: no manifest, whatever the rest holds."""


def check_plain_block(task: int, found: list[tuple[str, str, str]], block_size: int, work: RangeWork) -> Part:
    """``check_file`` for every entry of a range of plain lines (``LineParser.plain_block``), in
    order: the range's ``Part``. Outside confinement only.

    A directory of many entries is listed once (why: ``_dirlook``), and a file its listing typed as
    regular is opened relative to it, read once, ``fstat``-ed (a regular file, the inode the entry
    named, on the directory's device, as big as what was read, its times older than ``settled_ns``
    before the range began) and closed. Anything else goes through ``check_file`` from the start, so
    its verdict and text are exactly that path's.
    """
    parser, prefix, settled, buffer = work.parser, work.prefix, work.settled, work.buffer
    on_chunk, own, tally = work.on_chunk, work.own, work.tally
    codes = bytearray()
    details: dict[int, str] = {}
    fsencode = os.fsencode
    wanted = Counter([line[1] for line in found])  # names per directory part
    listings: dict[str, ListedDirectory] = {}
    opened: list[tuple[str, ListedDirectory]] = []  # the listings open, oldest first
    # Per digest length, once its algorithm is known (one candidate, or settled): how to hash, the OK code.
    quick: dict[int, tuple[Callable[[memoryview], Hasher], int, Algorithm]] = {}
    view, room, targets = memoryview(buffer), len(buffer), [buffer]
    open_, readv, fstat, close = os.open, os.readv, os.fstat, os.close
    flags = OPEN_AT
    step = block_size // max(1, len(found))  # progress: manifest bytes per entry, near enough
    before = time.time_ns() - work.tuning.settled_ns
    max_listings = work.tuning.max_listings
    files, done = tally.files, tally.read
    hashed = 0
    current: str | None = None  # the directory part of the entries just checked, and its listing
    listed = NOT_LISTED
    regular, dir_fd, dev = listed.regular, listed.fd, listed.dev
    try:
        for index, (expected, key, last) in enumerate(found):
            if not index % PROGRESS_EVERY:
                tally.files, tally.read = files + index, done + step * index
            own()  # a stop leaves len(codes) entries done
            if key != current:
                current = key
                listed = listings.get(key, NOT_LISTED)
                if key not in listings:
                    if wanted[key] >= LIST_FROM:
                        if len(opened) >= max_listings:  # the oldest goes: the rest of its names one by one
                            oldest, gone = opened.pop(0)
                            gone.close()
                            listings[oldest] = NOT_LISTED
                        directory = fsencode(key) if key.startswith("/") else prefix + fsencode(key)
                        listed = list_for(directory, wanted[key])
                        if listed is not NOT_LISTED:
                            opened.append((key, listed))
                    listings[key] = listed
                regular, dir_fd, dev = listed.regular, listed.fd, listed.dev
            read = 0
            inode = regular.get(last)
            if inode is not None:
                try:
                    fd = open_(last, flags, dir_fd=dir_fd)
                except OSError:
                    fd = -1
                if fd >= 0:
                    try:
                        count = readv(fd, targets)
                        after = fstat(fd)
                        if after.st_ino != inode or after.st_dev != dev:
                            regular.clear()  # swapped, or a filesystem whose entries' inodes differ
                        elif (
                            0 < count < room
                            and after.st_size == count
                            and after.st_mode & S_IFMT == stat.S_IFREG
                            and after.st_ctime_ns < before
                            and after.st_mtime_ns < before
                        ):
                            read = count
                    except OSError:
                        pass
                    finally:
                        close(fd)
            if read:
                length = len(expected)
                known = quick.get(length)
                if known is None:
                    candidates = parser.candidates(length)
                    algorithm = known_algorithm(candidates, settled, length)
                    if algorithm is not None:
                        known = quick[length] = (
                            one_shot(algorithm),
                            ALGORITHM_CODE[algorithm.name],
                            algorithm,
                        )
                if known is not None and known[0](view[:read]).hexdigest() == expected:
                    codes.append(known[1])
                else:
                    candidates = parser.candidates(length)
                    trying = candidates if known is None else (known[2],)
                    codes.append(judge_data(view[:read], expected, candidates, trying, settled))
            else:
                path = fsencode(key + last)
                if not key.startswith("/"):
                    path = prefix + path
                candidates = parser.candidates(len(expected))
                code, detail, read = check_file(path, expected, candidates, None, settled, buffer, on_chunk)
                if detail:
                    details[len(codes)] = detail
                codes.append(code)
            hashed += read
    except ScanStopped as stop:
        return Part(task, len(codes), False, bytes(codes), details, hashed=hashed, stopped=stop.reason)
    finally:
        for _, listed in opened:
            listed.close()
    tally.files, tally.read = files + len(found), done + block_size
    return Part(task, len(found), True, bytes(codes), details, hashed=hashed)


def check_lines(task: int, block: bytes, work: RangeWork) -> Part:
    """The range's lines one by one (comments, CRs, tags, escapes, bad lines; and every line when
    confined): its ``Part``. Raises ``_GaveUp`` past ``MAX_BAD_LINES`` bad lines in this process."""
    parse, prefix, settled, buffer = work.parser.parse, work.prefix, work.settled, work.buffer
    on_chunk, own, tally, confine, parents = work.on_chunk, work.own, work.tally, work.confine, work.parents
    lines = lines_of(block)
    read = tally.read
    codes = bytearray()
    details: dict[int, str] = {}
    bad = BadLines()
    hashed = 0
    number = 0
    try:
        for number, line, cr in checksum_lines(lines):  # number: where a stop leaves off
            tally.read += len(line) + 1 + cr
            parsed = parse(line)
            if parsed is None:
                bad.add(number)
                work.bad_seen += 1
                if work.bad_seen > MAX_BAD_LINES:
                    raise _GaveUp()
                continue
            own()
            name, digest, candidates = parsed
            digest = digest.lower()
            where = place(name, prefix, confine)
            if isinstance(where, tuple):
                code, detail, size = where
            else:
                code, detail, size = check_file(where, digest, candidates, parents, settled, buffer, on_chunk)
            beside = place(name + b"\r", prefix, confine) if code == MISSING_CODE and cr else None
            if isinstance(beside, bytes):
                code, detail, size = check_file(
                    beside, digest, candidates, parents, settled, buffer, on_chunk
                )
            if detail:
                details[len(codes)] = detail
            codes.append(code)
            hashed += size
            tally.files += 1
    except ScanStopped as stop:
        return Part(
            task, number - 1, False, bytes(codes), details, bad.numbers, bad.count, hashed, stop.reason
        )
    tally.read = read + len(block)
    return Part(task, len(lines), True, bytes(codes), details, bad.numbers, bad.count, hashed)


#: Where a manifest's name is looked for (``place``), or the verdict it has without a look, as ``look``
#: gives one: UNREADABLE too long or outside the roots, MISSING where the kernel stops on the way.
Place = bytes | tuple[int, str, int]


def place(name: bytes, base: bytes, confine: Confine | None) -> Place:
    """Where to look for a manifest's name, or its verdict without a look. The name with the CR its
    line ended in (b3sum writes it so: ``checksum_lines``) is looked for the same way once the name
    without it is MISSING."""
    path = name if name.startswith(b"/") else join(base, name)
    if too_long(path):  # no file's, and the roots' check refuses it as no path: say which it is
        return UNREADABLE_CODE, NAME_TOO_LONG, 0
    if confine is None:
        return path
    inside = confine(path)
    if inside is None:
        return UNREADABLE_CODE, OUTSIDE_ROOTS, 0
    if b"/.." in path or path.endswith((b"/", b"/.")):
        stop = kernel_stop(path, confine)
        if stop is not None:
            return stop
    return inside


def kernel_stop(path: bytes, confine: Confine) -> tuple[int, str, int] | None:
    """The verdict where the kernel stops on ``path`` and the roots' resolution (``realpath``'s way)
    goes on: at a ``..``, or a ``/`` or ``.`` that ends the name, after a name that is no directory
    (``f/``, ``gone/../f``: "Not a directory", "No such file or directory" to ``sha256sum -c``).
    None where it gets through. Each name before such a step is looked at as ``look`` looks, inside
    the roots, through no symlink; resolved from the last one looked at (a hostile name of a thousand
    ``d/..`` costs a thousand short resolutions, not a thousand of the whole)."""
    parts = path.split(b"/")
    last = len(parts) - 1
    known, since = b"", 0  # the last directory looked at, resolved, and the index of its part
    above = 0
    for index, part in enumerate(parts):
        if not (part == b".." or (index == last and part in (b"", b"."))):
            continue
        names = [name for name in parts[since:index] if name not in (b"", b".")]
        if not names:  # a parent of a directory, or the directory again: one too
            continue
        if not known:
            above += 1  # resolved from the top: a name that keeps going above the roots costs its length
            if above > MAX_ABOVE_ROOTS:
                return UNREADABLE_CODE, TOO_FAR_ABOVE, 0
        before = confine(b"/".join([known, *names]) if known else b"/".join(parts[:index]))
        if before is None or before == b"/":  # an ancestor of a root, gone through and back: a directory
            continue  # (the next is resolved from the last one looked at, with the names since)
        try:
            parent, name = open_parent(os.fsdecode(before))
            try:
                mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
            finally:
                os.close(parent)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return MISSING_CODE, "", 0
            return UNREADABLE_CODE, explain(exc) or "unreadable", 0
        if not stat.S_ISDIR(mode):
            return MISSING_CODE, "", 0
        known, since = before, index
    return None


def ranges_for(size: int, processes: int) -> tuple[int, int]:
    """Bytes per task and the number of tasks: about 16 per process, each 4 KiB to 256 KiB (larger only
    past ``MAX_TASKS`` tasks)."""
    per_task = max(MIN_RANGE, min(MAX_RANGE, size // (processes * 16) + 1), -(-size // MAX_TASKS))
    return per_task, max(1, -(-size // per_task))


def check_ranges(
    reader: ManifestBytes,
    request: VerifyRequest,
    budget: Budget,
    progress: Progress,
    cancel: Cancel,
) -> Verification:
    """Parse and check a long manifest in ranges of whole lines, shared between forked processes.

    At the deadline the processes stop; the ranges, or rests of ranges, they did not reach are parsed
    here so every entry is counted (and NOT_CHECKED) and every line number is right.
    ``progress(manifest bytes read, its size)`` every few milliseconds.
    """
    forced, base, confine, tuning = request.algorithm, request.base, request.confine, request.tuning
    prefer = hint_order(request.source.name_hint)
    processes = available_processes() if tuning.processes is None else tuning.processes
    per_task, tasks = ranges_for(reader.size, processes)
    style = decide_style(reader.blocks(per_task, throttled(cancel)), forced, prefer)
    prefix = base if base.endswith(b"/") else base + b"/"
    progress(0, reader.size)
    mine = RangeProgress()  # this process's files checked and manifest bytes read

    def work(claim: Callable[[], int | None], counters: SharedCounters, in_child: bool) -> dict[str, Any]:
        if in_child:
            tally = RangeProgress()
            own = budget.sharing(lambda: counters.set(tally.files, tally.read))
        else:

            def progress_and_cancel() -> None:
                progress(mine.read + counters.others()[1], reader.size)
                cancel()

            tally, own = mine, budget.sharing(progress_and_cancel)
        ranges = RangeWork(LineParser(forced, prefer, style), prefix, own, tally, confine, tuning)
        return _check_claimed(claim, reader, per_task, ranges)

    results: list[dict[str, Any] | None] = run_shared(tasks, processes, work, budget)
    return _assemble(reader, per_task, tasks, results, LineParser(forced, prefer, style), cancel, budget)


def _check_claimed(
    claim: Callable[[], int | None], reader: ManifestBytes, per_task: int, work: RangeWork
) -> dict[str, Any]:
    """Every range this process claims, checked: its parts and why it stopped, as sent back."""
    parts: list[tuple[Any, ...]] = []
    stopped: str | None = None
    gave_up = False
    try:
        while (task := claim()) is not None:
            start = task * per_task
            block = reader.owned(start, min(reader.size, start + per_task))
            plain = work.parser.plain_block(block) if work.confine is None else None
            if plain is not None:
                part = check_plain_block(task, plain, len(block), work)
            else:
                part = check_lines(task, block, work)
            parts.append(part.wire())
            if part.stopped is not None:
                stopped = part.stopped
                break
    except _GaveUp:
        gave_up = True
    finally:
        if work.parents is not None:
            work.parents.close()
    return {"parts": parts, "stopped": stopped, "gave_up": gave_up}


def _assemble(
    reader: ManifestBytes,
    per_task: int,
    tasks: int,
    results: list[dict[str, Any] | None],
    parser: LineParser,
    cancel: Callable[[], None],
    check: Budget,
) -> Verification:
    """The processes' parts in manifest order, with what no process reached parsed here (NOT_CHECKED)."""
    parts: dict[int, Part] = {}
    stopped: str | None = None
    for result in results:
        if result is None:
            stopped = stopped or "a checking process ended unexpectedly"
            continue
        if result["gave_up"]:
            raise NotAManifest(reader.shown)
        for part in (Part(*wired) for wired in result["parts"]):
            parts[part.task] = part
        stopped = stopped or result["stopped"]
    verdicts = Verdicts()
    codes, details = verdicts.codes, verdicts.details
    bad_lines: list[int] = []
    bad_count = 0
    line_offset = 0
    cancelled = throttled(cancel)
    for task in range(tasks):
        part = parts.get(task) or Part(task, 0, False, b"", {})
        if not part.complete:  # not reached, or left at the deadline: the rest is parsed (not checked) here
            start = task * per_task
            rest, bad = bytearray(part.codes), BadLines(list(part.bad), part.bad_count)
            split = lines_of(reader.owned(start, min(reader.size, start + per_task)))
            for number, line, _ in checksum_lines(split):
                if number <= part.lines:
                    continue
                cancelled()
                if parser.parse(line) is None:
                    bad.add(number)
                else:
                    rest.append(NOT_CHECKED_CODE)
            part = Part(task, len(split), True, bytes(rest), part.details, bad.numbers, bad.count)
            stopped = stopped or check.reason
        entry_offset = len(codes)
        codes += part.codes
        for index, detail in part.details.items():
            details[entry_offset + index] = detail
        room = MAX_BAD_LINES_KEPT - len(bad_lines)
        if room > 0:
            bad_lines += [line_offset + number for number in part.bad[:room]]
        bad_count += part.bad_count
        if bad_count > MAX_BAD_LINES:
            raise NotAManifest(reader.shown)
        line_offset += part.lines
    if not codes:
        raise NoEntries(reader.shown, bad_count)
    style = parser.reversed_style

    def names() -> Iterator[bytes]:
        parse = LineParser(parser.forced, parser.prefer, style).parse
        for block in reader.blocks(per_task, cancelled):
            for _, line, _ in checksum_lines(block.split(b"\n")):
                if (parsed := parse(line)) is not None:
                    yield parsed[0]

    hashed = sum(part.hashed for part in parts.values())
    return Verification(verdicts, bad_lines, bad_count, names=names, bytes_hashed=hashed, stopped=stopped)
