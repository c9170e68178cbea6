"""verify_checksums: check a checksum manifest against the files (sha256sum -c, b3sum -c, and more).

What it adds to ``sha256sum -c``: any of six algorithms in one manifest, GNU and BSD lines mixed,
MISSING told apart from unreadable, files that appeared since the manifest was made
(``report_new``), progress, cancellation, and a bounded answer however long the manifest is.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, overload

from sysmcp.fs.checksums import (
    ALGORITHM_NAMES,
    ALGORITHMS,
    CHUNK,
    HASH_THREADS,
    MAX_BAD_LINES,
    MAX_BAD_LINES_KEPT,
    Algorithm,
    Digest,
    Entry,
    Hasher,
    Job,
    LineParser,
    Manifest,
    PoolCounters,
    decide_style,
    describe_change,
    explain,
    hash_fd,
    hash_many,
    hash_once,
    hint_order,
    one_shot,
    parse_manifest,
)
from sysmcp.fs.dirlook import NOT_LISTED, OPEN_LISTED, ListedDirectory, list_for
from sysmcp.fs.fanout import MAX_TASKS, FanOut, Progress, available_processes
from sysmcp.fs.paths import PathPolicy, display, printable
from sysmcp.fs.safeopen import kind, open_regular_at, read_small_regular_at
from sysmcp.fs.units import human_bytes, plural, rate
from sysmcp.fs.walk import Budget, ScanStopped, SkipCounter, collect_within, join, throttled, walk_files
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ToolError
from sysmcp.results import MAX_ITEM, TooLarge
from sysmcp.tools.merging import summary_merge
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput
from sysmcp.tools.walking import (
    require_directory,
    skipped_phrase,
    timeout_property,
    walk_options,
    walk_properties,
)

MAX_MANIFEST = 1 << 30  # bytes: about 12 million lines (read in ranges, never whole)
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 600.0

#: NOT_CHECKED: the time budget ran out before this entry was looked at or hashed.
Status = Literal["OK", "FAILED", "MISSING", "UNREADABLE", "NOT_CHECKED"]

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "manifest": {
            "type": "string",
            "minLength": 1,
            "description": "The manifest to check: an absolute path to a checksum file (SHA256SUMS, B3SUMS, "
            "…), a sysmcp://results/… URI from hash_tree, or the manifest text itself (lines as sha256sum, "
            "sha256sum --tag, md5sum, b2sum or b3sum print them; algorithms are detected per line).",
        },
        "base_dir": {
            "type": "string",
            "minLength": 1,
            "description": "Absolute directory that relative names in the manifest are relative to. Default: "
            "the manifest file's directory (like running 'sha256sum -c' there); required when the manifest is "
            "text or a URI.",
        },
        "algorithm": {
            "type": "string",
            "enum": ["auto", *ALGORITHM_NAMES],
            "default": "auto",
            "description": "'auto' (default) detects the algorithm per line from its tag or digest length; a "
            "64-digit digest may be sha256 or blake3 and a 128-digit one sha512 or blake2b, which the first "
            "matching file settles. Naming one makes other lines improperly formatted, like 'sha256sum -c'.",
        },
        "report_new": {
            "type": "boolean",
            "default": False,
            "description": "Also walk base_dir and list regular files the manifest does not mention (files "
            "added since it was made), which sha256sum -c cannot tell.",
        },
        "max_listed": {
            "type": "integer",
            "minimum": 1,
            "maximum": 1000,
            "default": 50,
            "description": "At most this many names per list (FAILED, MISSING, …) inline; when a list is cut "
            "the full report is a resource link.",
        },
        "timeout_s": timeout_property(
            DEFAULT_TIMEOUT_S,
            MAX_TIMEOUT_S,
            stops="checking stops and the result, marked partial, reports the entries checked so far and "
            "counts the rest as not checked.",
        ),
        **walk_properties("base_dir", note="With report_new: "),
    },
    "required": ["manifest"],
    "additionalProperties": False,
}

_NAMES = {"type": "array", "items": {"type": "string"}}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "manifest": {"type": "string", "description": "The manifest's path, URI, or '(text)'."},
        "base_dir": {"type": "string"},
        "complete": {"type": "boolean", "description": "False when the time budget ran out."},
        "stopped_reason": {"type": ["string", "null"]},
        "not_checked": {
            "type": "integer",
            "description": "Entries not checked because the time budget ran out (0 when complete).",
        },
        "all_ok": {
            "type": "boolean",
            "description": "True exactly when 'sha256sum -c --strict' would succeed: at least one entry, "
            "every file present, readable and matching, no improperly formatted line. New files do not count.",
        },
        "entries": {"type": "integer", "description": "Properly formatted checksum lines."},
        "ok": {"type": "integer"},
        "failed": {"type": "integer", "description": "Files whose digest differs."},
        "missing": {"type": "integer", "description": "Listed files that do not exist."},
        "unreadable": {"type": "integer", "description": "Listed files that exist but could not be hashed."},
        "improperly_formatted": {"type": "integer", "description": "Lines that are not checksum lines."},
        "new": {
            "type": ["integer", "null"],
            "description": "Regular files under base_dir not in the manifest (null unless report_new).",
        },
        "algorithms": {
            "type": "object",
            "additionalProperties": {"type": "integer"},
            "description": "Entries checked per algorithm.",
        },
        "bytes_hashed": {"type": "integer"},
        "seconds": {"type": "number"},
        "failed_files": _NAMES,
        "missing_files": _NAMES,
        "unreadable_files": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "error": {"type": "string"}},
                "required": ["path", "error"],
            },
        },
        "improperly_formatted_lines": {"type": "array", "items": {"type": "integer"}},
        "new_files": _NAMES,
        "truncated": {"type": "boolean", "description": "True when a list above was cut at max_listed."},
        "report_uri": {
            "type": ["string", "null"],
            "description": "sysmcp:// resource with every entry's status, when a list was cut.",
        },
        "walk_skipped": {
            "type": "object",
            "additionalProperties": {"type": "integer"},
            "description": "With report_new: entries the walk left out, by reason.",
        },
    },
    "required": [
        "manifest",
        "base_dir",
        "complete",
        "stopped_reason",
        "not_checked",
        "all_ok",
        "entries",
        "ok",
        "failed",
        "missing",
        "unreadable",
        "improperly_formatted",
        "new",
        "algorithms",
        "bytes_hashed",
        "seconds",
        "failed_files",
        "missing_files",
        "unreadable_files",
        "improperly_formatted_lines",
        "new_files",
        "truncated",
        "report_uri",
        "walk_skipped",
    ],
    "additionalProperties": False,
}


@dataclass(slots=True)
class Checked:
    status: Status
    detail: str = ""
    algorithm: str = ""


NOT_CHECKED = Checked("NOT_CHECKED", "the time budget ran out first")

# Every entry's verdict is one byte (``Verdicts``): OK and FAILED carry their algorithm's number.
_VERDICT_ALGORITHMS: tuple[str, ...] = (*ALGORITHM_NAMES, *(f"blake2b-{bits}" for bits in range(8, 512, 8)))
_ALGORITHM_CODE = {name: code for code, name in enumerate(_VERDICT_ALGORITHMS)}
FAILED_CODE = 100  # plus the algorithm's number
MISSING_CODE, UNREADABLE_CODE, NOT_CHECKED_CODE = 250, 251, 252
_DECODED: dict[int, Checked] = {
    **{code: Checked("OK", algorithm=name) for code, name in enumerate(_VERDICT_ALGORITHMS)},
    **{
        FAILED_CODE + code: Checked("FAILED", algorithm=name) for code, name in enumerate(_VERDICT_ALGORITHMS)
    },
    MISSING_CODE: Checked("MISSING"),
    NOT_CHECKED_CODE: NOT_CHECKED,
}


def encode(checked: Checked) -> int:
    """A verdict's byte (an UNREADABLE one's detail is kept aside)."""
    if checked.status == "OK":
        return _ALGORITHM_CODE[checked.algorithm]
    if checked.status == "FAILED":
        return FAILED_CODE + _ALGORITHM_CODE[checked.algorithm]
    return {"MISSING": MISSING_CODE, "UNREADABLE": UNREADABLE_CODE, "NOT_CHECKED": NOT_CHECKED_CODE}[
        checked.status
    ]


class Verdicts(Sequence[Checked]):
    """Every entry's verdict, in manifest order: one byte each, UNREADABLE details aside.

    Why: a million entries cost a megabyte here, where a list of verdicts costs eight, and the
    forked checking processes send their parts back as plain bytes.
    """

    __slots__ = ("codes", "details")

    def __init__(self, codes: bytearray | None = None, details: dict[int, str] | None = None) -> None:
        self.codes = codes if codes is not None else bytearray()
        self.details = details if details is not None else {}

    def __len__(self) -> int:
        return len(self.codes)

    def _at(self, index: int) -> Checked:
        code = self.codes[index]
        if code == UNREADABLE_CODE:
            return Checked("UNREADABLE", self.details.get(index, "unreadable"))
        return _DECODED[code]

    @overload
    def __getitem__(self, index: int) -> Checked: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Checked]: ...

    def __getitem__(self, index: int | slice) -> Checked | Sequence[Checked]:
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("verdict index out of range")
        return self._at(index)

    def __setitem__(self, index: int, checked: Checked) -> None:
        self.codes[index] = encode(checked)
        if checked.status == "UNREADABLE":
            self.details[index] = checked.detail
        else:
            self.details.pop(index, None)

    def __iter__(self) -> Iterator[Checked]:
        for index in range(len(self)):
            yield self._at(index)

    def counts(self) -> Counter[Status]:
        """Entries per status."""
        by_code = Counter(self.codes)
        out: Counter[Status] = Counter()
        for code, count in by_code.items():
            out[_DECODED[code].status if code != UNREADABLE_CODE else "UNREADABLE"] += count
        return out

    def algorithms(self) -> Counter[str]:
        """Entries checked (OK or FAILED) per algorithm."""
        out: Counter[str] = Counter()
        for code, count in Counter(self.codes).items():
            if code < MISSING_CODE:
                out[_DECODED[code].algorithm] += count
        return out


def _no_names() -> Iterator[bytes]:
    return iter(())


@dataclass
class Verification:
    """What the check found: a verdict per entry, the improperly formatted lines, and the walk's finds.

    The entries' names are not kept (a million names would be most of the memory): ``names()``
    reads them again from the manifest, in order, when a list or the full report needs them.
    """

    checked: Verdicts = field(default_factory=Verdicts)
    bad_lines: list[int] = field(default_factory=list)  # line numbers, 1-based: the first MAX_BAD_LINES_KEPT
    bad_count: int = 0
    names: Callable[[], Iterator[bytes]] = _no_names
    new: list[bytes] | None = None
    walk_skipped: dict[str, int] = field(default_factory=dict)
    bytes_hashed: int = 0
    seconds: float = 0.0
    stopped: str | None = None  # why some entries were not checked (the time budget ran out)
    listed: dict[Status, list[tuple[bytes, Checked]]] | None = None  # the names the answer shows (render)
    listed_limit: int = 0
    report: str | None = None  # the full report, written in the worker when the answer cuts a list
    report_size: int = 0  # its UTF-8 bytes (also when it was too big to keep, and not kept here)

    @property
    def entries(self) -> int:
        return len(self.checked)


@dataclass(frozen=True)
class Source:
    """Where the manifest comes from: read in the worker (a file) or already in hand (text, URI)."""

    shown: str
    path: bytes | None = None
    data: bytes = b""
    name_hint: str | None = None


MIN_RANGE = 4 << 10  # bytes of manifest per task, at least: a split test of a few hundred lines splits
MAX_RANGE = 256 << 10  # and at most: each task's lines are in memory at once, and the last task
# a process claims ends the run at most a few thousand entries after the other's
_EXTEND = 64 << 10  # read-ahead while looking for the end of a line that runs past its range


class ManifestBytes:
    """The manifest's bytes, a range at a time: from the open file (``pread``: the forked processes
    share the descriptor but no file offset) or from memory (text, a stored result).

    Why ranges: each checking process parses its own ranges, so no process ever holds the whole
    manifest or an object per line, and the parse itself is shared out.
    """

    def __init__(self, shown: str, data: bytes = b"", fd: int | None = None) -> None:
        self.shown = shown
        self.data = data
        self.fd = fd
        self.looked = os.fstat(fd) if fd is not None else None
        self.size = self.looked.st_size if self.looked is not None else len(data)

    def read(self, start: int, end: int) -> bytes:
        if self.fd is None:
            if self.looked is not None:
                raise ValueError(f"the manifest {self.shown} was closed: its names were read in the worker")
            return self.data[start:end]
        pieces = []
        while start < end:
            piece = os.pread(self.fd, end - start, start)
            if not piece:
                break
            pieces.append(piece)
            start += len(piece)
        return b"".join(pieces)

    def owned(self, start: int, end: int) -> bytes:
        """The whole lines that start in ``[start, end)``: every line belongs to exactly one range."""
        data = self.read(max(0, start - 1), end)
        if start > 0:
            cut = data.find(b"\n")
            if cut < 0:
                return b""  # one line runs through the whole range: the range where it starts has it
            data = data[cut + 1 :]
        if not data or data.endswith(b"\n") or end >= self.size:
            return data
        pieces, at = [data], end
        while at < self.size:
            more = self.read(at, min(self.size, at + _EXTEND))
            if not more:
                break
            cut = more.find(b"\n")
            if cut >= 0:
                pieces.append(more[: cut + 1])
                break
            pieces.append(more)
            at += len(more)
        return b"".join(pieces)

    def blocks(self, per_task: int, check: Callable[[], None]) -> Iterator[bytes]:
        """Every range's lines in order; ``check`` (cancellation) runs before each."""
        for start in range(0, self.size, per_task):
            check()
            yield self.owned(start, min(self.size, start + per_task))

    def changed(self) -> bool:
        """Whether the file's size or modification time moved since it was opened."""
        if self.fd is None or self.looked is None:
            return False
        now = os.fstat(self.fd)
        return (now.st_size, now.st_mtime_ns) != (self.looked.st_size, self.looked.st_mtime_ns)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def open_manifest(source: Source) -> ManifestBytes:
    """The manifest's bytes: a checksum file opened safely (FIFOs and devices refused without
    blocking), or the text in hand. Huge ones are refused."""
    if source.path is None:
        data = source.data
    else:
        shown = source.shown
        try:
            fd, opened = open_regular_at(source.path)
        except FileNotFoundError:
            raise ToolError(f"No such manifest file: {shown}") from None
        except OSError as exc:
            raise ToolError(f"Cannot read the manifest {shown}: {explain(exc)}") from None
        if opened.st_size > 0:
            reader = ManifestBytes(shown, fd=fd)
            if reader.size > MAX_MANIFEST:
                reader.close()
                raise ToolError(f"The manifest {shown} is larger than {human_bytes(MAX_MANIFEST)}; split it")
            return reader
        try:  # size 0: a kernel-generated file (procfs) has its bytes only when read
            with os.fdopen(fd, "rb", closefd=False) as stream:
                data = stream.read(MAX_MANIFEST + 1)
        except OSError as exc:
            raise ToolError(f"Cannot read the manifest {shown}: {explain(exc)}") from None
        finally:
            os.close(fd)
    if len(data) > MAX_MANIFEST:
        raise ToolError(f"The manifest {source.shown} is larger than {human_bytes(MAX_MANIFEST)}; split it")
    return ManifestBytes(source.shown, data=data)


