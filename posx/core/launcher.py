"""What a launcher asked of this process, read from the environment alone (no torch): whether it is
one rank of several, so single-process commands refuse several without importing torch."""

from __future__ import annotations

import os

from posx.core.errors import PosxError

RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")  # what torchrun sets


def env_world_size() -> int:
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def single_process(command: str) -> None:
    if env_world_size() > 1:
        raise PosxError(
            f"{command} runs in one process; run it without torchrun (WORLD_SIZE={env_world_size()} is set)"
        )


def requested() -> bool:
    """Whether this process was started as one rank of several."""
    return all(v in os.environ for v in RANK_VARS)
