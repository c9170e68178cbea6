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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sysmcp.fs.checksums import (
    ALGORITHM_NAMES,
    ALGORITHMS,
    CHUNK,
    HASH_THREADS,
    MAX_BAD_LINES,
    Digest,
    Entry,
    Job,
    Manifest,
    PoolCounters,
    explain,
    hash_fd,
    hash_many,
    hash_once,
    hint_order,
    parse_manifest,
)
from sysmcp.fs.fanout import MAX_TASKS, FanOut, Progress, available_processes
from sysmcp.fs.paths import PathPolicy, display, printable
from sysmcp.fs.safeopen import kind, open_regular_at
from sysmcp.fs.units import human_bytes, plural, rate
from sysmcp.fs.walk import Budget, ScanStopped, SkipCounter, collect_within, join, throttled, walk_files
from sysmcp.protocol.context import Meter
from sysmcp.protocol.errors import ToolError
from sysmcp.tools.merging import summary_merge
from sysmcp.tools.registry import ResourceLink, Tool, ToolContext, ToolOutput
from sysmcp.tools.walking import (
    require_directory,
    skipped_phrase,
    timeout_property,
    walk_options,
    walk_properties,
)

MAX_MANIFEST = 64 << 20  # bytes: a manifest of about half a million files
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


@dataclass
class Verification:
    """The worker's answer: a status per entry, in manifest order, plus what the walk found."""

    manifest: Manifest
    checked: list[Checked] = field(default_factory=list)
    new: list[bytes] | None = None
    walk_skipped: dict[str, int] = field(default_factory=dict)
    bytes_hashed: int = 0
    seconds: float = 0.0
    stopped: str | None = None  # why some entries were not checked (the time budget ran out)


@dataclass(frozen=True)
class Source:
    """Where the manifest comes from: read in the worker (a file) or already in hand (text, URI)."""

    shown: str
    path: bytes | None = None
    data: bytes = b""
    name_hint: str | None = None


