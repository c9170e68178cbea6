"""Reclaim plans: what could be freed, with each file's identity, and acting on a reviewed plan alone.

``build_plan`` is read-only: it asks each class finder (``reclaim._classes``) where its files are, keeps
the ones inside the scope, and counts the disk blocks each item would free, each inode once and only
when every one of its links is in the plan (a hard link elsewhere keeps the blocks in use). Every path
carries its identity (device, inode, size, mtime_ns, ctime_ns, owner, group, mode) so that acting later
can tell a file that changed since it was planned; a duplicate's is the one its open descriptor had
when ``find_duplicates`` read its bytes.

``apply_items`` is the one thing here that writes, and only on items of a stored plan whose every file
(kept copies included) lies inside the roots: a plan reaching outside is refused whole. Each path is
reached by walking from ``/`` one component at a time with ``O_NOFOLLOW`` (``opens.open_parent``),
looked at with ``fstatat(AT_SYMLINK_NOFOLLOW)`` relative to the parent's descriptor and compared with
its planned identity. It is then renamed to a private name in the same directory
(``renameat2(RENAME_NOREPLACE)``, ``platform.rename_exclusive``), so a file renamed over the planned
name after the look is never the one acted on: the entry under the private name is looked at again,
and only if it is the planned file is it unlinked; otherwise it goes back to its name and is skipped
with the reason. A duplicate goes only once its bytes were compared again with the kept copy's, both
opened without following links relative to their parents' descriptors, the kept copy still the planned
inode inside the roots. What remains: between the second look and the unlink, the entry has a name
nobody else chose; a user who can write the directory can still rename something onto that private
name, and where the platform has no ``RENAME_NOREPLACE`` the rename aside itself is a check then an
act (docs/reclaim.md). The bytes freed are measured (``fstatvfs`` of the parent before and after).
A container's log is not removed but emptied (``_empty``): reached the same way, opened for writing
(``O_NOFOLLOW|O_NONBLOCK``) only while it is the planned regular inode with the planned owner, and
``ftruncate``d on that descriptor; its engine keeps writing to it.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import os
import secrets
import stat
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from sysmcp import platform
from sysmcp.engine.calls import Cancel, Progress, never_cancelled, no_progress
from sysmcp.engine.faults import NotFound, Refused
from sysmcp.engine.opens import (
    FileSwap,
    NotRegularFile,
    closing_fd,
    extended_attributes,
    open_parent,
    open_regular_at,
)
from sysmcp.engine.paths import escaped
from sysmcp.engine.procs import link_confined, mapped_anywhere
from sysmcp.reclaim import _classes as classes
from sysmcp.reclaim._classes import Copy, Proposal, RootsLayout


@dataclass(frozen=True, slots=True)
class Identity:
    """What a file was when planned: anything different later means it changed."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int
    nlink: int
    disk: int  # st_blocks * 512
    uid: int  # the owner, group and mode bits: who the file belongs to and who may change it
    gid: int
    mode: int

    @classmethod
    def of(cls, st: os.stat_result) -> Identity:
        return cls(
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_nlink,
            st.st_blocks * 512,
            st.st_uid,
            st.st_gid,
            st.st_mode,
        )

    def same_file(self, st: os.stat_result, *, ctime: bool = True) -> bool:
        """The same regular file, unchanged: inode, size, mtime, owner, group and mode (and ctime,
        unless this run moved it: a rename or a link of its own)."""
        return (
            stat.S_ISREG(st.st_mode)
            and (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_uid, st.st_gid, st.st_mode)
            == (self.dev, self.ino, self.size, self.mtime_ns, self.uid, self.gid, self.mode)
            and (not ctime or st.st_ctime_ns == self.ctime_ns)
        )


@dataclass(frozen=True, slots=True)
class PlannedFile:
    path: bytes
    identity: Identity


