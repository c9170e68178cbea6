"""Checksums: the hashing engine every hashing tool shares, and the manifest formats admins already use.

Why one engine: ``file_sha256``, ``hash_tree`` and ``verify_checksums`` must agree byte for byte with
``sha256sum``/``b3sum`` and must all stream (one reused buffer, flat memory), stop within one chunk
when cancelled, and never block on a FIFO or device. Doing that once keeps the three honest.

Manifest formats, as coreutils 9 writes and reads them:

- GNU: ``<hex>  <name>`` (``*`` instead of the second space marks "binary", meaningless on Linux).
  A name holding a backslash, newline or carriage return is written escaped (``\\\\``, ``\\n``,
  ``\\r``) and the whole line gets a leading backslash. b3sum escapes only backslash and newline.
- BSD (``--tag``): ``SHA256 (<name>) = <hex>``, same escaping rule.

Reading follows ``sha256sum -c``: lines starting with ``#`` and empty lines are skipped, one trailing
CR is dropped, and anything else that does not parse is counted as improperly formatted.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import sys
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Literal, Protocol, overload

import blake3

from sysmcp import platform
from sysmcp.fs.paths import PATH_MAX
from sysmcp.fs.safeopen import NotRegularFile, Replaced, open_regular_at

#: Hashing threads for many files: hashlib and blake3 release the GIL, so each core can hash (at most 4).
HASH_THREADS = max(1, min(4, os.cpu_count() or 1))
CHUNK = 1 << 20  # 1 MiB: large enough that per-chunk Python overhead vanishes, small enough to cancel fast

Style = Literal["gnu", "bsd"]


class Hasher(Protocol):
    def update(self, data: bytes | memoryview, /) -> object: ...

    def hexdigest(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Algorithm:
    """One digest algorithm as the command-line tools name and print it."""

    name: str  # what the tools' arguments accept: "sha256", "blake2b", "blake2b-256"
    tag: str  # the BSD --tag word: "SHA256", "BLAKE2b", "BLAKE2b-256", "BLAKE3"
    hex_length: int
    factory: Callable[[], Hasher]
    tool: str  # the command that checks a GNU manifest of this algorithm
    escapes_cr: bool = True  # coreutils 9 escapes CR in names; b3sum 1.x does not

    def new(self) -> Hasher:
        return self.factory()


def _blake2b(bits: int) -> Algorithm:
    size = bits // 8
    tag = "BLAKE2b" if bits == 512 else f"BLAKE2b-{bits}"
    name = "blake2b" if bits == 512 else f"blake2b-{bits}"
    return Algorithm(
        name, tag, size * 2, lambda: hashlib.blake2b(digest_size=size), "b2sum" if bits == 512 else "b2sum -l"
    )


ALGORITHMS: dict[str, Algorithm] = {
    "md5": Algorithm("md5", "MD5", 32, hashlib.md5, "md5sum"),
    "sha1": Algorithm("sha1", "SHA1", 40, hashlib.sha1, "sha1sum"),
    "sha256": Algorithm("sha256", "SHA256", 64, hashlib.sha256, "sha256sum"),
    "sha512": Algorithm("sha512", "SHA512", 128, hashlib.sha512, "sha512sum"),
    "blake2b": _blake2b(512),
    "blake3": Algorithm("blake3", "BLAKE3", 64, blake3.blake3, "b3sum", escapes_cr=False),
}

#: The algorithms a caller may choose by name, in the order the schemas list them.
ALGORITHM_NAMES: tuple[str, ...] = tuple(ALGORITHMS)

#: Tags other tools write for the same algorithms (OpenSSL 3 ``dgst`` says SHA2-256).
_TAG_ALIASES = {"SHA2-256": "sha256", "SHA2-512": "sha512"}

#: For an untagged line, the digest length says which algorithms it can be; the first is the guess.
_BY_LENGTH: dict[int, tuple[str, ...]] = {
    32: ("md5",),
    40: ("sha1",),
    64: ("sha256", "blake3"),
    128: ("sha512", "blake2b"),
}


BLAKE2B_256 = _blake2b(256)

#: What find_duplicates compares contents by: the fastest of them (several times BLAKE2b), and 256 bits
#: leave no room for accidental equality. The threaded one spreads a large file's chunks over the cores.
BLAKE3 = ALGORITHMS["blake3"]

# Set in every forked child (os.register_at_fork), whoever forks: a thread pool never crosses a fork.
_forked = False


def _mark_forked() -> None:
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_mark_forked)


def threaded_blake3() -> Hasher:
    """A BLAKE3 hasher on every core in the process that may own a thread pool, one thread in a fork.

    Why: ``max_threads=AUTO`` starts rayon's global pool on first use; a child forked after that
    inherits the pool without its threads and waits forever in ``update``. One thread never touches
    rayon, and a forked worker is already one of several processes sharing the cores. The one place
    that decides how many threads blake3 may use: every threaded hash goes through it.
    """
    return blake3.blake3(max_threads=1 if _forked else blake3.blake3.AUTO)


BLAKE3_THREADED = Algorithm("blake3", "BLAKE3", 64, threaded_blake3, "b3sum", escapes_cr=False)


def algorithm_for_tag(tag: str) -> Algorithm | None:
    """The algorithm a BSD tag names (``SHA256``, ``BLAKE2b-256``, ``SHA2-256``), or None."""
    for algorithm in ALGORITHMS.values():
        if algorithm.tag == tag:
            return algorithm
    if tag in _TAG_ALIASES:
        return ALGORITHMS[_TAG_ALIASES[tag]]
    if tag.startswith("BLAKE2b-"):
        bits = tag[len("BLAKE2b-") :]
        if bits.isdigit() and 0 < int(bits) <= 512 and int(bits) % 8 == 0:
            return _blake2b(int(bits))
    return None


def blake2b_of_length(hex_length: int) -> Algorithm | None:
    """b2sum -l N writes N/4 hex digits untagged; any multiple of 8 bits up to 512 is valid."""
    if 2 <= hex_length <= 128 and hex_length % 2 == 0:
        return _blake2b(hex_length * 4)
    return None


# -- hashing -----------------------------------------------------------------------------------


class Stopped(Exception):
    """Raised inside a hashing loop when its caller asked it to stop (the request was cancelled)."""


@dataclass(frozen=True, slots=True)
class Digest:
    """What one pass over a file produced."""

    hexdigests: dict[str, str]  # algorithm name → lowercase hex
    size: int  # bytes actually read
    changed: str | None  # why the digest is of no single version of the file, if it is not


GROWTH_ALLOWANCE = 64 << 20  # bytes a file may grow by while hashed, at least (see hash_fd)


class KeptGrowing(OSError):
    """The file produced far more than its size when opened: a live log, or a kernel pseudo-file such as
    /proc/self/pagemap that reports size 0 and yields hundreds of GiB. Hashing it would never end."""

    def __init__(self, read: int, size_at_open: int) -> None:
        super().__init__(
            errno.EFBIG,
            f"it kept growing while being read (over {read:,} bytes read, {size_at_open:,} when opened); "
            "hash it once nothing writes to it (kernel pseudo-files like /proc/*/pagemap cannot be hashed)",
        )


def hash_fd(
    fd: int,
    algorithms: Sequence[Algorithm],
    buffer: bytearray,
    on_chunk: Callable[[int], None] | None = None,
    *,
    opened: os.stat_result | None = None,
) -> Digest:
    """Stream an open regular file through every algorithm at once, reading into ``buffer``.

    ``on_chunk(bytes_so_far)`` runs after each chunk: the caller reports progress and raises to
    stop there. Size and mtime are compared before and after, so a file written while we read is
    reported instead of yielding a digest of no real version. ``opened`` is the descriptor's
    ``fstat`` if the caller has it (one system call fewer per file counts for tiny files). Reading
    stops with ``KeptGrowing`` past twice the size at open, or that size plus ``GROWTH_ALLOWANCE``.
    """
    before = opened if opened is not None else os.fstat(fd)
    expected = before.st_size
    most = expected + max(expected, GROWTH_ALLOWANCE)
    hashers = [algorithm.new() for algorithm in algorithms]
    updates = [hasher.update for hasher in hashers]
    view = memoryview(buffer)
    room = len(buffer)
    size = 0
    if expected > room:
        platform.advise_sequential(fd)
    readv = os.readv
    targets = [buffer]
    while count := readv(fd, targets):
        chunk = view[:count] if count < room else view
        for update in updates:
            update(chunk)
        size += count
        if size > most:
            raise KeptGrowing(size, expected)
        if on_chunk is not None:
            on_chunk(size)
        if size == expected and count < room:
            break  # a short read that ends at the size: EOF, without one more read (growth shows below)
    after = os.fstat(fd)
    return Digest(
        {algorithm.name: hasher.hexdigest() for algorithm, hasher in zip(algorithms, hashers, strict=True)},
        size,
        describe_change(before, after, size),
    )


#: Constructors that take the data at once: one call per small file instead of three.
_TAKES_DATA: frozenset[Callable[..., Hasher]] = frozenset(
    {hashlib.md5, hashlib.sha1, hashlib.sha256, hashlib.sha512, blake3.blake3}
)


def one_shot(algorithm: Algorithm) -> Callable[[memoryview], Hasher]:
    """``f(data)``: a hasher that has taken ``data``, with as few Python calls as the algorithm allows."""
    factory = algorithm.factory
    if factory in _TAKES_DATA:
        return factory  # type: ignore[return-value]

    def hashed(data: memoryview) -> Hasher:
        hasher = factory()
        hasher.update(data)
        return hasher

    return hashed


def hash_once(fd: int, algorithms: Sequence[Algorithm], buffer: bytearray, opened: os.stat_result) -> Digest:
    """``hash_fd`` for a file smaller than ``buffer``: one read, no chunk loop, no callback.

    The size read must be the size at open, and size and mtime must not have moved after it;
    otherwise the digest says what changed, as ``hash_fd``'s does. Empty and kernel-generated files
    (size 0) go to ``hash_fd``, which reads them to the end.
    """
    size = opened.st_size
    if not 0 < size < len(buffer):
        return hash_fd(fd, algorithms, buffer, opened=opened)
    count = os.readv(fd, [buffer])
    data = memoryview(buffer)[:count]
    hexdigests = {}
    for algorithm in algorithms:
        hasher = algorithm.new()
        hasher.update(data)
        hexdigests[algorithm.name] = hasher.hexdigest()
    return Digest(hexdigests, count, describe_change(opened, os.fstat(fd), count))


def describe_change(before: os.stat_result, after: os.stat_result, read: int) -> str | None:
    """Why a file read between these two looks yields the digest of no single version of it, or None."""
    # Size 0 before and after with bytes read is a kernel-generated file (procfs, sysfs): not a change.
    pseudo = before.st_size == after.st_size == 0
    if before.st_size != after.st_size or (read != after.st_size and not pseudo):
        return (
            f"its size changed while it was being hashed ({before.st_size:,} bytes at the start, "
            f"{after.st_size:,} at the end, {read:,} read)"
        )
    if before.st_mtime_ns != after.st_mtime_ns:
        return "it was modified while it was being hashed (its modification time changed)"
    return None


# Files are opened with ``safeopen.open_regular_at``: look, open (O_NONBLOCK, never a device),
# then check it is the file looked at.


def explain(exc: OSError) -> str:
    """A short reason for a file that could not be hashed, for people and models."""
    if isinstance(exc, (NotRegularFile, Replaced)):
        return str(exc.strerror)
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


# -- many files on a small thread pool ---------------------------------------------------------


@dataclass(slots=True)
class Job:
    """One file to hash: where it is, what to compute, and the ``stat`` it must still match."""

    key: int
    path: bytes
    algorithms: Sequence[Algorithm]
    looked: os.stat_result
    follow_symlinks: bool = False


@dataclass(slots=True)
class Outcome:
    job: Job
    digest: Digest | None = None
    error: str | None = None  # why it could not be hashed
    missing: bool = False  # it vanished between the look and the open


@dataclass
class PoolCounters:
    """Bytes and files done, summed over per-thread slots so no thread ever waits on a lock."""

    slots: list[list[int]] = field(default_factory=list)

    def slot(self) -> list[int]:
        mine = [0, 0]
        self.slots.append(mine)  # list.append is atomic; each thread then writes only its own slot
        return mine

    @property
    def bytes(self) -> int:
        return sum(s[0] for s in self.slots)

    @property
    def files(self) -> int:
        return sum(s[1] for s in self.slots)


BATCH_FILES = (
    64  # small files go to a thread in batches: a future per tiny file would cost more than the hash
)
BATCH_BYTES = 4 << 20
POLL = 0.05  # seconds between cancellation checks while the threads work


def hash_many(
    jobs: Iterable[Job],
    *,
    checkpoint: Callable[[], None],
    counters: PoolCounters,
    threads: int = 2,
) -> Iterator[Outcome]:
    """Hash many files on ``threads`` threads, yielding outcomes as batches finish.

    The caller's thread walks (``jobs`` may be a lazy walk) and calls ``checkpoint`` between jobs
    and every ``POLL`` seconds while waiting; when it raises, the hashing threads stop within one
    chunk and the exception propagates. hashlib and blake3 release the GIL on large updates, so
    the threads really do use the cores.
    """
    stop = threading.Event()
    local = threading.local()

    def run(batch: list[Job]) -> list[Outcome]:
        state = getattr(local, "state", None)
        if state is None:
            state = local.state = (bytearray(CHUNK), counters.slot())
        buffer, slot = state
        return [_hash_job(job, buffer, slot, stop) for job in batch]

    pending: set[Future[list[Outcome]]] = set()
    batch: list[Job] = []
    batch_bytes = 0
    limit = threads * 3
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sysmcp-hash") as pool:
        try:
            for job in jobs:
                checkpoint()
                batch.append(job)
                batch_bytes += job.looked.st_size
                if len(batch) >= BATCH_FILES or batch_bytes >= BATCH_BYTES:
                    pending.add(pool.submit(run, batch))
                    batch, batch_bytes = [], 0
                    while len(pending) >= limit:
                        yield from _collect(pending, checkpoint)
            if batch:
                pending.add(pool.submit(run, batch))
            while pending:
                yield from _collect(pending, checkpoint)
        except BaseException:
            stop.set()
            for future in pending:
                future.cancel()
            raise


def _collect(pending: set[Future[list[Outcome]]], checkpoint: Callable[[], None]) -> Iterator[Outcome]:
    done, _ = wait(pending, timeout=POLL, return_when=FIRST_COMPLETED)
    checkpoint()
    for future in done:
        pending.discard(future)
        yield from future.result()


def _hash_job(job: Job, buffer: bytearray, slot: list[int], stop: threading.Event) -> Outcome:
    if stop.is_set():
        raise Stopped()
    try:
        fd, opened = open_regular_at(job.path, follow_symlinks=job.follow_symlinks, expect=job.looked)
    except FileNotFoundError:
        return Outcome(job, error="no such file", missing=True)
    except OSError as exc:
        return Outcome(job, error=explain(exc))
    start = slot[0]
    on_chunk: Callable[[int], None] | None = None
    if opened.st_size >= len(buffer):  # a file of one chunk needs no report or stop check inside

        def on_chunk(done: int) -> None:
            slot[0] = start + done
            if stop.is_set():
                raise Stopped()

    try:
        digest = hash_fd(fd, job.algorithms, buffer, on_chunk, opened=opened)
    except OSError as exc:
        return Outcome(job, error=f"read error: {explain(exc)}")
    finally:
        os.close(fd)
    slot[0] = start + digest.size
    slot[1] += 1
    return Outcome(job, digest=digest)


# -- manifests: writing ------------------------------------------------------------------------


def _escape(name: bytes, escape_cr: bool) -> tuple[bytes, bool]:
    if b"\\" not in name and b"\n" not in name and not (escape_cr and b"\r" in name):
        return name, False
    escaped = name.replace(b"\\", b"\\\\").replace(b"\n", b"\\n")
    if escape_cr:
        escaped = escaped.replace(b"\r", b"\\r")
    return escaped, True


def format_line(name: bytes, hexdigest: str, algorithm: Algorithm, style: Style = "gnu") -> bytes:
    """One manifest line, newline included, exactly as the algorithm's own tool would print it."""
    shown, escaped = _escape(name, algorithm.escapes_cr or style == "bsd")  # b3sum has no --tag to follow
    prefix = b"\\" if escaped else b""
    if style == "bsd":
        return prefix + algorithm.tag.encode() + b" (" + shown + b") = " + hexdigest.encode() + b"\n"
    return prefix + hexdigest.encode() + b"  " + shown + b"\n"


