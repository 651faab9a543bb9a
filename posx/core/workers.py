"""How many worker processes a command may start: the cores this process may run on."""

from __future__ import annotations

import os


def cores() -> int:
    """Its CPU affinity where the system has one."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
