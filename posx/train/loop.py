"""Training: AdamW with warmup then cosine decay, gradient clipping, seeded batches.

``train(cfg, run_dir, start)`` trains into ``run_dir`` and writes config.yaml, metrics.csv,
model.json and model.safetensors there, and a resumable checkpoint
(``posx.runs.checkpoint``) every ``train.checkpoint_every`` steps, at the end, and when
SIGTERM/SIGUSR2 asks it to stop. Where it starts is explicit: ``Fresh()`` (a new model),
``Resume()`` (the run's latest checkpoint, when it has one), or ``FromParent(...)`` (an
extension: the parent's weights, the frequencies and lineage it trains with).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
import yaml
from omegaconf import DictConfig
from rich.console import Console

from posx.config.compose import to_yaml
from posx.core import files, lock
from posx.core.device import autocast, pick_device, set_threads
from posx.core.errors import Preempted, PosxError
from posx.core.progress import Reporter
from posx.core.signals import StopSignals
from posx.core.trackers import open_tracker
from posx.data import corpus as data_mod
from posx.eval import scoring
from posx.model.config import GPTConfig
from posx.model.gpt import GPT
from posx.model.rescale import RopeRecord, install_trained
from posx.runs import checkpoint
from posx.runs.records import Lineage, RunMeta, TrainExtras
from posx.runs.rundir import save_run


@dataclass
class Fresh:
    """A new model, initialised from ``seed``."""


@dataclass
class Resume:
    """Continue from the run's latest checkpoint; from step 0 when it has none yet."""


@dataclass
class FromParent:
    """An extension: start from ``model`` (the parent's weights, already extended), train
    with ``rope``'s frequencies, and record ``lineage``."""

    model: GPT
    rope: RopeRecord = field(default_factory=RopeRecord.identity)
    lineage: Lineage | None = None


Start = Fresh | Resume | FromParent


def gpt_config(cfg: DictConfig) -> GPTConfig:
    """The model a run config describes, on the corpus's vocabulary."""
    return GPTConfig.from_run_config(cfg, data_mod.VOCAB_SIZE)


def lr_at(step: int, cfg: DictConfig) -> float:
    """Linear warmup to train.lr, then cosine decay to lr * min_lr_ratio at the last step."""
    t = cfg.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    span = max(1, t.steps - t.warmup_steps)
    progress = min(1.0, (step - t.warmup_steps) / span)
    floor = t.lr * t.min_lr_ratio
    return floor + 0.5 * (t.lr - floor) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: GPT, cfg: DictConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices (linear layers, embeddings), none on norms."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.train.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    extra = {"fused": True} if device.type == "cuda" else {}
    return torch.optim.AdamW(groups, lr=cfg.train.lr, betas=(cfg.train.beta1, cfg.train.beta2), **extra)


@torch.no_grad()
def estimate_val_loss(model: GPT, val: torch.Tensor, cfg: DictConfig, device: torch.device) -> float:
    """Mean loss over the same eval_batches validation batches every time (fixed seed)."""
    model.eval()
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    losses = []
    for _ in range(cfg.train.eval_batches):
        x, y = data_mod.get_batch(val, cfg.train.batch_size, cfg.train.context_length, gen)
        x, y = x.to(device), y.to(device)
        with autocast(device):
            logits = model(x)
        losses.append(torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten()).item())
    model.train()
    return sum(losses) / len(losses)


def _check_eval_fits(cfg: DictConfig, val: torch.Tensor, start: Start) -> None:
    """The evaluation after training reads enough held-out tokens, or a one-line error before any step."""
    T, ev = cfg.train.context_length, cfg.eval
    lengths = [round(f * T) for f in ev.factors]
    if isinstance(start, FromParent):  # an extension is also scored at factor x the parent's T
        lengths += [round(f * start.lineage.train_context) for f in ev.factors]
    n_tokens, needed = scoring.held_out_needed(ev.protocol, ev.stride, ev.tokens, T, sorted(set(lengths)))
    if len(val) < needed:
        raise PosxError(f"the held-out split has {len(val)} tokens but eval.after_train would read {needed} "
                        f"({n_tokens} scored at each of lengths up to {max(lengths)}); lower eval.tokens or "
                        "eval.factors, or use more data (checked before training, so no step was lost)")


def train(cfg: DictConfig, run_dir: Path, start: Start, console: Console | None = None) -> Path:
    """Train into ``run_dir`` from ``start`` (``Fresh``, ``Resume`` or ``FromParent``).

    Raises ``Preempted`` after checkpointing when SIGTERM/SIGUSR2 arrives mid-run, and
    ``PosxError`` naming the step when the loss turns non-finite (the last good checkpoint stays).
    """
    console = console or Console()
    device = pick_device(cfg.device)
    set_threads(cfg.get("threads"))
    busy = f"{run_dir} is being trained by another posx process; wait for it to stop (or stop it) before resuming"
    with lock.exclusive(run_dir, busy=busy), StopSignals() as stop:
        return _train(cfg, Path(run_dir), start, console, device, stop)