# -- manifests: reading ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One parsed manifest line: the name as bytes, the expected digest and what it may be."""

    line: int
    name: bytes
    digest: str  # lowercase hex
    candidates: tuple[Algorithm, ...]  # one when tagged or forced; several when the length is ambiguous


MAX_BAD_LINES_KEPT = 10_000  # line numbers of improperly formatted lines kept (all are counted)
MAX_BAD_LINES = 100_000  # beyond this many improperly formatted lines the input is no manifest: stop


class Entries(Sequence[Entry]):
    """Parsed entries kept compactly: names in one buffer, raw digests in another, numbers in arrays.

    Why: an ``Entry`` object per line costs about 290 bytes (57 MB for 200,000 lines), and forked
    checking processes copy every page of them that reference counting or the collector touches.
    Here an entry costs its name plus about 50 bytes in a handful of flat buffers no process writes
    to after parsing; ``entries[i]`` builds the ``Entry`` on demand.
    """

    __slots__ = (
        "_digest_ends",
        "_digests",
        "_kind_of",
        "_kinds",
        "_kinds_seen",
        "_lines",
        "_name_ends",
        "_names",
    )

    def __init__(self) -> None:
        self._names = bytearray()
        self._name_ends = array("Q")
        self._digests = bytearray()  # raw digest bytes (hex decoded), so every digest is stored lowercase
        self._digest_ends = array("Q")
        self._lines = array("Q")
        self._kinds = array("H")  # index into _kinds_seen: the candidate algorithms of each entry
        self._kinds_seen: list[tuple[Algorithm, ...]] = []
        self._kind_of: dict[tuple[tuple[str, int], ...], int] = {}

    def add(self, line: int, name: bytes, digest: str, candidates: tuple[Algorithm, ...]) -> None:
        key = tuple((a.name, a.hex_length) for a in candidates)
        kind = self._kind_of.get(key)
        if kind is None:
            kind = self._kind_of[key] = len(self._kinds_seen)
            self._kinds_seen.append(candidates)
        self._names += name
        self._name_ends.append(len(self._names))
        self._digests += bytes.fromhex(digest)
        self._digest_ends.append(len(self._digests))
        self._lines.append(line)
        self._kinds.append(kind)

    def __len__(self) -> int:
        return len(self._lines)

    def _at(self, index: int) -> Entry:
        name_start = self._name_ends[index - 1] if index else 0
        digest_start = self._digest_ends[index - 1] if index else 0
        return Entry(
            self._lines[index],
            bytes(self._names[name_start : self._name_ends[index]]),
            self._digests[digest_start : self._digest_ends[index]].hex(),
            self._kinds_seen[self._kinds[index]],
        )

    @overload
    def __getitem__(self, index: int) -> Entry: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Entry]: ...

    def __getitem__(self, index: int | slice) -> Entry | Sequence[Entry]:
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("entry index out of range")
        return self._at(index)

    def __iter__(self) -> Iterator[Entry]:
        for index in range(len(self)):
            yield self._at(index)


