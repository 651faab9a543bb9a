"""`posx frequencies`: each RoPE method's wavelength (2*pi / inv_freq, from the call an evaluation
makes) per rotary pair against T and L = s x T, as tables and a PNG: past T a pair never turned
once in training, past L not even at the target length. Needs torch and matplotlib both."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from omegaconf import DictConfig
from rich.table import Table

from posx import rope
from posx.cli.exits import user_errors
from posx.configure.applies import key_of, refuse_flags
from posx.configure.compose import compose
from posx.core import files
from posx.core.console import new_console
from posx.core.errors import PosxError, choose
from posx.model.rescale import WINDOWED, method_frequencies
from posx.report.figures.output import DPI
from posx.report.figures.palette import color_of
from posx.runs.paths import read_meta, resolve_run
from posx.runs.records import RunMeta
from posx.schema.config import ROTARY, evaluated_length

MAX_HEAD_DIM = 4096  # beyond any model's head; keeps the table a table
MAX_CONTEXT = 1 << 24
MAX_FACTOR = 1024.0
_STYLES = ["-", "--", "-.", ":"]
_MARKERS = ["o", "s", "^", "v", "D", "x", "+", "*", "<", ">"]
# Settings ``posx frequencies`` takes as options, not from the config: the override names its option.
AS_OPTIONS = {"eval.methods": "--methods", "eval.factors": "--factor", "eval.scale": "--factor"}
FROM_THE_RUN = ("model.", "pos.", "train.")  # with a run, its head_dim, base and T win
FREQUENCIES_TAKES = "RUN, key=value overrides, --head-dim, --base, --context, --factor, --methods and --out"


def wavelength_table(
    ev: DictConfig, methods: list[str], head_dim: int, base: float, context: int, factor: float
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Wavelengths (rows: pair index, columns: methods) and each method's attention factor."""
    if not (math.isfinite(factor) and 1 <= factor <= MAX_FACTOR):
        raise PosxError(f"--factor {factor} must be a finite number from 1 to {MAX_FACTOR}")
    if not 1 <= context <= MAX_CONTEXT:
        raise PosxError(f"--context {context} must be a number of tokens from 1 to {MAX_CONTEXT}")
    if not (math.isfinite(base) and base > 1):
        raise PosxError(f"--base {base} must be a finite number greater than 1")
    if not methods:
        raise PosxError("--methods is empty; give a comma-separated list, e.g. --methods none,pi,yarn")
    unknown = [m for m in methods if m not in rope.METHODS]
    if unknown:
        raise PosxError(f"unknown method '{unknown[0]}'; {choose(rope.METHODS)}")
    target = evaluated_length(factor, context)
    columns, attention = {}, {}
    for method in methods:
        inv, attn = method_frequencies(
            method, ev, head_dim=head_dim, base=base, train_context=context, scale=factor, length=target
        )
        columns[method] = rope.wavelengths(inv.double()).numpy()
        attention[method] = attn
    df = pd.DataFrame(columns)
    df.index.name = "pair"
    return df, attention


def _cell(wavelength: float, context: int, target: int) -> str:
    text = f"{wavelength:,.4g}"
    if wavelength > target:
        return f"[red]{text}[/]"
    if wavelength > context:
        return f"[yellow]{text}[/]"
    return text


def coinciding(df: pd.DataFrame, attention: dict[str, float]) -> list[list[str]]:
    """Sets of methods with the same wavelengths and attention factor at these settings."""
    sets: list[list[str]] = []
    for method in df.columns:
        for same in sets:
            if np.allclose(df[same[0]], df[method], rtol=1e-9, atol=0) and attention[same[0]] == attention[method]:
                same.append(method)
                break
        else:
            sets.append([method])
    return [s for s in sets if len(s) > 1]


def rich_tables(
    df: pd.DataFrame, attention: dict[str, float], context: int, target: int, title: str, width: int
) -> list[Table]:
    """Pairs by rows, methods by columns, coloured past T and L; split so no table exceeds ``width``."""
    cells = {m: [f"{v:,.4g}" for v in df[m]] + [f"{attention[m]:.4g}"] for m in df.columns}
    need = {m: max(len(m), *(len(c) for c in cells[m])) + 3 for m in df.columns}
    chunks, current, used = [], [], len(str(len(df))) + 12
    for m in df.columns:
        if current and used + need[m] > width:
            chunks.append(current)
            current, used = [], len(str(len(df))) + 12
        current.append(m)
        used += need[m]
    chunks.append(current)
    same = coinciding(df, attention)
    note = ("; coincide here: " + "; ".join(" = ".join(s) for s in same)) if same else ""
    tables = []
    for i, methods in enumerate(chunks):
        part = f" ({i + 1}/{len(chunks)})" if len(chunks) > 1 else ""
        table = Table(
            title=title + part,
            caption=f"[yellow]yellow[/]: longer than T={context} (never a full turn "
            f"in training); [red]red[/]: longer than L={target}{note}",
        )
        table.add_column("pair", justify="right", no_wrap=True)
        for method in methods:
            table.add_column(method, justify="right", no_wrap=True, min_width=need[method] - 3)
        for pair, row in df[methods].iterrows():
            table.add_row(str(pair), *(_cell(v, context, target) for v in row))
        table.add_section()
        table.add_row("λ > T", *(str(int((df[m] > context).sum())) for m in methods))
        table.add_row("attention", *(f"{attention[m]:.4g}" for m in methods))
        tables.append(table)
    return tables


