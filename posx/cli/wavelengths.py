"""What ``posx frequencies`` does: each RoPE method's wavelength per rotary pair against T and
s x T, as tables in the terminal and a PNG (``posx.report.frequencies`` computes and draws them).

It is the one command that needs both torch (the frequencies) and matplotlib (the figure), so it
is a module of its own: the other commands that need torch (``posx.cli.commands``) import no
matplotlib. ``posx.cli`` loads it only when ``posx frequencies`` runs.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from posx import rope
from posx.cli.exits import user_errors
from posx.configure.applies import refuse_flags
from posx.configure.compose import compose
from posx.core import files
from posx.core.console import new_console
from posx.core.errors import PosxError
from posx.model.rescale import WINDOWED
from posx.report import frequencies as freqplot
from posx.runs.paths import read_meta, resolve_run
from posx.runs.records import RunMeta
from posx.schema.config import ROTARY, evaluated_length

FREQUENCIES_TAKES = "RUN, key=value overrides, --head-dim, --base, --context, --factor, --methods and --out"


def frequencies(args: list[str], geometry: tuple, factor: float, methods: str | None, out: Path | None) -> None:
    """``posx frequencies``: geometry is (head_dim, base, T) as given (None: the run's, else the
    configured model's); methods None means every method that sets frequencies."""
    with user_errors():
        refuse_flags(args, "posx frequencies", FREQUENCIES_TAKES)
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
        target = evaluated_length(factor, context)
        title = freqplot.title(head_dim, base, context, factor) + (f" (from {runs[0]})" if runs else "")
        console = new_console()
        for table in freqplot.rich_tables(df, attention, context, target, title, console.width):
            console.print(table)
        _write_png(df, context, target, title, out, cfg.results_dir, console)


def _rope_geometry(given: tuple, model: RunMeta | None, cfg) -> tuple[int, float, int]:
    """head_dim, base and T: each as given, else the run's, else the configured model's."""
    if model is not None:
        fallback = (model.model.head_dim, model.model.pos.base, model.train_context)
    else:
        fallback = (cfg.model.d_model // cfg.model.n_head, cfg.pos.base, cfg.train.context_length)
    return tuple(value if value is not None else default for value, default in zip(given, fallback))


def _rope_run(runs: list[str], results_dir: str) -> RunMeta | None:
    """The run ``posx frequencies`` takes head_dim, base and T from: at most one, and a RoPE run."""
    if len(runs) > 1:
        raise PosxError(f"posx frequencies takes at most one run, got {', '.join(runs)}")
    model = read_meta(resolve_run(runs[0], results_dir)) if runs else None
    if model is not None and model.model.pos.name not in ROTARY:
        raise PosxError(f"{runs[0]} uses pos={model.model.pos.name}, not RoPE; it has no rotary frequencies")
    return model


def _write_png(df, context: int, target: int, title: str, out: Path | None, results_dir: str, console: Console) -> None:
    """The wavelength plot at ``out`` (checked new by ``check_out``; the plot is published only
    under a free name), else the first free results/frequencies[-N].png."""
    out = out if out is not None else files.free_name(Path(results_dir), "frequencies", ".png")
    freqplot.plot(df, context, target, title, out)
    console.print(f"wrote {out}", markup=False)