@dataclass
class Manifest:
    entries: Entries = field(default_factory=Entries)
    bad_lines: list[int] = field(default_factory=list)  # line numbers, 1-based: the first MAX_BAD_LINES_KEPT
    bad_count: int = 0  # improperly formatted lines in all
    gave_up: bool = False  # more than MAX_BAD_LINES were improperly formatted: parsing stopped there


Parsed = tuple[bytes, str, tuple[Algorithm, ...]]

_HEX = frozenset(b"0123456789abcdefABCDEF")
_PLAIN_GNU = re.compile(rb"([0-9a-fA-F]+) [ *](.+)", re.DOTALL)
#: Plain GNU lines, all of a range at once (``LineParser.plain_block``): lowercase hex, one space, a space
#: or '*', and a name with no CR or NUL, short enough that its UTF-8 bytes stay under PATH_MAX, not
#: ending in '/': its directory part (up to the last '/') and its last component apart.
_PLAIN_LINES = re.compile(
    rf"^([0-9a-f]+) [ *](?=[^\n\r\0]{{1,{(PATH_MAX - 1) // 4}}}\n)([^\n]*/)?([^\n/]+)\n", re.MULTILINE
)
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()  # os.fsencode's
_TAG_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_BROKEN: Parsed = (b"", "", ())  # a known tag on a line that does not parse: improperly formatted


