"""The ``posx`` command line (Typer): parses arguments and hands them to ``posx.jobs`` (or to
the function that does the work). ``train`` and ``extend`` pass their arguments to Hydra
untouched (``extend`` adds ``parent=RUN``).

Every user error (``PosxError``) ends as one line on stderr and a non-zero exit.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from posx import __version__, jobs, rope
from posx.cli_examples import (
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
from posx.config.compose import compose, to_yaml
from posx.config.evalsettings import eval_config, kept_from_run
from posx.config.resume import SAFE
from posx.core import distributed, files
from posx.core.console import new_console
from posx.core.errors import PosxError
from posx.core.usage import OneLineUsageErrors
from posx.data import store
from posx.data import tokenizer as tok_mod
from posx.eval.run import evaluate_run
from posx.hf.checkpoint import evaluate_hf_dir
from posx.hf.export import export_run
from posx.jobs import user_errors
from posx.model.encodings import ROTARY
from posx.model.rescale import WINDOWED
from posx.report import collection, digest
from posx.report import frequencies as freqplot
from posx.report.summary import report as build_report
from posx.runs.records import RunMeta
from posx.runs.rundir import read_meta, resolve_run
from posx.train.extend import prepare as prepare_extension

app = typer.Typer(
    cls=OneLineUsageErrors,
    name="posx",
    help="Train small GPTs with different positional encodings and measure how they hold up "
    "past the length they trained at.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command(context_settings=PASS_THROUGH, epilog=TRAIN_EPILOG)
def train(
    overrides: Optional[List[str]] = typer.Argument(
        None, help="Hydra overrides and flags (key=value, -m, --cfg job, hydra/launcher=...)."
    ),
    resume: Optional[str] = typer.Option(
        None,
        "--resume",
        metavar="RUN",
        help="Continue RUN (a path or a name under results/runs) from its last checkpoint, with its saved "
        "config; overrides may only change " + ", ".join(f"{key}.*" if key == "eval" else key for key in SAFE) + ".",
    ),
) -> None:
    """Train a GPT; writes results/runs/<name>/ (config, metrics, checkpoint, weights).

    Exit status: 0 done, 2 bad input or a failed run, 3 an internal error (its line names the
    file holding the traceback), 75 stopped by SIGTERM/SIGUSR2 after saving a checkpoint
    (resume it with --resume).
    """
    args = list(overrides or [])
    if resume is not None:
        with user_errors():
            jobs.resume(resume, args)
        return
    jobs.run_hydra(jobs.train_job, "config", args)


@app.command(context_settings=PASS_THROUGH, epilog=EXTEND_EPILOG)
def extend(
    run: Optional[str] = typer.Argument(None, help="The run to extend: a directory, or a run name under results/runs."),
    overrides: Optional[List[str]] = typer.Argument(
        None, help="Hydra overrides and flags (method=, factor=, extend.steps=, -m, --cfg job)."
    ),
) -> None:
    """Rescale a trained run's positions and continue training at factor x T; writes a new
    run (results/runs/<parent>-<method>-x<factor>/) that records its parent. The parent is only read."""
    overrides = list(overrides or [])
    if run is not None and ("=" in run or run.startswith("-")):  # no RUN: it was an override
        overrides.insert(0, run)
        run = None
    if run is not None:
        quoted = run.replace("\\", "\\\\").replace("'", "\\'")
        # Next to the other overrides: Hydra's parser takes one contiguous run of them.
        first = next((i for i, a in enumerate(overrides) if "=" in a and not a.startswith("-")), len(overrides))
        overrides.insert(first, f"parent='{quoted}'")
    if _cfg_job(overrides):
        return
    jobs.run_hydra(jobs.extend_job, "extend", overrides)


@app.command("export", epilog=EXPORT_EPILOG)
def export(
    run: str = typer.Argument(..., help="A llama-block RoPE run: a directory, or a run name under results/runs."),
    out: Path = typer.Option(..., "--out", help="The transformers model directory to write (new or empty)."),
    results_dir: str = typer.Option("results", "--results-dir", help="Where run names are looked up."),
) -> None:
    """Write a run as a transformers LlamaForCausalLM directory (config.json, safetensors, tokenizer)."""
    with user_errors():
        written = export_run(resolve_run(run, results_dir), out)
        new_console().print(
            f"wrote {written} (load it with transformers.AutoModelForCausalLM.from_pretrained)", markup=False
        )


def _cfg_job(overrides: list[str]) -> bool:
    """``posx extend RUN --cfg job``: print the config the extension will actually run (the
    parent's model and corpus, the extend.* schedule in train.*), not the composed extend.yaml."""
    flags = [i for i, a in enumerate(overrides) if a in ("--cfg", "-c")]
    if (
        not flags
        or flags[0] + 1 >= len(overrides)
        or overrides[flags[0] + 1] != "job"
        or "-m" in overrides
        or "--multirun" in overrides
    ):
        return False
    rest = overrides[: flags[0]] + overrides[flags[0] + 2 :]
    with user_errors():
        cfg = compose(rest, config_name="extend")
        ext = prepare_extension(cfg, rest)
        print(
            f"# the config this extension will run: {ext.parent_dir} -> {Path(cfg.results_dir) / 'runs' / ext.name}\n"
            + to_yaml(ext.config),
            end="",
        )
    return True


@app.command("eval-extrapolate", context_settings=PASS_THROUGH, epilog=EVAL_EPILOG)
def eval_extrapolate(
    run: Optional[str] = typer.Argument(None, help="Run directory, or a run name under results/runs."),
    overrides: Optional[List[str]] = typer.Argument(
        None, help="Overrides of eval.*, device, threads, logger, results_dir (the model is the run's)."
    ),
    latest: bool = typer.Option(False, "--latest", help="Evaluate the most recently trained run."),
    force: bool = typer.Option(
        False, "--force", help="Evaluate again even when the run already holds an evaluation with these settings."
    ),
    defaults: bool = typer.Option(
        False, "--defaults", help="Start from the default evaluation settings instead of the run's own."
    ),
) -> None:
    """Perplexity at 1x, 2x, 4x, 8x the training length, for each RoPE rescaling method.

    RUN may also be a local transformers checkpoint directory (config.json), e.g. `posx export`'s."""
    overrides = list(overrides or [])
    if run is not None and "=" in run:  # `--latest key=value`: the first override landed in RUN
        overrides.insert(0, run)
        run = None
    with user_errors():
        distributed.single_process("posx eval-extrapolate")
        cfg = compose(overrides)
        run_dir = resolve_run(run, cfg.results_dir, latest=latest)
        console = new_console()
        if (run_dir / "config.json").is_file() and not (run_dir / "model.json").is_file():
            evaluate_hf_dir(run_dir, cfg, console)  # a transformers checkpoint: the composed settings
            return
        if not defaults:
            composed = cfg
            cfg, source = eval_config(run_dir, composed, overrides)
            kept = kept_from_run(cfg, composed)
            console.print(
                f"evaluation settings: from {source}"
                + (", with the overrides on top" if overrides else "")
                + (f"; it sets {kept} (--defaults starts from the defaults)" if kept else ""),
                highlight=False,
                markup=False,
            )
        evaluate_run(run_dir, cfg, console, force=force)
        digest.refresh(run_dir)  # what posx report and posx runs read of the run


@app.command("frequencies", context_settings=PASS_THROUGH, epilog=FREQ_EPILOG)
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
    methods: str = typer.Option(
        ",".join(m for m in rope.METHODS if m not in WINDOWED),
        "--methods",
        help="Comma-separated RoPE methods (the windowed ones, left out by default, have none's frequencies).",
    ),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        help="Where to write the PNG (a new file); default results/frequencies.png, or -2, -3 ... when taken.",
    ),
) -> None:
    """Each RoPE method's wavelength per rotary pair against T and s x T: a table and a PNG."""
    args = list(overrides or [])
    with user_errors():
        runs = [a for a in args if "=" not in a]
        freqplot.check_overrides([a for a in args if "=" in a], with_run=bool(runs))
        cfg = compose([a for a in args if "=" in a])
        model = _rope_run(runs, cfg.results_dir)
        head_dim, base, context = _rope_geometry((head_dim, base, context), model, cfg)
        freqplot.check_head_dim(head_dim)
        freqplot.check_out(out)
        names = [m.strip() for m in methods.split(",") if m.strip()]
        df, attention = freqplot.wavelength_table(cfg.eval, names, head_dim, base, context, factor)
        target = round(factor * context)
        title = freqplot.title(head_dim, base, context, factor) + (f" (from {runs[0]})" if runs else "")
        console = new_console()
        for table in freqplot.rich_tables(df, attention, context, target, title, console.width):
            console.print(table)
        _write_png(df, context, target, title, out, cfg.results_dir, console)


