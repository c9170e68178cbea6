"""Words the process-reading tools (deleted_open_files, disk_io) share: why some processes were unreadable.

Their engines (``fs.openfiles``, ``fs.diskio``) only count the processes they could not read; what
the text says about it depends on who is asking, and that is decided here, once.
"""

from __future__ import annotations

import os


def unreadable_reason() -> str:
    """Why another process's /proc entries were refused, as the text should say it: without root it is
    ownership; as root, a sandbox or security module (ptrace limits, another PID namespace's init)."""
    if os.geteuid() != 0:
        return "other users' processes need root"
    return "refused even to root: a sandbox or security module restricts them"
