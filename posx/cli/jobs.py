"""The jobs behind the commands: ``train_job`` and ``extend_job`` (Hydra task functions, one per
sweep job) and ``resume``. A job this process created that fails holding neither weights nor a
checkpoint is removed (``cleanup_on_failure``); nothing else ever is. Each job runs inside
``distributed.session``: rank 0 alone chooses and creates the run directory and evaluates."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig
from rich.console import Console
from rich.text import Text

from posx.cli.exits import TRAINING_INTERRUPTED, user_errors
from posx.configure import command_line
from posx.configure.checks import check_train_config
from posx.configure.compose import compose, config_dir, refuse_additions, register_configs, typed
from posx.configure.resume import differences, refuse_flags, resume_config, saved_config
from posx.configure.sweep_dir import check_sweep_dir
from posx.core import distributed, files, launcher
from posx.core.console import new_console
from posx.core.errors import Interrupted, PosxError
from posx.core.lock import LOCK_NAME, Busy
from posx.eval.run import evaluate_run
from posx.eval.sweep import update_sweep_table
from posx.report.store import digest
from posx.runs import code, resumable
from posx.runs.paths import CONFIG, check_writable, is_run, new_named_run_dir, new_run_dir, read_meta, resolve_run
from posx.schema.config import Config
from posx.train import extend as extension
from posx.train.loop import train
from posx.train.state import Fresh, Resume, Start


def check_launcher(args: list[str]) -> None:
    """The SLURM launcher off a cluster fails here in one line, before Hydra makes a sweep directory."""
    if any(a.replace(" ", "") == "hydra/launcher=submitit_slurm" for a in args) and shutil.which("srun") is None:
        raise PosxError(
            "hydra/launcher=submitit_slurm needs SLURM, and there is no srun on this machine; run it "
            "on the cluster's login node, or use hydra/launcher=joblib (or submitit_local) here"
        )


def run_hydra(
    task: Callable[[DictConfig], None],
    config_name: str,
    args: list[str],
    check_job: Callable[[DictConfig, list[str]], object] | None = None,
    show_job: Callable[[list[str]], None] | None = None,
) -> None:
    """Run ``task`` through ``hydra.main`` on ``args`` (flags, launchers and sweeps as on Hydra's
    own command line), after posx's checks of the command line and of every job it would run
    (composed, then ``check_job``). ``show_job`` of the overrides answers ``--cfg job`` instead."""
    with user_errors():
        refuse_additions(args)
        check_launcher(args)
        register_configs()
        parsed = command_line.parse(args)
        command_line.refuse_run_dir(parsed.overrides)
        if parsed.flags.multirun and launcher.env_world_size() > 1:
            raise PosxError(
                f"-m cannot run under torchrun ({launcher.env_world_size()} ranks): run the sweep "
                "with hydra/launcher=submitit_slurm hydra.launcher.tasks_per_node=N instead "
                "(each sweep job then trains on N ranks)"
            )
        modes = command_line.modes(parsed.flags)
        if len(modes) > 1:
            raise PosxError(f"{' and '.join(modes)} cannot go together; give one of them")
        if parsed.flags.experimental_rerun is not None:
            raise PosxError(
                "--experimental-rerun loads a pickle and runs what it holds; posx refuses it — "
                "re-run with the overrides instead (they are in the run's config.yaml)"
            )
        if show_job is not None and parsed.flags.cfg == "job":
            show_job(parsed.lines)
            return
        # Compose every value of every sweep here: a bad one is one line, not Hydra's report.
        probed = command_line.probes(parsed.overrides)
        for overrides in probed:
            job = compose(overrides, config_name)
            if check_job is not None and parsed.flags.multirun:
                check_job(job, overrides)
        if parsed.flags.multirun:  # before Hydra writes its multirun.yaml there
            command_line.refuse_name_in_sweep(parsed.overrides)
            check_sweep_dir(probed[0], config_name)
    main = hydra.main(version_base="1.3", config_path=str(config_dir()), config_name=config_name)(task)
    with user_errors(TRAINING_INTERRUPTED), command_line.argv(args):
        main()


@dataclass
class JobDir:
    path: Path
    created: bool  # this job made it (so a failure may remove it)
    start: Start  # Resume when it holds a checkpoint of this very config
    finished: bool = False  # a requeued sweep job whose training had finished: only evaluate


def job_run_dir(cfg: Config, name: str) -> JobDir:
    """A sweep job uses Hydra's job directory, resuming (or only evaluating) what a requeued job of
    the same config left there; a single run gets a new results/runs/<name>/ (a default name gets
    a -2, -3 ... suffix, a name= that exists is refused)."""
    if HydraConfig.get().mode != RunMode.MULTIRUN:
        make = new_named_run_dir if cfg.name else new_run_dir
        return JobDir(make(cfg.results_dir, name), created=True, start=Fresh())
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if is_run(run_dir) or resumable.exists(run_dir):
        check_writable(run_dir)
        changed = differences(saved_config(run_dir), cfg)
        if changed:
            held = "a trained run" if is_run(run_dir) else "a checkpoint"
            raise PosxError(
                f"{run_dir} holds {held} of another config (differs in {', '.join(changed[:5])}); "
                "use a new hydra.sweep.dir"
            )
        # A requeued job (preempted, timed out) or a sweep started again: resume its checkpoint,
        # or only evaluate the run it finished.
        return JobDir(run_dir, created=False, start=Resume(), finished=is_run(run_dir))
    # Hydra makes the job directory just before the job: empty, or an earlier attempt's lock and
    # config, means it is this job's.
    files.real_dir(run_dir, "the sweep job directory")
    found = {p.name for p in run_dir.iterdir()}
    if found - {LOCK_NAME, CONFIG}:
        raise PosxError(
            f"{run_dir} already holds files of something else ({', '.join(sorted(found)[:3])}); "
            "use a new hydra.sweep.dir (posx never writes into a directory it did not make)"
        )
    if CONFIG in found and differences(saved_config(run_dir), cfg):
        raise PosxError(f"{run_dir} holds the config of another job; use a new hydra.sweep.dir")
    return JobDir(run_dir, created=not found, start=Fresh())


@contextlib.contextmanager
def cleanup_on_failure(job: JobDir) -> Iterator[None]:
    """A failed job's directory goes if this job made it and it holds no weights nor checkpoint."""
    try:
        yield
    except Busy:
        raise  # another process holds the directory: nothing in it is this job's to remove
    except BaseException:
        if job.created and distributed.is_main() and not is_run(job.path) and not resumable.exists(job.path):
            shutil.rmtree(job.path, ignore_errors=True)
        raise


