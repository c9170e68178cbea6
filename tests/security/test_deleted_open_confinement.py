"""A deleted file held open is confined by its inode and its holder's view, not by the text of its /proc link.

A process in another mount namespace (a container with a host volume) shows paths of its own view: here it
bind-mounts ``ns/other`` at ``ns/r`` and holds a deleted ``r/app.log``, whose inode lives in ``other``. Seen
from the host, its ``/proc/PID/fd`` link reads ``…/ns/r/app.log (deleted)``. A server confined to ``ns/r``
must treat it as outside the root: never named, never planned, never truncated.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sysmcp.reclaim import ApplyRequest, PlanRequest, apply_items, build_plan
from sysmcp.reclaim._classes import RootsLayout
from tests.profile import needs_proc
from tests.reclaim.test_reclaim import HOLDER
from tests.wire import result_text, spawn

pytestmark = [pytest.mark.anyio, needs_proc]  # deleted files held open are found through /proc

SIZE = 3_000_000
MOUNT_THEN_HOLD = 'mount --bind "$1" "$2" && exec "$3" -c "$4" "$5" "$6"'


def needs_root_and_namespaces() -> str:
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0 or not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs root, /proc/PID/fd and unshare for a second mount namespace")
    if subprocess.run([unshare, "-m", "--propagation", "private", "true"], capture_output=True).returncode:
        pytest.skip("unshare -m is not permitted here")
    return unshare


@contextmanager
def holding(argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A holder that has written, deleted and still holds its file once its first line is read."""
    holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        assert int(holder.stdout.readline()) > 0  # written, deleted, held
        yield holder
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def held_sizes(pid: int) -> list[int]:
    """Sizes of the deleted app.log files process ``pid`` holds, read through its descriptors."""
    fd_dir = f"/proc/{pid}/fd"
    return [
        os.stat(os.path.join(fd_dir, fd)).st_size
        for fd in os.listdir(fd_dir)
        if os.readlink(os.path.join(fd_dir, fd)).endswith("app.log (deleted)")
    ]


async def test_a_file_held_in_another_mount_namespace_is_neither_named_nor_planned_under_the_root(
    tmp_path: Path,
) -> None:
    unshare = needs_root_and_namespaces()
    root, other = tmp_path / "ns" / "r", tmp_path / "ns" / "other"
    root.mkdir(parents=True)
    other.mkdir()
    command = [unshare, "-m", "--propagation", "private", "sh", "-c", MOUNT_THEN_HOLD, "sh"]
    argv = [*command, str(other), str(root), sys.executable, HOLDER, str(root / "app.log"), str(SIZE)]
    with holding(argv) as holder:
        links = [os.readlink(f"/proc/{holder.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{holder.pid}/fd")]
        assert f"{root / 'app.log'} (deleted)" in links  # the link's text does name a path under the root
        async with spawn("--allow-reclaim", "--root", str(root)) as wire:
            await wire.initialize()
            listed = await wire.call("deleted_open_files", {})
            seen = result_text(listed) + repr(listed["result"]["structuredContent"])
            assert "app.log" not in seen, seen
            assert listed["result"]["structuredContent"]["outside_allowed_roots"]["files"] >= 1
            plan = await wire.call("reclaim_plan", {"path": str(root), "classes": ["deleted_open"]})
            assert plan["result"]["structuredContent"]["items"] == [], plan
        assert held_sizes(holder.pid) == [SIZE]


MOVES_AWAY = textwrap.dedent(
    """
    import ctypes, os, sys
    handle = open(sys.argv[1], "wb")
    handle.write(b"x" * int(sys.argv[2]))
    handle.flush()
    os.fsync(handle.fileno())
    os.unlink(sys.argv[1])
    print(os.fstat(handle.fileno()).st_blocks * 512, flush=True)
    sys.stdin.readline()  # the plan is made: now leave for a mount namespace of our own
    if ctypes.CDLL(None, use_errno=True).unshare(0x00020000) != 0:  # CLONE_NEWNS
        raise OSError(ctypes.get_errno(), "unshare")
    print("moved", flush=True)
    sys.stdin.read()
    """
)


def test_a_file_whose_holder_left_for_another_mount_namespace_after_the_plan_is_not_truncated(
    tmp_path: Path,
) -> None:
    needs_root_and_namespaces()
    name = tmp_path / "app.log"
    with holding([sys.executable, "-c", MOVES_AWAY, str(name), str(SIZE)]) as holder:
        request = PlanRequest(
            layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(os.fsencode(tmp_path),)
        )
        plan = build_plan(request)
        (item,) = plan.items  # held in our own view: planned
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.write(b"go\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == b"moved\n"
        (applied,) = apply_items(ApplyRequest(plan, [item.id], lambda path: True))
        assert [(o.done, o.reason) for o in applied.outcomes] == [(False, "outside")]
        assert held_sizes(holder.pid) == [SIZE]


SWAPS_IN = textwrap.dedent(
    """
    import os, sys
    handle = open(sys.argv[1], "wb")
    handle.write(b"x" * int(sys.argv[2]))
    handle.flush()
    os.fsync(handle.fileno())
    os.unlink(sys.argv[1])
    print(os.fstat(handle.fileno()).st_blocks * 512, flush=True)
    sys.stdin.readline()  # the plan is made: now put another file behind the same descriptor number
    os.dup2(os.open(sys.argv[3], os.O_PATH), handle.fileno())  # O_PATH: no permission to open it needed
    print("swapped", flush=True)
    sys.stdin.read()
    """
)


def _watch_opens(path: Path) -> int:
    """An inotify descriptor told of every open of ``path`` (IN_OPEN), read without blocking."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0 or libc.inotify_add_watch(fd, os.fsencode(path), 0x20) < 0:  # IN_OPEN
        raise OSError(ctypes.get_errno(), "inotify")
    return fd


def test_a_descriptor_pointed_at_another_file_after_the_plan_is_never_opened_for_writing(
    tmp_path: Path,
) -> None:
    """Opening /proc/PID/fd/N re-opens whatever the holder put there, with the server's rights: a
    device (/dev/watchdog reboots the machine when closed so) reached by an O_PATH descriptor its
    holder could not even open. The inode is looked at first; only the planned one is opened."""
    needs_root_and_namespaces()
    name, device = tmp_path / "app.log", tmp_path / "stands-for-a-device"
    device.write_bytes(b"")
    with holding([sys.executable, "-c", SWAPS_IN, str(name), str(SIZE), str(device)]) as holder:
        request = PlanRequest(
            layout=RootsLayout(homes=()), classes=("deleted_open",), scope=(os.fsencode(tmp_path),)
        )
        plan = build_plan(request)
        (item,) = plan.items
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.write(b"go\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == b"swapped\n"
        watch = _watch_opens(device)
        try:
            (applied,) = apply_items(ApplyRequest(plan, [item.id], lambda path: True))
            assert [(o.done, o.reason) for o in applied.outcomes] == [(False, "changed")]
            with pytest.raises(BlockingIOError):
                os.read(watch, 4096)  # no open of the swapped-in file was ever made
        finally:
            os.close(watch)
