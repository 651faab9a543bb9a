"""The ``posx`` command line (Typer): the commands, their arguments and their help. Each command
hands its arguments to a module imported only when it runs (``startup.load``), so ``--help`` and
``--version`` answer at once (a test holds it to that)."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import List, Optional

import typer

from posx import __version__
from posx.cli.examples import (
    COMPARE_EPILOG,
    EVAL_EPILOG,
    EXPORT_EPILOG,
    EXTEND_EPILOG,
    FREQ_EPILOG,
    PREPARE_EPILOG,
    REPORT_EPILOG,
    RUNS_EPILOG,
    TRAIN_EPILOG,
)
from posx.core import startup
from posx.core.usage import OneLineUsageErrors
from posx.schema.config import RESUME_SAFE, Config

# Each command's module, imported when it runs: what it pulls in is in the comment.
work = functools.partial(startup.load, "posx.cli.commands")  # torch and pandas (about 3 s)
reading = functools.partial(startup.load, "posx.cli.results")  # runs, compare: pandas, no torch or matplotlib
wavelengths = functools.partial(startup.load, "posx.cli.wavelengths")  # frequencies: torch and matplotlib
reporting = functools.partial(startup.load, "posx.cli.reporting")  # report: pandas and matplotlib, no torch

GROUP = {"cls": OneLineUsageErrors, "no_args_is_help": True, "add_completion": False, "pretty_exceptions_enable": False}
app = typer.Typer(
    name="posx",
    help="Train small GPTs with different positional encodings and measure how they hold up "
    "past the length they trained at.",
    rich_markup_mode="rich",
    **GROUP,
)
data_app = typer.Typer(name="data", help="Token stores: prepare a corpus once, train and evaluate from it.", **GROUP)
app.add_typer(data_app)
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}
ALLOW_CHANGED_CODE = (
    "Go on although the source of a class or method from outside posx (pos.impl, eval.methods) changed since "
    "the run or evaluation recorded it (code.json); without it posx refuses."
)


def command(owner: typer.Typer, name: str | None = None, **settings):
    """``owner.command`` with the docstring as help, each paragraph on one line (Typer's rich markup
    keeps the line breaks of every paragraph but the first)."""

    def register(fn):
        paragraphs = inspect.cleandoc(fn.__doc__ or "").split("\n\n")
        return owner.command(name, help="\n\n".join(" ".join(p.split()) for p in paragraphs), **settings)(fn)

    return register


@command(app, context_settings=PASS_THROUGH, epilog=TRAIN_EPILOG)
def train(
    overrides: Optional[List[str]] = typer.Argument(
        None, help="Hydra overrides and flags (key=value, -m, --cfg job, hydra/launcher=...)."
    ),
    resume: Optional[str] = typer.Option(
        None,
        "--resume",
        metavar="RUN",
        help="Continue RUN (a path or a name under results/runs) from its last checkpoint, with its saved "
        "config; overrides may only change "
        + ", ".join(f"{key}.*" if key == "eval" else key for key in RESUME_SAFE)
        + ".",
    ),
    allow_changed_code: bool = typer.Option(False, "--allow-changed-code", help=ALLOW_CHANGED_CODE),
) -> None:
    """Train a GPT; writes results/runs/<name>/ (config, metrics, checkpoint, weights).

    Exit status: 0 done, 2 bad input or a failed run, 3 an internal error (its line names the
    file holding the traceback), 75 stopped by SIGTERM/SIGUSR2 after saving a checkpoint
    (resume it with --resume).
    """
    work().train(list(overrides or []), resume, allow_changed_code)


@command(app, context_settings=PASS_THROUGH, epilog=EXTEND_EPILOG)
def extend(
    run: Optional[str] = typer.Argument(
        None, help="The run to extend: a directory, or a run name under results/runs (or parent=RUN; not both)."
    ),
    overrides: Optional[List[str]] = typer.Argument(
        None, help="Hydra overrides and flags (method=, factor=, extend.steps=, -m, --cfg job)."
    ),
) -> None:
    """Rescale a trained run's positions and continue training at factor x T.

    Writes a new run (results/runs/<parent>-<method>-x<factor>/) that records its parent; the
    parent is only read."""
    work().extend(run, list(overrides or []))


@command(app, "export", epilog=EXPORT_EPILOG)
def export(
    run: str = typer.Argument(..., help="A llama-block RoPE run: a directory, or a run name under results/runs."),
    out: Path = typer.Option(..., "--out", help="The transformers model directory to write (new or empty)."),
    results_dir: str = typer.Option(Config.results_dir, "--results-dir", help="Where run names are looked up."),
) -> None:
    """Write a run as a transformers LlamaForCausalLM directory (config.json, safetensors, tokenizer)."""
    work().export(run, out, results_dir)


@command(app, "eval-extrapolate", context_settings=PASS_THROUGH, epilog=EVAL_EPILOG)
def eval_extrapolate(
    run: Optional[str] = typer.Argument(None, help="Run directory, or a run name under results/runs."),
    overrides: Optional[List[str]] = typer.Argument(
        None,
        help="Overrides of eval.*, device, threads, logger, results_dir, data.cache_dir; any other key is refused "
        "(the model and its corpus are the run's; a transformers checkpoint takes data.* and no logger).",
    ),
    latest: bool = typer.Option(False, "--latest", help="Evaluate the most recently trained run (instead of RUN)."),
    force: bool = typer.Option(
        False, "--force", help="Evaluate again even when the run already holds an evaluation with these settings."
    ),
    defaults: bool = typer.Option(
        False, "--defaults", help="Start from the default evaluation settings instead of the run's own."
    ),
    allow_changed_code: bool = typer.Option(False, "--allow-changed-code", help=ALLOW_CHANGED_CODE),
) -> None:
    """Perplexity at 1x, 2x, 4x, 8x the training length, for each RoPE rescaling method.

    RUN may also be a local transformers checkpoint directory (config.json), e.g. `posx export`'s."""
    work().eval_extrapolate(run, list(overrides or []), latest, force, defaults, allow_changed_code)


