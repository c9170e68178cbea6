"""The small hooks through which dir_usage, disk_usage and hash_tree leave history behind: the words.

Why here: the store work is the engine's (``sysmcp.history.recording``); what stays here is each
tool's one call and the sentence its answer says when a write failed. Every hook does nothing when
history is off (``sysmcp.history.state.active()`` is None).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sysmcp.history import recording, state
from sysmcp.history.snapshots import DiskReading, ScanSnapshot, reading_identity
from sysmcp.protocol.threads import run_in_thread
from sysmcp.render import plural
from sysmcp.tools.typed import ABSENT

if TYPE_CHECKING:  # disk_usage records through here too, and walks nothing
    from sysmcp.engine.usage import Usage, UsageRequest
    from sysmcp.engine.walk import WalkOptions
    from sysmcp.tools.disk_usage import Filesystem


def recorded_scan(
    request: UsageRequest, run: Callable[[UsageRequest], Usage]
) -> tuple[Usage, ScanSnapshot | None, str | None]:
    """``run(request)``, recording every directory's totals for history when history is on: the
    usage, the snapshot saved (None if none) and a sentence when it could not be saved. In a worker."""
    done = recording.record_scan(state.active(), request, run, state.now)
    return done.usage, done.snapshot, None if done.unsaved is None else f"History: {done.unsaved}."


#: The process's gate for disk readings (``history.recording.ReadingGate``); a test passes its own.
READINGS = recording.ReadingGate()


def readings_quiet(key: str, gate: recording.ReadingGate = READINGS) -> bool:
    """Whether disk_usage's call named ``key`` can be answered with no reading due (no store
    opened: for the event loop's at-once check)."""
    gate.follow(state.directory())
    return gate.quiet(key)


async def record_disk(
    filesystems: Sequence[Filesystem],
    key: str,
    gate: recording.ReadingGate = READINGS,
    identities: Sequence[str | None] | None = None,
) -> str | None:
    """Keep disk_usage's figures (a few tiny rows) when ``gate`` finds them due, off the event loop;
    a sentence if not saved. ``key`` names the call (its path) for the gate's ``quiet``; ``identities``,
    each filesystem's ``filesystem_id`` where known (None: not), tells a filesystem mounted anew at a
    mount point from the one before (the same source and type: a tmpfs, a device made again by mkfs).

    The store is opened by the worker that writes (``state.active()`` in ``save``), not here: the
    event loop does no file I/O, and a fresh process opens one SQLite connection, not two."""
    if not state.configured():
        return None
    gate.follow(state.directory())
    taken = state.now()
    host = state.host_name()
    readings = [
        DiskReading(
            host,
            os.fsencode(fs.mount_point),
            reading_identity(fs.device, fs.fs_type, identity),
            taken,
            fs.total_bytes or 0,
            fs.used_bytes,
            fs.free_bytes or 0,
            fs.inodes.used if fs.inodes else None,
            fs.inodes.free if fs.inodes else None,
        )
        for fs, identity in zip(filesystems, identities or [None] * len(filesystems), strict=True)
        if fs.status == "ok" and fs.used_bytes is not ABSENT
    ]
    gate.answered(key, readings)
    due = gate.due(readings)
    if not due:
        return None  # each filesystem has a recent reading and has not moved since: nothing to add

    def save(_: None) -> str | None:
        store = state.active()
        if store is None:
            return None
        saved = store.save_readings(due)
        if not saved.ok:
            return f"History: {saved.reason}."
        gate.kept(due)
        return None

    return await run_in_thread(save, None, None)


def record_baseline(
    base: bytes,
    manifest: bytes,
    algorithm: str,
    options: WalkOptions,
    partial: bool,
    unreadable: recording.Unreadable = recording.NOTHING_UNREADABLE,
) -> str:
    """hash_tree's manifest kept as an integrity baseline of ``base``, with what it could not read;
    the sentence for the answer. In a worker."""
    kept = recording.record_baseline(
        state.active(), base, manifest, algorithm, options, partial, state.now, unreadable
    )
    if kept.history_off:
        return f"No baseline kept: history is off ({state.off_because()})."
    if not kept.kept:
        return f"No baseline kept: {kept.unsaved if kept.unsaved is not None else kept.unreadable}."
    said = f"Integrity baseline of {plural(kept.files, 'file')} kept (what_changed compares against it)."
    return " ".join([said, *unread_kept(kept.unread, kept.unrecorded)])


def unread_kept(unread: int, unrecorded: int) -> list[str]:
    """What a baseline says of the files and directories it could not read: recorded as such, so
    what_changed can say it cannot tell whether they changed (never 'added'); those past the bound
    counted only, and called added once readable."""
    said = []
    if unread:
        one = unread == 1
        said.append(
            f"{plural(unread, 'file or directory', 'files or directories')} it could not read "
            f"{'is' if one else 'are'} recorded as unreadable: once readable, what_changed says it cannot "
            f"tell whether {'it' if one else 'they'} changed."
        )
    if unrecorded:
        one = unrecorded == 1
        said.append(
            f"{plural(unrecorded, 'more file or directory', 'more files or directories')} it could not read "
            f"{'is' if one else 'are'} past what a baseline records and not in it: what_changed will call "
            f"{'it' if one else 'them'} added once "
            f"{'it' if one else 'they'} can be read."
        )
    return said
