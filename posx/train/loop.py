"""Training: AdamW with warmup then cosine decay, gradient clipping, seeded batches.

``train`` runs named steps over one ``LoopState`` from an explicit start (``Fresh``, ``Resume``,
``FromParent``), checkpointing every ``train.checkpoint_every`` steps, at the end and on
SIGTERM/SIGUSR2. Under torchrun every rank runs it with DistributedDataParallel: the global batch
is drawn whole by one generator alike on every rank and sliced, so the batches are one process's
and a checkpoint resumes on any number of ranks (docs/sweeps-and-clusters.md). Rank 0 alone holds
the lock, validates and writes; a stop signal or failure is agreed at the step boundary. The
uncompiled module is what is saved.
"""

from __future__ import annotations

import contextlib
import math
import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pandas as pd
import torch
import yaml
from rich.console import Console
from rich.markup import escape
from rich.text import Text
from torch.nn.parallel import DistributedDataParallel

from posx.configure.compose import to_plain, to_yaml
from posx.configure.resume import refuse_edits
from posx.core import distributed, files, lock
from posx.core.console import new_console
from posx.core.device import bf16_peak_flops, set_threads, use_tf32
from posx.core.errors import PosxError, Preempted
from posx.core.progress import Reporter
from posx.core.signals import StopSignals
from posx.core.trackers import Tracker, open_tracker
from posx.data import corpus as data_mod
from posx.data import store
from posx.eval.tables import perplexity
from posx.model.gpt import GPT
from posx.model.rescale import install_trained
from posx.model.spec import ModelSpec
from posx.runs import checkpoint, resumable
from posx.runs.paths import CONFIG
from posx.runs.records import RunMeta, TrainExtras
from posx.runs.rundir import save_run
from posx.schema.config import Config
from posx.train import memory, steps, taskcurve
from posx.train.compiling import compile_seconds, decide_compile
from posx.train.state import FromParent, LoopState, Resume, Start
from posx.train.steps import train_step  # by name: a test wraps it
from posx.train.taskmix import make_pool, mix_batch

COMPILE_BACKEND = "inductor"  # torch.compile's backend (tests use "eager" to check graphs without codegen)
__all__ = ["COMPILE_BACKEND", "train"]


def train(cfg: Config, run_dir: Path, start: Start, console: Console | None = None) -> Path:
    """Train into ``run_dir`` from ``start`` on every rank (rank 0 holds the run's lock). Raises
    ``Preempted`` after checkpointing on SIGTERM/SIGUSR2, ``PosxError`` when the loss turns non-finite."""
    console = console or new_console()
    if not distributed.is_main():
        console = Console(quiet=True)
    device = distributed.device(cfg.device)
    set_threads(cfg.threads)
    run_dir = Path(run_dir)
    busy = f"{run_dir} is being trained by another posx process; wait for it to stop (or stop it) before resuming"
    with contextlib.ExitStack() as stack:
        distributed.on_main(partial(stack.enter_context, lock.exclusive(run_dir, busy=busy)))  # held until the end
        stop = stack.enter_context(StopSignals())
        state = set_up(cfg, run_dir, start, console, device)
        run_steps(state, stop)
        distributed.on_main(partial(finish, state))
    return run_dir


def load_data(cfg: Config, start: Start, console: Console) -> store.Store:
    """The token store (rank 0 builds it), checked to hold what training and eval.after_train read."""
    load = partial(store.load, cfg.data, cfg.data.cache_dir, console=console)
    corpus = distributed.on_main(load) or load()
    T = cfg.train.context_length
    parent = start.lineage if isinstance(start, FromParent) else None
    length = f"factor={parent.factor:g} x the parent's T: {T}" if parent else f"train.context_length={T}"
    data_mod.require_tokens(corpus.train, T + 1, f"the training split ({length})")
    data_mod.require_tokens(corpus.val, T + 1, f"the validation split ({length})")
    if cfg.eval.after_train:  # caught now, not after the whole training
        steps.check_eval_fits(cfg, corpus.val, parent.train_context if parent else None)
    return corpus


def forwards(
    model: GPT, device: torch.device, compiled: bool
) -> tuple[DistributedDataParallel | None, Callable, Callable]:
    """(the DDP wrapper or None, the training forward, the validation forward: never DDP)."""
    ddp = None
    if distributed.enabled():
        # broadcast_buffers=False: the buffers (RoPE frequencies, ALiBi slopes, T5 buckets) are
        # made the same on every rank, so re-sending rank 0's before every forward is waste.
        ids = [device.index] if device.type == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=ids, broadcast_buffers=False)
    wrapped = model if ddp is None else ddp
    fwd = torch.compile(wrapped, backend=COMPILE_BACKEND) if compiled else wrapped  # same parameters
    val_fwd = fwd if ddp is None else (torch.compile(model, backend=COMPILE_BACKEND) if compiled else model)
    return ddp, fwd, val_fwd


