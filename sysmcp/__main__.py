"""``python -m sysmcp`` and the ``sysmcp`` console script: refuse native Windows, then run ``cli.main``.

The Windows check comes before ``sysmcp.cli`` is imported, so that nothing meant for POSIX (its
imports, the stdio wire) is loaded on a system where it is not meant to run.
"""

import gc
import sys

from sysmcp import platform


def main() -> int:
    # The start creates the objects the process lives on (modules, classes, functions): the cyclic
    # collector would walk them over and over while they are made, for nothing. Off until cli.main
    # knows what it runs: a server freezes them (gc.freeze) and turns it back on before serving.
    gc.disable()
    if platform.is_native_windows():
        sys.stderr.write(f"sysmcp: {platform.WSL_HINT}\n")
        return 2
    from sysmcp.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    raise SystemExit(main())