def read_manifest(path: bytes, shown: str) -> bytes:
    """Read a checksum file, refusing FIFOs and devices without blocking, and huge files."""
    try:
        fd, _ = open_regular_at(path)
    except FileNotFoundError:
        raise ToolError(f"No such manifest file: {shown}") from None
    except OSError as exc:
        raise ToolError(f"Cannot read the manifest {shown}: {explain(exc)}") from None
    try:
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read(MAX_MANIFEST + 1)
    except OSError as exc:
        raise ToolError(f"Cannot read the manifest {shown}: {explain(exc)}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_MANIFEST:
        raise ToolError(f"The manifest {shown} is larger than {human_bytes(MAX_MANIFEST)}; split it")
    return data


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
    """Parse, look at every listed file, hash the regular ones on a small pool, then walk for new files.

    At the deadline (``timeout_s``) whatever is left stays NOT_CHECKED and ``stopped`` says why.
    """
    started = time.perf_counter()
    check = throttled(meter.checkpoint)  # parsing is bounded by MAX_MANIFEST: no deadline inside it
    data = read_manifest(source.path, source.shown) if source.path is not None else source.data
    forced = None if args["algorithm"] == "auto" else ALGORITHMS[args["algorithm"]]
    manifest = parse_manifest(data, forced=forced, prefer=hint_order(source.name_hint), check=check)
    del data  # up to 64 MiB the forked checking processes would otherwise map (and count) too
    if manifest.gave_up:
        raise ToolError(
            f"{source.shown}: more than {MAX_BAD_LINES:,} improperly formatted lines, so this does not look "
            "like a checksum manifest. Expected lines like '<hex digest>  <name>' or "
            "'SHA256 (<name>) = <hex digest>'."
        )
    if not manifest.entries:
        bad = manifest.bad_count
        raise ToolError(
            f"{source.shown}: no properly formatted checksum lines found"
            + (f" ({bad:,} improperly formatted)" if bad else "")
            + ". Expected lines like '<hex digest>  <name>' or 'SHA256 (<name>) = <hex digest>'."
        )
    result = Verification(manifest, [NOT_CHECKED] * len(manifest.entries))
    budget = Budget(timeout_s, meter.checkpoint, clock=clock)
    try:
        _check_entries(manifest, base, args, policy, meter, threads, budget, result, source.path)
    except ScanStopped as stop:
        result.stopped = stop.reason
    result.seconds = time.perf_counter() - started
    return result


NOT_CHECKED = Checked("NOT_CHECKED", "the time budget ran out first")


def _check_entries(
    manifest: Manifest,
    base: bytes,
    args: dict[str, Any],
    policy: PathPolicy,
    meter: Meter,
    threads: int,
    check: Budget,
    result: Verification,
    manifest_path: bytes | None,
) -> None:
    """Both passes, the retry and the walk for new files; ``check`` raises ScanStopped at the deadline."""
    processes = available_processes() if len(manifest.entries) >= PARALLEL_FROM else 1
    if processes > 1:
        result.bytes_hashed = check_in_processes(manifest, base, policy, meter, check, result, processes)
    else:
        _check_here(manifest, base, policy, meter, threads, check, result)
    if args["report_new"]:
        result.new, result.walk_skipped = find_new(manifest.entries, base, manifest_path, args, check)
        if check.expired:  # the walk ends quietly at the deadline: its list may miss files
            raise ScanStopped(
                check.reason + " while looking for new files (the list of new files may be short)"
            )


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

    hashing = Budget(check.seconds, report_and_check, clock=check.clock)  # progress every few ms
    hashing.deadline, hashing.reason = check.deadline, check.reason  # and the one deadline
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


PARALLEL_FROM = 2000  # entries from which the check is shared out between processes
_OK = {name: Checked("OK", algorithm=name) for name in ALGORITHM_NAMES}  # one object per algorithm


def check_one(
    entry: Entry,
    path: bytes,
    confined: bool,
    settled: dict[int, str],
    buffer: bytearray,
    on_chunk: Callable[[int], None],
) -> tuple[Checked, int]:
    """Look at, open and hash one entry's file; its verdict and the bytes read.

    The same rules as the two passes: stat follows symlinks as ``sha256sum`` does (unless the
    allowed roots confine us), anything but a regular file is refused before it is opened, and the
    open checks it is the file looked at. A digest length two algorithms share is settled by the
    first match; a mismatch under a settled length is tried with the other candidates too.
    """
    try:
        looked = os.stat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return Checked("MISSING"), 0
        return Checked("UNREADABLE", explain(exc)), 0
    if not stat.S_ISREG(looked.st_mode):
        return Checked("UNREADABLE", f"not a regular file: {kind(looked.st_mode)}"), 0
    try:
        fd, opened = open_regular_at(path, follow_symlinks=not confined, expect=looked)
    except FileNotFoundError:
        return Checked("MISSING"), 0
    except OSError as exc:
        return Checked("UNREADABLE", explain(exc)), 0
    candidates = entry.candidates
    narrowed = len(candidates) > 1 and len(entry.digest) in settled
    if narrowed:
        candidates = (ALGORITHMS[settled[len(entry.digest)]],)
    read = 0
    blamed = entry.candidates[0].name  # a FAILED verdict names the line's own first candidate (_judge)
    try:
        while True:
            try:
                if opened.st_size < len(buffer):
                    digest = hash_once(fd, candidates, buffer, opened)
                else:
                    digest = hash_fd(fd, candidates, buffer, on_chunk, opened=opened)
            except OSError as exc:
                return Checked("UNREADABLE", f"read error: {explain(exc)}"), read
            read += digest.size
            if digest.changed:
                return Checked(
                    "UNREADABLE", f"changed while being read ({digest.changed}); check it again"
                ), read
            for name, hexdigest in digest.hexdigests.items():
                if hexdigest == entry.digest:
                    if len(candidates) > 1:
                        settled.setdefault(len(entry.digest), name)
                    return _OK.get(name) or Checked("OK", algorithm=name), read
            if not narrowed:
                return Checked("FAILED", algorithm=blamed), read
            narrowed = False  # the settled guess failed: the other candidates, from the start
            first = candidates[0].name
            candidates = tuple(c for c in entry.candidates if c.name != first)
            os.lseek(fd, 0, os.SEEK_SET)
            opened = os.fstat(fd)
            if not candidates:
                return Checked("FAILED", algorithm=blamed), read
    finally:
        os.close(fd)


def check_in_processes(
    manifest: Manifest,
    base: bytes,
    policy: PathPolicy,
    meter: Meter,
    check: Budget,
    result: Verification,
    processes: int,
) -> int:
    """Check every entry, the entries shared out in contiguous slices between forked processes
    (``fanout.FanOut``, as ``dir_usage`` walks). Each process sends back the indices it found OK per
    algorithm and the other verdicts; what the deadline left is NOT_CHECKED. Returns bytes hashed."""
    entries = manifest.entries
    confined = policy.allowed is not None
    per_task = max(1, -(-len(entries) // MAX_TASKS))
    tasks = -(-len(entries) // per_task)
    meter.extra["files_total"] = meter.total = len(entries)
    fan: FanOut | None = None
    mine = [0, 0]  # this process's files and bytes done

    def report_and_check() -> None:
        files, done = mine
        if fan is not None:
            more_files, more_bytes = fan.progress.others()
            files, done = files + more_files, done + more_bytes
        meter.extra["files"], meter.extra["bytes"] = files, done
        meter.done = files
        meter.checkpoint()

    def work(claim: Callable[[], int | None], progress: Progress, in_child: bool) -> dict[str, Any]:
        counts = [0, 0]
        if in_child:
            own = Budget(check.seconds, lambda: progress.set(*counts), clock=check.clock)
        else:
            own = Budget(check.seconds, report_and_check, clock=check.clock)
            counts = mine
        own.deadline, own.reason = check.deadline, check.reason
        settled: dict[int, str] = {}
        buffer = bytearray(CHUNK)
        ok: dict[str, list[int]] = {}
        other: list[tuple[int, str, str, str]] = []
        stopped: str | None = None
        done_so_far = 0

        def on_chunk(read: int) -> None:
            counts[1] = done_so_far + read
            own()

        try:
            while (task := claim()) is not None:
                for index in range(task * per_task, min(len(entries), (task + 1) * per_task)):
                    own()
                    entry = entries[index]
                    path = entry.name if entry.name.startswith(b"/") else join(base, entry.name)
                    if confined:
                        try:
                            path = os.fsencode(policy.resolve(os.fsdecode(path)))
                        except ToolError:
                            other.append((index, "UNREADABLE", "outside the allowed roots", ""))
                            continue
                    done_so_far = counts[1]
                    verdict, read = check_one(entry, path, confined, settled, buffer, on_chunk)
                    counts[0] += 1
                    counts[1] = done_so_far + read
                    if verdict.status == "OK":
                        ok.setdefault(verdict.algorithm, []).append(index)
                    else:
                        other.append((index, verdict.status, verdict.detail, verdict.algorithm))
        except ScanStopped as stop:
            stopped = stop.reason
        return {"ok": ok, "other": other, "bytes": counts[1], "stopped": stopped}

    try:
        fan = FanOut(tasks, processes, work)
        fan.start()
        parts: list[dict[str, Any] | None] = [fan.run_here()]
        parts += collect_within(fan, check)
    finally:
        if fan is not None:
            fan.close()
    hashed = 0
    stopped: str | None = None
    checked = result.checked
    for part in parts:
        if part is None:
            stopped = stopped or "a checking process ended unexpectedly"
            continue
        for name, indices in part["ok"].items():
            verdict = _OK.get(name) or Checked("OK", algorithm=name)
            for index in indices:
                checked[index] = verdict
        for index, status, detail, algorithm in part["other"]:
            checked[index] = Checked(status, detail, algorithm)
        hashed += part["bytes"]
        stopped = stopped or part["stopped"]
    if stopped is None and any(c is NOT_CHECKED for c in checked):
        stopped = check.reason
    if stopped is not None:
        result.bytes_hashed = hashed
        raise ScanStopped(stopped)
    return hashed


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
    entries: Sequence[Entry],
    base: bytes,
    manifest_path: bytes | None,
    args: dict[str, Any],
    check: Callable[[], None],
) -> tuple[list[bytes], dict[str, int]]:
    """Regular files under ``base`` that no entry names (the manifest file itself aside)."""
    prefix = base.rstrip(b"/") + b"/"
    known: set[bytes] = set()
    for entry in entries:
        name = entry.name
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
        if "bytes_total" not in meter.extra:  # shared out between processes: no look at the sizes first
            return (
                f"{int(meter.extra.get('files', 0)):,} of {int(meter.extra.get('files_total', 0)):,} files, "
                f"{human_bytes(done)} at {rate(done, elapsed)}"
            )
        return (
            f"{int(meter.extra.get('files', 0)):,} of {int(meter.extra.get('files_total', 0)):,} files, "
            f"{human_bytes(done)} of {human_bytes(meter.extra.get('bytes_total', 0))} at {rate(done, elapsed)}"
        )

    result = await ctx.run_in_worker(
        lambda meter: verify(source, base, args, ctx.paths, meter, HASH_THREADS, timeout_s),
        describe=describe,
    )
    return render(result, source.shown, base_shown, args, ctx)


def render(
    result: Verification, manifest_shown: str, base_shown: str, args: dict[str, Any], ctx: ToolContext
) -> ToolOutput:
    """Counts first, then each non-OK list up to max_listed; the full report as a resource if cut."""
    limit: int = args["max_listed"]
    entries = result.manifest.entries
    counts = Counter(c.status for c in result.checked)
    algorithms = Counter(c.algorithm for c in result.checked if c.algorithm)
    bad_lines = result.manifest.bad_lines
    bad_count = result.manifest.bad_count
    by_status: dict[Status, list[tuple[Entry, Checked]]] = {"FAILED": [], "MISSING": [], "UNREADABLE": []}
    for entry, checked in zip(entries, result.checked, strict=True):
        if checked.status in by_status:
            by_status[checked.status].append((entry, checked))
    new = result.new
    all_ok = counts["OK"] == len(entries) and not bad_count and result.stopped is None
    truncated = any(len(v) > limit for v in by_status.values()) or bad_count > limit or len(new or ()) > limit
    truncated = truncated or counts["NOT_CHECKED"] > 0  # which ones were not checked: in the full report

    summary = (
        f"Checked {plural(len(entries), 'entry')} of {manifest_shown} against {base_shown}: {counts['OK']:,} OK, "
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
            f"{len(entries):,} entries were not checked. Give a larger timeout_s (at most {MAX_TIMEOUT_S:g}) "
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
        if result.stopped is not None
        and counts["OK"] + counts["NOT_CHECKED"] == len(entries)
        and not bad_count
        else "Result: NOT OK (sha256sum -c --strict would fail)",
    ]
    titles: dict[Status, str] = {
        "FAILED": "FAILED (digest differs)",
        "MISSING": "MISSING",
        "UNREADABLE": "UNREADABLE",
    }
    for status, items in by_status.items():
        if not items:
            continue
        out.append(f"{titles[status]} ({len(items):,}):")
        for entry, checked in items[:limit]:
            detail = f": {checked.detail}" if checked.detail else ""
            out.append(f"  {printable(entry.name)}{detail}")
        if len(items) > limit:
            out.append(f"  … and {len(items) - limit:,} more")
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
        link = ctx.keep(
            "verify-report.txt",
            full_report(result),
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
        "entries": len(entries),
        "ok": counts["OK"],
        "failed": counts["FAILED"],
        "missing": counts["MISSING"],
        "unreadable": counts["UNREADABLE"],
        "improperly_formatted": bad_count,
        "new": None if new is None else len(new),
        "algorithms": dict(sorted(algorithms.items())),
        "bytes_hashed": result.bytes_hashed,
        "seconds": round(result.seconds, 6),
        "failed_files": [printable(e.name) for e, _ in by_status["FAILED"][:limit]],
        "missing_files": [printable(e.name) for e, _ in by_status["MISSING"][:limit]],
        "unreadable_files": [
            {"path": printable(e.name), "error": c.detail} for e, c in by_status["UNREADABLE"][:limit]
        ],
        "improperly_formatted_lines": bad_lines[:limit],
        "new_files": [printable(name) for name in (new or [])[:limit]],
        "truncated": truncated,
        "report_uri": uri,
        "walk_skipped": result.walk_skipped,
    }
    return ToolOutput("\n".join(out), structured, links=links)


def full_report(result: Verification) -> str:
    """One line per entry like 'sha256sum -c' prints them, then bad lines and new files."""
    lines = []
    for entry, checked in zip(result.manifest.entries, result.checked, strict=True):
        detail = f" ({checked.detail})" if checked.detail else ""
        lines.append(f"{printable(entry.name)}: {checked.status}{detail}")
    lines += [f"line {n}: improperly formatted" for n in result.manifest.bad_lines]
    unlisted = result.manifest.bad_count - len(result.manifest.bad_lines)
    if unlisted:
        lines.append(f"… and {unlisted:,} more improperly formatted lines")
    lines += [f"{printable(name)}: NEW (not in the manifest)" for name in result.new or ()]
    return "\n".join(lines) + "\n"


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
