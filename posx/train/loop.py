"""Training: AdamW with warmup then cosine decay, gradient clipping, seeded batches.

``train(cfg, run_dir, start)`` trains into ``run_dir`` and writes config.yaml, metrics.csv,
model.json and model.safetensors there, and a resumable checkpoint
(``posx.runs.checkpoint``) every ``train.checkpoint_every`` steps, at the end, and when
SIGTERM/SIGUSR2 asks it to stop. Where it starts is explicit: ``Fresh()`` (a new model),
``Resume()`` (the run's latest checkpoint, when it has one), or ``FromParent(...)`` (an
extension: the parent's weights, the frequencies and lineage it trains with).

Under torchrun (or a submitit job of several tasks, see ``posx.core.distributed``) every rank
runs ``train`` and the model is wrapped in DistributedDataParallel. ``train.batch_size`` is the
global batch: one generator, identical on every rank, draws all of it and each rank takes its
slice, then runs it in micro-batches of ``train.micro_batch_size`` with gradient accumulation
(DDP's gradient all-reduce only on the last micro-step, ``no_sync`` before). The batches are
therefore those of a single process, whatever the number of ranks, and a checkpoint resumes on
any number of ranks. Rank 0 alone holds the lock, validates, writes every file and shows
progress; the logged loss is the mean over ranks. A stop signal, a non-finite loss or a
failure of rank 0's work is agreed by all ranks at the step boundary.

On CUDA it runs with TF32 matmuls (train.tf32) and a ``torch.compile``d model
(train.compile=auto; as nanoGPT's train.py does); the uncompiled module is what is saved. The
model keeps no Python-number state that changes between calls, so one graph serves training
and one serves validation. metrics.csv has ``mfu``: achieved FLOP/s (``GPT.flops_per_token``
times tokens/s) over the GPU's bf16 peak (``posx.core.device.BF16_PEAK``); empty on the CPU
and on GPUs not in that table. The data is a token store (``posx.data.store``), read through
memmap; the model's vocabulary is its tokenizer's.
"""

from __future__ import annotations

import contextlib
import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
import yaml
from omegaconf import DictConfig
from rich.console import Console
from torch.nn.parallel import DistributedDataParallel

from posx.config.compose import to_yaml
from posx.core import distributed, files, lock
from posx.core.device import autocast, bf16_peak_flops, set_threads, use_compile, use_tf32
from posx.core.errors import Preempted, PosxError
from posx.core.progress import Reporter
from posx.core.signals import StopSignals
from posx.core.trackers import Tracker, open_tracker
from posx.data import corpus as data_mod
from posx.data import store
from posx.model.config import GPTConfig
from posx.model.gpt import GPT
from posx.model.rescale import RopeRecord, install_trained
from posx.runs import checkpoint
from posx.runs.records import Lineage, RunMeta, TrainExtras
from posx.runs.rundir import CONFIG, save_run
from posx.train.steps import (COLUMNS, batch_layout, check_eval_fits, estimate_val_loss, lr_at, make_optimizer,
                              mfu, write_metrics)

COMPILE_BACKEND = "inductor"  # torch.compile's backend (tests use "eager" to check graphs without codegen)
__all__ = ["COLUMNS", "COMPILE_BACKEND", "Fresh", "FromParent", "Resume", "Start", "batch_layout",
           "estimate_val_loss", "gpt_config", "lr_at", "make_optimizer", "mfu", "train", "write_metrics"]


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


def gpt_config(cfg: DictConfig, vocab_size: int = data_mod.VOCAB_SIZE) -> GPTConfig:
    """The model a run config describes, on the corpus tokenizer's vocabulary (256: bytes)."""
    return GPTConfig.from_run_config(cfg, vocab_size)


def train(cfg: DictConfig, run_dir: Path, start: Start, console: Console | None = None) -> Path:
    """Train into ``run_dir`` from ``start`` (``Fresh``, ``Resume`` or ``FromParent``).

    Raises ``Preempted`` after checkpointing when SIGTERM/SIGUSR2 arrives mid-run, and
    ``PosxError`` naming the step when the loss turns non-finite (the last good checkpoint stays).
    Every rank calls it; rank 0 holds the run's lock.
    """
    console = console or Console()
    if not distributed.is_main():
        console = Console(quiet=True)
    device = distributed.device(cfg.device)
    set_threads(cfg.threads)
    busy = f"{run_dir} is being trained by another posx process; wait for it to stop (or stop it) before resuming"
    with contextlib.ExitStack() as stack:
        distributed.on_main(lambda: stack.enter_context(lock.exclusive(run_dir, busy=busy)))
        stop = stack.enter_context(StopSignals())
        return _train(cfg, Path(run_dir), start, console, device, stop)


@dataclass
class _Log:
    """What rank 0 keeps between steps."""

    rows: list[dict] = field(default_factory=list)
    val_loss: float = float("nan")
    t_last: float = 0.0


