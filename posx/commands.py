"""What each ``posx`` command does with its parsed arguments. ``posx.cli`` declares the commands
and their options and calls these; ``train`` and ``extend`` hand their arguments to Hydra through
``posx.jobs``.

This module imports torch, pandas and matplotlib (about 3 s on a small CPU); ``posx.cli`` loads it
only when a command runs, so ``posx --help`` and ``posx --version`` answer at once. The commands
that only read results (``posx runs``, ``compare``, ``report``) are in ``posx.results``, which
imports no torch.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from posx import jobs, rope
from posx.config.compose import compose, to_yaml
from posx.config.evalsettings import eval_config, kept_from_run
from posx.core import files, launcher
from posx.core.console import new_console
from posx.core.errors import PosxError
from posx.data import store
from posx.data import tokenizer as tok_mod
from posx.eval.run import evaluate_run
from posx.exits import user_errors
from posx.hf.checkpoint import evaluate_hf_dir
from posx.hf.export import export_run
from posx.model.encodings import ROTARY
from posx.model.rescale import WINDOWED
from posx.report import digest
from posx.report import frequencies as freqplot
from posx.runs.paths import read_meta, resolve_run
from posx.runs.records import RunMeta
from posx.train.extend import prepare as prepare_extension


def train(args: list[str], resume: str | None) -> None:
    """``posx train``: a Hydra job (or sweep), or ``--resume RUN`` from its last checkpoint."""
    if resume is not None:
        with user_errors():
            jobs.resume(resume, args)
        return
    jobs.run_hydra(jobs.train_job, "config", args)


def extend(run: str | None, overrides: list[str]) -> None:
    """``posx extend [RUN] overrides``: RUN becomes the ``parent=`` override."""
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


def export(run: str, out: Path, results_dir: str) -> None:
    """``posx export RUN --out DIR``."""
    with user_errors():
        written = export_run(resolve_run(run, results_dir), out)
        new_console().print(
            f"wrote {written} (load it with transformers.AutoModelForCausalLM.from_pretrained)", markup=False
        )


def eval_extrapolate(run: str | None, overrides: list[str], latest: bool, force: bool, defaults: bool) -> None:
    """``posx eval-extrapolate``: a posx run with its own settings (or the defaults), or a
    transformers checkpoint directory with the composed ones."""
    if run is not None and "=" in run:  # `--latest key=value`: the first override landed in RUN
        overrides.insert(0, run)
        run = None
    with user_errors():
        launcher.single_process("posx eval-extrapolate")
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


def frequencies(args: list[str], geometry: tuple, factor: float, methods: str | None, out: Path | None) -> None:
    """``posx frequencies``: geometry is (head_dim, base, T) as given (None: the run's, else the
    configured model's); methods None means every method that sets frequencies."""
    with user_errors():
        runs = [a for a in args if "=" not in a]
        freqplot.check_overrides([a for a in args if "=" in a], with_run=bool(runs))
        cfg = compose([a for a in args if "=" in a])
        model = _rope_run(runs, cfg.results_dir)
        head_dim, base, context = _rope_geometry(geometry, model, cfg)
        freqplot.check_head_dim(head_dim)
        freqplot.check_out(out)
        if methods is None:
            names = [m for m in rope.METHODS if m not in WINDOWED]
        else:
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


def data_prepare(overrides: list[str]) -> None:
    """``posx data prepare``: build (or find) the token store and say what it holds."""
    with user_errors():
        cfg = compose(overrides)
        found = store.load(cfg.data, cfg.data.cache_dir, console=new_console())
        fp = found.fingerprint
        new_console().print(
            f"token store {found.path}: {fp['train_tokens']:,} train + {fp['val_tokens']:,} val tokens, "
            f"{fp['documents']['train']} + {fp['documents']['val']} documents, "
            f"{tok_mod.kind_label(fp['tokenizer']['kind'])} vocab {fp['tokenizer']['vocab_size']} ({fp['dtype']})",
            markup=False,
            highlight=False,
        )
