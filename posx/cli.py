"""The ``posx`` command line (Typer). ``train`` and ``extend`` hand their arguments to Hydra
untouched (``extend`` adds ``parent=RUN``).

Every user error (``PosxError``) ends as one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from pathlib import Path
from typing import Iterator, List, Optional

import typer
from rich.console import Console

from posx.errors import Preempted, PosxError

app = typer.Typer(
    name="posx",
    help="Train small GPTs with different positional encodings and measure how they hold up "
    "past the length they trained at.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}
err = Console(stderr=True, soft_wrap=True)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """PosxError (and Hydra/OmegaConf config errors) -> one line on stderr, exit 2."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

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


def _run_dir_for_job(cfg) -> tuple[Path, bool]:
    """(directory, resume). Sweep jobs use Hydra's job directory and resume the checkpoint a
    killed or requeued job left there; single runs get results/runs/<name>/, never an
    existing one."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from posx import checkpoint
    from posx.resume import differences, saved_config
    from posx.runs import is_run, new_run_dir

    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:
        run_dir = Path(hc.runtime.output_dir)
        if is_run(run_dir):
            raise PosxError(f"{run_dir} already holds a trained run; use a new hydra.sweep.dir")
        if checkpoint.exists(run_dir):
            changed = differences(saved_config(run_dir), cfg)
            if changed:
                raise PosxError(f"{run_dir} holds a checkpoint of another config (differs in {', '.join(changed[:5])}); "
                                "use a new hydra.sweep.dir")
            return run_dir, True
        run_dir.mkdir(parents=True, exist_ok=True)
        return run_dir, False
    name = cfg.name or f"{cfg.pos.name}-T{cfg.train.context_length}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    return new_run_dir(cfg.results_dir, name), False


def _train_job(cfg) -> None:
    """One Hydra job: check the config, train, and evaluate when eval.after_train."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from posx import checkpoint
    from posx.config import check_config
    from posx.evaluate import evaluate_run
    from posx.runs import is_run
    from posx.sweep import update_sweep_table
    from posx.train import train

    console = Console()
    run_dir = None
    with user_errors():
        try:
            check_config(cfg)
            run_dir, resume = _run_dir_for_job(cfg)
            train(cfg, run_dir, console, resume=resume)
        except BaseException:
            # Nothing half-written: a new run that saved neither weights nor a checkpoint
            # leaves no directory behind. A checkpoint is kept: it is what --resume needs.
            if (run_dir is not None and not resume and not is_run(run_dir)
                    and not checkpoint.exists(run_dir)):
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        if cfg.eval.after_train:
            evaluate_run(run_dir, cfg, console)
            if HydraConfig.get().mode == RunMode.MULTIRUN:
                table = update_sweep_table(run_dir.parent)
                console.print(f"sweep table: {table}")


TRAIN_EPILOG = """[bold]Examples[/]

  posx train                                      [dim]# RoPE GPT on the built-in corpus[/]
  posx train pos=absolute train.context_length=64 [dim]# Hydra overrides[/]
  posx train experiment=quick                     [dim]# a smoke run in seconds[/]
  posx train -m pos=absolute,rope seed=0,1,2      [dim]# a sweep into results/sweeps/<time>/[/]
  posx train -m pos=absolute,rope hydra/launcher=joblib   [dim]# jobs in parallel[/]
  posx train --cfg job                            [dim]# print the composed config[/]
  posx train --resume results/runs/<name>         [dim]# continue a stopped or killed run[/]
"""


@app.command(context_settings=PASS_THROUGH, epilog=TRAIN_EPILOG)
def train(
    overrides: Optional[List[str]] = typer.Argument(
        None, help="Hydra overrides and flags (key=value, -m, --cfg job, hydra/launcher=...)."
    ),
    resume: Optional[str] = typer.Option(
        None, "--resume", metavar="RUN",
        help="Continue RUN (a path or a name under results/runs) from its last checkpoint, with its saved "
        "config; overrides may only change device, checkpoint/validation frequency and eval.*.",
    ),
) -> None:
    """Train a GPT; writes results/runs/<name>/ (config, metrics, checkpoint, weights).

    Exit status: 0 done, 2 bad input or a failed run, 75 stopped by SIGTERM/SIGUSR2 after
    saving a checkpoint (resume it with --resume).
    """
    if resume is not None:
        with user_errors():
            _resume(resume, list(overrides or []))
        return
    import hydra

    from posx.config import config_dir, register_configs

    with user_errors():
        register_configs()
        args = list(overrides or [])
        if not any(a.startswith(("-", "hydra")) for a in args):
            # A single run: compose it here first, so a typo'd key or a wrong type is one line
            # (Hydra's own report inside hydra.main spans several). Sweeps go to Hydra as is.
            compose(args)
        task = hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")(_train_job)
    saved = sys.argv
    sys.argv = ["posx-train", *(overrides or [])]
    try:
        task()
    finally:
        sys.argv = saved