def _rope_geometry(given: tuple, model: RunMeta | None, cfg) -> tuple[int, float, int]:
    """head_dim, base and T: each as given, else the run's, else the configured model's."""
    if model is not None:
        fallback = (model.model.head_dim, model.model.rope_base, model.train_context)
    else:
        fallback = (cfg.model.d_model // cfg.model.n_head, cfg.pos.base, cfg.train.context_length)
    return tuple(value if value is not None else default for value, default in zip(given, fallback))


def _rope_run(runs: list[str], results_dir: str) -> RunMeta | None:
    """The run ``posx frequencies`` takes head_dim, base and T from: at most one, and a RoPE run."""
    if len(runs) > 1:
        raise PosxError(f"posx frequencies takes at most one run, got {', '.join(runs)}")
    model = read_meta(resolve_run(runs[0], results_dir)) if runs else None
    if model is not None and model.model.pos not in ROTARY:
        raise PosxError(f"{runs[0]} uses pos={model.model.pos}, not RoPE; it has no rotary frequencies")
    return model


def _write_png(df, context: int, target: int, title: str, out: Path | None, results_dir: str, console: Console) -> None:
    """The wavelength plot at ``out`` (a new file), else the first free results/frequencies[-N].png."""
    if out is not None and out.exists():
        raise PosxError(f"{out} already exists; choose another --out (nothing is overwritten)")
    if out is None:
        out = next(p for p in files.numbered(Path(results_dir), "frequencies", ".png") if not p.exists())
    freqplot.plot(df, context, target, title, out)
    console.print(f"wrote {out}", markup=False)


@app.command("report", epilog=REPORT_EPILOG)
def report(
    paths: List[Path] = typer.Argument(..., help="Run directories and/or directories of runs (sweeps)."),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Report directory (new or empty); default results/reports/<time>/."
    ),
    factor: Optional[float] = typer.Option(
        None, "--factor", help="Factor of the per-position plot (default: the largest each encoding has)."
    ),
    results_dir: Path = typer.Option(Path("results"), "--results-dir", help="Where reports/ goes by default."),
    smooth: int = typer.Option(
        1, "--smooth", help="Per-position curves: a centred moving mean over this many buckets."
    ),
    evaluations: str = typer.Option(
        "current", "--evaluations", help="current: each run's last evaluation; all: every evaluation it keeps."
    ),
    formats: str = typer.Option("png,pdf", "--format", help="Figure formats to write: png (200 dpi), pdf, or both."),
) -> None:
    """Summary tables and plots from evaluated runs, runs pooled as seeds only when all else is equal."""
    with user_errors():
        distributed.single_process("posx report")
        build_report(
            paths,
            out=out,
            results_dir=results_dir,
            factor=factor,
            console=new_console(),
            smooth=smooth,
            evaluations=evaluations,
            formats=formats,
        )


