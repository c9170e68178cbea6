"""Reclaim plans: what could be freed, with each file's identity, and acting on a reviewed plan alone.

``build_plan`` is read-only: it asks each class finder (``reclaim_classes``) where its files are, keeps
the ones inside the scope, and counts the disk blocks each item would free, each inode once and only
when every one of its links is in the plan (a hard link elsewhere keeps the blocks in use). Every path
carries its identity (device, inode, size, mtime_ns, ctime_ns) so that acting later can tell a file
that changed since it was planned.

``apply_items`` is the one thing here that writes, and only on items of a stored plan: each path is
reached by walking from ``/`` one component at a time with ``O_NOFOLLOW`` (``safeopen.open_parent``),
looked at with ``fstatat(AT_SYMLINK_NOFOLLOW)`` relative to the parent's descriptor, compared with its
planned identity and only then unlinked relative to that same descriptor: no path is resolved twice,
so nothing swapped in between the look and the unlink can be hit. The bytes freed are measured
(``fstatvfs`` of the parent before and after), not assumed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sysmcp.fs import reclaim_classes as classes
from sysmcp.fs.errors import NotFound, Refused
from sysmcp.fs.openfiles import link_confined
from sysmcp.fs.reclaim_classes import Found, RootsLayout
from sysmcp.fs.safeopen import open_parent

__all__ = [
    "LINK",
    "Applied",
    "Entry",
    "Identity",
    "Item",
    "Outcome",
    "Plan",
    "PlanRequest",
    "RootsLayout",
    "apply_items",
    "build_plan",
    "choose",
    "confirmation_code",
]

Checkpoint = Callable[[], None]


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
        return (
            stat.S_ISREG(st.st_mode)
            and (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            == (self.dev, self.ino, self.size, self.mtime_ns)
            and (not ctime or st.st_ctime_ns == self.ctime_ns)
        )


@dataclass(frozen=True, slots=True)
class Entry:
    path: bytes
    identity: Identity


@dataclass(frozen=True, slots=True)
class Item:
    id: str
    klass: str
    entries: tuple[Entry, ...]
    bytes: int  # disk bytes it would free
    command: str | None
    cost: str
    safety: str
    method: str
    action: str  # delete | truncate | command
    note: str | None = None
    holders: tuple[dict[str, object], ...] = ()
    shared: int = 0  # disk bytes of files whose other hard links stay (not counted in ``bytes``)
    keep: Entry | None = None  # duplicates: the kept copy, which ``:link`` makes each entry a name of

    def facts(self) -> dict[str, Any]:
        """Its words and figures, no files: what the answer shows and the history store keeps alike."""
        return {
            "id": self.id,
            "class": self.klass,
            "bytes": self.bytes,
            "shared_bytes": self.shared,
            "command": self.command,
            "cost": self.cost,
            "safety": self.safety,
            "method": self.method,
            "action": self.action,
            "note": self.note,
            "holders": [dict(h) for h in self.holders],
        }

    @classmethod
    def from_facts(cls, facts: dict[str, Any], entries: tuple[Entry, ...], keep: Entry | None) -> Item:
        return cls(
            id=str(facts["id"]),
            klass=str(facts["class"]),
            entries=entries,
            bytes=int(facts["bytes"]),
            command=facts["command"],
            cost=str(facts["cost"]),
            safety=str(facts["safety"]),
            method=str(facts["method"]),
            action=str(facts["action"]),
            note=facts["note"],
            holders=tuple(dict(h) for h in facts["holders"]),
            shared=int(facts["shared_bytes"]),
            keep=keep,
        )

    @property
    def linkable(self) -> bool:
        """Duplicates on the kept copy's filesystem can become hard links to it instead of going."""
        return self.keep is not None and all(e.identity.dev == self.keep.identity.dev for e in self.entries)


@dataclass(frozen=True, slots=True)
class Plan:
    id: str
    created: float  # wall-clock seconds (for people; nothing is decided on it)
    scope: tuple[bytes, ...]
    items: tuple[Item, ...]
    #: Keys this plan's confirmation codes; kept with the plan (never shown), so any server process
    #: that reads the plan back checks a code another one gave.
    secret: bytes = b""

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
            raise Refused(f"item {base} cannot be replaced by hard links (only duplicates on one filesystem)")
        if base in chosen:
            raise Refused(f"item {base} is named twice (both removed and hard-linked)")
        chosen[base] = (item, "link" if given.endswith(LINK) else item.action)
    return list(chosen.values())


