"""What a verify_checksums check is asked: the request, and the knobs of a check in ranges.

Why apart: the short check (``_verify``) and the check in ranges (``_verify_ranges``) both read it, and
the short one hands long manifests to the ranges: the request lives below both.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sysmcp.engine.hashing._checksums import CHUNK, HASH_THREADS, Algorithm
from sysmcp.engine.hashing._manifests import Source
from sysmcp.engine.hashing._verdicts import Verification
from sysmcp.engine.walk import WalkOptions

#: Where a confined check looks for a manifest's name: the path inside the allowed roots it resolves
#: to, or None when it resolves outside them (the entry is UNREADABLE, "outside the allowed roots").
Confine = Callable[[bytes], "bytes | None"]

MAX_LISTINGS = 64  # directories a range keeps open at once (descriptors); each is listed once at most
#: A file whose change or modification time is this close to the start of its range (or later) is
#: checked by ``check_file``, which compares a look before the open with one after the read. Older
#: than that, no write can have been under way while it was read: a write sets both times to "now"
#: (give or take the coarsest timestamps, FAT's 2 s), so the one ``fstat`` after the read suffices.
SETTLED_NS = 3_000_000_000
#: Manifest bytes (about 2,000 lines) from which a manifest is checked in ranges (``verify``).
PARALLEL_FROM = 160 << 10


@dataclass(frozen=True, slots=True)
class Tuning:
    """The knobs of a check in ranges, each at its constant unless a test sets it."""

    parallel_from: int = PARALLEL_FROM  # manifest bytes from which ranges are used at all
    processes: int | None = None  # None: as many as this process may use
    settled_ns: int = SETTLED_NS
    max_listings: int = MAX_LISTINGS
    chunk: int = CHUNK  # the buffer: files smaller are read at once


@dataclass(frozen=True)
class VerifyRequest:
    """One check: which manifest, against which directory, how, and within what time budget."""

    source: Source
    base: bytes  # the directory relative names are relative to (absolute, resolved)
    algorithm: Algorithm | None = None  # None: detected per line; one: other lines improperly formatted
    report_new: bool = False  # also walk ``base`` for regular files no entry names
    walk: WalkOptions = field(default_factory=WalkOptions)  # that walk's rules
    max_listed: int = 50  # names per non-OK list read back for the answer (``Verification.listed``)
    threads: int = HASH_THREADS  # hashing threads for a short manifest
    confine: Confine | None = None  # None: no allowed roots to keep names inside
    timeout_s: float = math.inf
    tuning: Tuning = field(default_factory=Tuning)  # how a long manifest is checked in ranges
    clock: Callable[[], float] = time.monotonic  # the time budget's
    #: Runs last, while ``names()`` can still read the manifest (a full report is written there, in the
    #: worker: a million names read again would hold the event loop for seconds).
    before_close: Callable[[Verification], None] | None = None
