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

from sysmcp import platform
from sysmcp.engine.calls import Cancel, never_cancelled
from sysmcp.engine.faults import EngineError, Unavailable
from sysmcp.engine.paths import one_line

OUTPUT_LIMIT = 8 << 20  # bytes kept of each stream; past it the command is stopped
_SLICE_S = 0.05  # how often a waiting call asks ``cancel`` and whether the command has ended


class CommandFault(Unavailable):
    """A command that gave no usable answer: ``argv`` what was run, ``status`` its exit status if it
    ended by itself."""

    def __init__(self, detail: str, *, reason: str, argv: Sequence[str] = (), status: int | None = None):
        super().__init__(detail, reason=reason)
        self.argv, self.status = tuple(argv), status


class CommandMissing(CommandFault):
    """The command is not installed (not on PATH, or not executable); reason ``missing``."""


class CommandTimedOut(CommandFault):
    """The command did not answer within its timeout and was killed; reason ``timeout``."""


class CommandFailed(CommandFault):
    """The command could not be started or exited non-zero (reason ``failed``), or wrote more than the
    bound (``too_long``)."""


class BadOutput(EngineError):
    """The command answered with text its documented format does not allow."""


@dataclass(frozen=True, slots=True)
class Output:
    status: int  # the exit status (negative: the signal that ended it)
    stdout: bytes
    stderr: bytes
    truncated: bool  # a stream reached the bound: the command was stopped there

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")


def run(
    argv: Sequence[str], timeout_s: float, cancel: Cancel = never_cancelled, *, limit: int = OUTPUT_LIMIT
) -> Output:
    """Run ``argv`` to its end and return its status and output, whatever the status. Raises
    ``CommandMissing``, ``CommandFailed`` (could not start), ``CommandTimedOut``, or what ``cancel`` raises.

    The call ends once the command has exited and what its pipes hold is read, even while something it
    left behind holds them open: its process group is killed then, as on a timeout or a cancellation."""
    if shutil.which(argv[0]) is None:
        raise CommandMissing(f"{argv[0]} is not installed", reason="missing", argv=argv)
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
        detail = f"{argv[0]} could not be started: {exc.strerror or exc}"
        raise CommandFailed(detail, reason="failed", argv=argv) from None
    assert child.stdout is not None and child.stderr is not None
    kept = {child.stdout.fileno(): bytearray(), child.stderr.fileno(): bytearray()}
    deadline = time.monotonic() + timeout_s
    try:
        with selectors.DefaultSelector() as selector:
            for fd in kept:
                selector.register(fd, selectors.EVENT_READ)
            while all(len(buffer) < limit for buffer in kept.values()):
                cancel()
                if (left := deadline - time.monotonic()) <= 0:
                    detail = f"{' '.join(argv[:3])} gave no answer within {timeout_s:g} s"
                    raise CommandTimedOut(detail, reason="timeout", argv=argv)
                ended = _ended(child)
                ready = selector.select(0 if ended else min(_SLICE_S, left))
                if ended and not ready:
                    break
                for key, _ in ready:
                    if chunk := os.read(key.fd, 1 << 16):
                        kept[key.fd] += chunk[: limit - len(kept[key.fd])]
                    else:
                        selector.unregister(key.fd)
    finally:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
        child.stderr.close()
    out, err = kept.values()
    return Output(child.returncode, bytes(out), bytes(err), max(len(out), len(err)) >= limit)


def _ended(child: subprocess.Popen[bytes]) -> bool:
    """The command has exited. Where ``waitid`` looks without reaping it, its process group id stays its
    own until the ``killpg`` after the loop; elsewhere it is reaped here and the group killed just after."""
    if platform.has_waitid():
        return os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    return child.poll() is not None


def run_command(argv: Sequence[str], timeout_s: float, cancel: Cancel = never_cancelled) -> str:
    """The standard output of a query command that must succeed: ``run``'s faults, and ``CommandFailed``
    for a non-zero exit (with its first error line) or output past the bound."""
    done, shown = run(argv, timeout_s, cancel), " ".join(argv[:3])
    if done.truncated:
        raise CommandFailed(f"{shown} wrote more than {OUTPUT_LIMIT:,} bytes", reason="too_long", argv=argv)
    if done.status != 0:
        first = (
            done.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit status {done.status}"]
        )[0]
        # On one line, no escape driving a terminal: the words may be another program's (a daemon's).
        said = one_line(first[:200])
        raise CommandFailed(f"{shown} failed: {said}", reason="failed", argv=argv, status=done.status)
    return done.text