def stopped_run(run_dir: Path) -> str:
    """What Ctrl-C left of a run it stopped, and how to go on from there."""
    if is_run(run_dir):
        return f"stopped by Ctrl-C after training; evaluate {run_dir} with `posx eval-extrapolate {run_dir}`"
    if resumable.exists(run_dir):
        return f"stopped by Ctrl-C; continue {run_dir} from its last checkpoint with `posx train --resume {run_dir}`"
    if run_dir.is_dir():
        return f"stopped by Ctrl-C before the first checkpoint; `posx train --resume {run_dir}` trains it from step 0"
    return f"stopped by Ctrl-C before the first checkpoint; {run_dir} was removed, so start the run again"


@contextlib.contextmanager
def says_what_it_left(run_dir: Path) -> Iterator[None]:
    """Ctrl-C inside becomes ``Interrupted`` with ``stopped_run``'s line (after any clean-up)."""
    try:
        yield
    except KeyboardInterrupt as exc:
        if isinstance(exc, Interrupted):
            raise
        raise Interrupted(stopped_run(run_dir)) from None


def _after_train(job: JobDir, cfg: Config, console: Console) -> None:
    """The run's digest; with eval.after_train, evaluate it (in a sweep, rebuild the sweep table)."""
    run_dir = job.path
    if job.finished:
        evaluates = "; evaluating it (eval.after_train)" if cfg.eval.after_train else ""
        console.print(f"{run_dir} already finished training; not trained again{evaluates}", markup=False)
    digest.refresh(run_dir)
    if not cfg.eval.after_train:
        return
    evaluate_run(run_dir, cfg, console)
    digest.refresh(run_dir)
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        console.print(f"sweep table: {update_sweep_table(run_dir.parent)}", markup=False, highlight=False)