def hint_order(manifest_name: str | None) -> tuple[str, ...]:
    """Preferred algorithms for ambiguous digest lengths, from a manifest's file name (B3SUMS, *.sha512)."""
    name = (manifest_name or "").lower()
    preferred: list[str] = []
    for needle, algorithm in (
        ("b3", "blake3"),
        ("blake3", "blake3"),
        ("b2", "blake2b"),
        ("blake2", "blake2b"),
        ("sha512", "sha512"),
        ("sha256", "sha256"),
    ):
        if needle in name and algorithm not in preferred:
            preferred.append(algorithm)
    return tuple(preferred)


def parse_manifest(
    data: bytes,
    *,
    forced: Algorithm | None = None,
    prefer: Sequence[str] = (),
    check: Callable[[], None] | None = None,
) -> Manifest:
    """Parse GNU and BSD lines of any supported algorithm, line by line, as ``sha256sum -c`` does.

    ``forced``: only that algorithm (other tags and lengths are improperly formatted, like running
    ``sha256sum -c`` on an MD5 list; a forced blake2b takes its length from the line, like b2sum).
    ``prefer``: order of the candidates for lengths that several algorithms share (64, 128).
    ``check``: called every few thousand lines (a cancellation checkpoint).
    """
    manifest = Manifest()
    parse = LineParser(forced, prefer).parse
    # Line by line from a stream, not ``split``: 64 MiB of short junk lines would be millions of objects.
    for number, raw_line in enumerate(io.BytesIO(data), 1):
        line = raw_line[:-1] if raw_line.endswith(b"\n") else raw_line
        if check is not None and not number % 4096:
            check()
        if line.startswith(b"#"):
            continue
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            continue
        parsed = parse(line)
        if parsed is None:
            manifest.bad_count += 1
            if len(manifest.bad_lines) < MAX_BAD_LINES_KEPT:
                manifest.bad_lines.append(number)
            if manifest.bad_count > MAX_BAD_LINES:
                manifest.gave_up = True
                break
            continue
        name, digest, candidates = parsed
        manifest.entries.add(number, name, digest, candidates)
    return manifest


