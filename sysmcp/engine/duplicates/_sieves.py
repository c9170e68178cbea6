"""find_duplicates' sieves: read candidates safely, group them by head and tail, then by full content.

The comparison half of ``sysmcp.engine.duplicates._duplicates``: the ``Reader``, the two hashing
sieves over a block of candidates, the candidates file they read from, and the ``Handoff``.
"""

from __future__ import annotations

import contextlib
import errno
import marshal
import os
import select
import stat
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from blake3 import blake3 as _blake3

from sysmcp.engine.duplicates._sizeruns import merge_by_size, parse, read_records
from sysmcp.engine.hashing import BLAKE3, BLAKE3_THREADED, CHUNK, OPEN_AT, KeptGrowing, hash_fd
from sysmcp.engine.parallel import pipe, release
from sysmcp.engine.walk import ScanStopped, SkipCounter

BLOCK = 4096  # head and tail sample size
SMALL = 64 << 10  # files up to this size are hashed whole at once: one read beats a second open
THREADED_FROM = 4 << 20  # files at least this big are hashed by blake3's threads, on every core
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
BLOCKS = 200  # the candidates are cut into about this many blocks of whole sizes, claimed one by one
#: Why a candidate could not be opened, as skipped counts it (else: it vanished). A symlink, file or
#: socket that now stands on the way is not followed: the file changed.
_NOT_OPENED = {
    errno.EACCES: "unreadable",
    errno.EPERM: "unreadable",
    **dict.fromkeys((errno.ELOOP, errno.EMLINK, errno.ENOTDIR, errno.ENXIO), "changed"),
}


# A candidate while it is compared: (name relative to the root, device, inode, bytes allocated).
RawCandidate = tuple[bytes, int, int, int]
# What ``fstat`` said of a file's open descriptor when its bytes were read (``seen``): mode, inode,
# device, links, owner, group, size, mtime_ns, ctime_ns, blocks. A plan's identity is this, not a later look.
StatFields = tuple[int, int, int, int, int, int, int, int, int, int]
# A confirmed copy: the candidate and what its descriptor was when it was hashed.
Hashed = tuple[bytes, int, int, int, StatFields]


def seen(st: os.stat_result) -> StatFields:
    return (
        st.st_mode,
        st.st_ino,
        st.st_dev,
        st.st_nlink,
        st.st_uid,
        st.st_gid,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        st.st_blocks,
    )