def _not_a_manifest(shown: str) -> ToolError:
    return ToolError(
        f"{shown}: more than {MAX_BAD_LINES:,} improperly formatted lines, so this does not look "
        "like a checksum manifest. Expected lines like '<hex digest>  <name>' or "
        "'SHA256 (<name>) = <hex digest>'."
    )


def _no_entries(shown: str, bad: int) -> ToolError:
    return ToolError(
        f"{shown}: no properly formatted checksum lines found"
        + (f" ({bad:,} improperly formatted)" if bad else "")
        + ". Expected lines like '<hex digest>  <name>' or 'SHA256 (<name>) = <hex digest>'."
    )


def verify(
    source: Source,
    base: bytes,
    args: dict[str, Any],
    policy: PathPolicy,
    meter: Meter,
    threads: int,
    timeout_s: float = math.inf,
    clock: Callable[[], float] = time.monotonic,
) -> Verification:
    """Check every entry, walk for new files, and read the names the answer shows.

    A short manifest is parsed here and checked on a small thread pool (``_check_here``); a long one
    is cut into ranges of whole lines that the checking processes parse and check themselves
    (``check_ranges``). At the deadline (``timeout_s``) what is left stays NOT_CHECKED and
    ``stopped`` says why.
    """
    started = time.perf_counter()
    reader = open_manifest(source)
    try:
        forced = None if args["algorithm"] == "auto" else ALGORITHMS[args["algorithm"]]
        prefer = hint_order(source.name_hint)
        budget = Budget(timeout_s, meter.checkpoint, clock=clock)
        if reader.size >= PARALLEL_FROM:
            result = check_ranges(reader, forced, prefer, base, policy, meter, budget)
        else:
            result = _parse_and_check_here(reader, forced, prefer, base, policy, meter, threads, budget)
        if args["report_new"] and result.stopped is None:
            try:
                result.new, result.walk_skipped = find_new(result.names(), base, source.path, args, budget)
                if budget.expired:  # the walk ends quietly at the deadline: its list may miss files
                    raise ScanStopped(
                        budget.reason + " while looking for new files (the list of new files may be short)"
                    )
            except ScanStopped as stop:
                result.stopped = stop.reason
        prepare_answer(result, int(args.get("max_listed", 50)))  # the last read of the manifest
        if reader.changed():
            raise ToolError(
                f"The manifest {source.shown} changed while it was being checked; check it again once "
                "nothing writes to it"
            )
    finally:
        reader.close()
    result.seconds = time.perf_counter() - started
    return result