class LineParser:
    """One manifest line at a time, as ``parse_manifest`` reads them (comments, empty lines and the
    trailing CR already dropped by the caller).

    Why a class: the one piece of state a line leaves for the next is ``reversed_style`` (BSD
    ``md5 -r`` lines, "<hex> <name>", or GNU ones), fixed by the first line that tells. A parser
    started on a later part of the manifest is given it (``decide_style``), so parts parsed apart
    read every line exactly as one pass from the start would.
    """

    __slots__ = ("_by_length", "_plain", "forced", "prefer", "reversed_style")

    def __init__(
        self, forced: Algorithm | None = None, prefer: Sequence[str] = (), reversed_style: bool | None = None
    ) -> None:
        self.forced = forced
        self.prefer = prefer
        self.reversed_style = reversed_style
        self._by_length: dict[
            int, tuple[Algorithm, ...]
        ] = {}  # candidates per digest length, worked out once
        self._plain = _PLAIN_GNU.fullmatch

    def candidates(self, length: int) -> tuple[Algorithm, ...]:
        """The algorithms a plain line's digest of ``length`` hex digits may be (worked out once)."""
        candidates = self._by_length.get(length)
        if candidates is None:
            candidates = self._by_length[length] = _candidates(length, self.forced, self.prefer)
        return candidates

    def plain_block(self, block: bytes) -> list[tuple[str, str, str]] | None:
        """Every line of ``block`` (whole lines, each ending in a newline) as ``(hex digest, directory
        part, last component)`` in one regular-expression pass, when each is a plain '<hex>  <name>'
        line that ``parse`` would read the same way; else None, and the block is parsed line by line.

        Why: for the common manifest the per-line Python work (split, comment and CR checks, the
        parse call) is a large part of the cost per entry. Only a block whose every line matches is
        taken (the count of matches equals the count of newlines), so comments, empty lines, CRs,
        tagged, escaped and improperly formatted lines all keep their one way through ``parse``.
        The name is the directory part (up to and with its last '/', or '') and the last component
        together, as ``str`` the way ``os.fsdecode`` gives it (``os.fsencode`` restores the bytes);
        digests are lowercase, of a length some candidate algorithm has.
        """
        if self.reversed_style is True or not block.endswith(b"\n"):
            return None
        if _FS_ENCODING != "utf-8" or _FS_ERRORS != "surrogateescape":
            return None  # the name bound in _PLAIN_LINES counts on at most 4 bytes a character
        text = block.decode(_FS_ENCODING, _FS_ERRORS)
        found: list[tuple[str, str, str]] = _PLAIN_LINES.findall(text)
        if len(found) != text.count("\n"):
            return None
        if any(not self.candidates(length) for length in {len(line[0]) for line in found}):
            return None
        if found:
            self.reversed_style = False  # as parse leaves it after a plain line
        return found

    def parse(self, line: bytes) -> Parsed | None:
        """The line's name, hex digest and candidate algorithms, or None if improperly formatted."""
        # The common line, '<hex>  <name>' with nothing to unescape, in one match (a tag is never all hex).
        simple = self._plain(line) if self.reversed_style is not True else None
        parsed: Parsed | None
        if simple is not None:
            digest_bytes = simple.group(1)
            candidates = self.candidates(len(digest_bytes))
            if candidates:
                parsed = (simple.group(2), digest_bytes.decode("ascii"), candidates)
                self.reversed_style = False
            else:
                parsed = None
        else:
            parsed = _parse_tagged(line, self.forced)
            if parsed is None:
                parsed, self.reversed_style = _parse_gnu(line, self.forced, self.prefer, self.reversed_style)
        # A name of PATH_MAX bytes or more can be no file's: improperly formatted too.
        if parsed is None or not parsed[0] or b"\0" in parsed[0] or len(parsed[0]) >= PATH_MAX:
            return None
        return parsed


