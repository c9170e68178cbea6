"""Reclaim: plans of what could go (the classes), the plan as a script, the one write path, and the
plans and action log kept in the history store.

This is the room's front door: other rooms import these names from here, never a private module.
"""

from sysmcp.reclaim._classes import CLASSES
from sysmcp.reclaim._keep import PLAN_TTL_S, ActionLog, Durability, LogRecord, PlanKeeper, plan_log, read_log
from sysmcp.reclaim._plan import (
    LINK,
    ApplyRequest,
    FileResult,
    Item,
    ItemResult,
    Plan,
    PlannedFile,
    PlanRequest,
    apply_items,
    build_plan,
    choose,
    confirmation_code,
    outside_roots,
)
from sysmcp.reclaim._script import render_script

__all__ = [
    "CLASSES",
    "LINK",
    "PLAN_TTL_S",
    "ActionLog",
    "ApplyRequest",
    "Durability",
    "FileResult",
    "Item",
    "ItemResult",
    "LogRecord",
    "Plan",
    "PlanKeeper",
    "PlanRequest",
    "PlannedFile",
    "apply_items",
    "build_plan",
    "choose",
    "confirmation_code",
    "outside_roots",
    "plan_log",
    "read_log",
    "render_script",
]