def _parse_and_check_here(
    reader: ManifestBytes,
    forced: Algorithm | None,
    prefer: Sequence[str],
    base: bytes,
    policy: PathPolicy,
    meter: Meter,
    threads: int,
    budget: Budget,
) -> Verification:
    check = throttled(meter.checkpoint)  # a short manifest: no deadline inside the parse
    manifest = parse_manifest(reader.read(0, reader.size), forced=forced, prefer=prefer, check=check)
    if manifest.gave_up:
        raise _not_a_manifest(reader.shown)
    if not manifest.entries:
        raise _no_entries(reader.shown, manifest.bad_count)
    entries = manifest.entries
    result = Verification(
        Verdicts(bytearray([NOT_CHECKED_CODE]) * len(entries)),
        manifest.bad_lines,
        manifest.bad_count,
        names=lambda: (entry.name for entry in entries),
    )
    try:
        _check_here(manifest, base, policy, meter, threads, budget, result)
    except ScanStopped as stop:
        result.stopped = stop.reason
    return result


def _check_here(
    manifest: Manifest,
    base: bytes,
    policy: PathPolicy,
    meter: Meter,
    threads: int,
    check: Budget,
    result: Verification,
) -> None:
    """Look at every entry, then hash on a small thread pool: the way for short manifests."""
    confined = policy.allowed is not None

    # Pass 1: look at every listed file (stat follows symlinks, as sha256sum's open does).
    looked: list[tuple[int, bytes, os.stat_result]] = []
    total_bytes = 0
    for index, entry in enumerate(manifest.entries):
        check()
        path = entry.name if entry.name.startswith(b"/") else join(base, entry.name)
        if confined:
            try:
                path = os.fsencode(policy.resolve(os.fsdecode(path)))
            except ToolError:
                result.checked[index] = Checked("UNREADABLE", "outside the allowed roots")
                continue
        try:
            st = os.stat(path)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                result.checked[index] = Checked("MISSING")
            else:
                result.checked[index] = Checked("UNREADABLE", explain(exc))
            continue
        if not stat.S_ISREG(st.st_mode):
            result.checked[index] = Checked("UNREADABLE", f"not a regular file: {kind(st.st_mode)}")
            continue
        looked.append((index, path, st))
        total_bytes += st.st_size
    unhashed = len(manifest.entries) - len(looked)
    meter.total = total_bytes + len(manifest.entries)
    meter.extra["files_total"] = len(manifest.entries)
    meter.extra["bytes_total"] = total_bytes

    # Pass 2: hash. A digest length two algorithms share is settled by the first file that matches.
    settled: dict[int, str] = {}
    tried: dict[int, set[str]] = {}
    counters = PoolCounters()

    def jobs() -> Iterator[Job]:
        for index, path, st in looked:
            entry = manifest.entries[index]
            candidates = entry.candidates
            if len(candidates) > 1 and len(entry.digest) in settled:
                candidates = (ALGORITHMS[settled[len(entry.digest)]],)
            yield Job(index, path, candidates, st, follow_symlinks=not confined)

    def update_meter() -> None:
        done_bytes, done_files = counters.bytes, counters.files
        meter.extra["bytes"] = done_bytes
        meter.extra["files"] = unhashed + done_files
        meter.done = done_bytes + unhashed + done_files

    def report_and_check() -> None:
        update_meter()
        meter.checkpoint()

    hashing = check.sharing(report_and_check)  # progress every few ms, and the one deadline
    for outcome in hash_many(jobs(), checkpoint=hashing, counters=counters, threads=threads):
        index = outcome.job.key
        entry = manifest.entries[index]
        tried[index] = {a.name for a in outcome.job.algorithms}
        result.checked[index] = _judge(
            entry, outcome.job, outcome.digest, outcome.error, outcome.missing, settled
        )
    update_meter()
    result.bytes_hashed = counters.bytes + retry_others(
        manifest, looked, tried, result, meter, check, threads, confined
    )


