"""What lies under mount points: files written into a directory before another filesystem was mounted
over it. df counts them, no walk can reach them through the mount.

Looked at from a child process (``python -m sysmcp.engine.space._hidden SOURCE TARGET RELATIVE...``) in
a private mount namespace of its own, which bind-mounts the filesystem's root at ``TARGET`` (not
recursively: the mounts on top are left behind), prints one JSON line of sizes per ``RELATIVE``
directory and exits, its namespace ending with it: no other process ever sees a change. Needs root
(CAP_SYS_ADMIN), on Linux.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from sysmcp import platform
from sysmcp.engine.walk import (
    NEVER,
    MountPoint,
    ScanConfig,
    Scanner,
    SkipCounter,
    SubtreeTotals,
    WalkOptions,
    mount_table,
)


@dataclass(frozen=True, slots=True)
class Hidden:
    """The files under one mount point (relative to the filesystem's root)."""

    relative: str
    disk: int
    files: int
    entries: int


TOTALS_ONLY = ScanConfig(file_floor=NEVER, block_floor=NEVER, empty_listings=False, finished_depth=0)


def size_tree(top: str, mounts: Sequence[MountPoint] | None = None) -> tuple[int, int, int]:
    """(disk bytes, regular files, entries) of the tree below ``top``, itself included, as du -x counts
    them; ``mounts``: the mount table, when the caller sizes several trees under one."""
    scanner = Scanner(
        os.fsencode(top), WalkOptions(one_file_system=True), SkipCounter(), config=TOTALS_ONLY, mounts=mounts
    )
    try:
        for event in scanner.events():
            if isinstance(event, SubtreeTotals):
                return event.disk, event.files, scanner.entries
    except OSError:  # gone, or not a directory
        pass
    return 0, 0, 0


class Look:
    """The child at work, started before the walk so that its start-up overlaps it."""

    def __init__(self, source: str, target: str, relatives: list[str]) -> None:
        argv = [sys.executable, "-m", "sysmcp.engine.space._hidden", source, target, *relatives]
        self.process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def result(self, timeout: float) -> list[Hidden]:
        """Its sizes. Raises OSError when the child could not make its view, TimeoutError when it takes
        longer than ``timeout`` seconds (it is killed)."""
        try:
            out, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.close()
            raise TimeoutError(f"looking under the mount points took over {timeout:.0f} s") from None
        if self.process.returncode != 0:
            last = (err.strip().splitlines() or ["no reason given"])[-1]
            raise OSError(f"the private view could not be made: {last}")
        return [Hidden(**json.loads(line)) for line in out.splitlines()]

    def close(self) -> None:
        """Kill it if it still runs (a cancelled call), and reap it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()


def _child(source: str, target: str, relatives: list[str]) -> int:
    platform.bind_mount_privately(source, target)
    mounts = mount_table()  # this view's, once: every tree below is sized under the same mounts
    for relative in relatives:
        row = asdict(Hidden(relative, *size_tree(os.path.join(target, relative), mounts)))
        sys.stderr.flush()
        os.write(1, (json.dumps(row) + "\n").encode())  # stdout is this child's own pipe to its parent
    return 0


if __name__ == "__main__":
    raise SystemExit(_child(sys.argv[1], sys.argv[2], sys.argv[3:]))