def _train(cfg: DictConfig, run_dir: Path, start: Start, console: Console, device: torch.device,
           stop: StopSignals) -> Path:
    torch.manual_seed(cfg.seed)
    main, rank = distributed.is_main(), distributed.rank()
    local, micro = batch_layout(cfg, distributed.world_size())

    def load():  # the memmapped token store of the data config
        return store.load(cfg.data, cfg.data.cache_dir, console=console)
    corpus = distributed.on_main(load) or load()  # rank 0 builds the store, the others read it
    vocab, tok_sha = corpus.tokenizer.vocab_size, corpus.tokenizer.sha256
    T = cfg.train.context_length
    data_mod.require_tokens(corpus.train, T + 1, f"the training split (train.context_length={T})")
    data_mod.require_tokens(corpus.val, T + 1, f"the validation split (train.context_length={T})")
    if cfg.eval.after_train:  # caught now, not after the whole training
        parent = start.lineage if isinstance(start, FromParent) else None
        check_eval_fits(cfg, corpus.val, parent.train_context if parent else None)

    model = (start.model if isinstance(start, FromParent) else GPT(gpt_config(cfg, vocab))).to(device)
    use_tf32(device, cfg.train.tf32)
    compiled = use_compile(cfg.train.compile, device)
    peak = bf16_peak_flops(device)
    flops_per_token = model.flops_per_token(T)
    optimizer = make_optimizer(model, cfg, device)
    gen = torch.Generator().manual_seed(cfg.seed)  # the same on every rank: it draws the global batch
    extras = TrainExtras(data_sha256=corpus.fingerprint.get("sha256"), tokenizer_sha256=tok_sha)
    if isinstance(start, FromParent):
        extras.rope, extras.extended_from = start.rope, start.lineage
    tokens_per_step = cfg.train.batch_size * T
    log = _Log()
    first = 0
    resuming = isinstance(start, Resume)
    if resuming and checkpoint.exists(run_dir):
        state = checkpoint.load(run_dir, model, optimizer, gen, device)
        if state.extras.data_sha256 != extras.data_sha256:
            raise PosxError(f"the corpus differs from the one {run_dir} was training on (other files or "
                            "Python version); resuming would not continue the same run — start a new one")
        if state.extras.tokenizer_sha256 not in (None, tok_sha):  # None: a checkpoint from before stores
            raise PosxError(f"the tokenizer differs from the one {run_dir} was training with; resuming would not "
                            "continue the same run — start a new one")
        if state.step > cfg.train.steps:
            raise PosxError(f"{run_dir} has a checkpoint at step {state.step}, past train.steps={cfg.train.steps}")
        first, log.rows, extras = state.step, state.metrics, state.extras
        extras.tokenizer_sha256 = tok_sha
        # an extension keeps its frequencies (the model was built plain from the config)
        install_trained(model, extras.rope, T, f"the checkpoint of {run_dir}")
        log.val_loss = float("nan") if extras.val_loss is None else extras.val_loss
    # only once the run is known to start (or go on): a refused resume leaves config.yaml alone
    distributed.on_main(lambda: files.write_text(run_dir / CONFIG, to_yaml(cfg)))
    world = distributed.world_size()
    ranks = f" ranks={world} micro_batch={micro}" if distributed.enabled() else ""
    console.print(
        f"[bold]posx train[/] {run_dir}  pos={cfg.pos.name} T={T} "
        f"params={model.num_params() / 1e6:.2f}M device={device}{ranks} attention={model.config.attention}"
        f"{' compiled' if compiled else ''}"
        + (f"  [cyan]resuming at step {first}[/]" if resuming else "")
    )
    ddp = model
    if distributed.enabled():
        # Rank 0's parameters are broadcast here; validation uses ``model`` itself (no collective).
        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    fwd = torch.compile(ddp, backend=COMPILE_BACKEND) if compiled else ddp  # same parameters
    # validation runs on the module itself (no collective): compiled once more under DDP
    val_fwd = fwd if ddp is model else (torch.compile(model, backend=COMPILE_BACKEND) if compiled else model)

    def save_checkpoint(done: int) -> None:
        extras.val_loss = log.val_loss if math.isfinite(log.val_loss) else None
        checkpoint.save(run_dir, done, model, optimizer, gen, log.rows, extras)
        write_metrics(run_dir, log.rows)

    model.train()
    every = cfg.train.checkpoint_every
    n_micro = local // micro
    reporter = Reporter(console, "train", cfg.train.steps) if main else contextlib.nullcontext()
    config_text = to_yaml(cfg)
    # rank 0 alone reports to the tracker: the other ranks get the no-op one
    tracker = open_tracker(cfg.logger, run_dir, run_dir.name, yaml.safe_load(config_text), config_text) \
        if main else Tracker()
    with reporter as progress, tracker:
        if main:
            progress.skip_to(first)
        log.t_last = time.perf_counter()
        for step in range(first, cfg.train.steps):
            lr = lr_at(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            # The whole global batch, drawn alike on every rank; this rank's slice of it.
            x, y = data_mod.get_batch(corpus.train, cfg.train.batch_size, T, gen)
            x, y = x[rank * local:(rank + 1) * local], y[rank * local:(rank + 1) * local]
            optimizer.zero_grad(set_to_none=True)
            local_loss = torch.zeros((), device=device)
            for i in range(n_micro):
                xm = x[i * micro:(i + 1) * micro].to(device, non_blocking=True)
                ym = y[i * micro:(i + 1) * micro].to(device, non_blocking=True)
                last = i == n_micro - 1
                with contextlib.nullcontext() if last or ddp is model else ddp.no_sync():
                    with autocast(device):
                        _, loss = fwd(xm, ym)
                    if n_micro > 1:
                        loss = loss / n_micro
                    loss.backward()
                local_loss += loss.detach()
            if cfg.train.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
            optimizer.step()

            # The step boundary: every rank learns the mean loss, then rank 0 logs (and
            # validates), then all agree on a stop signal received by any rank meanwhile.
            train_loss = distributed.mean(local_loss.item())
            done = step + 1
            if not math.isfinite(train_loss):
                if not main:
                    raise distributed.PeerFailed(f"training loss is {train_loss} at step {done} (mean over ranks)")
                last_ckpt = checkpoint.latest_step(run_dir)
                kept = (f"the last good checkpoint (step {last_ckpt}) is kept in {checkpoint.root(run_dir)}"
                        if last_ckpt is not None else "no checkpoint was written before it")
                raise PosxError(f"training loss is {train_loss} at step {done}; {kept}; "
                                "lower train.lr or check the data")

            def record() -> None:  # rank 0: validate, log
                now = time.perf_counter()
                tok_s = tokens_per_step / max(now - log.t_last, 1e-9)
                log.t_last = now
                validate = done % cfg.train.eval_every == 0 or done == cfg.train.steps
                if validate:
                    log.val_loss = estimate_val_loss(val_fwd, corpus.val, cfg, device, micro)
                    log.t_last = time.perf_counter()  # validation time is not training throughput
                log.rows.append({"step": done, "train_loss": train_loss,
                                 "val_loss": log.val_loss if validate else float("nan"), "lr": lr,
                                 "tokens_per_s": tok_s, "mfu": mfu(tok_s, flops_per_token, peak)})
                tracker.log({"train/loss": train_loss, "train/lr": lr, "train/tokens_per_s": tok_s,
                             **({"val/loss": log.val_loss} if validate else {})}, done)
                progress.advance(
                    f"loss {train_loss:.3f} val {log.val_loss:.3f} lr {lr:.1e} {tok_s / 1e3:.1f}k tok/s")

            def save() -> None:  # rank 0: checkpoint
                save_checkpoint(done)
                log.t_last = time.perf_counter()  # checkpoint time is not training throughput

            distributed.on_main(record)
            signum = int(distributed.agree_max([stop.signum])[0])
            if signum or done == cfg.train.steps or (every > 0 and done % every == 0):
                distributed.on_main(save)
            if signum and done < cfg.train.steps:
                name = stop.received or f"{signal.Signals(signum).name} (on another rank)"
                message = f"{name} at step {done}/{cfg.train.steps}; checkpoint saved"
                if stop.chains(signum):
                    console.print(f"[yellow]stopped: {message}; passing {signal.Signals(signum).name} to the "
                                  "handler posx found (a submitit job: requeue)[/]", highlight=False)
                    stop.chain(signum)  # submitit's handler requeues the job and exits on rank 0
                raise Preempted(f"{message}; continue with `posx train --resume {run_dir}`")

    def finish() -> None:
        write_metrics(run_dir, log.rows)
        if corpus.tokenizer.hf is not None:  # the run carries the tokenizer its ids mean
            files.write_text(run_dir / "tokenizer.json", corpus.tokenizer.to_json())
        meta = RunMeta(model=gpt_config(cfg, vocab), train_context=T,
                       data={**corpus.fingerprint, "config": store.data_config(cfg.data)},
                       step=cfg.train.steps, rope=extras.rope, extended_from=extras.extended_from)
        save_run(run_dir, model.cpu(), meta)
        metrics = pd.DataFrame(log.rows)
        steady = (metrics["tokens_per_s"].iloc[min(5, len(metrics) - 1):].median() if len(metrics)
                  else float("nan"))
        steady_mfu = mfu(steady, flops_per_token, peak)
        console.print(
            f"[green]done[/] {run_dir}: val loss {log.val_loss:.4f} (ppl {math.exp(log.val_loss):.2f}), "
            f"{steady:,.0f} tokens/s, mfu " + ("n/a" if steady_mfu is None else f"{steady_mfu:.1%}")
        )

    distributed.on_main(finish)
    return run_dir