def as_stat(fields: StatFields) -> os.stat_result:
    """``seen`` back into a stat result (the fields a plan's identity reads)."""
    mode, ino, dev, nlink, uid, gid, size, mtime_ns, ctime_ns, blocks = fields
    times = (0, mtime_ns // 1_000_000_000, ctime_ns // 1_000_000_000)
    extra = {"st_mtime_ns": mtime_ns, "st_ctime_ns": ctime_ns, "st_blocks": blocks}
    return os.stat_result((mode, ino, dev, nlink, uid, gid, size, *times), extra)


class Reader:
    """Opens and hashes candidates, checking each is still the inode the walk saw.

    Every file is opened relative to its directory's descriptor, and every directory on the way from
    the root with ``O_DIRECTORY | O_NOFOLLOW``, so no symlink swapped in since the walk is followed and
    the kernel resolves one name per call. Candidates come in name order, so the files of one
    directory share one directory descriptor.
    """

    def __init__(self, root: bytes, skipped: SkipCounter, cancel: Callable[[], None]) -> None:
        self.root = root
        self.skipped = skipped
        self.cancel = cancel
        self.files_read = 0  # files opened for a head/tail or a full hash
        self.files_compared = (
            0  # files opened at least once: progress counts each file once, as its total does
        )
        self.bytes_read = 0
        self.buffer = bytearray(CHUNK)
        self.view = memoryview(self.buffer)
        self._root_fd: int | None = None
        self._dir_name: bytes | None = None
        self._dir: int | OSError | None = None  # the open directory, or why it could not be opened
        # (dev, ino) → its fstat at the last open, per block
        self.seen: dict[tuple[int, int], StatFields] = {}

    def close(self) -> None:
        self._forget()
        if self._root_fd is not None:
            fd, self._root_fd = self._root_fd, None
            os.close(fd)

    def _forget(self) -> None:
        fd, self._dir, self._dir_name = self._dir, None, None
        if isinstance(fd, int) and fd != self._root_fd:
            os.close(fd)

    def _directory(self, parent: bytes) -> int:
        """The descriptor of the directory ``parent`` (relative to the root), reached name by name."""
        if parent == self._dir_name:
            if isinstance(self._dir, OSError):
                raise self._dir
            assert self._dir is not None
            return self._dir
        self._forget()
        self._dir_name = parent
        fd = self._root_fd
        try:
            if fd is None:
                fd = self._root_fd = os.open(self.root, _DIRECTORY)
            if parent:
                for name in parent.split(b"/"):
                    child = os.open(name, _DIRECTORY, dir_fd=fd)
                    if fd != self._root_fd:
                        os.close(fd)
                    fd = child
        except OSError as exc:
            if fd is not None and fd != self._root_fd:
                os.close(fd)
            self._dir = exc
            raise
        self._dir = fd
        return fd

    def _open(self, candidate: RawCandidate, size: int) -> tuple[int, os.stat_result] | None:
        """Open the very inode the walk saw (its ``lstat`` is the look, as hash_tree takes it) with
        ``OPEN_AT``, if it is still a regular file of the size the walk saw: it and its ``fstat``.
        Why those flags: a symlink swapped in since is not followed (ELOOP), a FIFO swapped in cannot
        block the open, and a tty never becomes our controlling terminal."""
        self.cancel()  # one size can have a hundred thousand candidates: stop between any two
        relative, dev, ino, _ = candidate
        parent, _, name = relative.rpartition(b"/")
        try:
            fd = os.open(name, OPEN_AT, dir_fd=self._directory(parent))
        except OSError as exc:
            self.skipped.add(_NOT_OPENED.get(exc.errno or 0, "vanished"))
            return None
        st = os.fstat(fd)
        if st.st_ino != ino or st.st_dev != dev or not stat.S_ISREG(st.st_mode) or st.st_size != size:
            os.close(fd)
            self.skipped.add("changed")
            return None
        self.files_read += 1
        if (dev, ino) not in self.seen:
            self.files_compared += 1
        self.seen[(dev, ino)] = seen(st)
        return fd, st

    def sample(self, candidate: RawCandidate, size: int) -> str | None:
        """Hash of the first and last 4 KiB (the whole content for files up to SMALL)."""
        if size <= SMALL:
            return self.full(candidate, size)
        opened = self._open(candidate, size)
        if opened is None:
            return None
        fd = opened[0]
        try:
            head, tail = os.pread(fd, BLOCK, 0), os.pread(fd, BLOCK, size - BLOCK)
            self.bytes_read += len(head) + len(tail)
            return _blake3(head + tail).hexdigest()
        except OSError:
            self.skipped.add("unreadable")
            return None
        finally:
            os.close(fd)

    def full(self, candidate: RawCandidate, size: int) -> str | None:
        """BLAKE3 of the whole content: a file smaller than the buffer with one read (open, ``fstat``,
        read, ``fstat``, close: the per-file cost on a million small files), a larger one streamed with
        a cancel per chunk, on every core (blake3's own threads) when large. A file whose size or mtime
        moved while read counts as changed."""
        opened = self._open(candidate, size)
        if opened is None:
            return None
        fd, st = opened
        try:
            if size < len(self.buffer):
                count = os.readv(fd, [self.buffer])
                after = os.fstat(fd)
                same = count == size and after.st_size == size and after.st_mtime_ns == st.st_mtime_ns
                hexdigest = _blake3(self.view[:count]).hexdigest() if same else None
            else:
                algorithm = BLAKE3_THREADED if size >= THREADED_FROM else BLAKE3
                digest = hash_fd(fd, (algorithm,), self.buffer, lambda _: self.cancel(), opened=st)
                count, hexdigest = digest.size, None if digest.changed else digest.hexdigests[BLAKE3.name]
        except KeptGrowing:  # a live log: its size moved since the walk, as any file's that changed
            self.skipped.add("changed")
            return None
        except OSError:
            self.skipped.add("unreadable")
            return None
        finally:
            os.close(fd)
        self.bytes_read += count
        if hexdigest is None:
            self.skipped.add("changed")
        return hexdigest


def _split(
    candidates: list[tuple[int, RawCandidate]], key: Callable[[RawCandidate, int], str | None]
) -> list[tuple[int, str, list[RawCandidate]]]:
    """Candidates (size, candidate) grouped by size and key, keeping groups of two or more."""
    groups: dict[tuple[int, str], list[RawCandidate]] = {}
    for size, candidate in candidates:
        value = key(candidate, size)
        if value is not None:
            groups.setdefault((size, value), []).append(candidate)
    return [(size, value, group) for (size, value), group in groups.items() if len(group) > 1]


def compare_block(
    candidates: list[tuple[int, RawCandidate]], reader: Reader
) -> list[tuple[int, str, list[Hashed]]]:
    """The groups of identical content among candidates of a few sizes: head and tail, then the whole,
    each copy with its descriptor's ``fstat`` taken when its whole content was read. Candidates are
    read in name order (the files of a directory one after another), whatever their size.
    """
    reader.seen.clear()
    candidates.sort(key=lambda item: item[1][0])
    groups = []
    tied: list[tuple[int, RawCandidate]] = []
    for size, sample, same in _split(candidates, reader.sample):
        if size <= SMALL:  # the sample was the full hash
            groups.append((size, sample, same))
        else:
            tied += [(size, candidate) for candidate in same]
    if tied:
        tied.sort(key=lambda item: item[1][0])
        groups += _split(tied, reader.full)
    return [
        (size, digest, [(*found, reader.seen[found[1:3]]) for found in same]) for size, digest, same in groups
    ]


@dataclass
class Candidates:
    """Sizes at least two distinct inodes share, their records back to back in one temporary file,
    largest size first, cut into blocks of whole sizes for the comparison to share out."""

    spill: IO[bytes]
    blocks: list[tuple[int, int]] = field(default_factory=list)  # (offset, length)
    files: int = 0
    bytes: int = 0  # the candidates' total size


def gather_candidates(
    runs: list[tuple[int, int, int]], out: Candidates, files: int, cancel: Callable[[], None]
) -> int:
    """Merge the runs of ``files`` records by size into ``out``, shared sizes only. Returns the further
    names of inodes already counted (two processes each listed a name of one inode first)."""
    per_block = max(1, -(-files // BLOCKS))
    links = [0]
    written = block_start = block_files = 0
    spill = out.spill
    spill.seek(0)
    spill.truncate()
    for size, records in merge_by_size(runs, links, cancel):
        spill.writelines(records)  # buffered by the file object
        written += sum(map(len, records))
        out.files += len(records)
        out.bytes += size * len(records)
        block_files += len(records)
        if block_files >= per_block:
            out.blocks.append((block_start, written - block_start))
            block_start, block_files = written, 0
    if written > block_start:
        out.blocks.append((block_start, written - block_start))
    spill.flush()
    return links[0]


_BLOCK = struct.Struct("<QQ")  # a block of candidates handed to the workers: (offset, length)


class Handoff:
    """How forked workers that walked go on to compare, so that no second set of processes is forked.

    Forked processes count the parent's resident pages again, so forking once for the walk and once
    more for the comparison would pay the server's size three times. Instead each worker, its walk
    done, writes what it found after its runs and says where through its own pipe (the parent sees an
    end of file without a message if it died), then waits on a second pipe for the blocks to compare,
    which the parent writes all at once (a few kilobytes) and closes: the end of that pipe is the end
    of the tasks, also if the parent went away.
    """

    def __init__(self, processes: int) -> None:
        self.blocks_r, self.blocks_w = pipe()
        self.walked = [pipe() for _ in range(processes)]  # slot 0 (this process) unused

    @property
    def keep(self) -> list[int]:
        return [self.blocks_r, *(write_end for _, write_end in self.walked)]

    def in_child(self, slot: int) -> int:
        """In worker ``slot``: close the other workers' ends; returns this worker's end."""
        for other, (_, write_end) in enumerate(self.walked):
            if other != slot:
                os.close(write_end)
        return self.walked[slot][1]

    def started(self) -> None:
        """In this process, once the workers are forked: only they hold their pipes' write ends."""
        for _, write_end in self.walked:
            release(write_end)
        self.walked = [(read_end, -1) for read_end, _ in self.walked]

    @staticmethod
    def report(end: int, spill: IO[bytes], part: dict[str, Any]) -> None:
        """In a worker: store its walk's part after its runs and tell the parent where."""
        data = marshal.dumps(part)
        offset = spill.seek(0, os.SEEK_END)
        spill.write(data)
        spill.flush()
        os.write(end, _BLOCK.pack(offset, len(data)))
        os.close(end)

    def wait(
        self, workers: int, spills: Sequence[IO[bytes]], give_up_at: float, cancel: Callable[[], None]
    ) -> list[dict[str, Any] | None]:
        """Every worker's walk part (None for one that died or did not answer by ``give_up_at``)."""
        parts: list[dict[str, Any] | None] = [None] * workers
        waiting = {self.walked[slot][0]: slot for slot in range(1, workers + 1)}
        poller = select.poll()
        for fd in waiting:
            poller.register(fd, select.POLLIN)
        while waiting and time.monotonic() < give_up_at:
            cancel()
            for fd, _ in poller.poll(10):
                slot = waiting.pop(fd)
                poller.unregister(fd)
                message = os.read(fd, _BLOCK.size)
                if len(message) == _BLOCK.size:
                    offset, length = _BLOCK.unpack(message)
                    with contextlib.suppress(EOFError, ValueError, TypeError):
                        parts[slot - 1] = marshal.loads(os.pread(spills[slot].fileno(), length, offset))
        return parts

    def send(self, blocks: Sequence[tuple[int, int]]) -> None:
        """Hand every block to whoever claims it first (one write: at most BLOCKS + 1 entries)."""
        if blocks:
            os.write(self.blocks_w, b"".join(_BLOCK.pack(*block) for block in blocks))
        release(self.blocks_w)
        self.blocks_w = -1

    def claim(self) -> tuple[int, int] | None:
        """The next block nobody claimed yet (waits until ``send``); None once none are left."""
        data = os.read(self.blocks_r, _BLOCK.size)
        return _BLOCK.unpack(data) if len(data) == _BLOCK.size else None

    def close(self) -> None:
        ends = [self.blocks_r, self.blocks_w, *(fd for pair in self.walked for fd in pair)]
        release(*(fd for fd in ends if fd >= 0))
        self.walked = []


def compare(reader: Reader, fd: int, claim: Callable[[], tuple[int, int] | None]) -> dict[str, Any]:
    """The comparison's per-process part: claims blocks, returns the groups found and why it stopped."""
    groups: list[tuple[int, str, list[Hashed]]] = []
    stopped: str | None = None
    try:
        while (block := claim()) is not None:
            reader.cancel()
            records = map(parse, read_records(fd, *block))
            candidates = [(size, (name, dev, ino, disk)) for size, dev, ino, disk, name in records]
            groups += compare_block(candidates, reader)
    except ScanStopped as stop:
        stopped = stop.reason
    return {"groups": groups, "stopped": stopped}
