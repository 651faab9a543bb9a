"""The ``posx`` command line (Typer). ``train`` hands its arguments to Hydra untouched.

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

from posx.errors import PosxError

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
    """(directory, created_by_us). Sweep jobs use Hydra's job directory; single runs get
    results/runs/<name>/, never an existing one."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from posx.runs import is_run, new_run_dir

    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:
        run_dir = Path(hc.runtime.output_dir)
        if is_run(run_dir):
            raise PosxError(f"{run_dir} already holds a trained run; use a new hydra.sweep.dir")
        run_dir.mkdir(parents=True, exist_ok=True)
        return run_dir, False
    name = cfg.name or f"{cfg.pos.name}-T{cfg.train.context_length}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    return new_run_dir(cfg.results_dir, name), True


def _train_job(cfg) -> None:
    """One Hydra job: check the config, train, and evaluate when eval.after_train."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

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
            run_dir, fresh = _run_dir_for_job(cfg)
            train(cfg, run_dir, console)
        except BaseException:
            # Nothing half-written: a run that saved no weights leaves no directory behind.
            if run_dir is not None and not is_run(run_dir):
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
"""


@app.command(context_settings=PASS_THROUGH, epilog=TRAIN_EPILOG)
def train(
    overrides: Optional[List[str]] = typer.Argument(
        None, help="Hydra overrides and flags (key=value, -m, --cfg job, hydra/launcher=...)."
    ),
) -> None:
    """Train a GPT; writes results/runs/<name>/ (config, metrics, weights)."""
    import hydra

    from posx.config import config_dir, register_configs

    with user_errors():
        register_configs()
        task = hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")(_train_job)
    saved = sys.argv
    sys.argv = ["posx-train", *(overrides or [])]
    try:
        task()
    finally:
        sys.argv = saved


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
