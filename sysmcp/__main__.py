"""``python -m sysmcp`` and the ``sysmcp`` console script: refuse native Windows, then run ``cli.main``.

The Windows check comes before ``sysmcp.cli`` is imported, so that nothing meant for POSIX (its
imports, the stdio wire) is loaded on a system where it is not meant to run.
"""

import gc
import os
import signal
import sys

from sysmcp import platform

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, as a shell reports a command stopped by Ctrl-C


def main() -> int:
    """Run the command; Ctrl-C that reaches no handler of its own is a quiet exit 130.

    Why here: a call or a server catches Ctrl-C once it is under way (the call is then cancelled on the
    server); before that (the imports of a cold start, an ``--inventory`` still being written) there is
    nothing to cancel, and a KeyboardInterrupt traceback on stderr would be the one thing a server's
    stderr carries that is not a JSON log line.
    """
    try:
        return _main()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _main() -> int:
    # The start creates the objects the process lives on (modules, classes, functions): the cyclic
    # collector would walk them over and over while they are made, for nothing. Off until cli.main
    # knows what it runs: a server freezes them (gc.freeze) and turns it back on before serving.
    gc.disable()
    _hold_closed_standard_descriptors()
    if platform.is_native_windows():
        sys.stderr.write(f"sysmcp: {platform.WSL_HINT}\n")
        return 2
    from sysmcp.cli import main as cli_main

    return cli_main()


def _hold_closed_standard_descriptors() -> None:
    """Put /dev/null on a standard descriptor the launcher closed (``2>&-``), before anything else opens.

    Why: a file opened later takes the lowest free number, so with stderr closed the wire's copy of
    stdout became fd 2 and every log line went out on the wire; with stdin closed the server read
    from whatever took fd 0. Held by /dev/null, a closed stdin is an empty input (the server ends at
    once), a closed stdout or stderr a sink.
    """
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)  # the lowest free number: fd
            stream = open(fd, "r" if fd == 0 else "w", closefd=False)  # noqa: SIM115 - lives as long as the process
            setattr(sys, name, stream)  # Python made it None at start


if __name__ == "__main__":
    raise SystemExit(main())