#: A line that may fix ``reversed_style``: a hex word first (tagged lines start with a word that is not).
_MAY_DECIDE = re.compile(rb"^[ \t]*\\?[0-9a-fA-F]+[ \t]", re.MULTILINE)


def decide_style(
    blocks: Iterable[bytes], forced: Algorithm | None = None, prefer: Sequence[str] = ()
) -> bool | None:
    """The ``reversed_style`` one pass from the start settles, from the manifest's whole lines in order.

    Only a line starting with a hex word can settle it, so the search for those runs in C and a long
    BSD-tagged manifest (which never settles it) costs one regular-expression scan.
    """
    for block in blocks:
        for found in _MAY_DECIDE.finditer(block):
            end = block.find(b"\n", found.start())
            line = block[found.start() : end if end >= 0 else len(block)]
            if line.endswith(b"\r"):
                line = line[:-1]
            parser = LineParser(forced, prefer)
            parser.parse(line)
            if parser.reversed_style is not None:
                return parser.reversed_style
    return None


def _leading(line: bytes) -> tuple[int, bool]:
    i = 0
    while i < len(line) and line[i] in b" \t":
        i += 1
    if line[i : i + 1] == b"\\":
        return i + 1, True
    return i, False


def _parse_tagged(line: bytes, forced: Algorithm | None) -> Parsed | None:
    """``TAG (name) = hex`` (also OpenSSL's ``TAG(name)= hex``); None if the line is not tagged."""
    start, escaped = _leading(line)
    end = start
    while end < len(line) and line[end] in _TAG_BYTES:
        end += 1
    word = line[start:end].decode("ascii", "replace")
    if not word or not word[0].isalpha() or all(c in "0123456789abcdefABCDEF" for c in word):
        return None
    algorithm = algorithm_for_tag(word)
    if algorithm is None:
        return None
    rest = line[end:]
    if rest.startswith(b" "):
        rest = rest[1:]
    close = rest.rfind(b")")
    if not rest.startswith(b"(") or close < 1:
        return _BROKEN
    name = rest[1:close]
    after = rest[close + 1 :].lstrip(b" \t")
    if not after.startswith(b"="):
        return _BROKEN
    digest = after[1:].lstrip(b" \t")
    if escaped:
        unescaped = _unescape(name)
        if unescaped is None:
            return _BROKEN
        name = unescaped
    if forced is not None and forced.name.split("-")[0] != algorithm.name.split("-")[0]:
        return _BROKEN
    if len(digest) != algorithm.hex_length or not _HEX.issuperset(digest):
        return _BROKEN
    return name, digest.decode("ascii"), (algorithm,)


