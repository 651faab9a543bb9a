"""The stateless pieces of a training step: schedule, optimizer, the split of the global batch,
``train_step`` (shared by the loop, ``posx extend`` and the benchmarks), validation, MFU, metrics.csv."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from posx.core import files
from posx.core.device import autocast
from posx.core.errors import PosxError
from posx.data import corpus as data_mod
from posx.eval import extended, scoring
from posx.model.gpt import GPT
from posx.schema.config import Config

COLUMNS = ["step", "train_loss", "val_loss", "lr", "tokens_per_s", "mfu"]  # metrics.csv


def lr_at(step: int, cfg: Config) -> float:
    """Linear warmup to train.lr, then cosine decay to lr * min_lr_ratio at the last step."""
    t = cfg.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    span = max(1, t.steps - t.warmup_steps)
    progress = min(1.0, (step - t.warmup_steps) / span)
    floor = t.lr * t.min_lr_ratio
    return floor + 0.5 * (t.lr - floor) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: GPT, cfg: Config, device: torch.device) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices (linear layers, embeddings), none on norms."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.train.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # CUDA: one fused kernel; CPU: the foreach (multi-tensor) path, the for-loop's exact numbers in fewer ops
    extra = {"fused": True} if device.type == "cuda" else {"foreach": True}
    return torch.optim.AdamW(groups, lr=cfg.train.lr, betas=(cfg.train.beta1, cfg.train.beta2), **extra)


def batch_layout(cfg: Config, world: int) -> tuple[int, int]:
    """(sequences per rank, sequences per micro-batch) of the global ``train.batch_size``."""
    B = cfg.train.batch_size
    if B % world:
        raise PosxError(
            f"train.batch_size={B} (the global batch) is not divisible by the {world} ranks; use a multiple of {world}"
        )
    local = B // world
    micro = cfg.train.micro_batch_size or local
    if micro > local or local % micro:
        raise PosxError(
            f"train.micro_batch_size={micro} must divide the per-rank batch "
            f"(train.batch_size / ranks = {B} / {world} = {local})"
        )
    return local, micro


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The learning rate of every parameter group (the schedule's value for this step)."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    device: torch.device,
    micro: int | None = None,
    grad_clip: float = 0.0,
    fwd: Callable | None = None,
    ddp: DistributedDataParallel | None = None,
) -> Tensor:
    """One optimizer step on ``x``, ``y`` (B, T) in micro-batches of ``micro`` (None: one), losses
    averaged, gradients accumulated; with ``ddp`` the all-reduce happens on the last micro-step only.
    ``fwd``: a compiled or wrapped ``model`` (None: ``model``). Returns the loss as a 0-d tensor on
    ``device`` (reading it syncs: the caller decides when)."""
    fwd = model if fwd is None else fwd
    micro = micro or len(x)
    n_micro = len(x) // micro
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=device)
    for i in range(n_micro):
        xm = x[i * micro : (i + 1) * micro].to(device, non_blocking=True)
        ym = y[i * micro : (i + 1) * micro].to(device, non_blocking=True)
        last = i == n_micro - 1
        with contextlib.nullcontext() if last or ddp is None else ddp.no_sync():
            with autocast(device):
                _, loss = fwd(xm, ym)
            if n_micro > 1:
                loss = loss / n_micro
            loss.backward()
        total += loss.detach()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return total


@torch.no_grad()
def estimate_val_loss(model, val, cfg: Config, device: torch.device, chunk: int | None = None) -> float:
    """Mean loss over the same eval_batches validation batches every time, ``chunk`` sequences a pass."""
    model.eval()
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    losses = []
    B = cfg.train.batch_size
    chunk = chunk or B
    for _ in range(cfg.train.eval_batches):
        x, y = data_mod.get_batch(val, B, cfg.train.context_length, gen)
        parts = []
        for i in range(0, B, chunk):
            xc, yc = x[i : i + chunk].to(device), y[i : i + chunk].to(device)
            with autocast(device):
                _, loss = model(xc, yc)
            parts.append(loss.item())
        losses.append(parts[0] if len(parts) == 1 else sum(parts) / len(parts))
    model.train()
    return sum(losses) / len(losses)


def check_eval_fits(cfg: Config, val, parent_context: int | None) -> None:
    """A one-line error before any step when the evaluation after training would lack held-out
    tokens (an extension is also scored at factor x its parent's T, ``parent_context``)."""
    T, ev = cfg.train.context_length, cfg.eval
    if parent_context is not None:
        plan = extended.planned(parent_context, T, cfg.pos.pose_length, ev)
        lengths, n_tokens, needed = plan.lengths, plan.n_tokens, plan.needed
    else:
        lengths = scoring.eval_lengths(ev.factors, T)
        n_tokens, needed = scoring.held_out_needed(ev.protocol, ev.stride, ev.tokens, T, lengths)
    if len(val) < needed:
        raise PosxError(
            f"the held-out split has {len(val)} tokens but eval.after_train would read {needed} "
            f"({n_tokens} scored at each of lengths up to {max(lengths)}); lower eval.tokens or "
            "eval.factors, or use more data (checked before training, so no step was lost)"
        )


def mfu(tokens_per_s: float, flops_per_token: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation: achieved FLOP/s over the ``peak`` of the same GPUs; None without one."""
    return None if peak is None else tokens_per_s * flops_per_token / peak


def run_peak(device_peak: float | None, ranks: int) -> float | None:
    """The peak of all the run's GPUs (tokens/s is the global batch's)."""
    return None if device_peak is None else device_peak * ranks


def write_metrics(run_dir: Path, rows: list[dict]) -> None:
    """metrics.csv with every row so far, replaced atomically."""
    with files.atomic_path(run_dir / "metrics.csv") as tmp:
        pd.DataFrame(rows, columns=COLUMNS).to_csv(tmp, index=False)
