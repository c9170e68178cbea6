"""The one fork driver: worker processes that share out a walk or known tasks, and collect their parts.

This is the room's front door: other rooms import these names from here, never a private module.
"""

from sysmcp.engine.parallel._driver import (
    SPLIT_AFTER_S,
    ParallelWalk,
    SharedTasks,
    Sharing,
    children_counts,
    give_up_at,
    quiet,
    run_shared,
)
from sysmcp.engine.parallel._fork import (
    MAX_TASKS,
    FanOut,
    SharedCounters,
    available_processes,
    forked,
    pipe,
    release,
)

__all__ = [
    "MAX_TASKS",
    "SPLIT_AFTER_S",
    "FanOut",
    "ParallelWalk",
    "SharedCounters",
    "SharedTasks",
    "Sharing",
    "available_processes",
    "children_counts",
    "forked",
    "give_up_at",
    "pipe",
    "quiet",
    "release",
    "run_shared",
]
