"""The walk's second job: handing its waiting subtrees to other scanners (and processes), and
adding their totals back once they are walked.

Why apart from the walk (``walk.Scanner``, which inherits this): the walk is the hot loop, tuned
per entry; handing out happens once per split or per gift and has its own rules (every directory
above a handed-out one holds back its ``Finished`` until ``settle``; a subtree is reopened from the
root component by component, never through a symlink).
"""

from __future__ import annotations

import errno
import os
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from sysmcp.engine.walk._types import (
    DIR_FLAGS,
    Finished,
    Frame,
    Listing,
    ScanConfig,
    SkipCounter,
    Subtree,
    same,
)

if TYPE_CHECKING:
    from sysmcp.engine.walk._budget import ScanStopped


class Handout:
    """The half of ``Scanner`` that splits a running walk into subtrees and settles them again."""

    if TYPE_CHECKING:  # the walk's state, set by Scanner.__init__
        root: bytes
        skipped: SkipCounter
        apparent: int
        base_fd: int | None
        _config: ScanConfig
        share: Callable[[list[Subtree]], list[Subtree]] | None
        share_wanted: bool
        share_limit: int
        _seen: set[tuple[int, int]]
        _chain: list[Frame]
        _split: list[Frame]
        _stack_ref: list[Frame] | None
        _stop: ScanStopped | None

        def _read(self, frame: Frame) -> Listing: ...

        def _admit(self, parent: Frame, name: str, st: os.stat_result) -> bool: ...

    @staticmethod
    def _totals(frame: Frame) -> Finished:
        return Finished(
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
        if frame.fd is not None:
            fd, frame.fd = frame.fd, None
            os.close(fd)

    @staticmethod
    def _reopen_parent(child: Frame, parent: Frame) -> int | None:
        """Reach the parent again through the child's '..', accepting it only if it is the same inode."""
        if child.fd is None:
            return None
        try:
            return same(os.open("..", DIR_FLAGS, dir_fd=child.fd), parent.dev, parent.ino)
        except OSError:
            return None

    def detach(self, limit: int, target: int) -> tuple[list[Subtree], list[Listing]]:
        """Hand out the directories still waiting on the stack, for other scanners to walk.

        Call it between events. Each waiting directory becomes a ``Subtree``, shallowest first
        (they tend to be the biggest); while there are fewer than ``target``, the shallowest is
        read here and replaced by its subdirectories, so that one huge subtree is not one task.
        Returns the subtrees (at most ``limit``) and the listings of the directories read here.
        Every directory above a subtree holds back its ``Finished`` event until ``settle``.
        """
        stack = self._stack_ref or []
        if self.base_fd is not None or not any(frame.subdirs for frame in stack):
            return [], []
        self.base_fd = self._root_again(stack[0])
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
        while queue and len(queue) < target and len(self._split) < 4 * target and self._stop is None:
            frame = queue.popleft()
            self._split.append(frame)
            if not self._reopen(frame):
                continue
            try:
                listing = self._read(frame)
            finally:
                self._close(frame)
            if self._stop is not None:
                frame.partial = True
            if self._config.empty_listings or listing.files or listing.links:
                listings.append(listing)
            subdirs, frame.subdirs = frame.subdirs, []
            for name, st in subdirs:
                if len(queue) < limit:
                    self._hand_out(frame, name, st, queue)
                else:
                    self.skipped.add("vanished")  # never reached: limit is far above target
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

    def _root_again(self, root: Frame) -> int | None:
        """A descriptor of the root for reopening subtrees (None if the root is no longer the same)."""
        if root.fd is not None:
            return os.dup(root.fd)
        try:  # a walk deeper than its descriptor budget closed the root: the path, then identity
            return same(os.open(self.root, DIR_FLAGS), root.dev, root.ino)
        except OSError:
            return None

    @property
    def detached(self) -> bool:
        """Whether ``detach`` handed anything out (then ``settle`` must follow)."""
        return bool(self._chain)

    def _hand_out(self, parent: Frame, name: str, st: os.stat_result, queue: deque[Frame]) -> None:
        """Queue a subdirectory as a subtree, unless the walk would not enter it at all."""
        if st.st_dev != parent.dev and not self._admit(parent, name, st):
            return
        relative = parent.relative + "/" + name if parent.relative else name
        subtree = Frame(
            None, relative, parent.depth + 1, st.st_dev, st.st_ino, st.st_size, st.st_blocks * 512
        )
        subtree.parent = parent
        self.apparent += st.st_size
        queue.append(subtree)

    def _reopen(self, frame: Frame) -> bool:
        """Open a handed-out directory again, name by name from the root, and check it is the same.

        Every component is opened with O_NOFOLLOW, so a directory swapped for a symlink since it
        was listed is not followed; a different inode at the end counts as vanished. An unreadable
        directory keeps its own size, as ``du`` counts it.
        """
        if self.base_fd is None:
            raise AssertionError("subtrees are reopened from the root detach() kept open")
        fd = os.dup(self.base_fd)
        reached: list[str] = []
        try:
            for name in frame.relative.split("/"):
                reached.append(name)
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
        except OSError as exc:
            os.close(fd)
            unreadable = exc.errno in (errno.EACCES, errno.EPERM)
            if unreadable:
                self.skipped.unreadable("/".join(reached))  # the component that denied access
            else:
                self.skipped.add("vanished")
            if not unreadable:
                frame.apparent = frame.disk = frame.dirs = 0
            return False
        frame.fd = same(fd, frame.dev, frame.ino)
        if frame.fd is None:
            self.skipped.add("vanished")
            frame.apparent = frame.disk = frame.dirs = 0
            return False
        return True

    def mark_seen(self, keys: Iterable[tuple[int, int]]) -> None:
        """Inodes (device, inode) counted elsewhere: further names of them are links here."""
        self._seen.update(keys)

    def settle(self, subtrees: Sequence[tuple[Subtree, bool]]) -> list[Finished]:
        """Add walked subtrees (each with whether it is complete) to the directories above them.

        Returns the held-back ``Finished`` events of those directories, deepest first.
        """
        chain = self._chain
        on_chain = {id(frame): i for i, frame in enumerate(chain)}
        for subtree, complete in subtrees:
            subtree.partial = subtree.partial or not complete
        pending = sorted([*self._split, *(subtree for subtree, _ in subtrees)], key=lambda f: -f.depth)
        for frame in pending:  # deepest first: a split directory is complete before it is added up
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
        deepest = self._config.finished_depth
        deepest = deepest if deepest is not None else 1 << 30
        held = sorted(self._split, key=lambda f: -f.depth) + chain[::-1]  # the chain finished deepest first
        return [self._totals(frame) for frame in held if frame.depth <= deepest]

    def close(self) -> None:
        """Release the root descriptor ``detach`` kept."""
        if self.base_fd is not None:
            fd, self.base_fd = self.base_fd, None
            os.close(fd)
