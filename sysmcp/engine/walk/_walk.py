"""One directory-tree engine for every tool that walks: dir_usage, find_duplicates, hash_tree.

Why descriptor-relative: every directory is opened with ``openat(parent_fd, name,
O_DIRECTORY|O_NOFOLLOW)`` and its identity (device, inode) checked against what the parent's listing
said, and every entry is ``lstat``-ed relative to that descriptor. A directory swapped for a symlink
mid-walk fails to open instead of leading the walk elsewhere, and the kernel resolves one name per
call instead of a whole path, which is also what makes this faster than a path-based ``os.walk``.

Why one engine with two faces: ``walk_files`` is the simple, stable interface (regular files, one
at a time); ``Scanner`` is what ``dir_usage`` needs on top (every entry's bytes, hard links once,
cumulative totals per directory in post-order, partial results when a budget runs out).

Memory stays bounded by the depth and width of the tree, not its size: the stack holds, per open
directory, only the subdirectories still to visit; regular files are handed out per directory and
forgotten. The one exception is the set of (device, inode) of files with more than one link.
"""

from __future__ import annotations

import errno
import fnmatch
import functools
import itertools
import os
import re
import stat
from collections import deque
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import replace

from sysmcp.engine.calls import never_cancelled
from sysmcp.engine.mounts import KERNEL_TYPES  # kernel filesystems: sizes there are fiction, walks endless
from sysmcp.engine.opens import S_IFMT
from sysmcp.engine.walk._budget import OutOfDescriptors, ScanStopped, open_again, out_of_descriptors
from sysmcp.engine.walk._mountpoints import MountPoint, holding, mount_points_below, mount_table
from sysmcp.engine.walk._types import (
    DIR_FLAGS,
    GONE,
    S_IFDIR,
    S_IFLNK,
    S_IFREG,
    FileEntry,
    Frame,
    Listing,
    Node,
    ScanConfig,
    SkipCounter,
    Subtree,
    SubtreeTotals,
    WalkOptions,
    reopen,
    same,
)

# Mount points that are pseudo whatever a container mounted on them (e.g. /dev as tmpfs).
PSEUDO_MOUNT_POINTS = frozenset({b"/proc", b"/sys", b"/dev"})
# The inode number of every btrfs subvolume's (and snapshot's) root directory (BTRFS_FIRST_FREE_OBJECTID).
BTRFS_SUBVOLUME_ROOT = 256


DEFAULTS = ScanConfig()  # every file listed, every event handed out
NEVER = 1 << 62  # a file floor (ScanConfig) no file reaches: no file is listed
# Files per Listing of a big directory, for a consumer that keeps nothing of one (``ScanConfig.listing_parts``):
# about 3 MiB of names and stat results, however many files the directory holds.
PART = 4096


def _chunks(names: Iterable[str], size: int) -> Iterable[Sequence[str]]:
    """``names`` in lists of at most ``size`` (a listed directory that small is its own chunk)."""
    if isinstance(names, list) and len(names) <= size:
        return (names,)
    iterator = iter(names)
    return iter(lambda: list(itertools.islice(iterator, size)), [])


def _names(fd: int) -> Generator[str, None, None]:
    """A big directory's names one at a time (``os.scandir`` streams; ``os.listdir`` does not)."""
    with os.scandir(fd) as iterator:
        for entry in iterator:
            yield entry.name


def _node(prefix: str, name: str, st: os.stat_result, dir_fd: int) -> Node | None:
    """What an integrity baseline records of a directory, symbolic link or special file ``name`` of
    the directory open as ``dir_fd``: a link's target is read relative to that descriptor (``readlink``
    never follows the link it reads). None for a link gone since it was listed."""
    kind = st.st_mode & S_IFMT
    target = None
    if kind == S_IFLNK:
        try:
            target = os.readlink(os.fsencode(name), dir_fd=dir_fd)
        except OSError:  # gone or replaced since the lstat: the next walk sees what is there
            return None
    rdev = st.st_rdev if kind in (stat.S_IFCHR, stat.S_IFBLK) else None
    return (os.fsencode(prefix + name), kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, rdev, target)


def _exclusion(patterns: Sequence[str]) -> Callable[[str], re.Match[str] | None] | None:
    """One compiled regex for all glob patterns, so an exclude list costs one match per test."""
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns), re.DOTALL).match


