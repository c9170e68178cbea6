"""disk_usage explain's walk budget (``timeout_s``), in a module of its own: disk_usage's schema reads it
when disk_usage is imported, and disk_explain's advice names its maximum, while disk_usage imports
disk_explain only when an explain runs (so neither can take it from the other)."""

from __future__ import annotations

from sysmcp.tools.schemas import TimeBudget

EXPLAIN_TIMEOUT = TimeBudget(default=60, maximum=600)