def set_up(cfg: Config, run_dir: Path, start: Start, console: Console, device: torch.device) -> LoopState:
    """The loop's state, resumed when ``start`` says so; config.yaml written once the run goes on."""
    torch.manual_seed(cfg.seed)
    local, micro = steps.batch_layout(cfg, distributed.world_size())
    corpus = load_data(cfg, start, console)
    model = (
        start.model if isinstance(start, FromParent) else GPT(ModelSpec.from_config(cfg, corpus.tokenizer.vocab_size))
    ).to(device)
    use_tf32(device, cfg.train.tf32)
    work = (local * cfg.train.context_length, cfg.train.steps)  # tokens per step on this rank, steps
    compiled = decide_compile(cfg.train.compile, device, cfg.model.block, cfg.model.n_layer, model.num_params(), work)
    extras = TrainExtras(
        data_sha256=corpus.fingerprint.get("sha256"), tokenizer_sha256=corpus.tokenizer.sha256, config=to_plain(cfg)
    )
    if isinstance(start, FromParent):
        extras.rope, extras.extended_from = start.rope, start.lineage
    state = LoopState(
        cfg=cfg,
        run_dir=run_dir,
        console=console,
        device=device,
        corpus=corpus,
        model=model,
        optimizer=steps.make_optimizer(model, cfg, device),
        gen=torch.Generator().manual_seed(cfg.seed),
        extras=extras,
        local=local,
        micro=micro,
        fwd=model,
        val_fwd=model,
        ddp=None,
        compiled=compiled,
        flops_per_token=model.flops_per_token(cfg.train.context_length),
        peak=steps.run_peak(bf16_peak_flops(device), distributed.world_size()),
        held=taskcurve.held_out(cfg.data, cfg.train.context_length, corpus.val, corpus.tokenizer),
        pool=make_pool(cfg.data, cfg.train.context_length, corpus.train, cfg.seed, corpus.tokenizer),
    )
    resuming = isinstance(start, Resume)
    if resuming and resumable.exists(run_dir):
        resume(state)
    elif resuming:  # said under the run's lock: a run another process trains is refused first
        console.print(Text(f"{run_dir} has no checkpoint yet; training it from step 0", style="yellow"))
    # only once the run is known to start (or go on): a refused resume leaves config.yaml alone
    distributed.on_main(partial(files.write_text, run_dir / CONFIG, to_yaml(cfg)))
    announce(state, resuming)
    state.ddp, state.fwd, state.val_fwd = forwards(model, device, compiled)
    model.train()
    return state


def resume(state: LoopState) -> None:
    """Continue from the run's latest checkpoint; refused for another corpus or tokenizer, or past train.steps."""
    cfg, run_dir, ours = state.cfg, state.run_dir, state.extras
    saved = checkpoint.load(run_dir, state.model, state.optimizer, state.gen, state.device)
    refuse_edits(run_dir, saved.extras.config, ours.config)
    if saved.extras.data_sha256 != ours.data_sha256:
        raise PosxError(
            f"the corpus differs from the one {run_dir} was training on (other files or "
            "Python version); resuming would not continue the same run — start a new one"
        )
    if saved.extras.tokenizer_sha256 not in (None, ours.tokenizer_sha256):  # None: a checkpoint from before stores
        raise PosxError(
            f"the tokenizer differs from the one {run_dir} was training with; resuming would not "
            "continue the same run — start a new one"
        )
    if saved.step > cfg.train.steps:
        raise PosxError(f"{run_dir} has a checkpoint at step {saved.step}, past train.steps={cfg.train.steps}")
    state.step, state.rows, state.extras = saved.step, saved.metrics, saved.extras
    state.curve = taskcurve.read(run_dir, saved.step)
    state.extras.tokenizer_sha256, state.extras.config = ours.tokenizer_sha256, ours.config
    # an extension keeps its frequencies (the model was built plain from the config)
    install_trained(state.model, state.extras.rope, cfg.train.context_length, f"the checkpoint of {run_dir}")
    state.val_loss = float("nan") if state.extras.val_loss is None else state.extras.val_loss


