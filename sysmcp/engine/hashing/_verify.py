"""The verify_checksums engine: a manifest's every entry checked against the files under a base.

A short manifest is parsed whole and checked on a small thread pool (here); a long one is cut into
ranges of whole lines that forked processes parse and check themselves (``_verify_ranges``).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterable

from sysmcp.engine.calls import Cancel, Progress
from sysmcp.engine.hashing._checksums import (
    PoolCounters,
    hash_many,
)
from sysmcp.engine.hashing._manifests import (
    ManifestBytes,
    ManifestChanged,
    NoEntries,
    NotAManifest,
    hint_order,
    open_manifest,
    parse_manifest,
)
from sysmcp.engine.hashing._verdicts import (
    MISSING_CODE,
    NOT_CHECKED_CODE,
    EntryVerdict,
    Status,
    Verdicts,
    Verification,
    check_file,
    look,
)
from sysmcp.engine.hashing._verify_ranges import check_ranges, place
from sysmcp.engine.hashing._verify_request import VerifyRequest
from sysmcp.engine.opens import Parents
from sysmcp.engine.paths import PATH_MAX
from sysmcp.engine.walk import Budget, ScanStopped, SkipCounter, WalkOptions, throttled, walk_files


def verify(request: VerifyRequest, progress: Progress, cancel: Cancel) -> Verification:
    """Check every entry, walk for new files, and read the names the answer shows.

    At the deadline what is left stays NOT_CHECKED and ``stopped`` says why. ``progress(done, total)``:
    a long manifest's bytes read of its size; a short one's entries and bytes done of all of them.
    """
    started = time.perf_counter()
    source = request.source
    budget = Budget(request.timeout_s, cancel, clock=request.clock)
    reader = open_manifest(source)
    try:
        check = check_ranges if reader.size >= request.tuning.parallel_from else _check_here
        result = check(reader, request, budget, progress, cancel)
        if request.report_new and result.stopped is None:
            try:
                result.new, result.walk_skipped, walk_stopped = find_new(
                    result.names(), request.base, source.path, request.walk, budget
                )
                if walk_stopped is not None or budget.expired:  # its list may miss files
                    result.stopped, result.new_cut = walk_stopped or budget.reason, True
            except ScanStopped as stop:
                result.stopped = stop.reason
        counts = result.checked.tally()[0]  # the last reads of the manifest: the names the answer shows
        result.listed, result.listed_limit = listed(result, request.max_listed, counts), request.max_listed
        result.cut = is_cut(result, counts, request.max_listed)
        if request.before_close is not None:
            request.before_close(result)
        if reader.changed():
            raise ManifestChanged(source.shown)
    finally:
        reader.close()
    result.seconds = time.perf_counter() - started
    return result


def _check_here(
    reader: ManifestBytes, request: VerifyRequest, budget: Budget, progress: Progress, cancel: Cancel
) -> Verification:
    """A short manifest, parsed whole: every entry looked at, then hashed on a small thread pool."""
    prefer = hint_order(request.source.name_hint)
    manifest = parse_manifest(
        reader.read(0, reader.size), forced=request.algorithm, prefer=prefer, cancel=throttled(cancel)
    )  # no deadline inside the parse
    entries = manifest.entries
    if manifest.gave_up:
        raise NotAManifest(reader.shown)
    if not entries:
        raise NoEntries(reader.shown, manifest.bad_count)
    result = Verification(
        Verdicts(bytearray([NOT_CHECKED_CODE]) * len(entries)),
        manifest.bad_lines,
        manifest.bad_count,
        names=lambda: (entry.name for entry in entries),
    )
    base, confine, threads = request.base, request.confine, request.threads
    parents = Parents() if confine is not None else None  # confined: no symlink on the way is followed
    looked: list[tuple[int, bytes, os.stat_result]] = []
    total_bytes = 0
    try:
        # Pass 1: look at every listed file (stat follows symlinks, as sha256sum's open does).
        for index, entry in enumerate(entries):
            budget()
            where = place(entry.name, base, confine)
            st = look(where, parents) if isinstance(where, bytes) else where
            missing = not isinstance(st, os.stat_result) and st[0] == MISSING_CODE
            beside = place(entry.name + b"\r", base, confine) if missing and entry.cr else None
            if isinstance(beside, bytes):
                st, where = look(beside, parents), beside
            if not isinstance(st, os.stat_result):
                result.checked.put(index, *st[:2])
            elif isinstance(where, bytes):  # a file was looked at, so there was where to look
                looked.append((index, where, st))
                total_bytes += st.st_size
        unhashed = len(entries) - len(looked)
        total = len(entries) + total_bytes  # entries and bytes: moves for big and tiny files
        progress(0, total)

        # Pass 2: hash, as the long manifests' ranges do (``check_file``): a digest length two algorithms
        # share is settled by the first file that matches, and a mismatch under it is tried with the others.
        settled: dict[int, str] = {}
        counters = PoolCounters()

        def check(
            item: tuple[int, bytes, os.stat_result], buffer: bytearray, on_chunk: Callable[[int], None]
        ) -> tuple[tuple[int, int, str], int]:
            index, path, _ = item
            entry = entries[index]
            # Looked at again here, not judged against pass 1's look: a file touched or edited while
            # the files before it were hashed is judged as it is read, as the ranges judge theirs.
            code, detail, read = check_file(
                path, entry.digest, entry.candidates, parents, settled, buffer, on_chunk
            )
            return (index, code, detail), read

        def progress_and_cancel() -> None:
            progress(unhashed + counters.files + counters.bytes, total)
            cancel()

        hashing = budget.sharing(progress_and_cancel)  # progress every few ms, and the one deadline
        size: Callable[[tuple[int, bytes, os.stat_result]], int] = lambda item: item[2].st_size  # noqa: E731
        for index, code, detail in hash_many(
            looked, check, size, cancel=hashing, counters=counters, threads=threads
        ):
            result.checked.put(index, code, detail)
        progress(unhashed + counters.files + counters.bytes, total)
        result.bytes_hashed = counters.bytes
    except ScanStopped as stop:
        result.stopped = stop.reason
    finally:
        if parents is not None:
            parents.close()
    return result


def find_new(
    names: Iterable[bytes],
    base: bytes,
    manifest_path: bytes | None,
    options: WalkOptions,
    cancel: Callable[[], None],
) -> tuple[list[bytes], dict[str, int], str | None]:
    """Regular files under ``base`` that no entry names (the manifest file itself aside), what the walk
    skipped, and why it stopped early (its deadline, no descriptor left) if it did: then the list may
    miss files."""
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
    new: list[bytes] = []
    stopped: str | None = None
    try:
        for found in walk_files(base, options, skipped, cancel):
            if found.relative not in known and found.path != manifest_path:
                new.append(found.relative)
    except ScanStopped as stop:
        stopped = stop.reason
    new.sort()
    return new, skipped.as_dict(), stopped


_LISTS: tuple[Status, ...] = ("FAILED", "MISSING", "UNREADABLE")  # the statuses whose names are listed


def listed(
    result: Verification, limit: int, counts: Counter[Status]
) -> dict[Status, list[tuple[bytes, EntryVerdict]]]:
    """The first ``limit`` names of each non-OK list: read again from the manifest, only as far as needed.
    A name too long for any file is kept to its first ``PATH_MAX`` bytes (a manifest line may be a GiB)."""
    by_status: dict[Status, list[tuple[bytes, EntryVerdict]]] = {status: [] for status in _LISTS}
    wanted = sum(min(limit, counts[status]) for status in by_status)
    if wanted:
        for name, checked in zip(result.names(), result.checked, strict=False):
            items = by_status.get(checked.status)
            if items is not None and len(items) < limit:
                items.append((name[:PATH_MAX], checked))  # a name past it is no file's: its start will do
                wanted -= 1
                if not wanted:
                    break
    return by_status


def is_cut(result: Verification, counts: Counter[Status], limit: int) -> bool:
    """Whether the answer cuts a list at ``limit`` (or leaves entries not checked): then a full report helps."""
    cut = any(counts[s] > limit for s in _LISTS) or result.bad_count > limit or len(result.new or ()) > limit
    return cut or counts["NOT_CHECKED"] > 0  # which ones were not checked: in the full report
