"""Counting the descriptors a piece of code holds, by counting the process's own (``/proc/self/fd``).

Why in a forked child (``counted_alone``): in the test process, threads other tests left running (a pool,
a subprocess's reader) and the garbage collector finalising what they left open and close descriptors of
their own whenever the machine lets them, so a count taken there is the code's only on an idle machine.
A forked child has only the thread that forked, and its collector is turned off: what it counts is the code's.
"""

from __future__ import annotations

import gc
import json
import os
import resource
from collections.abc import Callable
from typing import Any

from tests.deep_trees import under_limit


def open_descriptors() -> int:
    """The descriptors this process holds, the listing's own included (Linux: ``/proc/self/fd``)."""
    return len(os.listdir("/proc/self/fd"))


def counted_alone(work: Callable[[], object]) -> Any:
    """``work()``'s answer (JSON-able: counts taken with ``open_descriptors``), worked out in a forked child;
    what ``work`` raised (a failed assertion) is raised here as an ``AssertionError`` naming it."""

    def alone() -> str:
        gc.collect()
        gc.disable()
        return json.dumps(work())

    answer = under_limit(alone, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    try:
        return json.loads(answer)
    except ValueError:
        raise AssertionError(f"in the child: {answer}") from None