@dataclass(frozen=True, slots=True)
class PlanRequest:
    scope: tuple[bytes, ...] = (b"/",)  # resolved absolute paths; items must lie inside one of them
    layout: RootsLayout = field(default_factory=RootsLayout)
    classes: tuple[str, ...] | None = None  # None: every class
    duplicates: Sequence[Sequence[bytes]] = ()  # groups of identical files, the kept copy first
    #: The history hook: items for "what grew since the last snapshot" (None: no history store).
    grew: Callable[[], Sequence[Found]] | None = None
    min_bytes: int = 1


def _inside(path: bytes, scope: Sequence[bytes]) -> bool:
    return any(root == b"/" or path == root or path.startswith(root.rstrip(b"/") + b"/") for root in scope)


def build_plan(request: PlanRequest, checkpoint: Checkpoint | None = None) -> Plan:
    """Every class's items inside the scope, largest first, with identities and honest byte counts."""
    found: list[Found] = []
    for name, finder in classes.CLASSES.items():
        if request.classes is not None and name not in request.classes:
            continue
        if checkpoint is not None:
            checkpoint()
        found += finder(request.layout)
    if request.classes is None or "duplicate" in request.classes:
        found += classes.duplicates(request.duplicates)
    if request.grew is not None and (request.classes is None or "grew" in request.classes):
        found += request.grew()
    links: dict[tuple[int, int], int] = {}  # how many of each inode's names the plan holds
    kept: list[tuple[Found, list[tuple[bytes, os.stat_result]]]] = []
    for group in found:
        paths = [
            (path, st)
            for path, st in group.paths
            if group.action == "truncate" or _inside(path, request.scope)
        ]
        if group.action == "truncate" and not any(_inside(_target(path), request.scope) for path, _ in paths):
            paths = []
        if not paths and group.figure is None:
            continue
        if group.action == "command" and request.scope != (b"/",):
            continue  # a container engine's store is no path below the scope
        for _path, st in paths:
            links[(st.st_dev, st.st_ino)] = links.get((st.st_dev, st.st_ino), 0) + 1
        kept.append((group, paths))
    counted: set[tuple[int, int]] = set()
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
        if freed < request.min_bytes and not shared:
            continue
        items.append(
            Item(
                id=_item_id(group),
                klass=group.klass,
                entries=tuple(Entry(path, Identity.of(st)) for path, st in paths),
                bytes=freed,
                command=group.command,
                cost=group.cost,
                safety=group.safety,
                method=group.method,
                action=group.action,
                note=group.note,
                holders=tuple(group.holders),
                shared=shared,
                keep=Entry(group.keep[0], Identity.of(group.keep[1])) if group.keep is not None else None,
            )
        )
    items.sort(key=lambda item: (-item.bytes, item.id))
    return Plan(secrets.token_hex(6), time.time(), request.scope, tuple(items), secrets.token_bytes(32))


def _target(proc_link: bytes) -> bytes:
    """The name a deleted-open file had (``/proc/PID/fd/N`` → ``/var/log/x.log``), for scoping."""
    try:
        return os.readlink(proc_link).removesuffix(b" (deleted)")
    except OSError:
        return b""


def _item_id(group: Found) -> str:
    digest = hashlib.blake2s(f"{group.klass}\0{group.key}".encode(errors="surrogateescape"), digest_size=4)
    return f"{group.klass}-{digest.hexdigest()}"


def confirmation_code(secret: bytes, plan: Plan, item_ids: Sequence[str]) -> str:
    """A short code bound to the plan, the exact item list and its bytes: a second call must carry it."""
    chosen = sorted(set(item_ids))
    bases = {item_id.removesuffix(LINK) for item_id in chosen}
    total = sum(item.bytes for item in plan.items if item.id in bases)
    message = "\0".join([plan.id, *chosen, str(total)]).encode()
    return hashlib.blake2s(message, key=secret[:32], digest_size=5).hexdigest()


