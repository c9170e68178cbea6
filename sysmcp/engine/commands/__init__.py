"""Running another program: one timed, cancellable child at a time, its output bounded, its whole
process group killed when the call ends, so a helper it started cannot hold the pipe or outlive it.

The front door: ``run`` (status and output, whatever the status: smartctl answers with a bit mask),
``run_command`` (the output of a query that must succeed) and the faults, each carrying its facts.
"""

from __future__ import annotations

from sysmcp.engine.commands._run import (
    BadOutput,
    CommandFailed,
    CommandMissing,
    CommandTimedOut,
    run,
    run_command,
)

__all__ = ["BadOutput", "CommandFailed", "CommandMissing", "CommandTimedOut", "run", "run_command"]