def announce(state: LoopState, resuming: bool) -> None:
    cfg, model = state.cfg, state.model
    ranks = f" ranks={distributed.world_size()} micro_batch={state.micro}" if distributed.enabled() else ""
    state.console.print(
        f"[bold]posx train[/] {escape(str(state.run_dir))}  pos={cfg.pos.name} T={cfg.train.context_length} "
        f"params={model.num_params() / 1e6:.2f}M device={state.device}{ranks} attention={model.config.model.attention}"
        f"{' compiled' if state.compiled else ''}" + (f"  [cyan]resuming at step {state.step}[/]" if resuming else "")
    )
    too_large = memory.warning(model.config, state.micro, cfg.train.context_length, model.num_params(), state.device)
    if too_large:
        state.console.print(f"[yellow]warning:[/] {escape(too_large)}")
    if state.compiled and state.device.type == "cpu":
        state.console.print(
            f"compiling the model: the first step takes about {compile_seconds(cfg.model.n_layer):.0f} s more "
            "(train.compile=false skips it)"
        )


def run_steps(state: LoopState, stop: StopSignals) -> None:
    """From ``state.step`` to train.steps; at each step boundary all ranks agree on a stop signal."""
    cfg, main = state.cfg, distributed.is_main()
    every = cfg.train.checkpoint_every
    reporter = Reporter(state.console, "train", cfg.train.steps) if main else contextlib.nullcontext()
    with reporter as progress, open_run_tracker(state) as tracker:
        if main:
            progress.skip_to(state.step)
        state.t_last = time.perf_counter()
        while state.step < cfg.train.steps:
            lr = steps.lr_at(state.step, cfg)
            train_loss = step(state, lr)
            check_finite(state, train_loss)
            distributed.on_main(partial(record, state, train_loss, lr, tracker, progress))
            signum = int(distributed.agree_max([stop.signum])[0])
            if signum or state.step == cfg.train.steps or (every > 0 and state.step % every == 0):
                distributed.on_main(partial(save_checkpoint, state))
            if signum and state.step < cfg.train.steps:
                stop_here(state, stop, signum)


def open_run_tracker(state: LoopState) -> Tracker:
    """The configured tracker on rank 0; the no-op one on the other ranks."""
    if not distributed.is_main():
        return Tracker()
    config_text = to_yaml(state.cfg)
    return open_tracker(state.cfg.logger, state.run_dir, state.run_dir.name, yaml.safe_load(config_text), config_text)


def step(state: LoopState, lr: float) -> float:
    """One optimizer step on this rank's slice of the global batch; the loss averaged over ranks."""
    cfg, rank, local = state.cfg, distributed.rank(), state.local
    steps.set_lr(state.optimizer, lr)
    x, y = data_mod.get_batch(state.corpus.train, cfg.train.batch_size, cfg.train.context_length, state.gen)
    x, y, _ = mix_batch(x, y, cfg.data, state.corpus.train, cfg.seed, state.step, state.corpus.tokenizer, state.pool)
    x, y = x[rank * local : (rank + 1) * local], y[rank * local : (rank + 1) * local]
    loss = train_step(
        state.model, state.optimizer, x, y, state.device, state.micro, cfg.train.grad_clip, state.fwd, state.ddp
    )
    state.model.pos.project_()  # a learned range back inside its bounds (KERPLE's floor)
    state.step += 1
    return distributed.mean(loss.item())


def check_finite(state: LoopState, train_loss: float) -> None:
    """A non-finite loss stops every rank; rank 0's error names the step and the checkpoint kept."""
    if math.isfinite(train_loss):
        return
    done = state.step
    if not distributed.is_main():
        raise distributed.PeerFailed(f"training loss is {train_loss} at step {done} (mean over ranks)")
    last = resumable.latest_step(state.run_dir)
    kept = (
        f"the last good checkpoint (step {last}) is kept in {resumable.root(state.run_dir)}"
        if last is not None
        else "no checkpoint was written before it"
    )
    raise PosxError(f"training loss is {train_loss} at step {done}; {kept}; lower train.lr or check the data")


