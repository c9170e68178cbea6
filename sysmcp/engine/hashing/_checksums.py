"""Checksums: the hashing engine every hashing tool shares, and the manifest formats admins already use.

Why one engine: ``file_sha256``, ``hash_tree`` and ``verify_checksums`` must agree byte for byte with
``sha256sum``/``b3sum`` and must all stream (one reused buffer, flat memory), stop within one chunk
when cancelled, and never block on a FIFO or device. Doing that once keeps the three honest.

Manifest formats, as coreutils 9 writes and reads them:

- GNU: ``<hex>  <name>`` (``*`` instead of the second space marks "binary", meaningless on Linux).
  A name holding a backslash, newline or carriage return is written escaped (``\\\\``, ``\\n``,
  ``\\r``) and the whole line gets a leading backslash. b3sum escapes only backslash and newline.
- BSD (``--tag``): ``SHA256 (<name>) = <hex>``, same escaping rule.
"""

from __future__ import annotations

import errno
import hashlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar

import blake3

from sysmcp import platform
from sysmcp.engine.calls import WAIT_S, StopFlag
from sysmcp.engine.opens import FileSwap, NotRegularFile
from sysmcp.engine.parallel import forked
from sysmcp.engine.walk import out_of_descriptors

#: Hashing threads for many files: hashlib and blake3 release the GIL, so each core can hash (at most 4).
HASH_THREADS = max(1, min(4, os.cpu_count() or 1))
CHUNK = 1 << 20  # 1 MiB: large enough that per-chunk Python overhead vanishes, small enough to cancel fast
#: How a file is opened relative to its directory's descriptor: never following a symlink, never
#: blocking (a FIFO swapped in), never becoming a controlling terminal.
OPEN_AT = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
#: How a name's ``str`` becomes a manifest's bytes and back, as ``os.fsencode`` and ``os.fsdecode`` do:
#: named here so a whole block of names is encoded or decoded in one call.
FS_ENCODING, FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()

Style = Literal["gnu", "bsd"]
T = TypeVar("T")
R = TypeVar("R")


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

#: The algorithms by their BSD tags, and the tags other tools write for them (OpenSSL 3 ``dgst`` says SHA2-256).
_BY_TAG = {algorithm.tag: algorithm for algorithm in ALGORITHMS.values()}
_BY_TAG.update({"SHA2-256": ALGORITHMS["sha256"], "SHA2-512": ALGORITHMS["sha512"]})

#: For an untagged line, the digest length says which algorithms it can be; the first (in
#: ``ALGORITHMS`` order: sha256 before blake3, sha512 before blake2b) is the guess.
_BY_LENGTH: dict[int, tuple[str, ...]] = {}
for _algorithm in ALGORITHMS.values():
    _BY_LENGTH[_algorithm.hex_length] = (*_BY_LENGTH.get(_algorithm.hex_length, ()), _algorithm.name)


#: What find_duplicates compares contents by: the fastest of them (several times BLAKE2b), and 256 bits
#: leave no room for accidental equality. The threaded one spreads a large file's chunks over the cores.
BLAKE3 = ALGORITHMS["blake3"]


def threaded_blake3() -> Hasher:
    """A BLAKE3 hasher on every core in the process that may own a thread pool, one thread in a fork.

    Why: ``max_threads=AUTO`` starts rayon's global pool on first use; a child forked after that
    inherits the pool without its threads and waits forever in ``update``. One thread never touches
    rayon, and a forked worker is already one of several processes sharing the cores. Every threaded
    hash goes through here: the one place that decides it.
    """
    return blake3.blake3(max_threads=1 if forked() else blake3.blake3.AUTO)


BLAKE3_THREADED = Algorithm("blake3", "BLAKE3", 64, threaded_blake3, "b3sum", escapes_cr=False)


def algorithm_for_tag(tag: str) -> Algorithm | None:
    """The algorithm a BSD tag names (``SHA256``, ``BLAKE2b-256``, ``SHA2-256``), or None."""
    if tag in _BY_TAG:
        return _BY_TAG[tag]
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
            f"it kept growing while being read (over {read:,} bytes read, {size_at_open:,} when opened)",
        )


def hash_fd(
    fd: int,
    algorithms: Sequence[Algorithm],
    buffer: bytearray,
    on_chunk: Callable[[int], None] | None = None,
    *,
    opened: os.stat_result | None = None,
    allowance: int = GROWTH_ALLOWANCE,
) -> Digest:
    """Stream an open regular file through every algorithm at once, reading into ``buffer``.

    ``on_chunk(bytes_so_far)`` runs after each chunk (and may raise to stop there). Size and mtime
    are compared before and after, so a file written while we read is reported instead of yielding
    a digest of no real version. ``opened``: the descriptor's ``fstat``, if the caller has it (one
    system call fewer per file counts for tiny files). Reading stops with ``KeptGrowing`` past twice
    the size at open, or that size plus ``allowance``.
    """
    before = opened if opened is not None else os.fstat(fd)
    expected = before.st_size
    most = expected + max(expected, allowance)
    hashers = [algorithm.factory() for algorithm in algorithms]
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