def _extend_job(cfg) -> None:
    """One Hydra job of ``posx extend``: extend, then evaluate when eval.after_train."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from posx.evaluate import evaluate_run
    from posx.extend import extend_job
    from posx.sweep import update_sweep_table

    with user_errors():
        run_dir = extend_job(cfg)
        if cfg.eval.after_train:
            evaluate_run(run_dir, cfg, Console())
            if HydraConfig.get().mode == RunMode.MULTIRUN:
                Console().print(f"sweep table: {update_sweep_table(run_dir.parent)}")


EXTEND_EPILOG = """[bold]Examples[/]

  posx extend results/runs/base method=yarn factor=4      [dim]# YaRN to 4x T, 200 steps[/]
  posx extend base method=abf new_base=1e6 extend.steps=400
  posx extend base method=pi factor=2 eval.after_train=true
  posx extend base -m method=pi,yarn,abf factor=2,4       [dim]# a sweep into results/sweeps/<time>/[/]
  posx extend results/runs/absolute-... method=interpolate factor=2   [dim]# learned absolute[/]
  posx extend base --cfg job                               [dim]# print the composed config[/]
"""


@app.command(context_settings=PASS_THROUGH, epilog=EXTEND_EPILOG)
def extend(
    run: Optional[str] = typer.Argument(None, help="The run to extend: a directory, or a run name under results/runs."),
    overrides: Optional[List[str]] = typer.Argument(
        None, help="Hydra overrides and flags (method=, factor=, extend.steps=, -m, --cfg job)."
    ),
) -> None:
    """Rescale a trained run's positions and continue training at factor x T; writes a new
    run (results/runs/<parent>-<method>-x<factor>/) that records its parent. The parent is only read."""
    import hydra

    from posx.config import config_dir, register_configs

    overrides = list(overrides or [])
    if run is not None and ("=" in run or run.startswith("-")):  # no RUN: it was an override
        overrides.insert(0, run)
        run = None
    if run is not None:
        quoted = run.replace("\\", "\\\\").replace("'", "\\'")
        # Next to the other overrides: Hydra's parser takes one contiguous run of them.
        first = next((i for i, a in enumerate(overrides) if "=" in a and not a.startswith("-")), len(overrides))
        overrides.insert(first, f"parent='{quoted}'")
    with user_errors():
        register_configs()
        task = hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="extend")(_extend_job)
    saved = sys.argv
    sys.argv = ["posx-extend", *overrides]
    try:
        task()
    finally:
        sys.argv = saved


def _resume(run: str, overrides: list[str]) -> None:
    """posx train --resume RUN: continue a run in place from its latest checkpoint."""
    from posx import checkpoint
    from posx.evaluate import evaluate_run
    from posx.resume import resume_config
    from posx.runs import is_run, read_meta, resolve_run
    from posx.train import train

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
    train(cfg, run_dir, console, resume=True)
    if cfg.eval.after_train:
        evaluate_run(run_dir, cfg, console)


def compose(overrides: list[str]):
    """The composed config with overrides, without running a Hydra job."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from posx.config import check_config, config_dir, register_configs

    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(config_dir()), job_name="posx"):
        cfg = hydra_compose(config_name="config", overrides=overrides)
    check_config(cfg)
    return cfg


EVAL_EPILOG = """[bold]Examples[/]

  posx eval-extrapolate --latest                          [dim]# the most recent run[/]
  posx eval-extrapolate results/runs/rope-T128-s0-...     [dim]# a run by path (or by name)[/]
  posx eval-extrapolate --latest eval.methods=[none,yarn] eval.factors=[1,4]
  posx eval-extrapolate --latest eval.tokens=65536 device=cpu
"""