def _train(cfg: DictConfig, run_dir: Path, start: Start, console: Console, device: torch.device,
           stop: StopSignals) -> Path:
    torch.manual_seed(cfg.seed)
    corpus = data_mod.load_corpus(cfg.data.source, cfg.data.path, cfg.data.val_fraction,
                                  cfg.data.cache_dir, console=console)
    T = cfg.train.context_length
    data_mod.require_tokens(corpus.train, T + 1, f"the training split (train.context_length={T})")
    data_mod.require_tokens(corpus.val, T + 1, f"the validation split (train.context_length={T})")
    if cfg.eval.after_train:  # caught now, not after the whole training
        _check_eval_fits(cfg, corpus.val, start)

    files.write_text(run_dir / "config.yaml", to_yaml(cfg))
    model = (start.model if isinstance(start, FromParent) else GPT(gpt_config(cfg))).to(device)
    optimizer = make_optimizer(model, cfg, device)
    gen = torch.Generator().manual_seed(cfg.seed)
    extras = TrainExtras(data_sha256=corpus.fingerprint.get("sha256"))
    if isinstance(start, FromParent):
        extras.rope, extras.extended_from = start.rope, start.lineage
    tokens_per_step = cfg.train.batch_size * T
    rows: list[dict] = []
    val_loss = float("nan")
    first = 0
    resuming = isinstance(start, Resume)
    if resuming and checkpoint.exists(run_dir):
        state = checkpoint.load(run_dir, model, optimizer, gen, device)
        if state.extras.data_sha256 != extras.data_sha256:
            raise PosxError(f"the corpus differs from the one {run_dir} was training on (other files or "
                            "Python version); resuming would not continue the same run — start a new one")
        if state.step > cfg.train.steps:
            raise PosxError(f"{run_dir} has a checkpoint at step {state.step}, past train.steps={cfg.train.steps}")
        first, rows, extras = state.step, state.metrics, state.extras
        # an extension keeps its frequencies (the model was built plain from the config)
        install_trained(model, extras.rope, T, f"the checkpoint of {run_dir}")
        val_loss = float("nan") if extras.val_loss is None else extras.val_loss
    console.print(
        f"[bold]posx train[/] {run_dir}  pos={cfg.pos.name} T={T} "
        f"params={model.num_params() / 1e6:.2f}M device={device}"
        + (f"  [cyan]resuming at step {first}[/]" if resuming else "")
    )

    def save_checkpoint(done: int) -> None:
        extras.val_loss = val_loss if math.isfinite(val_loss) else None
        checkpoint.save(run_dir, done, model, optimizer, gen, rows, extras)
        write_metrics(run_dir, rows)

    model.train()
    t_last = time.perf_counter()
    every = cfg.train.checkpoint_every
    config_text = to_yaml(cfg)
    tracker = open_tracker(cfg.logger, run_dir, run_dir.name, yaml.safe_load(config_text), config_text)
    with Reporter(console, "train", cfg.train.steps) as progress, tracker:
        progress.skip_to(first)
        for step in range(first, cfg.train.steps):
            lr = lr_at(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            x, y = data_mod.get_batch(corpus.train, cfg.train.batch_size, T, gen)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with autocast(device):
                logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.train.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
            optimizer.step()

            train_loss = loss.item()
            if not math.isfinite(train_loss):
                last = checkpoint.latest_step(run_dir)
                kept = (f"the last good checkpoint (step {last}) is kept in {checkpoint.root(run_dir)}"
                        if last is not None else "no checkpoint was written before it")
                raise PosxError(f"training loss is {train_loss} at step {step + 1}; {kept}; "
                                "lower train.lr or check the data")
            now = time.perf_counter()
            tok_s = tokens_per_step / max(now - t_last, 1e-9)
            t_last = now
            done = step + 1
            validate = done % cfg.train.eval_every == 0 or done == cfg.train.steps
            if validate:
                val_loss = estimate_val_loss(model, corpus.val, cfg, device)
                t_last = time.perf_counter()  # validation time is not training throughput
            rows.append({"step": done, "train_loss": train_loss,
                         "val_loss": val_loss if validate else float("nan"), "lr": lr, "tokens_per_s": tok_s})
            tracker.log({"train/loss": train_loss, "train/lr": lr, "train/tokens_per_s": tok_s,
                         **({"val/loss": val_loss} if validate else {})}, done)
            progress.advance((
                f"loss {train_loss:.3f} val {val_loss:.3f} lr {lr:.1e} {tok_s / 1e3:.1f}k tok/s"))
            if stop.received or done == cfg.train.steps or (every > 0 and done % every == 0):
                save_checkpoint(done)
                t_last = time.perf_counter()  # checkpoint time is not training throughput
            if stop.received and done < cfg.train.steps:
                raise Preempted(f"{stop.received} at step {done}/{cfg.train.steps}; checkpoint saved; "
                                f"continue with `posx train --resume {run_dir}`")

    write_metrics(run_dir, rows)
    meta = RunMeta(model=gpt_config(cfg), train_context=T,
                   data={**corpus.fingerprint, "config": {"source": cfg.data.source, "path": cfg.data.path,
                                                          "val_fraction": cfg.data.val_fraction}},
                   step=cfg.train.steps, rope=extras.rope, extended_from=extras.extended_from)
    save_run(run_dir, model.cpu(), meta)
    metrics = pd.DataFrame(rows)
    steady = metrics["tokens_per_s"].iloc[min(5, len(metrics) - 1):].median() if len(metrics) else float("nan")
    console.print(
        f"[green]done[/] {run_dir}: val loss {val_loss:.4f} (ppl {math.exp(val_loss):.2f}), "
        f"{steady:,.0f} tokens/s"
    )
    return run_dir


def write_metrics(run_dir: Path, rows: list[dict]) -> None:
    """metrics.csv with every row so far, replaced atomically."""
    with files.atomic_path(run_dir / "metrics.csv") as tmp:
        pd.DataFrame(rows, columns=["step", "train_loss", "val_loss", "lr", "tokens_per_s"]).to_csv(tmp, index=False)
