"""Share independent tasks between this process and forked children: a second core for big walks.

Why processes: a directory walk in Python is CPU-bound in the interpreter (each ``lstat`` result is
an object to build), so threads share one core under the GIL. Why ``fork``: a child starts in about
a millisecond with the walk's state (mount table, inodes seen so far, the root's descriptor)
already in memory, where a fresh interpreter would take tens of milliseconds to start.

How: the task numbers are written into a pipe before forking, and every process claims the next
one with a 4-byte ``read`` (atomic on a pipe), so fast processes take more tasks and no coordinator
is needed. Each child sends one ``marshal``-ed result through its own pipe; progress comes back
through shared memory.

A process with one big task left that sees the queue run low (``waiting``) gives part of it away
(``give``): a ``marshal``-ed record in its own region of a shared map (one writer per region: no
lock), its number queued in the same pipe. With ``waits_for_gifts``, a process that finds the queue
empty while another still walks waits for its gifts (never needed for correctness: a giver always
claims again until the queue is empty).

A child touches nothing but the walk: no logging, no event loop, no stdout (it never writes to the
wire), garbage collection off, and leaves with ``os._exit``: no atexit handler of the parent runs and
no stdio buffer it inherited is flushed onto the wire. It exits if the server goes away. On cancellation, or any error in
this process, the children are killed (SIGKILL) and reaped before ``FanOut`` lets go.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import marshal
import math
import mmap
import os
import select
import signal
import termios
import time
import warnings
from collections.abc import Callable, Collection
from typing import Any

from sysmcp import platform

MAX_PROCESSES = 4
_TASK = 4  # bytes per task number in the queue pipe
MAX_QUEUE_BYTES = 4096  # the queue is written at once, before any reader: one page always fits
MAX_TASKS = MAX_QUEUE_BYTES // _TASK
# Every pipe end any FanOut of this process holds open. A child closes all but its own, so two scans
# running at once never hold each other's pipes (a result pipe would not see its end of file).
_PIPES: set[int] = set()
_POLL_MS = 10  # while waiting for children, how often ``cancel`` runs
GIVEN_BYTES = 256 << 10  # per process: room for the records of the tasks it gives away
_LENGTH = 4  # bytes of a given record's length, before its marshal-ed data
_IDLE_POLL_MS = 1  # while a process waits for a gift, how often it asks whether to go on waiting


# Python 3.12+ warns on every fork of a process with threads, because the child may inherit a lock
# another thread held. A child here only walks and exits (no logging, imports or event loop), which
# is what makes that safe, so the warning is noise: it is silenced for this module's forks only.
warnings.filterwarnings(
    "ignore", message=r".*use of fork\(\) may lead to deadlocks", category=DeprecationWarning, module=__name__
)

# Set in every forked child (os.register_at_fork), whoever forks: see ``forked``.
_forked = False


def _mark_forked() -> None:
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_mark_forked)


def forked() -> bool:
    """Whether this process is a forked child (of a ``FanOut``, or of anyone).

    Why: a child has only the thread that forked. A pool the parent started (blake3's rayon pool)
    exists in the child without its threads, and work handed to it waits for ever; so whatever may
    use such a pool asks this first and stays on one thread in a child (``threaded_blake3``).
    """
    return _forked


CPU_MAX = platform.CGROUP_CPU_MAX  # cgroup v2: "<quota> <period>" in microseconds, or "max <period>"


def available_processes() -> int:
    """How many processes a walk may use: ``SYSMCP_SCAN_PROCESSES`` or the usable CPUs (allowed by
    affinity and a container's CPU quota), at most 4; 1 where ``fork`` is not safe and cheap
    (``platform.fork_is_safe``): the one place that decides whether a walk forks."""
    if not platform.fork_is_safe():
        return 1
    configured = os.environ.get("SYSMCP_SCAN_PROCESSES", "").strip()
    if configured.isdigit() and int(configured) >= 1:
        return min(int(configured), 64)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (OSError, AttributeError):  # no affinity call (not Linux): every CPU
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, cpu_quota() or cpus, MAX_PROCESSES))


def cpu_quota(path: str = CPU_MAX) -> int | None:
    """CPUs the cgroup quota allows, rounded up (None: no quota, or no cgroup v2 to ask: no /sys)."""
    try:
        with open(path) as handle:
            quota, _, period = handle.read().partition(" ")
        if quota == "max":
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError, ZeroDivisionError):
        return None


class SharedCounters:
    """Per-process counters (entries, bytes) in memory shared with the children."""

    def __init__(self, processes: int) -> None:
        self._map = mmap.mmap(-1, 16 * processes)
        self._slots = memoryview(self._map).cast("q")
        self.slot = 0  # this process's slot: 0 in the parent, set in each child
        self.parent: int | None = None  # in a child: the parent's pid

    def parent_alive(self) -> bool:
        """True; in a child whose parent has gone (the server went away), this exits at once."""
        if self.parent is not None and os.getppid() != self.parent:
            os._exit(1)
        return True

    def set(self, entries: int, bytes_seen: int) -> None:
        """Publish this process's counters; in a child whose parent has gone, exit at once."""
        self.parent_alive()
        self._slots[2 * self.slot] = entries
        self._slots[2 * self.slot + 1] = bytes_seen

    def reset(self) -> None:
        """Every process's counters back to zero: a walk's next phase counts something else."""
        for slot in range(len(self._slots)):
            self._slots[slot] = 0

    def others(self) -> tuple[int, int]:
        """What the children have reported so far."""
        slots = self._slots
        return sum(slots[2::2]), sum(slots[3::2])

    def close(self) -> None:
        self._slots.release()
        self._map.close()


Claim = Callable[[], "int | None"]
Work = Callable[[Claim, SharedCounters, bool], Any]


class FanOut:
    """Tasks ``0..count-1`` shared out by claim; ``start`` forks, ``run_here`` works, ``collect`` joins.

    ``work(claim, progress, in_child)`` runs in every process, calls ``claim()`` until it gets None
    and returns a ``marshal``-able result; in a child it must not touch the event loop.
    """

    def __init__(
        self,
        count: int,
        processes: int,
        work: Work,
        keep: Collection[int] = (),
        *,
        waits_for_gifts: bool = False,
    ) -> None:
        self.processes = max(1, min(processes, count))
        self.work = work
        self.keep = frozenset(keep)  # descriptors from ``pipe()`` the children keep open (a later stage's)
        self.waits_for_gifts = waits_for_gifts
        self.progress = SharedCounters(self.processes)
        self._parent = os.getpid()
        if count * _TASK > MAX_QUEUE_BYTES:
            raise ValueError(f"at most {MAX_QUEUE_BYTES // _TASK} tasks")
        self.count = count
        self._queue_r, self._queue_w = pipe()
        try:
            # One page: what any pipe holds, even one the kernel shrank for a user over its limit.
            os.write(self._queue_w, b"".join(i.to_bytes(_TASK, "little") for i in range(count)))
        except BaseException:
            release(self._queue_r, self._queue_w)
            raise
        os.set_blocking(self._queue_r, False)
        os.set_blocking(self._queue_w, False)  # a full queue refuses a gift instead of blocking
        # Given tasks: per process, 8 bytes of bytes used, then [length][marshal data] records.
        self._given = mmap.mmap(-1, GIVEN_BYTES * self.processes)
        # Per process, 1 while it walks a task (it may give part of it away), 0 once it found none.
        self._walking = mmap.mmap(-1, self.processes)
        self._walking[0] = 1  # this process claims at once
        self._children: dict[int, int] = {}  # pid -> read end of its result pipe
        self._slots: dict[int, int] = {}  # pid -> its slot
        self._reaped: dict[int, int] = {}  # pid -> its wait status, where looking at it reaped it
        self._idle: select.poll | None = None  # the queue, polled while waiting for a gift

    @property
    def children(self) -> int:
        """How many children ``start`` forked and are not yet collected (fewer than asked if ``fork`` failed)."""
        return len(self._children)

    def claim(self, keep_waiting: Callable[[], bool] | None = None) -> int | None:
        """The next unclaimed task, or None when every task has been claimed; with ``keep_waiting`` (and
        ``waits_for_gifts``), an empty queue is waited on while another process still walks and
        ``keep_waiting()`` says so (it may raise: cancellation)."""
        slot = self.progress.slot
        while True:
            task = self._take()
            if task is not None:
                self._walking[slot] = 1
                return task
            self._walking[slot] = 0
            if keep_waiting is None or not self.waits_for_gifts or not self._others_walk():
                break
            if not keep_waiting():
                break
            if self._idle is None:
                self._idle = select.poll()
                self._idle.register(self._queue_r, select.POLLIN)
            self._idle.poll(_IDLE_POLL_MS)  # wakes as soon as a gift is queued
        task = self._take()  # a gift queued just before its giver stopped walking
        if task is not None:
            self._walking[slot] = 1
        return task

    def _take(self) -> int | None:
        try:
            data = os.read(self._queue_r, _TASK)
        except BlockingIOError:
            return None
        return int.from_bytes(data, "little") if len(data) == _TASK else None

    def walking(self) -> int:
        """How many processes are walking a task (not yet come back to find the queue empty)."""
        return sum(self._walking[:])

    def _others_walk(self) -> bool:
        """Whether another process still walks; in the parent, a child that died no longer counts."""
        mine = self.progress.slot
        for pid, slot in self._slots.items():  # only the parent knows its children
            if self._walking[slot] and self._ended(pid):
                self._walking[slot] = 0  # it died walking: nobody will get its gifts
        return any(self._walking[slot] for slot in range(self.processes) if slot != mine)

    def _ended(self, pid: int) -> bool:
        """Whether the child ``pid`` has exited (reaped only where there is no ``waitid``: its status
        kept for ``_status``)."""
        with contextlib.suppress(ChildProcessError):
            if platform.has_waitid():
                return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self._reaped[pid] = status
                return True
        return False

    def _status(self, pid: int) -> int:
        """The child's wait status, waiting for it unless ``_ended`` already reaped it."""
        if pid in self._reaped:
            return self._reaped.pop(pid)
        return os.waitpid(pid, 0)[1]

    def waiting(self) -> int:
        """How many tasks are queued and not yet claimed (one ``ioctl``: ask it every few ms, not per entry)."""
        try:
            data = fcntl.ioctl(self._queue_r, termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            return self.processes  # cannot tell: never reason to give
        return int.from_bytes(data, "little") // _TASK

    def give(self, records: list[Any]) -> int:
        """Queue the first ``records`` (marshal-able) there is room for as new tasks; returns how many.
        A task number at or above ``count`` names a given record (``record``)."""
        base = self.progress.slot * GIVEN_BYTES
        used = int.from_bytes(self._given[base : base + 8], "little") or 8
        start = used
        numbers: list[int] = []
        for record in records:
            data = marshal.dumps(record)
            end = used + _LENGTH + len(data)
            if end > GIVEN_BYTES or len(numbers) * _TASK >= select.PIPE_BUF:
                break
            self._given[base + used : base + used + _LENGTH] = len(data).to_bytes(_LENGTH, "little")
            self._given[base + used + _LENGTH : base + end] = data
            numbers.append(self.count + base + used)
            used = end
        if not numbers:
            return 0
        self._given[base : base + 8] = used.to_bytes(8, "little")
        try:  # at most PIPE_BUF bytes: queued all at once or not at all
            os.write(self._queue_w, b"".join(n.to_bytes(_TASK, "little") for n in numbers))
        except OSError:
            self._given[base : base + 8] = start.to_bytes(8, "little")
            return 0
        return len(numbers)

    def record(self, number: int) -> Any:
        """The record given as task ``number`` (at or above ``count``)."""
        at = number - self.count
        length = int.from_bytes(self._given[at : at + _LENGTH], "little")
        return marshal.loads(self._given[at + _LENGTH : at + _LENGTH + length])

    def given(self) -> dict[int, Any]:
        """Every record given so far by any process, by task number (for the parent, after ``collect``)."""
        found: dict[int, Any] = {}
        for slot in range(self.processes):
            base = slot * GIVEN_BYTES
            used = int.from_bytes(self._given[base : base + 8], "little")
            at = 8
            while at < used:
                length = int.from_bytes(self._given[base + at : base + at + _LENGTH], "little")
                found[self.count + base + at] = self.record(self.count + base + at)
                at += _LENGTH + length
        return found

    def start(self) -> None:
        """Fork the children; each starts claiming at once. Fewer children if ``fork`` fails."""
        for slot in range(1, self.processes):
            read_end, write_end = pipe()
            self._walking[slot] = 1  # before it runs: nobody may take it for idle before it starts
            try:
                pid = os.fork()
            except OSError:
                self._walking[slot] = 0
                release(read_end, write_end)
                break
            if pid == 0:  # pragma: no cover - runs in the child, which ends in os._exit
                self._child(slot, write_end)
            release(write_end)
            self._children[pid] = read_end
            self._slots[pid] = slot

    def _child(self, slot: int, result_fd: int) -> None:  # pragma: no cover - child process
        code = 1
        try:
            gc.disable()  # nothing to collect in a short walk, and no finalizers of the parent's objects
            try:
                signal.set_wakeup_fd(-1)  # a signal here must never wake the parent's event loop
                for signum in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(signum, signal.SIG_DFL)
            except ValueError:  # not the main thread after all: the defaults stay as inherited
                pass
            for fd in list(
                _PIPES - {self._queue_r, self._queue_w, result_fd} - self.keep
            ):  # siblings' and other scans' pipes
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.progress.slot = slot
            self._slots.clear()  # the parent's children are not this one's to wait for
            self.progress.parent = self._parent
            alive = self.progress.parent_alive

            def claim() -> int | None:
                alive()
                return self.claim(alive)

            try:
                result = self.work(claim, self.progress, True)
            finally:
                self._walking[slot] = 0  # done, even without coming back to an empty queue (a deadline)
            data = marshal.dumps(result)
            view = memoryview(data)
            while view:
                view = view[os.write(result_fd, view) :]
            code = 0
        finally:
            os._exit(code)

    def run_here(self, keep_waiting: Callable[[], bool] | None = None) -> Any:
        """Do tasks in this process until none are left (``keep_waiting``: as ``claim``); returns this
        process's result."""
        try:
            return self.work(lambda: self.claim(keep_waiting), self.progress, False)
        finally:
            self._walking[self.progress.slot] = 0  # a walk that stopped (a deadline) gives nothing more

    def collect(self, cancel: Callable[[], None], give_up_at: float = math.inf) -> list[Any | None]:
        """Each child's result (None for one that died, sent garbage or was given up), in fork order;
        ``cancel`` runs every few milliseconds while waiting. At ``give_up_at`` (``time.monotonic``)
        children still running are killed: one stuck in the kernel (a dead network mount) must not
        hold the call for ever."""
        pids = list(self._children)
        buffers = {fd: bytearray() for fd in self._children.values()}
        open_fds = set(buffers)
        poller = select.poll()
        for fd in open_fds:
            poller.register(fd, select.POLLIN)
        while open_fds:
            cancel()
            if time.monotonic() >= give_up_at:
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                give_up_at = math.inf  # their pipes now end; the loop reads what is left
            for fd, _ in poller.poll(_POLL_MS):
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    buffers[fd] += chunk
                else:
                    poller.unregister(fd)
                    open_fds.discard(fd)
        results: list[Any | None] = []
        for pid in pids:
            fd = self._children.pop(pid)
            self._slots.pop(pid, None)
            release(fd)
            ok = os.waitstatus_to_exitcode(self._status(pid)) == 0
            try:
                results.append(marshal.loads(buffers[fd]) if ok else None)
            except (EOFError, ValueError, TypeError):
                results.append(None)
        return results

    def close(self) -> None:
        """Kill and reap any child still running; release the queue and the shared memory."""
        for pid, fd in list(self._children.items()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._status(pid)
            release(fd)
        self._children.clear()
        self._slots.clear()
        if self._queue_r >= 0:
            release(self._queue_r, self._queue_w)
            self._queue_r = self._queue_w = -1
            self._given.close()
            self._walking.close()
        self.progress.close()

    def __enter__(self) -> FanOut:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pipe() -> tuple[int, int]:
    """A pipe that the children of every other ``FanOut`` close (pass an end as ``keep`` to keep it)."""
    read_end, write_end = os.pipe()
    _PIPES.update((read_end, write_end))
    return read_end, write_end


def release(*fds: int) -> None:
    """Close ends of pipes made by ``pipe()`` (or by a ``FanOut``)."""
    for fd in fds:
        _PIPES.discard(fd)
        os.close(fd)
