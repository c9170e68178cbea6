"""The commands' stdout, which may fail as any command's does: a pipe closed early, a full disk."""

from __future__ import annotations

import errno
import os
import signal
import sys
from collections.abc import Callable

EXIT_PIPE = 128 + signal.SIGPIPE  # 141, as a shell reports `seq 1e9 | head -3`'s seq


def writing(command: str, run: Callable[[], int]) -> int:
    """A command whose output goes to stdout, which may fail as sha256sum's does: a closed pipe (``| head``)
    is a quiet 141, a full disk or a failing device one line and 1, never a traceback."""
    try:
        status = run()
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        silence_stdout()
        return EXIT_PIPE
    except (OSError, BaseExceptionGroup) as exc:
        failed = _write_error(exc)
        if failed is None:
            raise
        silence_stdout()
        print(f"sysmcp {command}: write error: {failed.strerror}", file=sys.stderr)
        return 1


def _write_error(exc: BaseException) -> OSError | None:
    """The failed write in ``exc``, looked for inside a task group's group too (``call --raw`` writes
    the wire as it goes, from inside the session's task group)."""
    if isinstance(exc, BaseExceptionGroup):
        return next(filter(None, map(_write_error, exc.exceptions)), None)
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
        return exc
    return None


def silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail on the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