@dataclass(slots=True)
class Outcome:
    """What happened to one path."""

    path: bytes
    done: bool
    reason: str | None = None  # why it was skipped: "changed", "symlink", "gone", "outside", or the OS error
    freed: int = 0  # measured on its filesystem (statvfs before and after)


@dataclass(slots=True)
class Applied:
    item: Item
    outcomes: list[Outcome] = field(default_factory=list)
    action: str = "delete"

    @property
    def freed(self) -> int:
        return sum(o.freed for o in self.outcomes)

    @property
    def skipped(self) -> int:
        return sum(1 for o in self.outcomes if not o.done)


#: Told of every file acted on or left alone: the item, the file, the action, what happened.
Log = Callable[[Item, Entry, str, "Outcome"], None]


def _nothing(item: Item, entry: Entry, action: str, outcome: Outcome) -> None:
    return None


def apply_items(
    plan: Plan,
    item_ids: Sequence[str],
    allowed: Callable[[bytes], bool],
    *,
    log: Log = _nothing,
    checkpoint: Checkpoint | None = None,
) -> list[Applied]:
    """Delete, truncate or hard-link the files of the named items, each only if it is still what was
    planned (an id ending in ``:link``: duplicates become hard links to the kept copy).

    ``allowed(path)`` is the server's roots: a path outside them is skipped whatever the plan says.
    """
    chosen = choose(plan, item_ids)
    relinked: set[tuple[int, int]] = set()  # inodes that lost or gained a name here: their ctime moved
    results: list[Applied] = []
    for item, action in chosen:
        applied = Applied(item, action=action)
        for entry in item.entries:
            if checkpoint is not None:
                checkpoint()
            if action == "truncate":
                outcome = _truncate(entry, allowed)
            elif action == "link" and item.keep is not None:
                outcome = relink(entry, item.keep, allowed, relinked)
            else:
                outcome = _unlink(entry, allowed, relinked)
            log(item, entry, action, outcome)
            applied.outcomes.append(outcome)
        results.append(applied)
    return results


def _unlink(entry: Entry, allowed: Callable[[bytes], bool], relinked: set[tuple[int, int]]) -> Outcome:
    path, planned = entry.path, entry.identity
    if not allowed(path):
        return Outcome(path, False, "outside")
    try:
        parent, name = open_parent(os.fsdecode(path))
    except (OSError, ValueError) as exc:
        return Outcome(path, False, _why(exc))
    try:
        try:
            now = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError as exc:
            return Outcome(path, False, _why(exc))
        if stat.S_ISLNK(now.st_mode):
            return Outcome(path, False, "symlink")
        key = (planned.dev, planned.ino)
        if not planned.same_file(now, ctime=key not in relinked):
            return Outcome(path, False, "changed")
        before = os.fstatvfs(parent)
        try:
            os.unlink(name, dir_fd=parent)
        except OSError as exc:
            return Outcome(path, False, _why(exc))
        relinked.add(key)
        after = os.fstatvfs(parent)
        return Outcome(path, True, None, max(0, (after.f_bfree - before.f_bfree) * after.f_frsize))
    finally:
        os.close(parent)


def relink(
    entry: Entry, keep: Entry, allowed: Callable[[bytes], bool], relinked: set[tuple[int, int]]
) -> Outcome:
    """Replace a duplicate by a hard link to the kept copy, so its name stays and its blocks go.

    Both files are looked at relative to their parents' descriptors (reached without following any
    symlink) and must still be what was planned; the link is made under a temporary name in the
    duplicate's directory (``linkat`` without following), checked to be the kept copy's inode, and
    renamed over the duplicate, which is re-checked just before. A failure removes the temporary name.
    """
    path = entry.path
    if not allowed(path) or not allowed(keep.path):
        return Outcome(path, False, "outside")
    if entry.identity.dev != keep.identity.dev:
        return Outcome(path, False, "other_filesystem")
    try:
        kept_parent, kept_name = open_parent(os.fsdecode(keep.path))
    except (OSError, ValueError):
        return Outcome(path, False, "keep_changed")
    try:
        try:
            parent, name = open_parent(os.fsdecode(path))
        except (OSError, ValueError) as exc:
            return Outcome(path, False, _why(exc))
        try:
            return _relink_at((kept_parent, kept_name, keep), (parent, name, entry), relinked)
        except OSError as exc:
            return Outcome(path, False, _why(exc))
        finally:
            os.close(parent)
    finally:
        os.close(kept_parent)


