"""Where a training run starts (``Fresh``, ``Resume``, ``FromParent``), and ``LoopState``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from rich.console import Console
from torch.nn.parallel import DistributedDataParallel

from posx.data import store
from posx.model.gpt import GPT
from posx.model.roperecord import RopeRecord
from posx.runs.records import Lineage, TrainExtras
from posx.schema.config import Config


@dataclass
class Fresh:
    """A new model, initialised from ``seed``."""


@dataclass
class Resume:
    """Continue from the run's latest checkpoint; from step 0 when it has none yet."""


@dataclass
class FromParent:
    """An extension: the parent's weights, already extended, ``rope``'s frequencies and ``lineage``."""

    model: GPT
    rope: RopeRecord = field(default_factory=RopeRecord.identity)
    lineage: Lineage | None = None


Start = Fresh | Resume | FromParent


@dataclass
class LoopState:
    """Everything the loop carries between steps; ``rows``, ``val_loss`` and ``t_last`` are rank 0's."""

    cfg: Config
    run_dir: Path
    console: Console
    device: torch.device
    corpus: store.Store
    model: GPT  # the module itself: what is clipped, checkpointed and saved
    optimizer: torch.optim.AdamW
    gen: torch.Generator  # the same on every rank: it draws the global batch
    extras: TrainExtras
    local: int  # sequences per rank of the global batch
    micro: int  # sequences per forward pass
    fwd: Callable  # the training forward: the model, DDP-wrapped and/or compiled
    val_fwd: Callable  # the validation forward: never DDP (no collective on rank 0 alone)
    ddp: DistributedDataParallel | None  # the DDP wrapper under torchrun (no_sync, gradient all-reduce)
    compiled: bool
    flops_per_token: float
    peak: float | None  # bf16 peak FLOP/s of all ranks' GPUs together (None: unknown or CPU)
    step: int = 0  # optimizer steps done
    rows: list[dict] = field(default_factory=list)  # metrics.csv
    val_loss: float = float("nan")  # the latest validation estimate
    t_last: float = 0.0  # when the last step's timing ended (validation and checkpoints excluded)
    held: dict = field(default_factory=dict)  # {task: [Sample]}: the held-out task set (posx.train.taskcurve)
    curve: list[dict] = field(default_factory=list)  # task_curve.csv
    pool: tuple | None = None  # (inputs, targets) of data.task_pool's sequences (posx.train.taskmix)