def describe_change(before: os.stat_result, after: os.stat_result, read: int) -> str | None:
    """Why a file read between these two looks yields the digest of no single version of it, or None."""
    # A kernel-generated file (procfs, sysfs) has no blocks and a size that is not its content: 0, or
    # sysfs's 4,096 for a few bytes. Its size and mtime kept while read, what it gave is no change.
    pseudo = after.st_blocks == 0 and (after.st_size == 0 or read < after.st_size)
    if before.st_size != after.st_size or (read != after.st_size and not pseudo):
        return (
            f"its size changed while it was being hashed ({before.st_size:,} bytes at the start, "
            f"{after.st_size:,} at the end, {read:,} read)"
        )
    if before.st_mtime_ns != after.st_mtime_ns:
        return "it was modified while it was being hashed (its modification time changed)"
    return None


#: Why a name no file can have (``paths.too_long``, or the kernel's ENAMETOOLONG) was not hashed.
NAME_TOO_LONG = "name too long for this system"


def explain(exc: OSError) -> str:
    """A short reason for a file that could not be hashed, for people and models."""
    if isinstance(exc, (NotRegularFile, FileSwap)):
        return str(exc.strerror)
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno == errno.ENAMETOOLONG:
        return NAME_TOO_LONG
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno in (errno.EMFILE, errno.ENFILE) and not out_of_descriptors(exc):  # a FUSE daemon's own limit
        return f"the filesystem refused it: {exc.strerror} (its own limit, not this process's)"
    return exc.strerror or str(exc)


# -- many files on a small thread pool ---------------------------------------------------------


@dataclass
class PoolCounters:
    """Bytes and files done, summed over per-thread slots so no thread ever waits on a lock."""

    slots: list[list[int]] = field(default_factory=list)

    def slot(self) -> list[int]:
        mine = [0, 0, 0]  # bytes, files, bytes before the file under way
        self.slots.append(mine)  # list.append is atomic; each thread then writes only its own slot
        return mine

    @property
    def bytes(self) -> int:
        return sum(s[0] for s in self.slots)

    @property
    def files(self) -> int:
        return sum(s[1] for s in self.slots)


#: Small files go to a thread in batches: a future per tiny file would cost more than the hash.
BATCH_FILES = 64
BATCH_BYTES = 4 << 20


def hash_many(
    items: Iterable[T],
    work: Callable[[T, bytearray, Callable[[int], None]], tuple[R, int]],
    size: Callable[[T], int],
    *,
    cancel: Callable[[], None],
    counters: PoolCounters,
    threads: int = 2,
) -> Iterator[R]:
    """``work(item, buffer, on_chunk) -> (result, bytes read)`` for every item on ``threads`` threads
    (each with its own ``CHUNK`` buffer), yielding results as batches finish.

    The caller's thread iterates ``items`` (``size`` says an item's bytes, to batch by) and calls
    ``cancel`` between items and every ``WAIT_S`` seconds while waiting; when it raises, the hashing
    threads stop within one chunk and the exception propagates. (hashlib and blake3 release the GIL on
    large updates: the threads really use the cores.)
    """
    stop = StopFlag()
    local = threading.local()

    def start() -> None:
        slot = counters.slot()

        def on_chunk(done: int) -> None:
            slot[0] = slot[2] + done
            stop.check()

        local.state = (bytearray(CHUNK), slot, on_chunk)

    def run(batch: list[T]) -> list[R]:
        buffer, slot, on_chunk = local.state
        results = []
        for item in batch:
            stop.check()
            slot[2] = slot[0]  # bytes before this item
            result, read = work(item, buffer, on_chunk)
            slot[0] = slot[2] + read
            slot[1] += 1
            results.append(result)
        return results

    pending: set[Future[list[R]]] = set()
    batch: list[T] = []
    batch_bytes = 0
    limit = threads * 3
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sysmcp-hash", initializer=start) as pool:
        try:
            for item in items:
                cancel()
                batch.append(item)
                batch_bytes += size(item)
                if len(batch) >= BATCH_FILES or batch_bytes >= BATCH_BYTES:
                    pending.add(pool.submit(run, batch))
                    batch, batch_bytes = [], 0
                    while len(pending) >= limit:
                        yield from _collect(pending, cancel)
            if batch:
                pending.add(pool.submit(run, batch))
            while pending:
                yield from _collect(pending, cancel)
        except BaseException:
            stop.set()
            for future in pending:
                future.cancel()
            raise


def _collect(pending: set[Future[list[R]]], cancel: Callable[[], None]) -> Iterator[R]:
    done, _ = wait(pending, timeout=WAIT_S, return_when=FIRST_COMPLETED)
    cancel()
    for future in done:
        pending.discard(future)
        yield from future.result()


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