@dataclass(frozen=True, slots=True)
class Item:
    id: str
    klass: str
    entries: tuple[PlannedFile, ...]
    bytes: int  # disk bytes it would free
    command: str | None
    cost: str
    safety: str
    method: str
    action: str  # delete | truncate | command
    note: str | None = None
    holders: tuple[dict[str, object], ...] = ()
    shared: int = 0  # disk bytes of files whose other hard links stay (not counted in ``bytes``)
    keep: PlannedFile | None = None  # duplicates: the kept copy, which ``:link`` makes each entry a name of
    no_link: str | None = None  # duplicates: why ``:link`` is not offered (owner, mode, ACLs, filesystem)

    @property
    def held(self) -> bool:
        """A deleted file held open: truncated through its holder's ``/proc/PID/fd/N``, it has no name."""
        return self.klass == classes.HELD

    @property
    def emptied(self) -> bool:
        """A named file emptied in place, not removed: a container's log, which its engine keeps writing."""
        return self.action == "truncate" and not self.held

    def facts(self) -> dict[str, Any]:
        """Its words and figures, no files: what the history store keeps (``class``, ``shared_bytes``:
        the answer's names)."""
        return {_STORED.get(name, name): getattr(self, name) for name in _FACTS}

    @classmethod
    def from_facts(
        cls, facts: dict[str, Any], entries: tuple[PlannedFile, ...], keep: PlannedFile | None
    ) -> Item:
        facts = {"no_link": None, **facts}  # a plan kept before items said why they cannot be linked
        named = {name: facts[_STORED.get(name, name)] for name in _FACTS}
        return cls(**{**named, "holders": tuple(named["holders"])}, entries=entries, keep=keep)

    @property
    def linkable(self) -> bool:
        """Duplicates that match the kept copy (filesystem, owner, group, mode, ACLs, extended attributes)
        can become hard links to it instead of going."""
        return (
            self.keep is not None
            and self.no_link is None
            and all(e.identity.dev == self.keep.identity.dev for e in self.entries)
        )


#: An item's fields the history store keeps as facts (its files apart), and their stored names.
_FACTS = tuple(f.name for f in fields(Item) if f.name not in ("entries", "keep"))
_STORED = {"klass": "class", "shared": "shared_bytes"}