def _parse_gnu(
    line: bytes, forced: Algorithm | None, prefer: Sequence[str], reversed_style: bool | None
) -> tuple[Parsed | None, bool | None]:
    i, escaped = _leading(line)
    end = i
    while end < len(line) and line[end] not in b" \t":
        end += 1
    digest = line[i:end]
    if end >= len(line) or not digest or not _HEX.issuperset(digest):
        return None, reversed_style
    candidates = _candidates(len(digest), forced, prefer)
    if not candidates:
        return None, reversed_style
    i = end + 1  # the one whitespace after the digest
    if len(line) - i == 1 or line[i : i + 1] not in (b" ", b"*"):
        if reversed_style is False:
            return None, reversed_style  # GNU refuses to mix the two styles in one file
        reversed_style = True
    elif reversed_style is not True:
        reversed_style = False
        i += 1
    name = line[i:]
    if escaped:
        unescaped = _unescape(name)
        if unescaped is None:
            return None, reversed_style
        name = unescaped
    return (name, digest.decode("ascii"), candidates), reversed_style


def _candidates(length: int, forced: Algorithm | None, prefer: Sequence[str]) -> tuple[Algorithm, ...]:
    if forced is not None:
        if forced.name.startswith("blake2b"):
            blake = blake2b_of_length(length)
            return (blake,) if blake is not None else ()
        return (forced,) if forced.hex_length == length else ()
    names = _BY_LENGTH.get(length, ())
    ordered = [n for n in prefer if n in names] + [n for n in names if n not in prefer]
    return tuple(ALGORITHMS[n] for n in ordered)


def _unescape(name: bytes) -> bytes | None:
    """Undo GNU's escaping (``\\\\``, ``\\n``, ``\\r``); None for any other escape, as GNU refuses it."""
    out = bytearray()
    i = 0
    while i < len(name):
        byte = name[i]
        if byte == 0x5C:  # backslash
            if i + 1 >= len(name):
                return None
            following = name[i + 1]
            if following == ord("n"):
                out += b"\n"
            elif following == ord("r"):
                out += b"\r"
            elif following == 0x5C:
                out += b"\\"
            else:
                return None
            i += 2
        else:
            out.append(byte)
            i += 1
    return bytes(out)


# -- small shared pieces for the tools ---------------------------------------------------------

#: What admins call a manifest of each algorithm (Debian, Ubuntu, Arch and b3sum conventions).
MANIFEST_NAMES = {
    "md5": "MD5SUMS",
    "sha1": "SHA1SUMS",
    "sha256": "SHA256SUMS",
    "sha512": "SHA512SUMS",
    "blake2b": "B2SUMS",
    "blake3": "B3SUMS",
}