def _relink_at(
    kept: tuple[int, bytes, Entry], dup: tuple[int, bytes, Entry], relinked: set[tuple[int, int]]
) -> Outcome:
    kept_parent, kept_name, keep = kept
    parent, name, entry = dup
    kept_key = (keep.identity.dev, keep.identity.ino)
    key = (entry.identity.dev, entry.identity.ino)
    now = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if stat.S_ISLNK(now.st_mode):
        return Outcome(entry.path, False, "symlink")
    if (now.st_dev, now.st_ino) == kept_key:
        return Outcome(entry.path, False, "linked")
    try:
        source = os.stat(kept_name, dir_fd=kept_parent, follow_symlinks=False)
    except OSError:
        return Outcome(entry.path, False, "keep_changed")
    if not keep.identity.same_file(source, ctime=kept_key not in relinked):
        return Outcome(entry.path, False, "keep_changed")
    if not entry.identity.same_file(now, ctime=key not in relinked):
        return Outcome(entry.path, False, "changed")
    before = os.fstatvfs(parent)
    temp = _link_temporary(kept_parent, kept_name, parent)
    renamed = False
    try:
        made = os.stat(temp, dir_fd=parent, follow_symlinks=False)
        if (made.st_dev, made.st_ino) != (source.st_dev, source.st_ino) or not stat.S_ISREG(made.st_mode):
            return Outcome(entry.path, False, "keep_changed")  # swapped between the look and the link
        again = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not entry.identity.same_file(again, ctime=key not in relinked):
            return Outcome(entry.path, False, "changed")
        os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        renamed = True
    finally:
        if not renamed:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent)
    relinked.update((key, kept_key))
    result = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if (result.st_dev, result.st_ino) != (source.st_dev, source.st_ino):
        return Outcome(entry.path, False, "unverified")
    after = os.fstatvfs(parent)
    return Outcome(entry.path, True, None, max(0, (after.f_bfree - before.f_bfree) * after.f_frsize))


def _link_temporary(source_dir: int, source: bytes, target_dir: int) -> bytes:
    """A new name for ``source`` in ``target_dir`` (``linkat`` without following a symlink)."""
    for _attempt in range(5):
        temp = b".sysmcp-link-" + secrets.token_hex(8).encode()
        try:
            os.link(source, temp, src_dir_fd=source_dir, dst_dir_fd=target_dir, follow_symlinks=False)
        except FileExistsError:
            continue
        return temp
    raise FileExistsError(errno.EEXIST, "no free temporary name for the hard link")


def _truncate(entry: Entry, allowed: Callable[[bytes], bool]) -> Outcome:
    """Empty a deleted file still held open, through its holder's ``/proc/PID/fd/N``: the same inode,
    nameless (its ``nlink`` 0), or nothing is done. The size may have moved (it is being written)."""
    path, planned = entry.path, entry.identity
    target = _target(path)
    if not target or not allowed(target):
        return Outcome(path, False, "outside" if target else "gone")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        return Outcome(path, False, _why(exc))
    try:
        now = os.fstat(fd)
        if (
            (now.st_dev, now.st_ino) != (planned.dev, planned.ino)
            or now.st_nlink != 0
            or not stat.S_ISREG(now.st_mode)
        ):
            return Outcome(path, False, "changed")
        if not link_confined(path, now.st_dev):  # held in another mount namespace: its path is not ours
            return Outcome(path, False, "outside")
        before = os.fstatvfs(fd)
        os.ftruncate(fd, 0)
        after = os.fstatvfs(fd)
        return Outcome(path, True, None, max(0, (after.f_bfree - before.f_bfree) * after.f_frsize))
    except OSError as exc:
        return Outcome(path, False, _why(exc))
    finally:
        os.close(fd)


def _why(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "gone"
    if isinstance(exc, OSError) and exc.errno in (errno.ELOOP, errno.EMLINK):
        return "symlink"
    if isinstance(exc, NotADirectoryError):
        return "changed"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)