def _write_csv(df, csv: str, console: Console) -> None:
    if csv == "-":
        print(df.to_csv(index=False), end="")
        return
    path = Path(csv)
    if path.exists():
        raise PosxError(f"{path} already exists; choose another --csv (nothing is overwritten)")
    files.write_text(path, df.to_csv(index=False))
    console.print(f"wrote {path}", markup=False, highlight=False)


@app.command("runs", epilog=RUNS_EPILOG)
def runs(
    path: Path = typer.Argument(Path("results"), help="A results directory, a directory of runs, a sweep or a run."),
    csv: Optional[str] = typer.Option(None, "--csv", help="Also write the list as CSV to this new file ('-': stdout)."),
) -> None:
    """List runs: name, encoding, T, steps, validation perplexity, evaluated lengths, parent, status."""
    with user_errors():
        df = collection.list_runs(path)
        console = new_console()
        if csv != "-":
            console.print(collection.runs_table(df, f"{len(df)} run(s) under {path}"))
        if csv is not None:
            _write_csv(df, csv, console)


@app.command("compare", epilog=COMPARE_EPILOG)
def compare(
    run_args: List[str] = typer.Argument(..., metavar="RUN RUN...", help="Runs (paths or names under results/runs)."),
    csv: Optional[str] = typer.Option(
        None, "--csv", help="Also write the comparison as CSV to this new file ('-': stdout)."
    ),
    results_dir: Path = typer.Option(Path("results"), "--results-dir", help="Where run names are looked up."),
) -> None:
    """The runs' current perplexity tables side by side, with ratios to the first run."""
    with user_errors():
        dirs = [resolve_run(r, results_dir) for r in run_args]
        df, names = collection.compare(dirs)
        console = new_console()
        if csv != "-":
            console.print(collection.compare_table(df, names))
        if csv is not None:
            _write_csv(df, csv, console)


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
    """Train small GPTs with different positional encodings and measure how they hold up past the
    length they trained at."""


data_app = typer.Typer(
    cls=OneLineUsageErrors,
    name="data",
    help="Token stores: prepare a corpus once, train and evaluate from it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(data_app)


@data_app.command("prepare", context_settings=PASS_THROUGH, epilog=PREPARE_EPILOG)
def data_prepare(
    overrides: Optional[List[str]] = typer.Argument(None, help="Overrides of data.* (as for posx train)."),
) -> None:
    """Build the token store of a data config (posx train would build it on first use)."""
    with user_errors():
        cfg = compose(list(overrides or []))
        found = store.load(cfg.data, cfg.data.cache_dir, console=new_console())
        fp = found.fingerprint
        new_console().print(
            f"token store {found.path}: {fp['train_tokens']:,} train + {fp['val_tokens']:,} val tokens, "
            f"{fp['documents']['train']} + {fp['documents']['val']} documents, "
            f"{tok_mod.kind_label(fp['tokenizer']['kind'])} vocab {fp['tokenizer']['vocab_size']} ({fp['dtype']})",
            markup=False,
            highlight=False,
        )


def main() -> None:
    app()