PARALLEL_FROM = 160 << 10  # manifest bytes (about 2,000 lines) from which it is checked in ranges


def _known(candidates: tuple[Algorithm, ...], settled: dict[int, str], length: int) -> Algorithm | None:
    """The one algorithm a digest of ``length`` hex digits is checked with, if known yet: its only
    candidate, or the one an earlier match settled that length on."""
    if len(candidates) == 1:
        return candidates[0]
    name = settled.get(length)
    return None if name is None else ALGORITHMS[name]


def _blamed(candidates: tuple[Algorithm, ...]) -> int:
    """The FAILED code of a digest no candidate matched: under the line's own first candidate (``_judge``)."""
    return FAILED_CODE + _ALGORITHM_CODE[candidates[0].name]


def check_file(
    path: bytes,
    expected: str,
    candidates: tuple[Algorithm, ...],
    confined: bool,
    settled: dict[int, str],
    buffer: bytearray,
    on_chunk: Callable[[int], None],
) -> tuple[int, str, int]:
    """Look at, open and hash one entry's file: its verdict's code, an UNREADABLE detail, bytes read.

    The same rules as ``_check_here``'s two passes: stat follows symlinks as ``sha256sum`` does
    (unless the allowed roots confine us), anything but a regular file is refused before it is
    opened, and the open checks it is the file looked at. A digest length two algorithms share is
    settled by the first match; a mismatch under a settled length is tried with the other
    candidates too. ``expected`` is lowercase hex.
    """
    try:
        looked = os.stat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return MISSING_CODE, "", 0
        return UNREADABLE_CODE, explain(exc), 0
    return check_looked(path, looked, expected, candidates, confined, settled, buffer, on_chunk)


def check_looked(
    path: bytes,
    looked: os.stat_result,
    expected: str,
    candidates: tuple[Algorithm, ...],
    confined: bool,
    settled: dict[int, str],
    buffer: bytearray,
    on_chunk: Callable[[int], None],
) -> tuple[int, str, int]:
    """``check_file`` once the look is done: ``looked`` is ``os.stat(path)``, whatever it found."""
    if not stat.S_ISREG(looked.st_mode):
        return UNREADABLE_CODE, f"not a regular file: {kind(looked.st_mode)}", 0
    trying = candidates
    narrowed = len(candidates) > 1 and len(expected) in settled
    if narrowed:
        trying = (ALGORITHMS[settled[len(expected)]],)
    blamed = _blamed(candidates)
    if 0 < looked.st_size < len(buffer):
        return _check_small(path, looked, expected, candidates, trying, confined, settled, buffer, blamed)
    try:
        fd, opened = open_regular_at(path, follow_symlinks=not confined, expect=looked)
    except FileNotFoundError:
        return MISSING_CODE, "", 0
    except OSError as exc:
        return UNREADABLE_CODE, explain(exc), 0
    read = 0
    try:
        while True:
            try:
                if opened.st_size < len(buffer):
                    digest = hash_once(fd, trying, buffer, opened)
                else:
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
                    return _ALGORITHM_CODE[name], "", read
            if not narrowed:
                return blamed, "", read
            narrowed = False  # the settled guess failed: the other candidates, from the start
            first = trying[0].name
            trying = tuple(c for c in candidates if c.name != first)
            if not trying:
                return blamed, "", read
            os.lseek(fd, 0, os.SEEK_SET)
            opened = os.fstat(fd)
    finally:
        os.close(fd)


def _check_small(
    path: bytes,
    looked: os.stat_result,
    expected: str,
    candidates: tuple[Algorithm, ...],
    trying: tuple[Algorithm, ...],
    confined: bool,
    settled: dict[int, str],
    buffer: bytearray,
    blamed: int,
) -> tuple[int, str, int]:
    """``check_file`` for a file smaller than the buffer: open, one read, one ``fstat``, close
    (``safeopen.read_small_regular_at``), and the candidates a settled length skipped are tried on the
    bytes already read. The same verdicts as through ``open_regular_at`` and ``hash_once``, with two
    system calls and every per-file object fewer: these are most files, and per-file work is the cost."""
    try:
        count, after, failure = read_small_regular_at(path, looked, buffer, follow_symlinks=not confined)
    except FileNotFoundError:
        return MISSING_CODE, "", 0
    except OSError as exc:
        return UNREADABLE_CODE, explain(exc), 0
    if failure is not None:
        return UNREADABLE_CODE, f"read error: {explain(failure)}", 0
    size = looked.st_size
    if count != size or after.st_size != size or after.st_mtime_ns != looked.st_mtime_ns:
        changed = describe_change(looked, after, count) or "its contents moved while it was read"
        return UNREADABLE_CODE, f"changed while being read ({changed}); check it again", count
    return _judge_data(memoryview(buffer)[:count], expected, candidates, trying, settled, blamed), "", count


def _judge_data(
    data: memoryview,
    expected: str,
    candidates: tuple[Algorithm, ...],
    trying: tuple[Algorithm, ...],
    settled: dict[int, str],
    blamed: int,
) -> int:
    """The verdict's code for a whole file's bytes: ``trying`` first (a match settles the length when
    it was not settled), then the candidates a settled length skipped, else ``blamed``."""
    for algorithm in trying:
        if one_shot(algorithm)(data).hexdigest() == expected:
            if len(trying) > 1:
                settled.setdefault(len(expected), algorithm.name)
            return _ALGORITHM_CODE[algorithm.name]
    if len(trying) == len(candidates):
        return blamed
    for algorithm in candidates:  # a settled guess that failed: the other candidates too
        if algorithm.name != trying[0].name and one_shot(algorithm)(data).hexdigest() == expected:
            return _ALGORITHM_CODE[algorithm.name]
    return blamed


def check_entry(
    path: bytes,
    expected: str,
    candidates: tuple[Algorithm, ...],
    settled: dict[int, str],
    buffer: bytearray,
    on_chunk: Callable[[int], None],
) -> tuple[int, str, int]:
    """``check_file`` for an entry outside confinement, the common case with the fewest calls.

    Why: on a million small files the Python work per entry is what we lose to ``sha256sum -c``, not
    the system calls. A file smaller than the buffer whose algorithm is known (one candidate, or a
    length already settled) goes from the look straight to ``_check_small``; anything else, decided
    from the look alone (nothing is opened twice), goes on to ``check_looked``.
    """
    try:
        looked = os.stat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return MISSING_CODE, "", 0
        return UNREADABLE_CODE, explain(exc), 0
    size = looked.st_size
    algorithm = _known(candidates, settled, len(expected))
    if algorithm is None or not 0 < size < len(buffer) or not stat.S_ISREG(looked.st_mode):
        return check_looked(path, looked, expected, candidates, False, settled, buffer, on_chunk)
    blamed = _blamed(candidates)
    return _check_small(path, looked, expected, candidates, (algorithm,), False, settled, buffer, blamed)