def _console() -> Console:
    return new_console(quiet=not distributed.is_main())


def train_job(composed: DictConfig) -> None:
    """One Hydra job of ``posx train``: check the config, train, evaluate when eval.after_train."""
    with user_errors(), distributed.session(composed.device):
        console = _console()
        check_train_config(composed)
        cfg = typed(composed)
        default = f"{cfg.pos.name}-T{cfg.train.context_length}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
        job = distributed.on_main(lambda: job_run_dir(cfg, cfg.name or default), share=True)
        _train_job(job, cfg, job.start, console)


def extend_job(composed: DictConfig) -> None:
    """One Hydra job of ``posx extend``: extend the parent, train, evaluate when eval.after_train."""
    with user_errors(), distributed.session(composed.device):
        console = _console()
        cfg = typed(composed)
        ext = extension.prepare(cfg, list(HydraConfig.get().overrides.task))
        config = ext.config
        job = distributed.on_main(lambda: job_run_dir(config, ext.name), share=True)
        T0, T1 = ext.parent.train_context, config.train.context_length
        console.print(
            Text.assemble(("posx extend", "bold"), f" {ext.parent_dir} -> {job.path}: {cfg.method} x{cfg.factor:g}, "
                          f"T {T0} -> {T1}, {cfg.extend.steps} steps"),  # paths print as written
            highlight=False,
        )  # fmt: skip
        _train_job(job, config, job.start if isinstance(job.start, Resume) else ext.start, console)


def _train_job(job: JobDir, cfg: Config, start: Start, console: Console) -> None:
    """Train unless the job had finished, then ``_after_train``. A new run records its code from
    outside posx (``posx.runs.code``); a requeued job resumes only with the code it recorded."""
    with says_what_it_left(job.path):
        if not job.finished:
            with cleanup_on_failure(job):
                if isinstance(job.start, Resume):
                    distributed.on_main(lambda: code.check(job.path, allow=False, doing="resume it"))
                else:
                    distributed.on_main(lambda: code.record(job.path, code.encoding_sources(cfg)))
                train(cfg, job.path, start, console)
        distributed.on_main(lambda: _after_train(job, cfg, console))


def resume(run: str, overrides: list[str], allow_changed_code: bool = False) -> None:
    """``posx train --resume RUN``: continue a run in place from its latest checkpoint."""
    refuse_flags(overrides)
    composed = compose(overrides)
    run_dir = resolve_run(run, composed.results_dir)
    changed = code.check(run_dir, allow_changed_code, "resume it")  # before its config loads the code
    cfg = typed(resume_config(run_dir, overrides, composed))
    with distributed.session(cfg.device), says_what_it_left(run_dir):
        console = _console()
        if is_run(run_dir) and read_meta(run_dir).step >= cfg.train.steps:
            console.print(
                f"{run_dir} already finished ({cfg.train.steps} steps); nothing to resume "
                "(evaluate it with `posx eval-extrapolate`)",
                markup=False,
            )
            return
        check_writable(run_dir)
        for line in changed:
            console.print(f"warning: {line}; resuming with the code as it is now ({code.ALLOW_FLAG})", markup=False)
        train(cfg, run_dir, Resume(), console)
        distributed.on_main(lambda: digest.refresh(run_dir))
        if cfg.eval.after_train:
            distributed.on_main(lambda: evaluate_run(run_dir, cfg, console))
            distributed.on_main(lambda: digest.refresh(run_dir))