class Scanner:
    """A bounded, descriptor-relative, depth-first walk that never follows symlinks.

    ``events()`` gives a ``Listing`` (pre-order) and ``SubtreeTotals`` (post-order) per directory, with
    totals as ``du -x`` counts them (with ``one_file_system``): every entry's ``st_size`` and
    ``st_blocks * 512`` once per inode; other filesystems, excluded and vanished entries not counted;
    an unreadable directory its own size only.
    """

    def __init__(
        self,
        root: bytes,
        options: WalkOptions,
        skipped: SkipCounter,
        cancel: Callable[[], None] = never_cancelled,
        *,
        config: ScanConfig = DEFAULTS,
        fd_budget: int = 64,
        mounts: Sequence[MountPoint] | None = None,
        seen: set[tuple[int, int]] | None = None,
    ) -> None:
        self.root = os.fsencode(root)
        self.options = options
        self.skipped = skipped
        self.cancel = cancel
        self.fd_budget = max(2, fd_budget)
        self.entries = 0  # entries examined so far: progress for the caller
        self.apparent = 0  # bytes counted so far (apparent)
        self.stopped: str | None = None  # why the scan ended early, if it did
        self.root_dev: int | None = None  # st_dev of the root once opened (a spawned scanner: its parent's)
        # What the engine asked for, read once per directory; the floors are live attributes (a
        # top-N consumer raises them as its heap fills).
        self._config = config
        self._deepest = 1 << 30 if config.finished_depth is None else config.finished_depth
        self.file_floor = config.file_floor
        self.block_floor = config.block_floor
        self.eligible_files = 0
        # (dev, ino) of the multiply-linked inodes counted (here, or elsewhere: a parallel walk adds its
        # other processes'): further names of them are links. A caller walking several roots as one
        # (``du -x a b``) passes one set to each root's scanner.
        self.seen: set[tuple[int, int]] = set() if seen is None else seen
        # (dev, ino, apparent, blocks, is_regular, directory) of each multiply-linked inode counted,
        # when a parallel scan needs them to count an inode seen by two processes only once.
        self.linked: list[tuple[int, int, int, int, bool, str]] | None = None
        self._start: Frame | None = None  # walk this detached subtree instead of the root
        self._chain: list[Frame] = []  # the stack when detach() was called
        self._split: list[Frame] = []  # directories detach() read to split their subtrees further
        self._stack_ref: list[Frame] | None = None  # the running walk's stack
        # (dev, ino) of the directories above a detached subtree, the root's included, as they were when
        # it was reopened through them: a loop to any of them is a loop, however the subtree came here
        self._ancestors: frozenset[tuple[int, int]] = frozenset()
        self.base_fd: int | None = None  # the root, kept open by detach() for reopening subtrees
        self._match = _exclusion(options.exclude)
        self._pseudo: frozenset[int] | None = None
        self._on_btrfs: bool | None = None  # whether the root lies on btrfs (asked at the first new device)
        self._mount_points: dict[str, dict[str, str]] = {}
        self._mounts = mounts  # the mount table (None: read /proc/self/mountinfo when the walk starts)
        self._stop: ScanStopped | None = None
        self._reported = 0  # apparent bytes of the directory being read already added to .apparent
        # Giving work away mid-walk (a parallel walk whose other processes are running dry): its
        # ``cancel`` sets share_wanted, the walk then offers up to share_limit waiting subdirectories,
        # shallowest first, to ``share``, which returns those it could not place. The SubtreeTotals of
        # every directory above a given one goes to ``withheld`` (its totals lack the given subtrees).
        self.share: Callable[[list[Subtree]], list[Subtree]] | None = None
        self.share_wanted = False
        self.share_limit = 8
        self.withheld: list[SubtreeTotals] = []

    # -- the walk ---------------------------------------------------------------------------

    def events(self) -> Generator[Listing | SubtreeTotals, None, None]:
        """The walk itself. Raises ``OSError`` only if the root cannot be opened as a directory."""
        stack: list[Frame] = []
        if self._start is not None:  # a detached subtree: checked and counted already, not yet open
            top = self._start
            above: list[tuple[int, int]] = []
            if not self._reopen(top, above):
                if self._stop is not None:  # no descriptor left to open it with
                    self.stopped, self._stop = self._stop.reason, None
                return
            self._ancestors = frozenset(above)
        else:
            top = Frame(os.open(self.root, DIR_FLAGS), "", 0, 0, 0, 0, 0)
        stack.append(top)
        self._stack_ref = stack
        try:
            if self._start is None:
                st = os.fstat(top.fd)  # type: ignore[arg-type]
                top.dev, top.ino = st.st_dev, st.st_ino
                top.apparent, top.disk = st.st_size, st.st_blocks * 512
                self.root_dev = st.st_dev
                if self._mounts is None:
                    self._mounts = mount_table()  # read once per walk: mount points and pseudo devices
                self._mount_points = mount_points_below(self.root, self.options, self._mounts)
                self.entries += 1
                self.apparent += st.st_size
            empty, deepest = self._config.empty_listings, self._deepest
            cancel, read, enter, finish = self.cancel, self._read, self._enter, self._finish
            budget, skipped = self.fd_budget, self.skipped
            # The inode numbers of the directories the walk is inside of: one met again below itself (the
            # device too, checked on the stack) is a bind mount of it made since the mount table was
            # read, a loop (du warns of a cycle there). Numbers alone: a directory costs no tuple. A number
            # two of them share (on two devices: every tmpfs numbers from 1) is counted in ``repeated``:
            # leaving the deeper one keeps the number for the one still above.
            inside = {frame.ino for frame in self._above(top)} | {ino for _, ino in self._ancestors}
            repeated: dict[int, int] = {}
            try:
                cancel()
                if not top.listed:
                    listing = read(top)
                    if empty or listing.files or listing.links:
                        yield listing
                    if top.rest is not None:
                        del listing  # the part handed out is not held while the next is read
                        yield from self._more(top)
            except ScanStopped as stop:
                self._stop = stop
            while stack:
                try:
                    if self._stop is not None:
                        raise self._stop
                    if self.share_wanted:
                        self._give_away(stack)
                    top = stack[-1]
                    if top.subdirs:
                        name, st = top.subdirs.pop()
                        cancel()
                        known = st.st_ino in inside
                        if known and self._inside(top, st):
                            skipped.add("directory_loop")
                            continue
                        child = enter(top, name, st)
                        if child is None:
                            continue
                        if known:
                            repeated[st.st_ino] = repeated.get(st.st_ino, 0) + 1
                        else:
                            inside.add(st.st_ino)
                        stack.append(child)
                        if len(stack) > budget:
                            self._close(stack[-budget - 1])
                        listing = read(child)
                        if empty or listing.files or listing.links:
                            yield listing
                        if child.rest is not None:
                            del listing  # the part handed out is not held while the next is read
                            yield from self._more(child)
                    else:
                        stack.pop()
                        if top.ino in repeated:
                            repeated[top.ino] -= 1
                            if not repeated[top.ino]:
                                del repeated[top.ino]
                        else:
                            inside.discard(top.ino)
                        finish(top, stack, partial=self.stopped is not None)
                        if top.depth <= deepest and not top.held:
                            if top.given:
                                self.withheld.append(self._totals(top))
                            else:
                                yield self._totals(top)
                except ScanStopped as stop:  # every open directory finishes with what it has, as partial
                    self.stopped, self._stop = stop.reason, None
                    for frame in stack:
                        frame.subdirs.clear()
                        frame.partial = True
        finally:
            for frame in stack:
                self._close(frame)

    def _more(self, frame: Frame) -> Generator[Listing, None, None]:
        """The further parts of a big directory ``_read`` handed out the first part of
        (``ScanConfig.listing_parts``), until its names are all read or the walk is stopping."""
        while frame.rest is not None and self._stop is None:
            listing = self._read(frame)
            if listing.files or listing.links:
                yield listing
            del listing  # not held while the next part is read

    @staticmethod
    def _above(frame: Frame) -> Generator[Frame, None, None]:
        """``frame`` and the directories above it that this scanner knows: a handed-out subtree's
        ``parent`` chain (the frames of the walk that gave it away), else ``frame`` alone."""
        at: Frame | None = frame
        while at is not None:
            yield at
            at = at.parent

    def _inside(self, frame: Frame, st: os.stat_result) -> bool:
        """Whether the directory ``st`` is ``frame`` or one above it (an inode number alone may be another
        filesystem's): up ``frame``'s ``parent`` chain (split or handed-out directories), the stack above
        the frame where that chain meets it, and what is above a detached subtree (``_ancestors``)."""
        identity = (st.st_dev, st.st_ino)
        if identity in self._ancestors:
            return True
        stack = self._stack_ref or []
        at: Frame | None = frame
        while at is not None:
            if (at.dev, at.ino) == identity:
                return True
            index = next((i for i, on in enumerate(stack) if on is at), None)
            if index is None:
                at = at.parent
            elif any((on.dev, on.ino) == identity for on in stack[:index]):
                return True
            else:
                at = stack[0].parent  # above this walk's stack: the frames of the walk that handed it out
        return False

    def _unlistable(self, frame: Frame, exc: OSError) -> None:
        """``frame``'s directory could not be listed: out of descriptors (listing takes one of its own)
        stops the walk, its answer partial; any other fault skips that directory as unlistable."""
        if out_of_descriptors(exc):
            self._stop = OutOfDescriptors(exc)
            frame.partial = True
        else:
            self.skipped.unlistable(exc, frame.relative)

    def _read(self, frame: Frame) -> Listing:
        """List one directory and lstat every entry; sort them into files, links and subdirectories."""
        config = self._config
        if config.regular_by_type:
            return self._read_typed(frame)
        assert frame.fd is not None
        files: list[tuple[str, os.stat_result]] = []
        links: list[tuple[str, os.stat_result]] = []
        subdirs = frame.subdirs
        skipped = self.skipped
        seen = self.seen
        linked = self.linked
        match = self._match
        relative = frame.relative
        prefix = relative + "/" if relative else ""
        apparent = blocks = count = nfiles = eligible = 0
        newest = frame.newest
        floor, block_floor, min_size = self.file_floor, self.block_floor, config.min_file_size
        keep = config.keep_files
        prune_at = 2 * keep if keep else -1
        on_file = config.on_file
        s_ifmt, s_ifdir, s_ifreg, s_iflnk = S_IFMT, S_IFDIR, S_IFREG, S_IFLNK
        fd = frame.fd
        names: Iterable[str]
        if frame.rest is not None:  # the next part of a big directory (``listing_parts``)
            names, frame.rest = frame.rest, None
        else:
            try:
                # A small directory is listed in one call (names only: no DirEntry objects to build);
                # a big one is streamed, so memory stays bounded however many entries it has. The
                # size test uses the directory's own size, which is all ``apparent`` holds before this.
                try:
                    names = os.listdir(fd) if frame.apparent <= config.list_at_once else _names(fd)
                except OSError as first:  # an EMFILE the count calls not ours: once more (``open_again``)
                    names = open_again(first, lambda: os.listdir(fd))
            except OSError as exc:
                self._unlistable(frame, exc)
                return Listing(frame.relative, frame.depth, files, links)
        # a streamed directory's files go out in parts of this many (its names left in ``frame.rest``)
        part = config.listing_parts if config.listing_parts and not isinstance(names, list) else 1 << 62
        lstat = os.stat
        denied = False  # an entry could not be looked at for want of search permission on the directory
        mounted = self._mount_points.get(frame.relative) if self._mount_points else None
        try:
            # Checkpoints fall between chunks of ``check_every`` names, not on a count kept per entry:
            # almost every directory is one chunk, and the loop below does only the entry's work.
            for chunk in _chunks(names, config.check_every):
                if count:
                    self.entries += count
                    count = 0
                    self.apparent += apparent - self._reported
                    self._reported = apparent
                    try:
                        self.cancel()
                    except ScanStopped as stop:
                        self._stop = stop  # hand out what this directory gave so far, then stop
                        break
                count = len(chunk)
                for name in chunk:
                    if mounted is not None and name in mounted:
                        skipped.add(mounted[name])  # a mount point: not even an lstat
                        continue
                    try:
                        st = lstat(name, dir_fd=fd, follow_symlinks=False)
                    except OSError as exc:
                        denied = self._not_looked_at(exc, frame, denied)
                        continue
                    if match is not None and (match(name) or match(prefix + name)):
                        skipped.add("excluded")
                        continue
                    kind = st.st_mode & s_ifmt
                    if kind != s_ifreg or st.st_nlink > 1:  # not the common case: a file with one name
                        if kind == s_ifdir:
                            subdirs.append((name, st))
                            continue
                        if st.st_nlink > 1:
                            key = (st.st_dev, st.st_ino)
                            if key in seen:
                                if kind == s_ifreg and (st.st_size >= floor or st.st_blocks >= block_floor):
                                    links.append((name, st))
                                continue
                            seen.add(key)
                            if linked is not None:
                                linked.append((*key, st.st_size, st.st_blocks, kind == s_ifreg, relative))
                        if kind != s_ifreg:
                            apparent += st.st_size
                            blocks += st.st_blocks
                            if kind != s_iflnk:
                                skipped.add("special_file")
                            continue
                    size = st.st_size
                    used = st.st_blocks
                    apparent += size
                    blocks += used
                    nfiles += 1
                    if st.st_mtime > newest:
                        newest = st.st_mtime
                    if on_file is not None and not on_file(name, st):
                        continue
                    if size >= min_size:
                        eligible += 1
                    if size >= floor or used >= block_floor:
                        files.append((name, st))
                        if len(files) == prune_at:
                            floor, block_floor = self._prune(files, floor, block_floor)
                if len(files) + len(links) >= part:
                    frame.rest = iter(names)  # the names not pulled yet: read on next (``_more``)
                    break
        except OSError:  # the directory went bad while being read (EIO, removed): what is left of it unseen
            skipped.refused_directory(frame.relative)
        self.entries += count
        self.apparent += apparent - self._reported
        self._reported = 0
        frame.apparent += apparent
        frame.disk += blocks * 512
        frame.files += nfiles
        frame.newest = newest
        self.eligible_files += eligible
        return Listing(frame.relative, frame.depth, files, links)

    def _read_typed(self, frame: Frame) -> Listing:
        """``_read`` for ``regular_by_type``: a regular file costs no system call here, only its entry.

        Safe for a consumer that opens the file anyway: it opens it relative to the directory with
        ``O_NOFOLLOW`` and ``O_NONBLOCK``, then checks on the descriptor that it is a regular file and
        the inode the entry named, so a swap since the listing is caught either way. Directories,
        symlinks, special files and entries of unknown type are ``lstat``-ed as ``_read`` does.
        """
        assert frame.fd is not None
        typed: list[tuple[str, int]] = []
        subdirs = frame.subdirs
        skipped = self.skipped
        match = self._match
        prefix = frame.relative + "/" if frame.relative else ""
        count = nfiles = 0
        fd = frame.fd
        listing = Listing(frame.relative, frame.depth, [], [], typed)
        nodes = listing.nodes if self._config.record_nodes else None
        try:
            try:
                entries = os.scandir(fd)
            except OSError as first:  # an EMFILE the count calls not ours: once more (``open_again``)
                entries = open_again(first, lambda: os.scandir(fd))
        except OSError as exc:
            self._unlistable(frame, exc)
            return listing
        lstat = os.stat
        denied = False  # as in _read
        check_every = self._config.check_every
        mounted = self._mount_points.get(frame.relative) if self._mount_points else None
        try:
            with entries:
                for entry in entries:
                    count += 1
                    if count == check_every:
                        self.entries += count
                        count = 0
                        try:
                            self.cancel()
                        except ScanStopped as stop:
                            self._stop = stop  # hand out what this directory gave so far, then stop
                            break
                    name = entry.name
                    if mounted is not None and name in mounted:
                        skipped.add(mounted[name])  # a mount point: not even an lstat
                        continue
                    if match is not None and (match(name) or match(prefix + name)):
                        skipped.add("excluded")
                        continue
                    try:
                        if entry.is_file(follow_symlinks=False):
                            typed.append((name, entry.inode()))
                            nfiles += 1
                            continue
                        st = lstat(name, dir_fd=fd, follow_symlinks=False)
                    except OSError as exc:
                        denied = self._not_looked_at(exc, frame, denied)
                        continue
                    kind = st.st_mode & S_IFMT
                    if kind == S_IFREG:  # became one since the listing
                        typed.append((name, st.st_ino))
                        nfiles += 1
                        continue
                    if kind == S_IFDIR:
                        subdirs.append((name, st))
                    elif kind == S_IFLNK:
                        skipped.add("symlink")  # never followed, yet counted: a manifest's gaps are said
                    else:
                        skipped.add("special_file")
                    if nodes is not None and (node := _node(prefix, name, st, fd)) is not None:
                        nodes.append(node)
        except OSError:  # the directory went bad while being read (EIO, removed): what is left of it unseen
            skipped.refused_directory(frame.relative)
        self.entries += count
        frame.files += nfiles
        return listing

    def _not_looked_at(self, exc: OSError, frame: Frame, denied: bool) -> bool:
        """Count an entry of a listed directory that could not be ``lstat``-ed; returns ``denied``.

        Permission denied there means the directory may be read but not searched (mode r without x):
        that directory is one unreadable directory, counted and named once, however many entries it
        holds, as a directory that cannot be opened is. Gone: vanished; any other error: the
        filesystem's (``SkipCounter.refused``).
        """
        if exc.errno in (errno.EACCES, errno.EPERM):
            if not denied:
                self.skipped.unreadable(frame.relative)
            return True
        self.skipped.add("vanished" if exc.errno == errno.ENOENT else "filesystem_error")
        return denied

    def _prune(
        self, files: list[tuple[str, os.stat_result]], floor: int, block_floor: int
    ) -> tuple[int, int]:
        """Keep the ``keep_files`` largest of a directory's files so far (earlier first among equals,
        as the consumer's heap would) and raise this directory's floors past the smallest kept."""
        config = self._config
        by_disk, min_size, keep = config.keep_by_disk, config.min_file_size, config.keep_files

        def key(item: tuple[str, os.stat_result]) -> int:
            return item[1].st_blocks if by_disk else item[1].st_size

        # reverse=True keeps equal keys in their original order: the earlier one stays, as in the heap
        ranked = sorted((item for item in files if item[1].st_size >= min_size), key=key, reverse=True)
        files[:] = ranked[:keep]
        if len(files) == keep:
            smallest = key(files[-1]) + 1
            if by_disk:
                block_floor = max(block_floor, smallest)
            else:
                floor = max(floor, smallest)
        return floor, block_floor

    def _admit(self, parent: Frame, name: str, st: os.stat_result) -> bool:
        """Whether to enter a subdirectory on another device than its parent (counted if not)."""
        if self.options.skip_pseudo and self._is_pseudo(parent, name, st):
            self.skipped.add("pseudo_filesystem")
            return False
        if self.options.one_file_system:
            subvolume = st.st_ino == BTRFS_SUBVOLUME_ROOT and self._root_on_btrfs()
            self.skipped.add("btrfs_subvolume" if subvolume else "other_filesystem")
            return False
        return True

    def _root_on_btrfs(self) -> bool:
        """Whether the walk's root lies on btrfs, by the deepest mount point above it in the table.

        Why: a directory on another device that no mount put there (mount points are skipped by name
        before this) is, on btrfs, a subvolume or a snapshot: space on this very filesystem, which
        ``du -x`` leaves out too, and which the answer names as such, not as another filesystem."""
        if self._on_btrfs is None:
            table = self._mounts if self._mounts is not None else mount_table()
            mount = holding(table, self.root, self.root_dev)
            self._on_btrfs = mount is not None and mount.fstype == "btrfs"
        return self._on_btrfs

    def _enter(self, parent: Frame, name: str, st: os.stat_result) -> Frame | None:
        """Open a subdirectory relative to its parent, or count why not (None)."""
        if st.st_dev != parent.dev and not self._admit(parent, name, st):
            return None
        if parent.fd is None:
            raise AssertionError("a parent with subdirectories left always has a descriptor")
        parent_fd = parent.fd
        try:
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
            except OSError as first:  # an EMFILE the count calls not ours: once more (``open_again``)
                fd = open_again(first, lambda: os.open(name, DIR_FLAGS, dir_fd=parent_fd))
        except OSError as exc:
            # Unreadable (EACCES), gone (ENOENT) or swapped for a symlink/file (ELOOP, ENOTDIR): not followed.
            # No descriptor left says nothing of the directory: the walk stops there, partial.
            if out_of_descriptors(exc):
                self._stop = OutOfDescriptors(exc)
                return None
            if exc.errno not in GONE:  # denied, or refused by the filesystem (EIO, a FUSE daemon's EMFILE)
                self.skipped.refused(exc, f"{parent.relative}/{name}" if parent.relative else name)
                parent.apparent += st.st_size  # du counts an unreadable directory's own size
                parent.disk += st.st_blocks * 512
                parent.dirs += 1
                self.apparent += st.st_size
            else:
                self.skipped.add("vanished")
            return None
        if same(fd, st.st_dev, st.st_ino) is None:  # replaced between listing and opening
            self.skipped.add("vanished")
            return None
        return self._child(fd, parent, name, st)

    def _finish(self, frame: Frame, stack: list[Frame], partial: bool = False) -> None:
        """Close a finished directory, add its totals to its parent, reopen the parent if needed."""
        if stack:
            parent = stack[-1]
            parent.apparent += frame.apparent
            parent.disk += frame.disk
            parent.files += frame.files
            parent.dirs += frame.dirs
            if frame.newest > parent.newest:
                parent.newest = frame.newest
            if parent.fd is None and not partial:  # closed for the descriptor budget: reached through '..'
                try:
                    parent.fd = None if frame.fd is None else reopen("..", parent.dev, parent.ino, frame.fd)
                except OSError as exc:  # no descriptor left: the walk stops, what is left of it unseen
                    self._stop = OutOfDescriptors(exc)
                if parent.fd is None and self._stop is None:
                    self.skipped.add("vanished", len(parent.subdirs))
                    parent.subdirs.clear()
        self._close(frame)

    # -- handing out: the walk's second job ---------------------------------------------------
    # Its waiting subtrees go to other scanners (and processes), and their totals come back. Apart
    # from the hot loop above, since it happens once per split or per gift and has its own rules:
    # every directory above a handed-out one holds back its ``SubtreeTotals`` until ``settle``; a subtree
    # is reopened from the root component by component, never through a symlink.

    @staticmethod
    def _totals(frame: Frame) -> SubtreeTotals:
        return SubtreeTotals(
            frame.relative,
            frame.depth,
            frame.apparent,
            frame.disk,
            frame.files,
            frame.dirs,
            frame.partial,
            frame.newest,
        )

    @staticmethod
    def _close(frame: Frame) -> None:
        """Close a frame's descriptor; a deep walk reopens it later through its child's '..'."""
        if frame.rest is not None:  # a big directory's names not read (the walk stopped): its listing's
            rest, frame.rest = frame.rest, None
            if isinstance(rest, Generator):
                rest.close()
        if frame.fd is not None:
            fd, frame.fd = frame.fd, None
            os.close(fd)

    def detach(self, limit: int, target: int) -> tuple[list[Subtree], list[Listing]]:
        """Hand out the directories waiting on the stack (call it between events): at most ``limit``
        ``Subtree``s, shallowest first (likely the biggest), and the listings of the directories read
        here: while there are fewer than ``target``, the shallowest is read and replaced by its
        subdirectories, so that one huge subtree is not one task. Every directory above a subtree
        holds back its ``SubtreeTotals`` until ``settle``.
        """
        stack = self._stack_ref or []
        if self.base_fd is not None or not any(frame.subdirs for frame in stack):
            return [], []
        # The root, to reopen subtrees from: by its path if a walk deeper than its descriptor budget
        # closed it, and then only if it is still the same directory.
        root = stack[0]
        try:
            self.base_fd = os.dup(root.fd) if root.fd is not None else reopen(self.root, root.dev, root.ino)
        except OSError:  # no descriptor left: nothing given away, the walk goes on by itself
            return [], []
        if self.base_fd is None:
            return [], []
        queue: deque[Frame] = deque()
        for frame in stack:
            while frame.subdirs and len(queue) < limit:
                name, st = frame.subdirs.pop()
                self._hand_out(frame, name, st, queue)
        self._chain = list(stack)
        for frame in stack:
            frame.held = True
        listings: list[Listing] = []
        target = min(target, limit)  # a rest frame (below) fills the queue: it is never read again
        while queue and len(queue) < target and len(self._split) < 4 * target and self._stop is None:
            frame = queue.popleft()
            self._split.append(frame)
            if not self._reopen(frame):
                continue
            try:
                listing = self._read(frame)
                parts = list(self._more(frame)) if frame.rest is not None else []
            finally:
                self._close(frame)
            if self._stop is not None:
                frame.partial = True
            if self._config.empty_listings or listing.files or listing.links:
                listings.append(listing)
            listings += parts
            subdirs, frame.subdirs = frame.subdirs, []
            for at, (name, st) in enumerate(subdirs):
                if len(queue) >= limit - 1 and at < len(subdirs) - 1:
                    # More than the queue holds: the rest is one subtree, walked from the listing read
                    # here, whose totals only its directory holds (``settle``).
                    rest = Frame(None, frame.relative, frame.depth, frame.dev, frame.ino, 0, 0, subdirs[at:])
                    rest.dirs, rest.parent = 0, frame  # not a directory of its own: part of ``frame``
                    rest.held = rest.listed = True  # no totals event of its own, and no second read
                    queue.append(rest)
                    break
                self._hand_out(frame, name, st, queue)
        return list(queue), listings

    def _give_away(self, stack: list[Frame]) -> None:
        """Offer waiting subdirectories to ``share``, shallowest first (likely the biggest subtrees)."""
        self.share_wanted = False
        if self.share is None:
            return
        offered: deque[Frame] = deque()
        taken: list[tuple[Frame, str, os.stat_result]] = []
        for frame in stack:
            while frame.subdirs and len(taken) < self.share_limit:
                name, st = frame.subdirs.pop(0)  # the walk pops from the end: these come last
                before = len(offered)
                self._hand_out(frame, name, st, offered)
                if len(offered) > before:
                    taken.append((frame, name, st))
        if not offered:
            return
        pieces = list(offered)
        kept = {id(piece) for piece in self.share(pieces)}
        deepest = -1
        for piece, (frame, name, st) in zip(pieces, taken, strict=True):
            if id(piece) in kept:  # not placed: walked here after all
                frame.subdirs.insert(0, (name, st))
                self.apparent -= st.st_size
            else:
                deepest = max(deepest, stack.index(frame))
        for frame in stack[: deepest + 1]:
            frame.given = True

    @property
    def detached(self) -> bool:
        """Whether ``detach`` handed anything out (then ``settle`` must follow)."""
        return bool(self._chain)

    def _hand_out(self, parent: Frame, name: str, st: os.stat_result, queue: deque[Frame]) -> None:
        """Queue a subdirectory as a subtree, unless the walk would not enter it at all (a loop: it is
        ``parent`` or above it, as the walk's own step checks)."""
        if st.st_dev != parent.dev and not self._admit(parent, name, st):
            return
        if self._inside(parent, st):
            self.skipped.add("directory_loop")
            return
        subtree = self._child(None, parent, name, st)
        subtree.parent = parent
        queue.append(subtree)

    def _child(self, fd: int | None, parent: Frame, name: str, st: os.stat_result) -> Frame:
        """The frame of a subdirectory of ``parent``, its own size counted as seen."""
        self.apparent += st.st_size
        relative = parent.relative + "/" + name if parent.relative else name
        return Frame(fd, relative, parent.depth + 1, st.st_dev, st.st_ino, st.st_size, st.st_blocks * 512)

    def _reopen(self, frame: Frame, above: list[tuple[int, int]] | None = None) -> bool:
        """Open a handed-out directory again, name by name from the root with O_NOFOLLOW (a symlink
        swapped in is not followed), and check it is the same inode (else: vanished). An unreadable
        directory keeps its own size, as ``du`` counts it. ``above`` gets the (dev, ino) of each
        directory on the way, the root first."""
        if self.base_fd is None:
            raise AssertionError("subtrees are reopened from the root detach() kept open")
        reached: list[str] = []
        try:
            fd = os.dup(self.base_fd)
        except OSError as exc:
            if not out_of_descriptors(exc):
                raise
            self._stop = OutOfDescriptors(exc)
            frame.partial = True
            return False
        try:
            for name in frame.relative.split("/"):
                if above is not None:
                    st = os.fstat(fd)
                    above.append((st.st_dev, st.st_ino))
                reached.append(name)
                try:
                    child = os.open(name, DIR_FLAGS, dir_fd=fd)
                except OSError as first:  # an EMFILE the count calls not ours: once more (``open_again``)
                    child = open_again(first, functools.partial(os.open, name, DIR_FLAGS, dir_fd=fd))
                os.close(fd)
                fd = child
        except OSError as exc:
            os.close(fd)
            if out_of_descriptors(exc):  # says nothing of the directory: the walk stops, partial
                self._stop = OutOfDescriptors(exc)
                frame.partial = True
                return False
            if exc.errno not in GONE:
                self.skipped.refused(exc, "/".join(reached))  # the component that denied or refused it
                return False
        else:
            frame.fd = same(fd, frame.dev, frame.ino)
            if frame.fd is not None:
                return True
        self.skipped.add("vanished")
        frame.apparent = frame.disk = frame.dirs = 0
        return False

    def settle(self, subtrees: Sequence[tuple[Subtree, bool]]) -> list[SubtreeTotals]:
        """Add walked subtrees (each with whether it is complete) to the directories above them.

        Returns the held-back ``SubtreeTotals`` events of those directories, deepest first.
        """
        chain = self._chain
        on_chain = {id(frame): i for i, frame in enumerate(chain)}
        for subtree, complete in subtrees:
            subtree.partial = subtree.partial or not complete
        # Deepest first, and the rest of a split directory (detach) before it: a split directory is
        # complete before it is added up.
        pending = sorted([*self._split, *(s for s, _ in subtrees)], key=lambda f: (-f.depth, not f.listed))
        for frame in pending:
            parent = frame.parent
            assert parent is not None
            index = on_chain.get(id(parent))
            # The chain already passed its own totals up the stack; a split directory did not.
            targets = chain[: index + 1] if index is not None else [parent]
            for target in targets:
                target.apparent += frame.apparent
                target.disk += frame.disk
                target.files += frame.files
                target.dirs += frame.dirs
                target.partial = target.partial or frame.partial
        held = sorted(self._split, key=lambda f: -f.depth) + chain[::-1]  # the chain finished deepest first
        return [self._totals(frame) for frame in held if frame.depth <= self._deepest]

    def close(self) -> None:
        """Release the root descriptor ``detach`` kept."""
        if self.base_fd is not None:
            fd, self.base_fd = self.base_fd, None
            os.close(fd)

    # -- for consumers and the handing out -----------------------------------------------------

    @property
    def listing_fd(self) -> int | None:
        """The open descriptor of the directory whose ``Listing`` was just handed out (None for those
        ``detach`` read), valid until the next event: its files can be opened relative to it, with no
        path on the way that could be swapped."""
        stack = self._stack_ref
        return stack[-1].fd if stack else None

    def spawn(
        self,
        subtree: Subtree,
        skipped: SkipCounter,
        cancel: Callable[[], None],
        linked: list[tuple[int, int, int, int, bool, str]] | None,
        config: ScanConfig | None = None,
    ) -> Scanner:
        """A scanner for one detached subtree, with this scan's rules and seen inodes, and its config
        (default: this one's, floors as raised so far)."""
        if config is None:
            config = replace(self._config, file_floor=self.file_floor, block_floor=self.block_floor)
        scanner = Scanner(self.root, self.options, skipped, cancel, config=config, fd_budget=self.fd_budget)
        scanner._start = subtree
        scanner.root_dev = self.root_dev
        scanner.base_fd = self.base_fd
        scanner.seen = self.seen
        scanner._mounts = self._mounts
        scanner._mount_points = self._mount_points
        scanner._pseudo = self._pseudo
        scanner._on_btrfs = self._on_btrfs
        scanner.linked = linked
        return scanner

    def _is_pseudo(self, parent: Frame, name: str, st: os.stat_result) -> bool:
        if self._pseudo is None:
            table = self._mounts if self._mounts is not None else mount_table()
            self._pseudo = frozenset(m.dev for m in table if m.fstype in KERNEL_TYPES)
        if st.st_dev in self._pseudo:
            return True
        if st.st_dev == parent.dev:
            return False
        relative = parent.relative + "/" + name if parent.relative else name
        absolute = os.path.join(self.root, os.fsencode(relative))
        return absolute in PSEUDO_MOUNT_POINTS