LIST_FROM = 8  # names of one directory in a range from which the directory is listed (dirlook)
MAX_LISTINGS = 64  # directories a range keeps open at once (descriptors); each is listed once at most
#: A file whose change or modification time is this close to the start of its range (or later) is
#: checked by ``check_entry``, which compares a look before the open with one after the read. Older
#: than that, no write can have been under way while it was read: a write sets both times to "now"
#: (give or take the coarsest timestamps, FAT's 2 s), so the one ``fstat`` after the read suffices.
SETTLED_NS = 3_000_000_000
PROGRESS_EVERY = 16  # entries between two updates of the progress counts (read every few ms)
_S_IFMT, _S_IFREG = 0o170000, stat.S_IFREG


def check_plain_block(
    found: list[tuple[str, str, str]],
    parser: LineParser,
    prefix: bytes,
    settled: dict[int, str],
    buffer: bytearray,
    on_chunk: Callable[[int], None],
    own: Callable[[], None],
    counts: list[int],
    codes: bytearray,
    details: dict[int, str],
    block_size: int,
) -> int:
    """``check_entry`` for every entry of a range of plain lines (``LineParser.plain_block``), in
    order: each entry's code appended to ``codes`` (an UNREADABLE one's detail in ``details``), the
    bytes hashed returned. Outside confinement only.

    Why: most entries of a big manifest sit next to many others of their directory. Such a directory
    is listed once (``dirlook.list_for``), and a file its listing typed as regular is opened relative
    to it (``O_NOFOLLOW``, ``O_NONBLOCK``), read once, ``fstat``-ed (a regular file, the inode the
    entry named, on the directory's device, as big as what was read, its times older than
    ``SETTLED_NS`` before the range began) and closed: four system calls, where ``check_entry`` makes
    five and walks the whole path twice. Anything else (a name the listing did not type as a regular
    file or did not reach, a file empty, large, recently changed or swapped, any error) goes through
    ``check_entry`` from the start, so its verdict and text are exactly that path's.
    """
    fsencode = os.fsencode
    wanted = Counter([line[1] for line in found])  # names per directory part
    listings: dict[str, ListedDirectory] = {}
    opened: list[tuple[str, ListedDirectory]] = []  # the listings open, oldest first
    # Per digest length, once its algorithm is known (one candidate, or settled): how to hash, the OK code.
    quick: dict[int, tuple[Callable[[memoryview], Hasher], int, Algorithm]] = {}
    view, room, targets = memoryview(buffer), len(buffer), [buffer]
    open_, readv, fstat, close = os.open, os.readv, os.fstat, os.close
    flags = OPEN_LISTED
    step = block_size // max(1, len(found))  # progress: manifest bytes per entry, near enough
    before = time.time_ns() - SETTLED_NS
    files, done = counts
    hashed = 0
    current: str | None = None  # the directory part of the entries just checked, and its listing
    listed = NOT_LISTED
    regular, dir_fd, dev = listed.regular, listed.fd, listed.dev
    try:
        for index, (expected, key, last) in enumerate(found):
            if not index % PROGRESS_EVERY:
                counts[0], counts[1] = files + index, done + step * index
            own()  # a stop leaves len(codes) entries done
            if key != current:
                current = key
                listed = listings.get(key, NOT_LISTED)
                if key not in listings:
                    if wanted[key] >= LIST_FROM:
                        if len(opened) >= MAX_LISTINGS:  # the oldest goes: the rest of its names one by one
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
                            and after.st_mode & _S_IFMT == _S_IFREG
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
                    algorithm = _known(candidates, settled, length)
                    if algorithm is not None:
                        known = quick[length] = (
                            one_shot(algorithm),
                            _ALGORITHM_CODE[algorithm.name],
                            algorithm,
                        )
                if known is not None and known[0](view[:read]).hexdigest() == expected:
                    codes.append(known[1])
                else:
                    candidates = parser.candidates(length)
                    blamed = _blamed(candidates)
                    trying = candidates if known is None else (known[2],)
                    codes.append(_judge_data(view[:read], expected, candidates, trying, settled, blamed))
            else:
                path = fsencode(key + last)
                if not key.startswith("/"):
                    path = prefix + path
                candidates = parser.candidates(len(expected))
                code, detail, read = check_entry(path, expected, candidates, settled, buffer, on_chunk)
                if detail:
                    details[len(codes)] = detail
                codes.append(code)
            hashed += read
    finally:
        for _, listed in opened:
            listed.close()
    counts[0], counts[1] = files + len(found), done + block_size
    return hashed


class _GaveUp(Exception):
    """More than MAX_BAD_LINES improperly formatted lines: no manifest, whatever the rest holds."""


