"""The PNGs of ``posx report`` (matplotlib figures drawn straight to PNG: no pyplot, no
backend switch, no display needed).

* ``ppl_vs_length.png``: perplexity (log scale) by evaluation length in multiples of T, one line
  per encoding x method (x protocol when several), mean over seeds with ± std bars.
* ``positions.png``: mean NLL by position in the window (in multiples of T) at one factor,
  one panel per encoding, one line per method.
* ``passkey.png``: passkey exact-match accuracy and key NLL by evaluation length, one column
  per variant.

The training length is marked in every plot by a dashed vertical line at 1x.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from posx.core import files

STYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P"]


def _colors(names) -> dict:
    """One colour per method, the same in every plot of a report (sorted names)."""
    cmap = colormaps["tab10"]
    return {name: cmap(i % 10) for i, name in enumerate(sorted(set(names)))}


def _log_ticks(ax, lo: float, hi: float) -> None:
    """Readable labels on a log axis, also when the data span less than a decade."""
    lo, hi = max(lo, 1e-12), max(hi, lo * 1.01)
    ticks = sorted({float(f"{t:.2g}") for t in np.geomspace(lo, hi, 6)})
    ax.set_yticks(ticks)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _factor_axis(ax, factors) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(factors)
    ax.set_xticklabels([f"{f:g}x" for f in factors])
    ax.minorticks_off()
    ax.axvline(1.0, color="gray", linestyle="--", linewidth=1, label="training length T")
    ax.grid(True, which="major", alpha=0.3)


def _figure_legend(fig, axes) -> None:
    """One legend for all panels, right of the last, each label once."""
    entries: dict = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    fig.legend(entries.values(), entries.keys(), loc="upper left", bbox_to_anchor=(1.0, 0.93), fontsize=9)


def _save(fig, path: Path) -> Path:
    with files.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    return path


def plot_ppl(summary: pd.DataFrame, path: Path) -> Path | None:
    data = summary[summary["n_seeds"] > 0]
    if data.empty:
        return None
    several = data["protocol"].nunique() > 1
    colors = _colors(data["method"])
    encodings = list(dict.fromkeys(data["encoding"]))
    fig = Figure(figsize=(9, 5.5))
    ax = fig.subplots()
    for (enc, method, protocol), g in data.groupby(["encoding", "method", "protocol"], sort=False):
        g = g.sort_values("factor")
        i = encodings.index(enc)
        label = f"{enc} · {method}" + (f" · {protocol}" if several else "")
        ax.errorbar(g["factor"], g["ppl_mean"], yerr=g["ppl_std"].fillna(0), label=label,
                    color=colors[method], linestyle=STYLES[i % 4], marker=MARKERS[i % 6], capsize=3)
    ax.set_yscale("log")
    std = data["ppl_std"].fillna(0)
    _log_ticks(ax, float((data["ppl_mean"] - std).min()), float((data["ppl_mean"] + std).max()))
    _factor_axis(ax, sorted(summary["factor"].unique()))
    ax.set_xlabel("evaluation length (multiples of the training length T)")
    ax.set_ylabel("perplexity (log scale)")
    ax.set_title("Perplexity vs evaluation length (mean ± std over seeds)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    return _save(fig, path)


def position_curves(positions: pd.DataFrame, factor: float | None) -> tuple[pd.DataFrame, dict]:
    """Mean NLL per (encoding, method, position/T) over runs, at ``factor`` for each encoding
    (default: the largest factor that encoding has); returns the curves and the factor used."""
    if positions.empty:
        return positions, {}
    df = positions.assign(x=(positions["bucket_start"] + positions["bucket_end"]) / 2 / positions["train_context"])
    chosen = {}
    for enc, g in df.groupby("encoding", sort=False):
        have = sorted(g["factor"].unique())
        fits = [f for f in have if factor is None or f <= factor]
        chosen[enc] = fits[-1] if fits else have[0]
    keep = df[[chosen[e] == f for e, f in zip(df["encoding"], df["factor"])]]
    curves = keep.groupby(["encoding", "method", "x"], sort=False)["nll"].mean().reset_index()
    return curves, chosen


def plot_positions(positions: pd.DataFrame, path: Path, factor: float | None) -> Path | None:
    curves, chosen = position_curves(positions, factor)
    if curves.empty:
        return None
    encodings = list(chosen)
    colors = _colors(curves["method"])
    fig = Figure(figsize=(5.5 * len(encodings) + 1.5, 4.5))
    axes = fig.subplots(1, len(encodings), squeeze=False)
    for ax, enc in zip(axes[0], encodings):
        for method, g in curves[curves["encoding"] == enc].groupby("method", sort=False):
            g = g.sort_values("x")
            ax.plot(g["x"], g["nll"], label=method, color=colors[method], marker=".", linewidth=1.5)
        ax.axvline(1.0, color="gray", linestyle="--", linewidth=1, label="training length T")
        ax.set_title(f"{enc}: evaluated at {chosen[enc]:g}x T")
        ax.set_xlabel("position in the window (multiples of T)")
        ax.set_ylabel("mean NLL (nats per token)")
        ax.grid(True, alpha=0.3)
    _figure_legend(fig, axes[0])
    fig.suptitle("Loss by token position (mean over seeds)")
    fig.tight_layout()
    return _save(fig, path)


def plot_passkey(pk_summary: pd.DataFrame, path: Path) -> Path | None:
    """Top row: exact-match accuracy; bottom row: mean NLL of the key digits (chance: ln 10)."""
    if pk_summary.empty or (pk_summary["n_seeds"] == 0).all():
        return None
    data = pk_summary[pk_summary["n_seeds"] > 0]
    variants = list(dict.fromkeys(data["variant"]))
    encodings = list(dict.fromkeys(data["encoding"]))
    colors = _colors(data["method"])
    factors = sorted(pk_summary["factor"].unique())
    fig = Figure(figsize=(5.5 * len(variants) + 2, 8))
    axes = fig.subplots(2, len(variants), squeeze=False)
    for col, variant in enumerate(variants):
        top, bottom = axes[0][col], axes[1][col]
        for (enc, method), g in data[data["variant"] == variant].groupby(["encoding", "method"], sort=False):
            g = g.sort_values("factor")
            i = encodings.index(enc)
            style = dict(label=f"{enc} · {method}", color=colors[method], linestyle=STYLES[i % 4],
                         marker=MARKERS[i % 6])
            top.errorbar(g["factor"], g["accuracy_mean"], yerr=g["accuracy_std"].fillna(0), capsize=3, **style)
            bottom.plot(g["factor"], g["key_nll_mean"], **style)
        for ax in (top, bottom):
            _factor_axis(ax, factors)
            ax.set_xlabel("evaluation length (multiples of T)")
        bottom.axhline(math.log(10), color="black", linestyle=":", linewidth=1, label="chance over digits (ln 10)")
        top.set_ylim(-0.05, 1.05)
        top.set_title(f"passkey, {variant} variant: exact match")
        top.set_ylabel("exact-match accuracy")
        bottom.set_title(f"passkey, {variant} variant: key NLL")
        bottom.set_ylabel("mean NLL of the key digits (nats)")
    _figure_legend(fig, [*axes[0], *axes[1]])
    fig.suptitle("Passkey retrieval by evaluation length (mean ± std over seeds)")
    fig.tight_layout()
    return _save(fig, path)


def draw_all(summary: pd.DataFrame, positions: pd.DataFrame, pk_summary: pd.DataFrame, out_dir: Path,
             factor: float | None = None) -> dict[str, Path | None]:
    """Every plot there is data for; a name maps to None when its data is missing everywhere."""
    return {
        "ppl_vs_length.png": plot_ppl(summary, out_dir / "ppl_vs_length.png"),
        "positions.png": plot_positions(positions, out_dir / "positions.png", factor),
        "passkey.png": plot_passkey(pk_summary, out_dir / "passkey.png"),
    }