@command(app, "frequencies", context_settings=PASS_THROUGH, epilog=FREQ_EPILOG)
def frequencies(
    overrides: Optional[List[str]] = typer.Argument(
        None,
        metavar="[RUN] [OVERRIDES]...",
        help=(
            "A run (head_dim, base and T come from it), then overrides: eval.* method parameters (the methods "
            "and s are --methods and --factor); with no run, also pos.base, model.* and train.context_length."
        ),
    ),
    head_dim: Optional[int] = typer.Option(
        None,
        "--head-dim",
        help="Rotary dimension d (d_model / n_head); default: the run's, else the configured model's.",
    ),
    base: Optional[float] = typer.Option(None, "--base", help="RoPE base b; default: the run's, else pos.base."),
    context: Optional[int] = typer.Option(
        None, "--context", help="Training length T; default: the run's, else train.context_length."
    ),
    factor: float = typer.Option(8.0, "--factor", help="Scale s; the target length is s x T."),
    methods: Optional[str] = typer.Option(
        None,
        "--methods",
        help="Comma-separated RoPE methods; default: every method that sets frequencies (the windowed ones, "
        "left out, have none's).",
    ),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        help="Where to write the PNG (a new file); default results/frequencies.png, or -2, -3 ... when taken.",
    ),
) -> None:
    """Each RoPE method's wavelength per rotary pair against T and s x T: a table and a PNG."""
    wavelengths().frequencies(list(overrides or []), (head_dim, base, context), factor, methods, out)


