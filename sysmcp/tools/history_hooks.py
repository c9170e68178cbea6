"""The small hooks through which dir_usage and hash_tree leave history behind: the words.

Why here: the store work is the engine's (``sysmcp.history.recording``); what stays here is each
tool's one call and the sentence its answer says when a write failed. Every hook does nothing when
history is off (``sysmcp.history.state.active()`` is None).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sysmcp.history import recording, state
from sysmcp.history.snapshots import ScanSnapshot
from sysmcp.render import plural

if TYPE_CHECKING:
    from sysmcp.engine.usage import Usage, UsageRequest
    from sysmcp.engine.walk import WalkOptions


def recorded_scan(
    request: UsageRequest, run: Callable[[UsageRequest], Usage]
) -> tuple[Usage, ScanSnapshot | None, str | None]:
    """``run(request)``, recording every directory's totals for history when history is on: the
    usage, the snapshot saved (None if none) and a sentence when it could not be saved. In a worker."""
    done = recording.record_scan(state.active(), request, run, state.now)
    return done.usage, done.snapshot, None if done.unsaved is None else f"History: {done.unsaved}."


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
    past = kept.nodes_unrecorded
    cut = [
        f"{plural(past, 'more symbolic link, directory or special file', 'more symbolic links, directories or special files')}"
        f" past what a baseline records (250,000) {'is' if past == 1 else 'are'} counted, not kept: what_changed "
        f"does not compare {'it' if past == 1 else 'them'}."
    ]
    return " ".join([said, *unread_kept(kept.unread, kept.unrecorded), *cut * bool(past)])


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