def ranges_for(size: int, processes: int) -> tuple[int, int]:
    """Bytes per task and the number of tasks: about 16 per process, each 4 KiB to 256 KiB (larger only
    past ``MAX_TASKS`` tasks)."""
    per_task = max(MIN_RANGE, min(MAX_RANGE, size // (processes * 16) + 1), -(-size // MAX_TASKS))
    return per_task, max(1, -(-size // per_task))


def check_ranges(
    reader: ManifestBytes,
    forced: Algorithm | None,
    prefer: Sequence[str],
    base: bytes,
    policy: PathPolicy,
    meter: Meter,
    check: Budget,
) -> Verification:
    """Parse and check a long manifest in ranges of whole lines, shared between forked processes.

    Each process (``fanout.FanOut``, as ``dir_usage`` walks) claims a range, parses it, checks its
    entries as it goes and keeps one byte per entry: what comes back is those bytes, the UNREADABLE
    details and improperly formatted lines (few), per range. Nothing per entry exists before the
    fork, so no process holds (or counts again) another's. At the deadline the processes stop; the
    ranges, or rests of ranges, they did not reach are parsed here so every entry is counted (and
    NOT_CHECKED) and every line number is right.
    """
    processes = available_processes()
    per_task, tasks = ranges_for(reader.size, processes)
    style = decide_style(reader.blocks(per_task, throttled(meter.checkpoint)), forced, prefer)
    confined = policy.allowed is not None
    prefix = base if base.endswith(b"/") else base + b"/"
    meter.total = reader.size
    meter.extra["manifest_bytes"] = reader.size
    fan: FanOut | None = None
    mine = [0, 0]  # this process's files checked and manifest bytes read

    def report_and_check() -> None:
        files, done = mine
        if fan is not None:
            more_files, more_bytes = fan.progress.others()
            files, done = files + more_files, done + more_bytes
        meter.extra["files"] = files
        meter.done = done
        meter.checkpoint()

    def work(claim: Callable[[], int | None], progress: Progress, in_child: bool) -> dict[str, Any]:
        counts = [0, 0]
        if in_child:
            own = check.sharing(lambda: progress.set(*counts))
        else:
            own = check.sharing(report_and_check)
            counts = mine
        parser = LineParser(forced, prefer, style)
        parse = parser.parse
        settled: dict[int, str] = {}
        buffer = bytearray(CHUNK)
        parts: list[tuple[int, int, bool, bytes, dict[int, str], list[int], int]] = []
        hashed = 0
        stopped: str | None = None
        gave_up = False
        bad_seen = 0  # by this process: more than MAX_BAD_LINES means the whole is no manifest

        def on_chunk(read: int) -> None:
            own()

        try:
            while (task := claim()) is not None:
                start = task * per_task
                block = reader.owned(start, min(reader.size, start + per_task))
                plain = None if confined else parser.plain_block(block)
                if plain is not None:
                    codes = bytearray()
                    details: dict[int, str] = {}
                    try:
                        hashed += check_plain_block(
                            plain,
                            parser,
                            prefix,
                            settled,
                            buffer,
                            on_chunk,
                            own,
                            counts,
                            codes,
                            details,
                            len(block),
                        )
                    except ScanStopped:  # every line is an entry: the codes say how many lines were done
                        parts.append((task, len(codes), False, bytes(codes), details, [], 0))
                        raise
                    parts.append((task, len(plain), True, bytes(codes), details, [], 0))
                    continue
                lines = block.split(b"\n")
                if lines[-1] == b"":
                    lines.pop()
                codes = bytearray()
                details = {}
                bad: list[int] = []
                bad_count = 0
                number = 0
                try:
                    for number, raw in enumerate(lines, 1):  # number: where a stop leaves off
                        counts[1] += len(raw) + 1
                        if raw.startswith(b"#"):
                            continue
                        line = raw[:-1] if raw.endswith(b"\r") else raw
                        if not line:
                            continue
                        parsed = parse(line)
                        if parsed is None:
                            bad_count += 1
                            if len(bad) < MAX_BAD_LINES_KEPT:
                                bad.append(number)
                            bad_seen += 1
                            if bad_seen > MAX_BAD_LINES:
                                raise _GaveUp()
                            continue
                        own()
                        name, digest, candidates = parsed
                        path = name if name.startswith(b"/") else prefix + name
                        if confined:
                            try:
                                path = os.fsencode(policy.resolve(os.fsdecode(path)))
                            except ToolError:
                                details[len(codes)] = "outside the allowed roots"
                                codes.append(UNREADABLE_CODE)
                                counts[0] += 1
                                continue
                            code, detail, read = check_file(
                                path, digest.lower(), candidates, True, settled, buffer, on_chunk
                            )
                        else:
                            code, detail, read = check_entry(
                                path, digest.lower(), candidates, settled, buffer, on_chunk
                            )
                        if detail:
                            details[len(codes)] = detail
                        codes.append(code)
                        hashed += read
                        counts[0] += 1
                except ScanStopped:
                    parts.append((task, number - 1, False, bytes(codes), details, bad, bad_count))
                    raise
                parts.append((task, len(lines), True, bytes(codes), details, bad, bad_count))
        except ScanStopped as stop:
            stopped = stop.reason
        except _GaveUp:
            gave_up = True
        return {"parts": parts, "bytes": hashed, "stopped": stopped, "gave_up": gave_up}

    results: list[dict[str, Any] | None]
    try:
        fan = FanOut(tasks, processes, work)
        fan.start()
        results = [fan.run_here()]
        results += collect_within(fan, check)
    finally:
        if fan is not None:
            fan.close()
    return _assemble(reader, per_task, tasks, results, LineParser(forced, prefer, style), meter, check)


def _assemble(
    reader: ManifestBytes,
    per_task: int,
    tasks: int,
    results: list[dict[str, Any] | None],
    parser: LineParser,
    meter: Meter,
    check: Budget,
) -> Verification:
    """The processes' parts in manifest order, with what no process reached parsed here (NOT_CHECKED)."""
    parts: dict[int, tuple[int, int, bool, bytes, dict[int, str], list[int], int]] = {}
    hashed = 0
    stopped: str | None = None
    for result in results:
        if result is None:
            stopped = stopped or "a checking process ended unexpectedly"
            continue
        if result["gave_up"]:
            raise _not_a_manifest(reader.shown)
        for part in result["parts"]:
            parts[part[0]] = part
        hashed += result["bytes"]
        stopped = stopped or result["stopped"]
    verdicts = Verdicts()
    codes, details = verdicts.codes, verdicts.details
    bad_lines: list[int] = []
    bad_count = 0
    line_offset = 0
    cancelled = throttled(meter.checkpoint)
    for task in range(tasks):
        part = parts.get(task)
        if part is not None and part[2]:
            _, lines, _, task_codes, task_details, task_bad, task_bad_count = part
        else:  # not reached, or left at the deadline: the rest is parsed (not checked) here
            start = task * per_task
            block = reader.owned(start, min(reader.size, start + per_task))
            done = part[1] if part is not None else 0
            rest = bytearray(part[3]) if part is not None else bytearray()
            task_details = part[4] if part is not None else {}
            task_bad = list(part[5]) if part is not None else []
            task_bad_count = part[6] if part is not None else 0
            split = block.split(b"\n")
            if split[-1] == b"":
                split.pop()
            lines = len(split)
            for number in range(done + 1, lines + 1):
                cancelled()
                raw = split[number - 1]
                if raw.startswith(b"#"):
                    continue
                line = raw[:-1] if raw.endswith(b"\r") else raw
                if not line:
                    continue
                if parser.parse(line) is None:
                    task_bad_count += 1
                    if len(task_bad) < MAX_BAD_LINES_KEPT:
                        task_bad.append(number)
                else:
                    rest.append(NOT_CHECKED_CODE)
            task_codes = bytes(rest)
            stopped = stopped or check.reason
        entry_offset = len(codes)
        codes += task_codes
        for index, detail in task_details.items():
            details[entry_offset + index] = detail
        room = MAX_BAD_LINES_KEPT - len(bad_lines)
        if room > 0:
            bad_lines += [line_offset + number for number in task_bad[:room]]
        bad_count += task_bad_count
        if bad_count > MAX_BAD_LINES:
            raise _not_a_manifest(reader.shown)
        line_offset += lines
    if not codes:
        raise _no_entries(reader.shown, bad_count)
    style = parser.reversed_style

    def names() -> Iterator[bytes]:
        parse = LineParser(parser.forced, parser.prefer, style).parse
        for block in reader.blocks(per_task, cancelled):
            for raw in block.split(b"\n"):
                if raw.startswith(b"#"):
                    continue
                line = raw[:-1] if raw.endswith(b"\r") else raw
                if line and (parsed := parse(line)) is not None:
                    yield parsed[0]

    return Verification(verdicts, bad_lines, bad_count, names=names, bytes_hashed=hashed, stopped=stopped)


def retry_others(
    manifest: Manifest,
    looked: list[tuple[int, bytes, os.stat_result]],
    tried: dict[int, set[str]],
    result: Verification,
    meter: Meter,
    check: Callable[[], None],
    threads: int,
    confined: bool,
) -> int:
    """Hash FAILED files again with the candidates a settled length skipped, so mixed manifests stay right.

    Only files that failed and whose digest length two algorithms share pay for this second read.
    """
    jobs = []
    for index, path, st in looked:
        entry, checked = manifest.entries[index], result.checked[index]
        others = tuple(c for c in entry.candidates if c.name not in tried.get(index, ()))
        if checked.status == "FAILED" and len(entry.candidates) > 1 and others:
            jobs.append(Job(index, path, others, st, follow_symlinks=not confined))
    if not jobs:
        return 0
    counters = PoolCounters()
    base_done = meter.done
    meter.total = (meter.total or 0) + sum(job.looked.st_size for job in jobs)

    def checkpoint() -> None:
        meter.done = base_done + counters.bytes
        check()

    for outcome in hash_many(jobs, checkpoint=checkpoint, counters=counters, threads=threads):
        if outcome.digest is not None and not outcome.digest.changed:
            for name, hexdigest in outcome.digest.hexdigests.items():
                if hexdigest == manifest.entries[outcome.job.key].digest:
                    result.checked[outcome.job.key] = Checked("OK", algorithm=name)
    checkpoint()
    return counters.bytes


def _judge(
    entry: Entry,
    job: Job,
    digest: Digest | None,
    error: str | None,
    missing: bool,
    settled: dict[int, str],
) -> Checked:
    if digest is None:
        return Checked("MISSING") if missing else Checked("UNREADABLE", error or "unreadable")
    if digest.changed:
        return Checked("UNREADABLE", f"changed while being read ({digest.changed}); check it again")
    for name, hexdigest in digest.hexdigests.items():
        if hexdigest == entry.digest:
            if len(job.algorithms) > 1:
                settled.setdefault(len(entry.digest), name)
            return Checked("OK", algorithm=name)
    # The line's own first candidate, not the guess a settled length tried first: which guess that was
    # depends on the files checked before it, so a split between processes would name another one.
    return Checked("FAILED", algorithm=entry.candidates[0].name)


def find_new(
    names: Iterable[bytes],
    base: bytes,
    manifest_path: bytes | None,
    args: dict[str, Any],
    check: Callable[[], None],
) -> tuple[list[bytes], dict[str, int]]:
    """Regular files under ``base`` that no entry names (the manifest file itself aside)."""
    prefix = base.rstrip(b"/") + b"/"
    known: set[bytes] = set()
    for name in names:
        if name.startswith(b"/"):
            if not name.startswith(prefix):
                continue
            name = name[len(prefix) :]
        normal = os.path.normpath(name)
        if normal != b".." and not normal.startswith(b"../"):
            known.add(normal)
    skipped = SkipCounter()
    options = walk_options(args)
    new = [
        found.relative
        for found in walk_files(base, options, skipped, check)
        if found.relative not in known and found.path != manifest_path
    ]
    new.sort()
    return new, skipped.as_dict()


def classify(manifest: str) -> Literal["uri", "path", "text"]:
    """A single line starting with '/' (or '~') is a path; a sysmcp:// URI is a stored result; else text."""
    stripped = manifest.strip()
    if "\n" in stripped:
        return "text"
    if stripped.startswith("sysmcp://"):
        return "uri"
    if stripped.startswith(("/", "~")):
        return "path"
    return "text"


def to_bytes(text: str) -> bytes:
    """Manifest text as bytes; names that arrived as surrogate escapes get their original bytes back."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


async def handle(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    raw: str = args["manifest"]
    how = classify(raw)
    base_arg: str | None = args.get("base_dir")
    if how == "path":
        path = await ctx.resolve(raw.strip())
        source = Source(display(path), path=os.fsencode(path), name_hint=path.name)
        base_raw = base_arg or str(path.parent)
    else:
        if how == "uri":
            item = ctx.results.get(raw.strip())
            if item is None:
                raise ToolError(f"No stored result {raw.strip()} (results are kept for this session only)")
            source = Source(item.uri, data=to_bytes(item.text), name_hint=item.name)
        else:
            source = Source("(text)", data=to_bytes(raw))
        if not base_arg:
            raise ToolError(
                "base_dir is required when the manifest is given as text or a URI: the absolute directory its "
                "names are relative to"
            )
        base_raw = base_arg
    base_path = await ctx.resolve(
        base_raw, lambda found: require_directory(found, display(found), "base_dir")
    )
    base_shown = display(base_path)
    base = os.fsencode(base_path)
    timeout_s = min(float(args["timeout_s"]), MAX_TIMEOUT_S)

    def describe(meter: Meter, elapsed: float) -> str:
        done = meter.extra.get("bytes", 0)
        if "manifest_bytes" in meter.extra:  # checked in ranges as it is parsed: no count of files first
            read = meter.done or 0
            return (
                f"{int(meter.extra.get('files', 0)):,} files checked, {human_bytes(read)} of the "
                f"{human_bytes(meter.extra['manifest_bytes'])} manifest read"
            )
        return (
            f"{int(meter.extra.get('files', 0)):,} of {int(meter.extra.get('files_total', 0)):,} files, "
            f"{human_bytes(done)} of {human_bytes(meter.extra.get('bytes_total', 0))} at {rate(done, elapsed)}"
        )

    result = await ctx.run_in_worker(
        lambda meter: verify(source, base, args, ctx.paths, meter, HASH_THREADS, timeout_s),
        describe=describe,
    )
    output = render(result, source.shown, base_shown, args, ctx)
    manifest_dir = display(path.parent) if how == "path" else None
    return all_missing_hint(output, base_shown, manifest_dir)


def all_missing_hint(output: ToolOutput, base_shown: str, manifest_dir: str | None) -> ToolOutput:
    """Every entry MISSING is almost always a manifest checked from the wrong directory: say where its
    names were looked for, and where else to look."""
    data = output.structured
    if not data.get("entries") or data.get("missing") != data["entries"]:
        return output
    hint = f"Every entry is MISSING: a manifest's names are relative to base_dir, here {base_shown}."
    if manifest_dir is not None and manifest_dir != base_shown:
        hint += f" The manifest's own directory is {manifest_dir}: try base_dir={manifest_dir}."
    else:
        hint += " Give base_dir= the directory the manifest was made in (where sha256sum or hash_tree ran)."
    return replace(output, text=f"{output.text}\n{hint}")


def render(
    result: Verification, manifest_shown: str, base_shown: str, args: dict[str, Any], ctx: ToolContext
) -> ToolOutput:
    """Counts first, then each non-OK list up to max_listed; the full report as a resource if cut."""
    limit: int = args["max_listed"]
    entries = result.entries
    counts = result.checked.counts()
    algorithms = result.checked.algorithms()
    bad_lines = result.bad_lines
    bad_count = result.bad_count
    if result.listed is None or result.listed_limit != limit:
        result.listed, result.listed_limit = listed(result, limit, counts), limit
    by_status = result.listed
    new = result.new
    all_ok = counts["OK"] == entries and not bad_count and result.stopped is None
    truncated = is_cut(result, counts, limit)

    summary = (
        f"Checked {plural(entries, 'entry')} of {manifest_shown} against {base_shown}: {counts['OK']:,} OK, "
        f"{counts['FAILED']:,} FAILED, {counts['MISSING']:,} MISSING, {counts['UNREADABLE']:,} unreadable"
    )
    if bad_count:
        summary += f"; {bad_count:,} improperly formatted line{'s' if bad_count != 1 else ''}"
    if new is not None:
        summary += f"; {len(new):,} new file{'s' if len(new) != 1 else ''} not in the manifest"
    if counts["NOT_CHECKED"]:
        summary += f"; {counts['NOT_CHECKED']:,} not checked"
    out = []
    if result.stopped is not None:
        out.append(
            f"PARTIAL RESULT: checking stopped early ({result.stopped}); {counts['NOT_CHECKED']:,} of "
            f"{entries:,} entries were not checked. Give a larger timeout_s (at most {MAX_TIMEOUT_S:g}) "
            "or check a part of the manifest."
        )
    out += [
        summary,
        f"({', '.join(f'{n:,} {a}' for a, n in sorted(algorithms.items()))}; {human_bytes(result.bytes_hashed)} "
        f"hashed in {result.seconds:.2f} s)"
        if algorithms
        else f"(nothing hashed; {result.seconds:.2f} s)",
        "Result: ALL OK"
        if all_ok
        else "Result: NOT SETTLED (not every entry was checked)"
        if result.stopped is not None and counts["OK"] + counts["NOT_CHECKED"] == entries and not bad_count
        else "Result: NOT OK (sha256sum -c --strict would fail)",
    ]
    titles: dict[Status, str] = {
        "FAILED": "FAILED (digest differs)",
        "MISSING": "MISSING",
        "UNREADABLE": "UNREADABLE",
    }
    for status, items in by_status.items():
        if not counts[status]:
            continue
        out.append(f"{titles[status]} ({counts[status]:,}):")
        for name, checked in items:
            detail = f": {checked.detail}" if checked.detail else ""
            out.append(f"  {printable(name)}{detail}")
        if counts[status] > len(items):
            out.append(f"  … and {counts[status] - len(items):,} more")
    if bad_lines:
        shown_lines = ", ".join(str(n) for n in bad_lines[:limit])
        more = f" … and {bad_count - limit:,} more" if bad_count > limit else ""
        out.append(f"Improperly formatted lines (line numbers): {shown_lines}{more}")
    if new:
        out.append(f"New files under {base_shown} not in the manifest ({len(new):,}):")
        out += [f"  {printable(name)}" for name in new[:limit]]
        if len(new) > limit:
            out.append(f"  … and {len(new) - limit:,} more")
    if result.walk_skipped:
        out.append("walk skipped: " + skipped_phrase(result.walk_skipped))

    links: tuple[ResourceLink, ...] = ()
    uri: str | None = None
    if truncated:
        if result.report is None and result.report_size > MAX_ITEM:
            link: ResourceLink | str = TooLarge(result.report_size).reason
        else:
            link = ctx.keep(
                "verify-report.txt",
                result.report if result.report is not None else full_report(result),
                description=f"Every entry's status from checking {manifest_shown} against {base_shown}",
            )
        if isinstance(link, str):
            out.append(f"Lists were cut at {limit:,} names; the full report was not kept: {link}.")
        else:
            uri = link.uri
            links = (link,)
            out.append(f"Lists were cut at {limit:,} names; the full report is at {uri} (resources/read).")

    structured = {
        "manifest": manifest_shown,
        "base_dir": base_shown,
        "complete": result.stopped is None,
        "stopped_reason": result.stopped,
        "not_checked": counts["NOT_CHECKED"],
        "all_ok": all_ok,
        "entries": entries,
        "ok": counts["OK"],
        "failed": counts["FAILED"],
        "missing": counts["MISSING"],
        "unreadable": counts["UNREADABLE"],
        "improperly_formatted": bad_count,
        "new": None if new is None else len(new),
        "algorithms": dict(sorted(algorithms.items())),
        "bytes_hashed": result.bytes_hashed,
        "seconds": round(result.seconds, 6),
        "failed_files": [printable(name) for name, _ in by_status["FAILED"]],
        "missing_files": [printable(name) for name, _ in by_status["MISSING"]],
        "unreadable_files": [
            {"path": printable(name), "error": c.detail} for name, c in by_status["UNREADABLE"]
        ],
        "improperly_formatted_lines": bad_lines[:limit],
        "new_files": [printable(name) for name in (new or [])[:limit]],
        "truncated": truncated,
        "report_uri": uri,
        "walk_skipped": result.walk_skipped,
    }
    return ToolOutput("\n".join(out), structured, links=links)


def listed(
    result: Verification, limit: int, counts: Counter[Status]
) -> dict[Status, list[tuple[bytes, Checked]]]:
    """The first ``limit`` names of each non-OK list: read again from the manifest, only as far as needed."""
    by_status: dict[Status, list[tuple[bytes, Checked]]] = {"FAILED": [], "MISSING": [], "UNREADABLE": []}
    wanted = sum(min(limit, counts[status]) for status in by_status)
    if wanted:
        for name, checked in zip(result.names(), result.checked, strict=False):
            items = by_status.get(checked.status)
            if items is not None and len(items) < limit:
                items.append((name, checked))
                wanted -= 1
                if not wanted:
                    break
    return by_status


def is_cut(result: Verification, counts: Counter[Status], limit: int) -> bool:
    """Whether the answer cuts a list at ``limit`` (or leaves entries not checked): then the full report is kept."""
    lists: tuple[Status, ...] = ("FAILED", "MISSING", "UNREADABLE")
    cut = any(counts[s] > limit for s in lists) or result.bad_count > limit or len(result.new or ()) > limit
    return cut or counts["NOT_CHECKED"] > 0  # which ones were not checked: in the full report


def prepare_answer(result: Verification, limit: int) -> None:
    """Read the names the answer shows, and write the full report if a list will be cut, in the worker
    thread: a million names read again would hold the event loop (and every other request) for seconds."""
    counts = result.checked.counts()
    result.listed, result.listed_limit = listed(result, limit, counts), limit
    if is_cut(result, counts, limit):
        result.report, result.report_size = write_report(result, MAX_ITEM)


def full_report(result: Verification) -> str:
    """One line per entry like 'sha256sum -c' prints them, then bad lines and new files."""
    text, _ = write_report(result)
    assert text is not None
    return text


def write_report(result: Verification, most: int | None = None) -> tuple[str | None, int]:
    """``full_report`` and its size in UTF-8 bytes; past ``most`` bytes only the size (the text is
    dropped as soon as it is too big to keep: a million entries' report is 60 MB nobody can read)."""
    chunks: list[str] = []  # joined every few thousand lines: a million small strings would be 70 MB
    lines: list[str] = []
    size = 0
    keeping = True

    def add(line: str) -> None:
        nonlocal size, keeping, chunks, lines
        size += len(line.encode("utf-8", "surrogateescape")) + 1
        if not keeping:
            return
        if most is not None and size > most:
            keeping, chunks, lines = False, [], []
            return
        lines.append(line)
        if len(lines) >= 4096:
            chunks.append("\n".join(lines))
            lines = []

    for name, checked in zip(result.names(), result.checked, strict=True):
        detail = f" ({checked.detail})" if checked.detail else ""
        add(f"{printable(name)}: {checked.status}{detail}")
    for n in result.bad_lines:
        add(f"line {n}: improperly formatted")
    unlisted = result.bad_count - len(result.bad_lines)
    if unlisted:
        add(f"… and {unlisted:,} more improperly formatted lines")
    for name in result.new or ():
        add(f"{printable(name)}: NEW (not in the manifest)")
    if not keeping:
        return None, size
    return "\n".join([*chunks, *lines]) + "\n", size


TOOL = Tool(
    name="verify_checksums",
    title="Verify a checksum manifest",
    description=(
        "Checks files against a checksum manifest (like sha256sum -c / b3sum -c): give a path to SHA256SUMS, "
        "B3SUMS, MD5SUMS … , a sysmcp:// URI from hash_tree, or the manifest text. GNU and BSD (--tag) lines "
        "of md5, sha1, sha256, sha512, blake2b and blake3 are detected per line. Reports each file OK, FAILED, "
        "MISSING or unreadable, counts improperly formatted lines (like --strict), and with report_new lists "
        "files under base_dir the manifest does not mention. Bounded output; the full report is a resource "
        "link when lists are cut."
    ),
    input_schema=INPUT_SCHEMA,
    output_schema=OUTPUT_SCHEMA,
    handler=handle,
    merge=summary_merge(),  # per-host summaries
)