@command(app, "report", epilog=REPORT_EPILOG)
def report(
    paths: Optional[List[Path]] = typer.Argument(
        None,
        metavar="PATH",
        help="Run directories and/or directories of runs (sweeps); default: every run under --results-dir.",
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Report directory (new or empty); default results/reports/<time>/."
    ),
    factor: Optional[float] = typer.Option(
        None,
        "--factor",
        help="Factor of the per-position plot, one the runs were evaluated at (default: each encoding's largest).",
    ),
    results_dir: Path = typer.Option(
        Path(Config.results_dir), "--results-dir", help="Where reports/ goes by default, and the runs read by default."
    ),
    smooth: int = typer.Option(
        1, "--smooth", help="Per-position curves: a centred moving mean over this many buckets."
    ),
    evaluations: str = typer.Option(
        "current", "--evaluations", help="current: each run's last evaluation; all: every evaluation it keeps."
    ),
    formats: Optional[str] = typer.Option(
        None,
        "--format",
        help="Figure formats to write: png (200 dpi), pdf, or both; default both, png only when the report "
        "draws a choice of its groups (see --top); none: no figures, the tables alone (fastest).",
    ),
    where: Optional[List[str]] = typer.Option(
        None, "--where", metavar="KEY=VALUE", help="Only runs whose config key has this value, e.g. T=64 (repeatable)."
    ),
    median: bool = typer.Option(
        False, "--median-over-groups", help="Also draw ppl_median_over_groups.png: the median over unlike groups."
    ),
    top: Optional[str] = typer.Option(
        None,
        "--top",
        metavar="N",
        help="Groups the figures draw when there are more: the N with the lowest perplexity at the longest "
        "factor (default 12; all: every group). Tables keep every group.",
    ),
) -> None:
    """Summary tables and plots from evaluated runs, runs pooled as seeds only when all else is equal."""
    reporting().report(
        paths or [results_dir],
        out=out,
        results_dir=results_dir,
        factor=factor,
        smooth=smooth,
        evaluations=evaluations,
        formats=formats,
        where=where,
        median=median,
        top=top,
    )


@command(app, "runs", epilog=RUNS_EPILOG)
def runs(
    path: Path = typer.Argument(
        Path(Config.results_dir), help="A results directory, a directory of runs, a sweep or a run."
    ),
    csv: Optional[str] = typer.Option(None, "--csv", help="Also write the list as CSV to this new file ('-': stdout)."),
) -> None:
    """List runs: name, encoding, T, steps, validation perplexity, evaluated lengths, parent, status."""
    reading().runs(path, csv)


@command(app, "compare", epilog=COMPARE_EPILOG)
def compare(
    run_args: List[str] = typer.Argument(..., metavar="RUN RUN...", help="Runs (paths or names under results/runs)."),
    csv: Optional[str] = typer.Option(
        None, "--csv", help="Also write the comparison as CSV to this new file ('-': stdout)."
    ),
    results_dir: Path = typer.Option(Path(Config.results_dir), "--results-dir", help="Where run names are looked up."),
    where: Optional[List[str]] = typer.Option(
        None, "--where", metavar="KEY=VALUE", help="Only the runs whose config key has this value (repeatable)."
    ),
) -> None:
    """The runs' current perplexity tables side by side, with ratios to the first run and their 95% intervals;
    groups of seeds (equal settings but the seed) compared by their means, each with its 95% interval."""
    reading().compare(run_args, csv, results_dir, where)


def _version(value: bool) -> None:
    if value:
        print(f"posx {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """The options before a command (the app's help is ``app``'s)."""


@command(data_app, "prepare", context_settings=PASS_THROUGH, epilog=PREPARE_EPILOG)
def data_prepare(
    overrides: Optional[List[str]] = typer.Argument(
        None, help="Overrides of data.*, results_dir and experiment (as for posx train); any other key is refused."
    ),
) -> None:
    """Build the token store of a data config (posx train would build it on first use)."""
    work().data_prepare(list(overrides or []))


def main() -> None:
    app()
