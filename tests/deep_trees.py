"""Trees nested deeper than a process may hold descriptors, and a server started under a lowered limit.

Why built with ``mkdir`` relative to an open directory: a tree thousands of levels deep has paths longer
than ``PATH_MAX``, which no call taking a whole path accepts; one level at a time, each call sees one name.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

#: A common default soft limit of open files (systemd's, most desktops'): what a host may start sysmcp with.
COMMON_LIMIT = 1024
#: Deeper than ``COMMON_LIMIT`` descriptors could follow, one per level, and still within ``PATH_MAX``
#: with one-letter names (each level "d/"), so a tool can be given a path to its deepest file.
DEPTH = 1500
#: The environment of a server whose walks stay in one process (``SYSMCP_SCAN_PROCESSES``). Why, under a
#: lowered limit: a walk still going after ``Sharing.split_after_s`` (10 ms) is split, and the split reads
#: a chain of directories one at a time from the root, holding two or three descriptors, so a deep tree
#: is then walked in full where the unsplit walk (its budget of 64 descriptors) runs out. Which of the two
#: a call gets would hang on how fast the first 10 ms went; in one process it is always the second.
ONE_PROCESS = {"SYSMCP_SCAN_PROCESSES": "1"}


@contextlib.contextmanager
def removed_after(base: Path) -> Iterator[Path]:
    """``base``, removed with all below it on the way out: ``rm -rf`` takes any depth, where this
    Python's ``shutil.rmtree`` (pytest's cleanup of ``tmp_path`` too) recurses and fails on a deep tree."""
    try:
        yield base
    finally:
        subprocess.run(["rm", "-rf", "--", str(base)], check=True)


def nest(base: Path, depth: int = DEPTH, name: str = "d") -> list[str]:
    """``depth`` levels of ``name`` below ``base`` (made with ``mkdirat``, one level at a time); the
    relative names of the levels, shallowest first."""
    base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, dir_fd=fd)
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = below
    finally:
        os.close(fd)
    return ["/".join([name] * level) for level in range(1, depth + 1)]


def put(base: Path, relative: str, data: bytes) -> None:
    """Write ``data`` as the file ``relative`` below ``base``, reached a level at a time (any depth)."""
    *dirs, last = relative.split("/")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in dirs:
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = below
        out = os.open(last, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=fd)
        try:
            os.write(out, data)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def server_with_limit(limit: int = COMMON_LIMIT) -> list[str]:
    """The command starting ``python -m sysmcp`` with its soft limit of open files lowered to ``limit``
    (the arguments after it go to sysmcp)."""
    code = (
        "import resource, runpy, sys\n"
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, hard))\n"
        "sys.argv[0] = 'sysmcp'\n"
        "runpy.run_module('sysmcp', run_name='__main__', alter_sys=True)\n"
    )
    return [sys.executable, "-c", code]


def under_limit(work: Callable[[], object], limit: int = COMMON_LIMIT) -> str:
    """``str(work())`` run in a forked child whose soft limit of open files is ``limit`` (or the
    ``repr`` of what it raised): this process keeps its own limit and descriptors."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.close(read)
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
            answer = str(work())
        except BaseException as exc:
            answer = repr(exc)
        finally:
            os.write(write, answer.encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as said:
        answer = said.read().decode()
    os.waitpid(child, 0)
    return answer
