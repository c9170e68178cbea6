"""Records kept as sorted runs in an unlinked temporary file, so a million of them cost no memory.

Why one place: ``hash_tree``'s manifest lines and ``find_duplicates``' size records are both buffered
per process, sorted a MiB at a time and written out as runs that the parent merges in a stream.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import IO

RUN_BYTES = 1 << 20  # records buffered per process before they are sorted and written as one run


class SortedRuns:
    """One process's buffered records and the (offset, length) of each run already in ``spill``."""

    def __init__(self, spill: IO[bytes], run_bytes: int = RUN_BYTES) -> None:
        self.spill = spill
        self.run_bytes = run_bytes  # buffered past this, the records are sorted and written as one run
        self.records: list[bytes] = []
        self.buffered = 0  # bytes in ``records``
        self.extents: list[tuple[int, int]] = []

    def appended(self, size: int) -> None:
        """The owner appended ``size`` bytes of records to ``records``: past ``run_bytes``, one run written."""
        self.buffered += size
        if self.buffered >= self.run_bytes:
            self.flush()

    def flush(self) -> None:
        """Sort what is buffered and append it to the file as one run."""
        if not self.records:
            return
        self.records.sort()
        offset = self.spill.seek(0, os.SEEK_END)
        self.spill.writelines(self.records)  # no joined copy of the run
        self.spill.flush()
        self.extents.append((offset, self.spill.tell() - offset))
        self.records = []
        self.buffered = 0


def read_run(
    fd: int, offset: int, length: int, read_bytes: int, *, header: int = 0, line: bool = False
) -> Iterator[bytes]:
    """The records stored at ``offset`` (one run, or a block of them), in order, read ``read_bytes`` at a time.

    A record is ``header`` fixed bytes (which may hold any byte), then a name ended by a NUL (which no
    name holds); with ``line`` (and no header), a line follows the NUL and the record ends at its newline.

    Why a loop for each framing: a merge reads every record through here (a million for a manifest of a
    million files), and one loop for both paid a test and an addition per record, about 0.6 % of
    hash_tree's instructions per small file.
    """
    if line and header:
        raise ValueError("a record with a line has no header")
    end = offset + length
    pending = b""
    while offset < end:
        chunk = os.pread(fd, min(read_bytes, end - offset), offset)
        if not chunk:
            break
        offset += len(chunk)
        data = pending + chunk if pending else chunk
        start = 0
        if line:
            while (stop := data.find(b"\0", start)) >= 0 and (stop := data.find(b"\n", stop)) >= 0:
                yield data[start : stop + 1]
                start = stop + 1
        else:
            while (stop := data.find(b"\0", start + header)) >= 0:
                yield data[start : stop + 1]
                start = stop + 1
        pending = data[start:]