def record(state: LoopState, train_loss: float, lr: float, tracker: Tracker, progress: Reporter) -> None:
    """Rank 0: the step's throughput, validation when due, a metrics row, the tracker, progress."""
    cfg, done = state.cfg, state.step
    now = time.perf_counter()
    tok_s = cfg.train.batch_size * cfg.train.context_length / max(now - state.t_last, 1e-9)
    state.t_last = now
    validating = done % cfg.train.eval_every == 0 or done == cfg.train.steps
    if validating:
        validate(state)
    metrics = (done, train_loss, state.val_loss if validating else math.nan, lr, tok_s)
    state.rows.append(dict(zip(steps.COLUMNS, (*metrics, steps.mfu(tok_s, state.flops_per_token, state.peak)))))
    tracker.log(
        {
            "train/loss": train_loss,
            "train/lr": lr,
            "train/tokens_per_s": tok_s,
            **({"val/loss": state.val_loss} if validating else {}),
        },
        done,
    )
    val = "-" if math.isnan(state.val_loss) else f"{state.val_loss:.3f}"  # "-" until the first validation
    scored = [f"{r['task']} {r['accuracy']:.0%}" for r in taskcurve.latest(state.curve)]  # a task mix, as last scored
    tasks = f"exact {' '.join(scored)}" if scored else ""  # its exact answers at T: "exact copy 99% mqar 3%"
    shown = " ".join(s for s in (f"loss {train_loss:.3f} val {val}", tasks, f"lr {lr:.1e}") if s)
    progress.advance(f"{shown} {tok_s / 1e3:.1f}k tok/s")


def validate(state: LoopState) -> None:
    """Rank 0: the validation estimate; its time is not training throughput."""
    cfg = state.cfg
    state.val_loss = steps.estimate_val_loss(state.val_fwd, state.corpus.val, cfg, state.device, state.micro)
    tokens = state.step * cfg.train.batch_size * cfg.train.context_length
    state.curve += taskcurve.score(state.model, state.held, state.step, tokens, cfg.eval.batch_tokens, state.device)
    taskcurve.write(state.run_dir, state.curve)
    state.t_last = time.perf_counter()


def save_checkpoint(state: LoopState) -> None:
    """Rank 0: a checkpoint and metrics.csv (not counted in the throughput)."""
    state.extras.val_loss = state.val_loss if math.isfinite(state.val_loss) else None
    checkpoint.save(state.run_dir, state.step, state.model, state.optimizer, state.gen, state.rows, state.extras)
    steps.write_metrics(state.run_dir, state.rows)
    state.t_last = time.perf_counter()


def stop_here(state: LoopState, stop: StopSignals, signum: int) -> None:
    """After a stop signal's checkpoint: hand it on (submitit requeues), then raise ``Preempted``."""
    name = stop.received or f"{signal.Signals(signum).name} (on another rank)"
    message = f"{name} at step {state.step}/{state.cfg.train.steps}; checkpoint saved"
    if stop.chains(signum):
        state.console.print(
            f"[yellow]stopped: {message}; passing {signal.Signals(signum).name} to the "
            "handler posx found (a submitit job: requeue)[/]",
            highlight=False,
        )
        stop.chain(signum)  # submitit's handler requeues the job and exits on rank 0
    raise Preempted(f"{message}; continue with `posx train --resume {state.run_dir}`")


def finish(state: LoopState) -> None:
    """Rank 0: metrics.csv, the tokenizer, model.json and model.safetensors, and the summary line."""
    cfg, corpus, run_dir = state.cfg, state.corpus, state.run_dir
    steps.write_metrics(run_dir, state.rows)
    if corpus.tokenizer.hf is not None:  # the run carries the tokenizer its ids mean
        files.write_text(run_dir / "tokenizer.json", corpus.tokenizer.to_json())
    meta = RunMeta(
        model=ModelSpec.from_config(cfg, corpus.tokenizer.vocab_size),
        train_context=cfg.train.context_length,
        data={**corpus.fingerprint, "config": store.data_config(cfg.data)},
        step=cfg.train.steps,
        rope=state.extras.rope,
        extended_from=state.extras.extended_from,
    )
    save_run(run_dir, state.model.cpu(), meta)
    metrics = pd.DataFrame(state.rows)
    steady = metrics["tokens_per_s"].iloc[min(5, len(metrics) - 1) :].median() if len(metrics) else float("nan")
    steady_mfu = steps.mfu(steady, state.flops_per_token, state.peak)
    ppl = perplexity(state.val_loss)
    state.console.print(
        f"[green]done[/] {escape(str(run_dir))}: {escape(taskcurve.done_scores(cfg, state.val_loss, state.curve))}, "
        f"{steady:,.0f} tokens/s, mfu " + ("n/a" if steady_mfu is None else f"{steady_mfu:.1%}")
    )
    if ppl == math.inf:
        state.console.print(
            Text(f"note: ppl inf: the validation loss {state.val_loss:.4g} is past what exp holds; the run diverged "
                 "(lower train.lr, or raise train.warmup_steps or train.grad_clip)", style="yellow")
        )  # fmt: skip
