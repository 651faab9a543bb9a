"""The jobs behind the commands, and their one failure handling.

``train_job`` and ``extend_job`` are Hydra task functions (one per sweep job); ``resume``
continues a run in place. They share how a job finds its run directory (``job_run_dir``)
and what happens when a job fails (``cleanup_on_failure``: a directory this job created
that holds neither weights nor a checkpoint is removed; nothing else ever is).
``user_errors`` turns every user error into one line on stderr and an exit status.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from hydra._internal.utils import _run_hydra, get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console

from posx.config.checks import check_config
from posx.config.compose import compose, config_dir, refuse_additions, register_configs
from posx.config.resume import differences, resume_config, saved_config
from posx.core.errors import Preempted, PosxError
from posx.eval.run import evaluate_run
from posx.report.sweep import update_sweep_table
from posx.runs import checkpoint
from posx.runs.rundir import is_run, new_named_run_dir, new_run_dir, read_meta, resolve_run
from posx.train import extend as extension
from posx.train.loop import Fresh, Resume, Start, train

err = Console(stderr=True, soft_wrap=True)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """PosxError (and Hydra/OmegaConf config errors) -> one line on stderr, exit 2;
    ``Preempted`` -> exit 75; Ctrl-C -> exit 130."""
    try:
        yield
    except Preempted as exc:
        err.print(f"[bold yellow]stopped:[/] {exc}", markup=True, highlight=False)
        raise SystemExit(Preempted.EXIT_CODE) from None
    except PosxError as exc:
        err.print(f"[bold red]error:[/] {exc}", markup=True, highlight=False)
        raise SystemExit(2) from None
    except (HydraException, OmegaConfBaseException) as exc:
        message = " ".join(str(exc).split())
        err.print(f"[bold red]error:[/] {message}", highlight=False)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]")
        raise SystemExit(130) from None


def check_launcher(args: list[str]) -> None:
    """The SLURM launcher off a cluster fails here in one line, before Hydra makes a sweep directory."""
    if any(a.replace(" ", "") == "hydra/launcher=submitit_slurm" for a in args) and shutil.which("srun") is None:
        raise PosxError("hydra/launcher=submitit_slurm needs SLURM, and there is no srun on this machine; run it "
                        "on the cluster's login node, or use hydra/launcher=joblib (or submitit_local) here")


def run_hydra(task: Callable[[DictConfig], None], config_name: str, args: list[str]) -> None:
    """Run ``task`` as Hydra's ``@hydra.main`` would, on ``args`` instead of ``sys.argv``
    (``-m``, ``--cfg job``, launchers and sweeps behave as on Hydra's own command line)."""
    with user_errors():
        refuse_additions(args)
        check_launcher(args)
        register_configs()
        parser = get_args_parser()
        parsed = parser.parse_args(args)
    _run_hydra(args=parsed, args_parser=parser, task_function=task, config_path=str(config_dir()),
               config_name=config_name)


@dataclass
class JobDir:
    """Where a job trains, and how it came to be."""

    path: Path
    created: bool  # this job made it (so a failure may remove it)
    start: Start  # Resume when it holds a checkpoint of this very config


def job_run_dir(cfg: DictConfig, name: str) -> JobDir:
    """Sweep jobs use Hydra's job directory and resume the checkpoint a killed or requeued job
    left there (when it is of the same config); single runs get results/runs/<name>/, never
    an existing one: a default name gets a -2, -3 ... suffix, a name= that exists is refused."""
    if HydraConfig.get().mode != RunMode.MULTIRUN:
        make = new_named_run_dir if cfg.name else new_run_dir
        return JobDir(make(cfg.results_dir, name), created=True, start=Fresh())
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if is_run(run_dir):
        raise PosxError(f"{run_dir} already holds a trained run; use a new hydra.sweep.dir")
    if checkpoint.exists(run_dir):
        changed = differences(saved_config(run_dir), cfg)
        if changed:
            raise PosxError(f"{run_dir} holds a checkpoint of another config (differs in {', '.join(changed[:5])}); "
                            "use a new hydra.sweep.dir")
        return JobDir(run_dir, created=False, start=Resume())
    # Hydra makes the job directory just before the job: empty means it is this job's.
    fresh = not run_dir.exists() or not any(run_dir.iterdir())
    run_dir.mkdir(parents=True, exist_ok=True)
    return JobDir(run_dir, created=fresh, start=Fresh())


@contextlib.contextmanager
def cleanup_on_failure(job: JobDir) -> Iterator[None]:
    """Nothing half-written: a failed job's directory goes when this job created it and it
    holds neither weights nor a checkpoint (a checkpoint is what --resume needs)."""
    try:
        yield
    except BaseException:
        if job.created and not is_run(job.path) and not checkpoint.exists(job.path):
            shutil.rmtree(job.path, ignore_errors=True)
        raise


def _after_train(run_dir: Path, cfg: DictConfig, console: Console) -> None:
    """eval.after_train: evaluate the run; in a sweep, rebuild the sweep table."""
    if not cfg.eval.after_train:
        return
    evaluate_run(run_dir, cfg, console)
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        console.print(f"sweep table: {update_sweep_table(run_dir.parent)}")


def train_job(cfg: DictConfig) -> None:
    """One Hydra job of ``posx train``: check the config, train, evaluate when eval.after_train."""
    console = Console()
    with user_errors():
        check_config(cfg)
        default = f"{cfg.pos.name}-T{cfg.train.context_length}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
        job = job_run_dir(cfg, cfg.name or default)
        with cleanup_on_failure(job):
            train(cfg, job.path, job.start, console)
        _after_train(job.path, cfg, console)


def extend_job(cfg: DictConfig) -> None:
    """One Hydra job of ``posx extend``: extend the parent, train, evaluate when eval.after_train."""
    console = Console()
    with user_errors():
        ext = extension.prepare(cfg, list(HydraConfig.get().overrides.task))
        job = job_run_dir(ext.config, ext.name)
        T0, T1 = ext.parent.train_context, ext.config.train.context_length
        console.print(f"[bold]posx extend[/] {ext.parent_dir} -> {job.path}: {cfg.method} x{cfg.factor:g}, "
                      f"T {T0} -> {T1}, {cfg.extend.steps} steps", highlight=False)
        start = job.start if isinstance(job.start, Resume) else ext.start
        with cleanup_on_failure(job):
            train(ext.config, job.path, start, console)
        _after_train(job.path, ext.config, console)


def resume(run: str, overrides: list[str]) -> None:
    """``posx train --resume RUN``: continue a run in place from its latest checkpoint."""
    composed = compose([o for o in overrides if not o.startswith("-")])
    run_dir = resolve_run(run, composed.results_dir)
    cfg = resume_config(run_dir, overrides, composed)
    console = Console()
    if is_run(run_dir) and read_meta(run_dir).step >= cfg.train.steps:
        console.print(f"{run_dir} already finished ({cfg.train.steps} steps); nothing to resume "
                      "(evaluate it with `posx eval-extrapolate`)")
        return
    if not checkpoint.exists(run_dir):
        console.print(f"[yellow]{run_dir} has no checkpoint yet; training it from step 0[/]")
    train(cfg, run_dir, Resume(), console)
    if cfg.eval.after_train:
        evaluate_run(run_dir, cfg, console)