def plot(df: pd.DataFrame, context: int, target: int, title: str, path: Path) -> Path:
    """Wavelength (log scale) by pair index, one line per curve (methods that share it, one entry),
    T and L marked, the legend under the axes. PNG at 200 dpi, or PDF when ``path`` ends in .pdf."""
    fig = Figure(figsize=(9, 6.5), layout="constrained")
    ax = fig.subplots()
    same = {s[0]: s for s in coinciding(df, {m: 0.0 for m in df.columns})}  # same curves, one line
    hidden = {m for s in same.values() for m in s[1:]}
    for i, method in enumerate(m for m in df.columns if m not in hidden):
        label = " = ".join(same[method]) + " (same wavelengths)" if method in same else method
        ax.plot(
            df.index,
            df[method],
            linestyle=_STYLES[i % len(_STYLES)],
            marker=_MARKERS[i % len(_MARKERS)],
            markersize=3.5,
            linewidth=1.2,
            label=label,
            color=color_of(method),
        )
    for y, label, color, style in (
        (context, "training length T", "black", "--"),
        (target, "target length L", "firebrick", ":"),
    ):
        ax.axhline(y, color=color, linewidth=1.0, linestyle=style)
        ax.annotate(f"{label} = {y}", (0, y), xytext=(2, 3), textcoords="offset points", fontsize=8, color=color)
    ax.set_yscale("log")
    ax.set_xlabel("rotary pair index i")
    ax.set_ylabel("wavelength 2π / θᵢ (positions, log scale)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    fmt = "pdf" if Path(path).suffix.lower() == ".pdf" else "png"
    with files.atomic_path(path, new=True) as tmp:  # a new file: nothing there is replaced
        fig.savefig(tmp, format=fmt, dpi=DPI, bbox_inches="tight")
    return path


def check_head_dim(head_dim: int) -> None:
    if head_dim < 2 or head_dim % 2 or head_dim > MAX_HEAD_DIM:
        raise PosxError(f"--head-dim {head_dim} must be an even number from 2 to {MAX_HEAD_DIM}")


def check_out(out: Path | None) -> None:
    """--out names a .png file (None: the default name)."""
    if out is None:
        return
    if out.suffix.lower() != ".png":
        raise PosxError(f"--out {out} must name a .png file (the plot is a PNG)")
    if out.is_dir() and not out.is_symlink():
        raise PosxError(f"--out {out} is a directory; name a .png file")
    files.new_file(out, "--out")


def check_overrides(overrides: list[str], with_run: bool) -> None:
    """Refuse an override the command would ignore (``AS_OPTIONS``; with a run, ``FROM_THE_RUN``)."""
    for override in overrides:
        key = key_of(override)
        if key in AS_OPTIONS:
            raise PosxError(f"posx frequencies does not read {key}; use {AS_OPTIONS[key]} instead")
        if with_run and key.startswith(FROM_THE_RUN):
            raise PosxError(
                f"{override}: with a run, head_dim, base and T come from it; use --head-dim, --base or "
                "--context to change them, or leave out the run"
            )


def frequencies(args: list[str], geometry: tuple, factor: float, methods: str | None, out: Path | None) -> None:
    """``posx frequencies``: geometry is (head_dim, base, T), each None for the run's or the
    configured model's; methods None: every method that sets frequencies."""
    with user_errors():
        refuse_flags(args, "posx frequencies", FREQUENCIES_TAKES)
        runs = [a for a in args if "=" not in a]
        check_overrides([a for a in args if "=" in a], with_run=bool(runs))
        cfg = compose([a for a in args if "=" in a])
        model = _rope_run(runs, cfg.results_dir)
        if model is not None:  # each of head_dim, base and T as given, else the run's, else the config's
            fallback = (model.model.head_dim, model.model.pos.base, model.train_context)
        else:
            fallback = (cfg.model.d_model // cfg.model.n_head, cfg.pos.base, cfg.train.context_length)
        head_dim, base, context = (
            value if value is not None else default for value, default in zip(geometry, fallback)
        )
        check_head_dim(head_dim)
        check_out(out)
        if methods is None:
            names = [m for m in rope.METHODS if m not in WINDOWED]
        else:
            names = [m.strip() for m in methods.split(",") if m.strip()]
        df, attention = wavelength_table(cfg.eval, names, head_dim, base, context, factor)
        target = evaluated_length(factor, context)
        heading = f"RoPE wavelengths: head_dim={head_dim}, base={base:g}, T={context}, s={factor:g}"
        heading += f" (from {runs[0]})" if runs else ""
        console = new_console()
        for table in rich_tables(df, attention, context, target, heading, console.width):
            console.print(table)
        out = out if out is not None else files.free_name(Path(cfg.results_dir), "frequencies", ".png")
        plot(df, context, target, heading, out)  # published only under a free name
        console.print(f"wrote {out}", markup=False)


def _rope_run(runs: list[str], results_dir: str) -> RunMeta | None:
    """The run ``posx frequencies`` takes head_dim, base and T from: at most one, and a RoPE run."""
    if len(runs) > 1:
        raise PosxError(f"posx frequencies takes at most one run, got {', '.join(runs)}")
    model = read_meta(resolve_run(runs[0], results_dir)) if runs else None
    if model is not None and model.model.pos.name not in ROTARY:
        raise PosxError(f"{runs[0]} uses pos={model.model.pos.name}, not RoPE; it has no rotary frequencies")
    return model
