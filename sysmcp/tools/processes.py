"""What the process-reading tools (deleted_open_files, disk_io) share: why some processes were unreadable."""

from __future__ import annotations

import os

PROC = "/proc"  # where processes are read (tests point the tools at a fake one)


def unreadable_reason() -> str:
    """Why another process's /proc entries were refused, as the text should say it: without root it is
    ownership; as root, a sandbox or security module (ptrace limits, another PID namespace's init)."""
    if os.geteuid() != 0:
        return "other users' processes need root"
    return "refused even to root: a sandbox or security module restricts them"
