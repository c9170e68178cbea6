"""sysmcp.engine.commands on real processes: a command and everything it started end with the call,
whether it exits, hangs past its timeout, is cancelled or writes past the bound; a missing program
and a failing one are faults that carry their facts."""

from __future__ import annotations

import os
import select
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sysmcp.engine.commands import (
    CommandFailed,
    CommandMissing,
    CommandTimedOut,
    run,
    run_command,
)
from sysmcp.tools.errors import words

needs_pidfd = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="pidfd_open is Linux's")

#: A child that forks a grandchild ignoring SIGTERM and holding the output pipe; both write their pid
#: to the file named by argv[1]; the child then exits when argv[2] is "exit", else waits forever.
FAMILY = textwrap.dedent(
    """
    import os, signal, sys
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:
        with open(sys.argv[1], "a") as pids:
            pids.write(f"{os.getpid()}\\n")
        while True:
            signal.pause()
    with open(sys.argv[1], "a") as pids:
        pids.write(f"{os.getpid()}\\n")
    print("answer", flush=True)
    if sys.argv[2] != "exit":
        while True:
            signal.pause()
    """
)


def family(pidfile: Path, ending: str) -> list[str]:
    return [sys.executable, "-c", FAMILY, str(pidfile), ending]


def gone(pid: int) -> bool:
    """``pid`` has ended (or ends within 30 s of its SIGKILL): waited on through a pidfd, no sleeping."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], 30)[0])
    finally:
        os.close(fd)


def pids_in(pidfile: Path, count: int) -> list[int]:
    pids = [int(line) for line in pidfile.read_text().split()]
    assert len(pids) == count, pids
    return pids


@needs_pidfd
def test_a_hung_command_whose_grandchild_ignores_sigterm_and_holds_the_pipe_ends_at_its_timeout(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "pids"
    started = time.monotonic()
    with pytest.raises(CommandTimedOut) as caught:
        run(family(pidfile, "wait"), 0.5)
    assert time.monotonic() - started < 20  # the timeout, not the family's forever
    assert caught.value.reason == "timeout" and caught.value.argv[0] == sys.executable
    assert "gave no answer within 0.5 s" in words(caught.value)
    assert all(gone(pid) for pid in pids_in(pidfile, 2))


@needs_pidfd
def test_a_command_that_exits_answers_at_once_though_its_grandchild_still_holds_the_pipe(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "pids"
    started = time.monotonic()
    done = run(family(pidfile, "exit"), 600)
    assert time.monotonic() - started < 300  # far from the 600 s timeout
    assert (done.status, done.text, done.truncated) == (0, "answer\n", False)
    assert all(gone(pid) for pid in pids_in(pidfile, 2))


@needs_pidfd
def test_cancelling_raises_the_callers_exception_and_kills_the_whole_family(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"

    class Cancelled(Exception):
        pass

    def cancel() -> None:
        if pidfile.exists() and len(pidfile.read_text().split()) == 2:
            raise Cancelled

    with pytest.raises(Cancelled):
        run(family(pidfile, "wait"), 600, cancel)
    assert all(gone(pid) for pid in pids_in(pidfile, 2))


def test_output_past_the_bound_is_cut_there_and_the_writer_stopped() -> None:
    endless = [sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"]
    done = run(endless, 600, limit=100_000)
    assert done.truncated and done.stdout == b"x" * 100_000


def test_a_missing_program_is_a_fault_naming_it(tmp_path: Path) -> None:
    with pytest.raises(CommandMissing) as caught:
        run([str(tmp_path / "no-such-program"), "--json"], 5)
    assert caught.value.argv == (str(tmp_path / "no-such-program"), "--json")
    assert caught.value.detail == f"{tmp_path / 'no-such-program'} is not installed"


def test_a_non_zero_exit_is_returned_by_run_and_a_fault_with_its_first_error_line_from_run_command() -> None:
    argv = [sys.executable, "-c", "import sys; print('partial'); sys.exit('no such pool\\nsecond line')"]
    done = run(argv, 60)
    assert (done.status, done.text, done.stderr) == (1, "partial\n", b"no such pool\nsecond line\n")
    with pytest.raises(CommandFailed) as caught:
        run_command(argv, 60)
    assert caught.value.status == 1 and caught.value.reason == "failed"
    assert caught.value.detail == f"{sys.executable} -c {argv[2]} failed: no such pool"


def test_run_command_gives_the_standard_output_of_a_command_that_succeeds() -> None:
    assert run_command([sys.executable, "-c", "print('ok')"], 60) == "ok\n"
