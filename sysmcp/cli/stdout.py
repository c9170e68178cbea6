"""The commands' stdout, which may fail as any command's does: a pipe closed early, a full disk."""

from __future__ import annotations

import errno
import os
import signal
import sys
from collections.abc import Callable
from typing import TypeVar

E = TypeVar("E", bound=BaseException)

EXIT_PIPE = 128 + signal.SIGPIPE  # 141, as a shell reports `seq 1e9 | head -3`'s seq
_WRITE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


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
    except (OSError, BaseExceptionGroup) as exc:  # ``call --raw`` writes the wire from inside a task group
        failed = find_inside(exc, OSError, lambda error: error.errno in _WRITE_ERRORS)
        if failed is None:
            raise
        silence_stdout()
        print(f"sysmcp {command}: write error: {failed.strerror}", file=sys.stderr)
        return 1


def find_inside(exc: BaseException, kind: type[E], test: Callable[[E], bool] = lambda _: True) -> E | None:
    """``exc`` or the first exception of ``kind`` inside it that passes ``test`` (a task group wraps
    what its body raised)."""
    if isinstance(exc, BaseExceptionGroup):
        return next(filter(None, (find_inside(inner, kind, test) for inner in exc.exceptions)), None)
    return exc if isinstance(exc, kind) and test(exc) else None


def silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail on the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