@dataclass(frozen=True, slots=True)
class Plan:
    id: str
    created: float  # wall-clock seconds (for people; nothing is decided on it)
    scope: tuple[bytes, ...]
    items: tuple[Item, ...]
    #: Keys this plan's confirmation codes; kept with the plan (never shown), so any server process
    #: that reads the plan back checks a code another one gave.
    secret: bytes = b""
    #: Files a class found that are marked immutable or append-only (``chattr +i``/``+a``), or are to be
    #: removed from a directory so marked, left out of every item: someone marked them to stay. Said when
    #: the plan is made; not kept with it.
    protected: tuple[bytes, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(item.bytes for item in self.items)

    def item(self, item_id: str) -> Item | None:
        return next((item for item in self.items if item.id == item_id), None)


#: An item id with this suffix asks for the duplicates to be replaced by hard links to the kept copy.
LINK = ":link"


def choose(plan: Plan, item_ids: Sequence[str]) -> list[tuple[Item, str]]:
    """The named items and what to do to each (``delete``, ``truncate`` or ``link``), or why not."""
    chosen: dict[str, tuple[Item, str]] = {}
    for given in dict.fromkeys(item_ids):
        base = given.removesuffix(LINK)
        item = plan.item(base)
        if item is None:
            raise NotFound(f"plan {plan.id} has no item {base}")
        if item.action == "command":
            raise Refused(f"item {base} is freed by its vendor's command ({item.command}), not by sysmcp")
        if given.endswith(LINK) and not item.linkable:
            why = item.no_link or "only duplicates on one filesystem"
            raise Refused(f"item {base} cannot be replaced by hard links ({why})")
        if base in chosen:
            raise Refused(f"item {base} is named twice (both removed and hard-linked)")
        chosen[base] = (item, "link" if given.endswith(LINK) else item.action)
    return list(chosen.values())


@dataclass(frozen=True, slots=True)
class PlanRequest:
    scope: tuple[bytes, ...] = (b"/",)  # resolved absolute paths; items must lie inside one of them
    layout: RootsLayout = field(default_factory=RootsLayout)
    classes: tuple[str, ...] | None = None  # None: every class
    #: Sets of identical files, each copy as it was when its bytes were read (a bare path: looked at now).
    duplicates: Sequence[Sequence[bytes | Copy]] = ()


def build_plan(
    request: PlanRequest, progress: Progress = no_progress, cancel: Cancel = never_cancelled
) -> Plan:
    """Every class's items inside the scope, largest first, with identities and honest byte counts;
    ``progress`` counts the classes looked at."""
    found: list[Proposal] = []
    finders = [f for name, f in classes.CLASSES.items() if request.classes is None or name in request.classes]
    # The classes look only inside the scope: a place outside it is never listed (the scope below holds).
    layout = request.layout if b"/" in request.scope else replace(request.layout, scope=request.scope)
    for done, finder in enumerate(finders, 1):
        cancel()
        found += finder(layout)
        progress(done, len(finders))
    if request.classes is None or "duplicate" in request.classes:
        # A copy another item removes or empties, or one a class takes (in the trash, a cache, the logs; a
        # stray core file), is no copy of its set: kept, it would go with that item, or with the tool that
        # empties the place (emptying the trash, logrotate), and take the last copy with it.
        going, claimed = {path for group in found for path, _st in group.paths}, classes.taken(layout)

        def stays(copy: bytes | Copy) -> bool:
            path = copy if isinstance(copy, bytes) else copy[0]
            return path not in going and not claimed(path)

        found += classes.duplicates([[c for c in copies if stays(c)] for copies in request.duplicates])
    kept: list[tuple[Proposal, list[tuple[bytes, os.stat_result]]]] = []
    protected: list[bytes] = []
    directories: dict[bytes, str | None] = {}  # directory → its flag (``classes.directory_protection``)
    for group in found:
        cancel()
        paths = [
            (path, st) for path, st in group.paths if group.held or classes.within_scope(path, request.scope)
        ]
        if group.held and not any(classes.within_scope(_target(path), request.scope) for path, _ in paths):
            paths = []
        if not group.held:  # a deleted file has no name to mark
            # and a name to remove (or replace by a link) none in a marked directory: only emptying goes
            removes = group.action != "truncate"
            marked = {
                path
                for path, st in paths
                if classes.protection(None, path, st) is not None
                or (removes and classes.directory_protection(path, directories) is not None)
            }
            protected += [path for path, _st in paths if path in marked]
            paths = [(path, st) for path, st in paths if path not in marked]
        if not paths and group.figure is None:
            continue
        if group.action == "command" and b"/" not in request.scope:
            continue  # a container engine's store is no path below the scope (unless / is one of it)
        kept.append((group, paths))
    # how many of each inode's names the plan holds
    links = Counter((st.st_dev, st.st_ino) for _group, paths in kept for _path, st in paths)
    counted: set[tuple[int, int]] = set()
    taken: set[str] = set()  # item ids
    items: list[Item] = []
    for group, paths in kept:
        freed = shared = 0
        for _path, st in paths:
            key = (st.st_dev, st.st_ino)
            if key in counted:
                continue
            counted.add(key)
            if group.action == "truncate" or st.st_nlink <= links[key]:
                freed += st.st_blocks * 512
            else:
                shared += st.st_blocks * 512
        if group.figure is not None:
            freed = group.figure
        if not freed and not shared:
            continue
        items.append(
            Item(
                **{name: getattr(group, name) for name in _PROPOSED},
                id=_item_id(group, taken),
                entries=tuple(PlannedFile(path, Identity.of(st)) for path, st in paths),
                bytes=freed,
                holders=tuple(group.holders),
                shared=shared,
                keep=PlannedFile(group.keep[0], Identity.of(group.keep[1])) if group.keep else None,
            )
        )
    items.sort(key=lambda item: (-item.bytes, item.id))
    return Plan(
        secrets.token_hex(6),
        time.time(),
        request.scope,
        tuple(items),
        secrets.token_bytes(32),
        tuple(dict.fromkeys(protected)),
    )


#: An item's fields its class finder's ``Proposal`` gives as they are.
_PROPOSED = ("klass", "command", "cost", "safety", "method", "action", "note", "no_link")


def _target(proc_link: bytes) -> bytes:
    """The name a deleted-open file had (``/proc/PID/fd/N`` → ``/var/log/x.log``), for scoping."""
    try:
        return os.readlink(proc_link).removesuffix(b" (deleted)")
    except OSError:
        return b""


def _item_id(group: Proposal, taken: set[str]) -> str:
    """``class-HEX``, from the class and place, and not one of the plan's ids ``taken`` already: two
    places can share it (its 32 bits, as often as not among ~77,000 items; names that differ only in
    bytes that are not UTF-8, one ``key``), and then the second takes the next free one."""
    text, salt = f"{group.klass}\0{group.key}", 0
    while True:
        digest = hashlib.blake2s(text.encode(errors="surrogateescape"), digest_size=4)
        if (item_id := f"{group.klass}-{digest.hexdigest()}") not in taken:
            taken.add(item_id)
            return item_id
        salt += 1
        text = f"{group.klass}\0{group.key}\0{salt}"


def confirmation_code(secret: bytes, plan: Plan, item_ids: Sequence[str]) -> str:
    """A short code bound to the plan, the exact item list, their files and bytes: a second call must
    carry it, and acts on exactly the files the first one named."""
    chosen = sorted(set(item_ids))
    bases = {item_id.removesuffix(LINK) for item_id in chosen}
    picked = [item for item in plan.items if item.id in bases]
    total = sum(item.bytes for item in picked)
    code = hashlib.blake2s("\0".join([plan.id, *chosen, str(total)]).encode(), key=secret[:32], digest_size=5)
    for item in picked:
        for entry in item.entries:
            code.update(b"\0" + entry.path)
    return code.hexdigest()


@dataclass(slots=True)
class FileResult:
    """What happened to one path."""

    path: bytes
    done: bool
    #: Why it was skipped: "changed", "symlink", "gone", "outside", "mounted" (a mount on it now), "mapped"
    #: (a deleted file a process maps now: truncating it would kill that process), "maps_unreadable" (a
    #: process whose maps may not be read might map it), "owner"
    #: and "not_regular" (a log to empty whose owner changed, or that is no regular file now), "differs"
    #: (its bytes are not the kept copy's), "keep_gone", "keep_changed", "attributes" (``:link``: owner,
    #: mode, ACLs or extended attributes differ), "linked", "other_filesystem", "unverified", "cancelled"
    #: (stopped while the file was aside: logged before the cancellation goes on), or the OS error. A file
    #: that could not be put back under its name says where it is: "changed; left as .sysmcp-aside-…".
    #: "writable_by_others" (``:link``: others may write the copies, so they are not made one file).
    #: "immutable", "append_only": the file is marked so (chattr); "directory_immutable",
    #: "directory_append_only": the directory holding it is.
    reason: str | None = None
    freed: int = 0  # measured on its filesystem (statvfs before and after)


@dataclass(slots=True)
class ItemResult:
    item: Item
    outcomes: list[FileResult] = field(default_factory=list)
    action: str = "delete"

    @property
    def freed(self) -> int:
        return sum(o.freed for o in self.outcomes)


#: Told of every file acted on or left alone: the item, the file, the action, what happened.
Log = Callable[[Item, PlannedFile, str, "FileResult"], None]

#: Called with each path after it was looked at and found as planned, right before it is acted on: a
#: test's hook to swap something in at that very moment (a deterministic race); nothing in use.
Between = Callable[[bytes], None]


def outside_roots(chosen: Sequence[tuple[Item, str]], allowed: Callable[[bytes], bool]) -> list[bytes]:
    """The files of the chosen items (``choose``; their kept copies included) that lie outside the roots."""
    outside: list[bytes] = []
    for item, _action in chosen:
        if item.held:  # no name now: the one it had, which the question names (``_truncate`` looks again)
            outside += [name for name in held_names(item) if not allowed(name)]
            continue
        keep = [item.keep] if item.keep is not None else []
        outside += [e.path for e in [*item.entries, *keep] if not allowed(e.path)]
    return outside


def held_names(item: Item) -> list[bytes]:
    """The names a deleted-open item's file had, as its holders were found (``file``, and its exact bytes
    in base64 as ``file_bytes`` when they are not UTF-8)."""
    names: list[bytes] = []
    for holder in item.holders:
        exact, shown = holder.get("file_bytes"), holder.get("file")
        if isinstance(exact, str):
            names.append(base64.b64decode(exact))
        elif isinstance(shown, str):
            names.append(os.fsencode(shown))
    return names


@dataclass(frozen=True, slots=True)
class ApplyRequest:
    """Named items of a kept plan to act on, within the server's roots (``allowed(path)``)."""

    plan: Plan
    item_ids: Sequence[str]
    allowed: Callable[[bytes], bool]
    log: Log = lambda item, entry, action, outcome: None
    between: Between = lambda path: None
    #: Inodes (device, inode) an earlier reclaim of this plan gave or took a name, or renamed aside and
    #: back: their ctime moved by sysmcp's own hand, so it is not what says they changed (a kept copy
    #: that gained links; the rest of its identity, and its bytes, are still compared).
    relinked: frozenset[tuple[int, int]] = frozenset()


def apply_items(
    request: ApplyRequest, progress: Progress = no_progress, cancel: Cancel = never_cancelled
) -> list[ItemResult]:
    """Delete, truncate or hard-link the files of the named items, each only if it is still what was
    planned (an id ending in ``:link``: duplicates become hard links to the kept copy); a duplicate
    only if its bytes are still the kept copy's; ``progress`` counts the files.

    A plan whose chosen items name a file outside the roots (a kept copy included) is refused whole
    (``Refused``), before anything is done.
    """
    plan, allowed, log = request.plan, request.allowed, request.log
    chosen = choose(plan, request.item_ids)
    outside = outside_roots(chosen, allowed)
    if outside:
        raise Refused(
            f"plan {plan.id} names {len(outside):,} file(s) outside the roots this server is confined to "
            "(not named here); nothing removed"
        )
    relinked = set(request.relinked)  # inodes that lost or gained a name here or before: their ctime moved
    results: list[ItemResult] = []
    done, total = 0, sum(len(item.entries) for item, _action in chosen)
    for item, action in chosen:
        applied = ItemResult(item, action=action)
        for entry in item.entries:
            cancel()
            if action == "truncate" and item.held:
                outcome = _truncate(entry, allowed, held_names(item))
            elif item.emptied:
                outcome = _empty(entry, allowed, cancel, request.between)
            else:
                act = Act(entry, item.keep, allowed, relinked, cancel, request.between)
                try:
                    outcome = act.run(link=action == "link")
                except BaseException:
                    if act.interrupted is not None:  # said, with where the file is if not under its name
                        log(item, entry, action, act.interrupted)
                    raise
            log(item, entry, action, outcome)
            applied.outcomes.append(outcome)
            done += 1
            progress(done, total)
        results.append(applied)
    return results


#: How the files compared are opened: never following a symlink, never blocking on a FIFO swapped in.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
CHUNK = 1 << 20  # bytes compared at a time (a cancel() between any two)


class Act:
    """Removing one planned file, or replacing it by a hard link to its item's kept copy (``linkat``,
    which never replaces), as the module's docstring tells; whatever does not hold puts the file back
    under its name and says why."""

    def __init__(
        self,
        entry: PlannedFile,
        keep: PlannedFile | None,
        allowed: Callable[[bytes], bool],
        relinked: set[tuple[int, int]],
        cancel: Cancel,
        between: Between,
    ) -> None:
        self.entry, self.keep, self.allowed = entry, keep, allowed
        self.relinked, self.cancel, self.between = relinked, cancel, between
        self.key = (entry.identity.dev, entry.identity.ino)
        #: Set when a cancellation or an error stopped it with the file set aside: what became of it.
        self.interrupted: FileResult | None = None

    def run(self, *, link: bool) -> FileResult:
        path = self.entry.path
        if not self.allowed(path) or (self.keep is not None and not self.allowed(self.keep.path)):
            return FileResult(path, False, "outside")
        if link and self.keep is not None and self.entry.identity.dev != self.keep.identity.dev:
            return FileResult(path, False, "other_filesystem")
        return _at_parent(path, lambda parent, name: self._beside_keep(parent, name, link))

    def _beside_keep(self, parent: int, name: bytes, link: bool) -> FileResult:
        """``_at``, with the kept copy's parent directory open too when there is a kept copy."""
        if self.keep is None:
            return self._at(parent, name, None, link)
        try:
            kept = open_parent(os.fsdecode(self.keep.path))
        except (OSError, ValueError) as exc:
            return FileResult(self.entry.path, False, "keep_gone" if _why(exc) == "gone" else "keep_changed")
        with closing_fd(kept[0]):
            return self._at(parent, name, kept, link)

    def _at(self, parent: int, name: bytes, kept: tuple[int, bytes] | None, link: bool) -> FileResult:
        path, planned = self.entry.path, self.entry.identity
        now = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISLNK(now.st_mode):
            return FileResult(path, False, "symlink")
        if (
            link
            and self.keep is not None
            and (now.st_dev, now.st_ino) == (self.keep.identity.dev, self.keep.identity.ino)
        ):
            return FileResult(path, False, "linked")
        # first: marking it (chattr) moved its ctime, and "immutable" says more than "changed"
        if (now.st_dev, now.st_ino) == self.key and (
            marked := classes.protection(parent, name, now)
        ) is not None:
            return FileResult(path, False, marked)
        if not planned.same_file(now, ctime=self.key not in self.relinked):
            return FileResult(path, False, "changed")
        if (marked := _directory_marked(parent)) is not None:
            return FileResult(path, False, marked)
        self.between(path)
        try:
            aside = _aside(parent, name)
        except PermissionError as exc:  # EPERM: the file or its directory marked since the look
            why = classes.protection(parent, name, now) or _directory_marked(parent) or _why(exc)
            return FileResult(path, False, why)
        self.relinked.add(self.key)  # the rename moved its ctime
        try:
            reason = self._proven(parent, aside, kept, link)
            if reason is None and link and kept is not None:
                reason = self._link(parent, name, kept)
                if reason is None and self.keep is not None:
                    self.relinked.add((self.keep.identity.dev, self.keep.identity.ino))
        except OSError as exc:  # a read that failed, a name taken away: back under its name, or said where
            return FileResult(path, False, _put_back(parent, aside, name, _why(exc)))
        except BaseException:
            self.interrupted = FileResult(path, False, _put_back(parent, aside, name, "cancelled"))
            raise
        if reason is not None:
            return FileResult(path, False, _put_back(parent, aside, name, reason))
        try:  # measured right before: blocks others free during the comparison are theirs
            return _freeing(path, parent, lambda: os.unlink(aside, dir_fd=parent))
        except OSError as exc:  # EPERM: marked immutable or append-only while it was aside
            return FileResult(path, False, _put_back(parent, aside, name, _refusal(parent, aside, exc)))

    def _proven(self, parent: int, aside: bytes, kept: tuple[int, bytes] | None, link: bool) -> str | None:
        """None if the entry now under ``aside`` is the planned file and (a duplicate) has exactly the
        kept copy's bytes, the kept copy being its planned inode; else why not."""
        if kept is None or self.keep is None:  # no copy to compare with: its identity is all there is
            st = os.stat(aside, dir_fd=parent, follow_symlinks=False)
            return None if self.entry.identity.same_file(st, ctime=False) else "changed"
        try:
            fd = os.open(aside, _READ, dir_fd=parent)
        except OSError as exc:
            return _why(exc)
        with closing_fd(fd):
            st = os.fstat(fd)
            if not self.entry.identity.same_file(st, ctime=False):
                return "changed"
            try:
                other = os.open(kept[1], _READ, dir_fd=kept[0])
            except OSError as exc:
                return "keep_gone" if _why(exc) == "gone" else "keep_changed"
            with closing_fd(other):
                keep_key = (self.keep.identity.dev, self.keep.identity.ino)
                kst = os.fstat(other)
                if not self.keep.identity.same_file(kst, ctime=keep_key not in self.relinked):
                    return "keep_changed"
                if link:
                    attributes = extended_attributes(fd)
                    owned = (st.st_uid, st.st_gid, st.st_mode) == (kst.st_uid, kst.st_gid, kst.st_mode)
                    if not owned or attributes is None or attributes != extended_attributes(other):
                        return "attributes"
                    if classes.written_by_others(st, attributes) is not None:  # a plan kept before this rule
                        return "writable_by_others"
                if not _same_bytes(fd, other, st.st_size, self.cancel):
                    return "differs"
                # either written while compared (its size or mtime moved): the bytes compared are not its own
                if not self.keep.identity.same_file(os.fstat(other), ctime=False):
                    return "keep_changed"
                return None if self.entry.identity.same_file(os.fstat(fd), ctime=False) else "changed"

    def _link(self, parent: int, name: bytes, kept: tuple[int, bytes]) -> str | None:
        """Give ``name`` to the kept copy (``linkat``, never following, never replacing); None if the
        name now leads to the kept copy's planned inode, else why not (a wrong link made is undone)."""
        assert self.keep is not None
        try:
            os.link(kept[1], name, src_dir_fd=kept[0], dst_dir_fd=parent, follow_symlinks=False)
        except FileExistsError:
            return "changed"  # something took the name meanwhile: it stays, and so does the file aside
        except FileNotFoundError:
            return "keep_gone"  # the kept copy's name is gone since the comparison
        except OSError as exc:  # EMLINK (the kept copy has all the names it may), EPERM, EXDEV (a bind mount)
            return exc.strerror or str(exc)  # not ``_why``: its EMLINK is FreeBSD's word for a symlink
        made = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if (made.st_dev, made.st_ino) != (self.keep.identity.dev, self.keep.identity.ino):
            os.unlink(name, dir_fd=parent)  # only a name we just made of whatever was swapped in
            return "keep_changed"
        return None


def _same_bytes(first: int, second: int, size: int, cancel: Cancel) -> bool:
    """Whether two open files hold the same ``size`` bytes, read chunk by chunk (``cmp``): stops at the
    first difference, and at a cancellation between any two chunks."""
    offset = 0
    while offset < size:
        cancel()
        one = os.pread(first, CHUNK, offset)
        two = os.pread(second, CHUNK, offset)
        if one != two or not one:
            return False
        offset += len(one)
    return os.pread(first, 1, size) == os.pread(second, 1, size) == b""


#: Bytes of a file's name its private name ends with: short enough for filesystems whose names are
#: shorter than 255 bytes (eCryptfs: 143), long enough to tell what the file was.
ASIDE_KEEPS = 100


def _aside(parent: int, name: bytes) -> bytes:
    """Rename ``name`` to a fresh private name in the same directory, never over anything; the name.
    It ends with the file's own name (its first ``ASIDE_KEEPS`` bytes), so a file left aside by a process
    that died there (SIGKILL, a power cut: nothing logged) still says what it was."""
    for _attempt in range(5):
        aside = b".sysmcp-aside-" + secrets.token_hex(8).encode() + b"-" + name[:ASIDE_KEEPS]
        with contextlib.suppress(FileExistsError):
            platform.rename_exclusive(parent, name, parent, aside)
            return aside
    raise FileExistsError(errno.EEXIST, "no free private name to set the file aside")


def _refusal(parent: int, aside: bytes, exc: OSError) -> str:
    """Why the file set aside as ``aside`` could not be removed: its flag or its directory's when either
    is marked immutable or append-only now, else the error."""
    try:
        marked = classes.protection(parent, aside, os.stat(aside, dir_fd=parent, follow_symlinks=False))
    except OSError:
        marked = None
    return marked or _directory_marked(parent) or _why(exc)


def _directory_marked(parent: int) -> str | None:
    """``directory_immutable`` or ``directory_append_only`` when the open directory ``parent`` is marked
    so now (``chattr +i`` / ``+a``): no name in it can be removed, renamed or made, whatever the file.
    Looked at on the descriptor when acting, as a plan made before the mark could not know."""
    try:
        marked = platform.protection_at(parent, b"", os.fstat(parent))
    except OSError:
        return None
    return None if marked is None else f"directory_{marked}"


def _put_back(parent: int, aside: bytes, name: bytes, reason: str = "") -> str:
    """The file set aside goes back under its name if that is still free; the reason, saying where
    the file is (escaped: it ends with the file's own name) when it could not go back."""
    try:
        platform.rename_exclusive(parent, aside, parent, name)
    except OSError:
        return f"{reason or 'failed'}; left as {escaped(aside)} (its name was taken meanwhile)"
    return reason


def _at_parent(path: bytes, act: Callable[[int, bytes], FileResult]) -> FileResult:
    """``act(parent, name)`` with ``path``'s parent directory open (reached from ``/`` one component at a
    time with ``O_NOFOLLOW``: ``open_parent``) and closed after; an ``OSError`` says why the file was left."""
    try:
        parent, name = open_parent(os.fsdecode(path))
    except (OSError, ValueError) as exc:
        return FileResult(path, False, _why(exc))
    with closing_fd(parent):
        try:
            return act(parent, name)
        except OSError as exc:
            return FileResult(path, False, _why(exc))


def _freeing(path: bytes, fd: int, act: Callable[[], object]) -> FileResult:
    """``act()`` done to ``path``, with what it freed on the filesystem of ``fd`` (statvfs before and after)."""
    before = os.fstatvfs(fd)
    act()
    after = os.fstatvfs(fd)
    return FileResult(path, True, None, max(0, (after.f_bfree - before.f_bfree) * after.f_frsize))


def _truncate(entry: PlannedFile, allowed: Callable[[bytes], bool], names: Sequence[bytes]) -> FileResult:
    """Empty a deleted file still held open, through its holder's ``/proc/PID/fd/N``: the same inode,
    nameless (its ``nlink`` 0), with its planned owner and one of its planned former ``names``, or
    nothing is done. The size may have moved (it is being written). The name, since a freed inode
    number is handed straight back (ext4): the holder's next deleted file, on the same descriptor
    number, may have the planned one, and the approval named the file by its name."""
    path, planned = entry.path, entry.identity
    target = _target(path)
    if not target or not allowed(target):
        return FileResult(path, False, "outside" if target else "gone")
    if names and target not in names:
        return FileResult(path, False, "changed")
    try:
        fd = _open_planned(path, planned)
        if fd is None:
            return FileResult(path, False, "changed")
        with closing_fd(fd):
            now = os.fstat(fd)
            if (
                (now.st_dev, now.st_ino) != (planned.dev, planned.ino)
                or now.st_nlink != 0
                or not stat.S_ISREG(now.st_mode)
            ):
                return FileResult(path, False, "changed")
            if now.st_uid != planned.uid:  # the approval named its owner: another's is not the file it named
                return FileResult(path, False, "owner")
            if not link_confined(path, now.st_dev):  # held in another mount namespace: its path is not ours
                return FileResult(path, False, "outside")
            # Last before the truncation: a process that maps the file from here on is killed (SIGBUS)
            mapped = mapped_anywhere(path, now.st_dev, now.st_ino)
            if mapped is not None:
                return FileResult(path, False, "mapped" if mapped == "mapped" else "maps_unreadable")
            return _freeing(path, fd, lambda: os.ftruncate(fd, 0))
    except OSError as exc:
        return FileResult(path, False, _why(exc))


#: How a log is opened to be emptied: for writing, never through a symlink, never waiting on a FIFO.
_EMPTY = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _empty(
    entry: PlannedFile, allowed: Callable[[bytes], bool], cancel: Cancel, between: Between
) -> FileResult:
    """Empty a named file its writer keeps open (a container's log), as the module's docstring tells:
    looked at before the open, so no device or FIFO is opened, and checked again on the descriptor.
    Its size and times are not compared: the engine keeps writing to it."""
    path, planned = entry.path, entry.identity
    if not allowed(path):
        return FileResult(path, False, "outside")

    def at(parent: int, name: bytes) -> FileResult:
        now = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if (reason := _unlike(planned, now) or classes.protection(parent, name, now)) is not None:
            return FileResult(path, False, reason)
        between(path)
        try:
            fd, opened = open_regular_at(name, dir_fd=parent, expect=now, flags=_EMPTY)
        except OSError as exc:  # ENXIO: a FIFO swapped in after the look, with no reader
            if exc.errno != errno.ENXIO:
                raise
            return FileResult(path, False, "not_regular")
        with closing_fd(fd):
            if (reason := _unlike(planned, opened)) is not None:
                return FileResult(path, False, reason)
            cancel()  # the last moment nothing has been done
            return _freeing(path, fd, lambda: os.ftruncate(fd, 0))

    return _at_parent(path, at)


def _unlike(planned: Identity, st: os.stat_result) -> str | None:
    """Why a file to empty is not the planned one: a symlink, not a regular file, another inode, one
    with another name now (a hard link), or the planned inode with another owner now (it is never a way to another user's file); None if it is."""
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if not stat.S_ISREG(st.st_mode):
        return "not_regular"
    if (st.st_dev, st.st_ino) != (planned.dev, planned.ino):
        return "changed"
    if st.st_nlink != 1:  # another name elsewhere: emptying the log would empty that file too
        return "hard_linked"
    return "owner" if st.st_uid != planned.uid else None


def _open_planned(link: bytes, planned: Identity) -> int | None:
    """``/proc/PID/fd/N`` opened for writing if it still leads to the planned regular file, else None.

    Opening the link re-opens whatever its holder put behind that number since, with our rights (a
    device such as /dev/watchdog, held by an ``O_PATH`` descriptor its holder could not even open):
    so the inode is pinned with ``O_PATH`` (nothing is opened) and looked at first."""
    with closing_fd(os.open(link, os.O_PATH | os.O_CLOEXEC)) as pinned:
        st = os.fstat(pinned)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (planned.dev, planned.ino):
            return None
        return os.open(
            f"{platform.PROC_SELF_FD}/{pinned}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        )


#: What an errno says of a file left alone (EBUSY: renaming or removing a mount point).
_ERRNO_WHY = {errno.ELOOP: "symlink", errno.EMLINK: "symlink", errno.EBUSY: "mounted"}


def _why(exc: BaseException) -> str:
    if isinstance(exc, NotRegularFile):
        return "not_regular"
    if isinstance(exc, FileSwap | NotADirectoryError):
        return "changed"
    if isinstance(exc, FileNotFoundError):
        return "gone"
    if isinstance(exc, OSError):
        return _ERRNO_WHY.get(exc.errno or 0) or exc.strerror or str(exc)
    return str(exc)
