"""Every listed file as a compact record in sorted runs on disk, merged back by size in a stream.

Why: a duplicate search must know which sizes at least two inodes share before it reads anything, and
a million files held in memory (even as compact arrays) cost tens of megabytes, which every forked
worker then counts again. Here each process that walks writes one record per file as sorted runs to
an unlinked temporary file (never visible in any directory, gone when closed); the merge streams the
runs largest size first, one size at a time.

Further names of one inode seen by two processes (hard links split between them) sort next to each
other, so the merge counts them as links, not as copies, whichever process saw them first.
"""

from __future__ import annotations

import heapq
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from sysmcp.engine.walk import RUN_BYTES, Listing, SortedRuns, SubtreeTotals, read_run

# (largest size minus this size, device, inode, bytes allocated), big-endian, so that sorting records
# as bytes sorts them by size, largest first, then by inode; the name follows, ended by a NUL
# (which no name holds).
HEADER = struct.Struct(">QQQQ")
_TOP = (1 << 64) - 1
READ_BYTES = 32 << 10  # read-ahead per run while merging (a million files: about 50 runs)


class SizeRuns(SortedRuns):
    """One process's records in sorted runs in its own temporary file, and the counts behind them."""

    def __init__(self, spill: IO[bytes], run_bytes: int = RUN_BYTES) -> None:
        super().__init__(spill, run_bytes)
        self.files = 0
        self.links = 0  # further names of an inode this process already listed
        self.prefix = b""  # before every name (a search of several roots: the root's, relative to /)

    def listing(self, listing: Listing) -> None:
        """Add one directory's regular files (their further hard-linked names are only counted)."""
        fsencode, pack, top = os.fsencode, HEADER.pack, _TOP
        base = self.prefix + fsencode(listing.relative) + b"/" if listing.relative else self.prefix
        records = self.records
        added = 0
        for name, st in listing.files:
            record = pack(top - st.st_size, st.st_dev, st.st_ino, st.st_blocks * 512) + base + fsencode(name)
            records.append(record + b"\0")
            added += len(record) + 1
        self.files += len(listing.files)
        self.links += len(listing.links)
        self.appended(added)

    def consume(self, event: Listing | SubtreeTotals, scanner: object) -> None:
        """A walk's event, as the parallel walk hands it: listings are added, totals ignored."""
        if type(event) is Listing:
            self.listing(event)

    def summary(self) -> dict[str, Any]:
        """What a worker process sends back (``marshal``-able): its runs are in the file the parent opened."""
        self.flush()
        return {"extents": self.extents, "files": self.files, "links": self.links}


def read_records(fd: int, offset: int, length: int) -> Iterator[bytes]:
    """The records stored at ``offset`` (one run, or a block of them), in order."""
    return read_run(fd, offset, length, READ_BYTES, header=HEADER.size)


def parse(record: bytes) -> tuple[int, int, int, int, bytes]:
    """(size, device, inode, bytes allocated, name relative to the root) of one record."""
    inverted, dev, ino, disk = HEADER.unpack_from(record)
    return _TOP - inverted, dev, ino, disk, record[HEADER.size : -1]


def merge_by_size(
    runs: Sequence[tuple[int, int, int]], counts: list[int], cancel: Callable[[], None] = lambda: None
) -> Iterator[tuple[int, list[bytes]]]:
    """(size, records) for every size at least two distinct inodes share, largest size first.

    ``runs`` are (descriptor, offset, length) of sorted runs. A size's records come one per inode
    (the first name in byte order); further names of an inode are added to ``counts[0]`` (links).
    """
    streams = [read_records(fd, offset, length) for fd, offset, length in runs]
    current = b""
    group: list[bytes] = []
    last_inode = b""
    for number, record in enumerate(heapq.merge(*streams)):
        if not number & 0xFFF:
            cancel()
        key = record[:8]
        if key != current:
            if len(group) > 1:
                yield _TOP - int.from_bytes(current, "big"), group
            current, group, last_inode = key, [record], record[8:24]
            continue
        inode = record[8:24]
        if inode == last_inode:
            counts[0] += 1  # another name of the inode just kept: a hard link, not a copy
            continue
        last_inode = inode
        group.append(record)
    if len(group) > 1:
        yield _TOP - int.from_bytes(current, "big"), group