def join(root: bytes, relative: bytes) -> bytes:
    """``root/relative`` without doubling the slash when root is '/'."""
    if not relative:
        return root
    return (root if root.endswith(b"/") else root + b"/") + relative


def walk_files(
    root: bytes, options: WalkOptions, skipped: SkipCounter, cancel: Callable[[], None]
) -> Generator[FileEntry, None, None]:
    """Every regular file under ``root`` (hard-linked names included, unsorted), never following
    symlinks; special files and unreadable directories skipped and counted. A big directory is read
    in parts (``PART`` files each): memory holds a part, not the whole directory. ``cancel()`` runs between
    directories and every few thousand entries, and may raise. A walk that stopped early (``cancel``'s
    ``ScanStopped``, no descriptor left) raises ``ScanStopped`` with its reason once every file it saw
    was given: the caller cannot take what it got for the whole tree.
    """
    root = os.fsencode(root)
    scanner = Scanner(
        root,
        options,
        skipped,
        cancel,
        config=ScanConfig(empty_listings=False, finished_depth=-1, listing_parts=PART),
    )
    fsencode = os.fsencode
    head = join(root, b"x")[:-1]  # root and one slash
    events = scanner.events()
    try:
        for event in events:
            if type(event) is Listing:
                base = fsencode(event.relative) + b"/" if event.relative else b""
                for group in (event.files, event.links):
                    for name, st in group:
                        relative = base + fsencode(name)
                        yield FileEntry(head + relative, relative, st)
                del group  # a big directory's part is not held while the next is read
            del event
    finally:
        events.close()  # a consumer that stops early closes the directories at once
    if scanner.stopped is not None:
        raise ScanStopped(scanner.stopped)