@app.command("eval-extrapolate", context_settings=PASS_THROUGH, epilog=EVAL_EPILOG)
def eval_extrapolate(
    run: Optional[str] = typer.Argument(None, help="Run directory, or a run name under results/runs."),
    overrides: Optional[List[str]] = typer.Argument(None, help="Overrides of eval.*, device, results_dir."),
    latest: bool = typer.Option(False, "--latest", help="Evaluate the most recently trained run."),
) -> None:
    """Perplexity at 1x, 2x, 4x, 8x the training length, for each RoPE rescaling method."""
    from posx.evaluate import evaluate_run
    from posx.runs import resolve_run

    overrides = list(overrides or [])
    if run is not None and "=" in run:  # `--latest key=value`: the first override landed in RUN
        overrides.insert(0, run)
        run = None
    with user_errors():
        cfg = compose(overrides)
        run_dir = resolve_run(run, cfg.results_dir, latest=latest)
        evaluate_run(run_dir, cfg, Console())


FREQ_EPILOG = """[bold]Examples[/]

  posx frequencies                                        [dim]# head_dim 64, T=128, s=8, every method[/]
  posx frequencies --head-dim 32 --context 128 --factor 4 --methods none,pi,ntk,yarn
  posx frequencies --out results/freq.png eval.llama3.high_freq_factor=8
"""


@app.command("frequencies", context_settings=PASS_THROUGH, epilog=FREQ_EPILOG)
def frequencies(
    overrides: Optional[List[str]] = typer.Argument(None, help="Overrides of eval.* (method parameters)."),
    head_dim: int = typer.Option(64, "--head-dim", help="Rotary dimension d (d_model / n_head)."),
    base: float = typer.Option(10000.0, "--base", help="RoPE base b."),
    context: int = typer.Option(128, "--context", help="Training length T."),
    factor: float = typer.Option(8.0, "--factor", help="Scale s; the target length is s x T."),
    methods: str = typer.Option(",".join(["none", "pi", "ntk", "dynamic_ntk", "yarn", "dynamic_yarn",
                                          "ntk_by_parts", "abf", "llama3", "longrope"]),
                                "--methods", help="Comma-separated RoPE methods."),
    out: Path = typer.Option(Path("results/frequencies.png"), "--out", help="Where to write the PNG."),
) -> None:
    """Each RoPE method's wavelength per rotary pair against T and s x T: a table and a PNG."""
    from posx import freqplot

    with user_errors():
        freqplot.check_head_dim(head_dim)
        cfg = compose(list(overrides or []))
        names = [m.strip() for m in methods.split(",") if m.strip()]
        df, attention = freqplot.wavelength_table(cfg.eval, names, head_dim, base, context, factor)
        target = round(factor * context)
        title = freqplot.title(head_dim, base, context, factor)
        console = Console()
        console.print(freqplot.rich_table(df, attention, context, target, title))
        freqplot.plot(df, context, target, title, out)
        console.print(f"wrote {out}")


REPORT_EPILOG = """[bold]Examples[/]

  posx report results/runs/rope-T128-s0-... results/runs/absolute-T128-s0-...
  posx report results/sweeps/2025-01-01_12-00-00      [dim]# every run of a sweep[/]
  posx report results/runs --out results/reports/all  [dim]# every single run[/]
  posx report results/sweeps/... --factor 4            [dim]# per-position curves at 4x[/]
"""


@app.command("report", epilog=REPORT_EPILOG)
def report(
    paths: List[Path] = typer.Argument(..., help="Run directories and/or directories of runs (sweeps)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Report directory (new or empty); "
                                       "default results/reports/<time>/."),
    factor: Optional[float] = typer.Option(None, "--factor", help="Factor of the per-position plot "
                                           "(default: the largest each encoding has)."),
    results_dir: Path = typer.Option(Path("results"), "--results-dir", help="Where reports/ goes by default."),
) -> None:
    """Summary tables (mean ± std over seeds) and plots from evaluated runs; loads no model."""
    from posx.report import report as build_report

    with user_errors():
        build_report(paths, out=out, results_dir=results_dir, factor=factor, console=Console())


def main() -> None:
    app()
