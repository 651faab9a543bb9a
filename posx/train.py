"""Training: AdamW with warmup then cosine decay, gradient clipping, seeded batches.

``train(cfg, run_dir)`` runs one job of ``posx train`` into ``run_dir`` and writes
config.yaml, metrics.csv, model.json and model.safetensors there.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from pathlib import Path

import pandas as pd
import torch
from omegaconf import DictConfig
from rich.console import Console

from posx import data as data_mod
from posx import io
from posx.config import to_yaml
from posx.errors import PosxError
from posx.model import GPT, GPTConfig
from posx.progress import Reporter
from posx.runs import RunMeta, save_run


def pick_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise PosxError("device=cuda but CUDA is not available here; use device=cpu or device=auto")
    return torch.device(requested)


def autocast(device: torch.device):
    """bf16 autocast on CUDA; full precision on the CPU."""
    if device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return nullcontext()


def gpt_config(cfg: DictConfig) -> GPTConfig:
    """The model config a run records: names and sizes only, no Hydra."""
    return GPTConfig(
        vocab_size=data_mod.VOCAB_SIZE,
        n_layer=cfg.model.n_layer,
        n_head=cfg.model.n_head,
        d_model=cfg.model.d_model,
        mlp_ratio=cfg.model.mlp_ratio,
        dropout=cfg.model.dropout,
        pos=cfg.pos.name,
        rope_base=cfg.pos.base,
        max_positions=cfg.pos.max_positions or cfg.train.context_length,
        t5_num_buckets=cfg.pos.num_buckets,
        t5_max_distance=cfg.pos.max_distance,
        t5_per_layer=cfg.pos.per_layer,
    )


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


def train(cfg: DictConfig, run_dir: Path, console: Console | None = None) -> Path:
    console = console or Console()
    device = pick_device(cfg.device)
    torch.manual_seed(cfg.seed)
    corpus = data_mod.load_corpus(cfg.data.source, cfg.data.path, cfg.data.val_fraction,
                                  cfg.data.cache_dir, console=console)
    T = cfg.train.context_length
    data_mod.require_tokens(corpus.train, T + 1, f"the training split (train.context_length={T})")
    data_mod.require_tokens(corpus.val, T + 1, f"the validation split (train.context_length={T})")

    io.write_text(run_dir / "config.yaml", to_yaml(cfg))
    model = GPT(gpt_config(cfg)).to(device)
    optimizer = make_optimizer(model, cfg, device)
    gen = torch.Generator().manual_seed(cfg.seed)
    tokens_per_step = cfg.train.batch_size * T
    console.print(
        f"[bold]posx train[/] {run_dir}  pos={cfg.pos.name} T={T} "
        f"params={model.num_params() / 1e6:.2f}M device={device}"
    )

    rows: list[dict] = []
    val_loss = float("nan")
    model.train()
    t_last = time.perf_counter()
    with Reporter(console, "train", cfg.train.steps) as progress:
        for step in range(cfg.train.steps):
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
                raise PosxError(f"training loss is {train_loss} at step {step + 1}; lower train.lr or check the data")
            now = time.perf_counter()
            tok_s = tokens_per_step / max(now - t_last, 1e-9)
            t_last = now
            validate = (step + 1) % cfg.train.eval_every == 0 or step + 1 == cfg.train.steps
            if validate:
                val_loss = estimate_val_loss(model, corpus.val, cfg, device)
                t_last = time.perf_counter()  # validation time is not training throughput
            rows.append({"step": step + 1, "train_loss": train_loss,
                         "val_loss": val_loss if validate else float("nan"), "lr": lr, "tokens_per_s": tok_s})
            progress.advance((
                f"loss {train_loss:.3f} val {val_loss:.3f} lr {lr:.1e} {tok_s / 1e3:.1f}k tok/s"))

    metrics = pd.DataFrame(rows)
    with io.atomic_path(run_dir / "metrics.csv") as tmp:
        metrics.to_csv(tmp, index=False)
    meta = RunMeta(model=gpt_config(cfg), train_context=T,
                   data={**corpus.fingerprint, "config": {"source": cfg.data.source, "path": cfg.data.path,
                                                          "val_fraction": cfg.data.val_fraction}},
                   step=cfg.train.steps, rope={"method": "none", "factor": 1.0, "params": {}})
    save_run(run_dir, model.cpu(), meta)
    steady = metrics["tokens_per_s"].iloc[min(5, len(metrics) - 1):].median()
    console.print(
        f"[green]done[/] {run_dir}: val loss {val_loss:.4f} (ppl {math.exp(val_loss):.2f}), "
        f"{steady:,.0f} tokens/s"
    )
    return run_dir
