"""Running a read-only query command with a timeout: its output, or a fault that says which fact it is."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess

from sysmcp.engine.errors import EngineError, Unavailable

__all__ = ["BadOutput", "CommandFailed", "CommandMissing", "CommandTimedOut", "run_command"]


class CommandMissing(Unavailable):
    """The query command is not installed (not on PATH)."""


class CommandTimedOut(Unavailable):
    """The query command did not answer within its timeout; it was killed."""


class CommandFailed(Unavailable):
    """The query command exited non-zero (not root, no such device, ...)."""


class BadOutput(EngineError):
    """The command answered with text its documented format does not allow."""


def run_command(argv: list[str], timeout: float) -> str:
    """The standard output of ``argv`` (stdin closed, its own process group, killed whole after
    ``timeout`` seconds so a child it started cannot hold the pipe open)."""
    if shutil.which(argv[0]) is None:
        raise CommandMissing(f"{argv[0]} is not installed", reason="missing")
    try:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, "LC_ALL": "C"},
        )
    except OSError as exc:
        raise CommandFailed(f"{argv[0]} could not be started: {exc.strerror}", reason="failed") from None
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise CommandTimedOut(
            f"{' '.join(argv[:3])} gave no answer within {timeout:g} s", reason="timeout"
        ) from None
    if child.returncode != 0:
        first = (err.strip().splitlines() or [f"exit status {child.returncode}"])[0][:200]
        raise CommandFailed(f"{' '.join(argv[:3])} failed: {first}", reason="failed")
    return out
