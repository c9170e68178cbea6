"""The one way sysmcp runs another program: stdin closed, ``LC_ALL=C``, its own session (so its process
group is all it started), each stream kept up to a bound, ``cancel`` asked while it runs, and the whole
group killed when the call ends, whether by exit, timeout, cancellation or output past the bound."""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sysmcp.engine.calls import Cancel, never_cancelled
from sysmcp.engine.errors import EngineError, Unavailable

OUTPUT_LIMIT = 8 << 20  # bytes kept of each stream; past it the command is stopped
_SLICE_S = 0.05  # how often a waiting call asks ``cancel`` and whether the command has ended


class CommandFault(Unavailable):
    """A command that gave no usable answer; ``argv`` is what was run."""

    default_reason = ""

    def __init__(
        self, detail: str, *, reason: str | None = None, argv: Sequence[str] = (), status: int | None = None
    ) -> None:
        super().__init__(detail, reason=self.default_reason if reason is None else reason)
        self.argv = tuple(argv)
        self.status = status  # the exit status, when it ended by itself


class CommandMissing(CommandFault):
    """The command is not installed (not on PATH, or not executable)."""

    default_reason = "missing"


class CommandTimedOut(CommandFault):
    """The command did not answer within its timeout; it was killed with its process group."""

    default_reason = "timeout"


class CommandFailed(CommandFault):
    """The command could not be started, exited non-zero (``status``), or wrote more than the bound
    (reason ``too_long``)."""

    default_reason = "failed"


class BadOutput(EngineError):
    """The command answered with text its documented format does not allow."""


@dataclass(frozen=True, slots=True)
class Output:
    status: int  # the exit status (negative: the signal that ended it)
    stdout: bytes
    stderr: bytes
    truncated: bool = False  # a stream reached the bound: the command was stopped there

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    def first_error(self) -> str:
        """The first line of its standard error, or its exit status when it wrote none."""
        lines = self.stderr.decode("utf-8", "replace").strip().splitlines()
        return (lines or [f"exit status {self.status}"])[0][:200]


def _shown(argv: Sequence[str]) -> str:
    return " ".join(argv[:3])


def run(
    argv: Sequence[str], timeout_s: float, cancel: Cancel = never_cancelled, *, limit: int = OUTPUT_LIMIT
) -> Output:
    """Run ``argv`` to its end and return its status and output, whatever the status. Raises
    ``CommandMissing``, ``CommandFailed`` (could not start), ``CommandTimedOut``, or what ``cancel`` raises.

    The call ends when the command has exited and its pipes are drained, even when something it left
    behind holds them open: its process group is killed then, as on a timeout or a cancellation."""
    if shutil.which(argv[0]) is None:
        raise CommandMissing(f"{argv[0]} is not installed", argv=argv)
    try:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, "LC_ALL": "C"},
        )
    except OSError as exc:
        raise CommandFailed(f"{argv[0]} could not be started: {exc.strerror or exc}", argv=argv) from None
    assert child.stdout is not None and child.stderr is not None
    out, err = child.stdout.fileno(), child.stderr.fileno()
    kept = {out: bytearray(), err: bytearray()}
    deadline = time.monotonic() + timeout_s
    truncated = False
    try:
        with selectors.DefaultSelector() as selector:
            for fd in kept:
                os.set_blocking(fd, False)
                selector.register(fd, selectors.EVENT_READ)
            while not truncated:
                cancel()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CommandTimedOut(f"{_shown(argv)} gave no answer within {timeout_s:g} s", argv=argv)
                ended = _ended(child.pid)
                ready = selector.select(0 if ended else min(_SLICE_S, left)) if selector.get_map() else []
                if ended and not ready:
                    break
                if not ready and not selector.get_map():
                    selector.select(min(_SLICE_S, left))  # pipes closed, the command still running
                for key, _ in ready:
                    chunk = _read(key.fd)
                    if chunk is None:
                        continue
                    if not chunk:
                        selector.unregister(key.fd)
                        continue
                    buffer = kept[key.fd]
                    buffer += chunk[: limit - len(buffer)]
                    truncated = truncated or len(buffer) >= limit
    finally:
        with contextlib.suppress(OSError):  # the leader is not reaped yet: the group id is still its own
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
        child.stderr.close()
    return Output(child.returncode, bytes(kept[out]), bytes(kept[err]), truncated)


def _ended(pid: int) -> bool:
    """The command has exited (it is not reaped, so its process group cannot be another's yet)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _read(fd: int) -> bytes | None:
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return None


def run_command(argv: Sequence[str], timeout_s: float, cancel: Cancel = never_cancelled) -> str:
    """The standard output of a query command that must succeed: ``run``'s faults, and ``CommandFailed``
    for a non-zero exit (with its first error line) or output past the bound."""
    done = run(argv, timeout_s, cancel)
    if done.truncated:
        raise CommandFailed(
            f"{_shown(argv)} wrote more than {OUTPUT_LIMIT:,} bytes", reason="too_long", argv=argv
        )
    if done.status != 0:
        raise CommandFailed(f"{_shown(argv)} failed: {done.first_error()}", argv=argv, status=done.status)
    return done.text
