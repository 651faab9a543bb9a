"""The extension study in a report: ``extension.csv`` (per extension experiment, perplexity at s x T
zero-shot and after continued training, at T and at 2s x T, mean ± std over seeds) and
``extension.png`` (perplexity at s x T against fine-tuning steps, a line per method, band ± std).
Steps > 0 are the validation estimates of the extension's metrics.csv; step 0 is the zero-shot
evaluation (another estimator over the same held-out split), drawn hollow. See docs/evaluation.md.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from posx.report.figures import output
from posx.report.figures.axes import colors_for, figure_legend, legend_order, log_ticks
from posx.report.figures.output import FORMATS

KEY = ["group", "parent", "encoding", "method"]
CELLS = ("zero_shot", "extended", "extended_1x", "extended_2x_new")  # each with its std over seeds, <cell>_std
COLUMNS = [*KEY, "factor", "steps", *(f"{c}{std}" for c in CELLS for std in ("", "_std")), "n_seeds", "seeds"]


def _row(summary: pd.DataFrame, key: tuple, method: str, factor: float) -> pd.DataFrame:
    """The summary's row of line ``key`` (group, parent, encoding, _) with ``method`` at ``factor``."""
    at = (summary["group"] == key[0]) & (summary["parent"] == key[1]) & (summary["encoding"] == key[2])
    return summary[at & (summary["method"] == method) & np.isclose(summary["factor"], factor)]


def _cell(summary: pd.DataFrame, key: tuple, method: str, factor: float) -> tuple[float, float]:
    row = _row(summary, key, method, factor)
    if row.empty or row["n_seeds"].iloc[0] == 0:
        return math.nan, math.nan
    return float(row["ppl_mean"].iloc[0]), float(row["ppl_std"].iloc[0])


def extension_table(summary: pd.DataFrame, extended: dict) -> pd.DataFrame:
    """``extended``: (group, parent, encoding) -> (method, factor, steps) of each extension group."""
    rows = []
    for (group, parent, enc), (method, factor, steps) in extended.items():
        key = (group, parent, enc, method)
        found = (  # the cells of CELLS: zero-shot at s·T, extended at s·T, at T and at 2 s·T
            _cell(summary, key, f"{method} (zero-shot)", factor),
            *(_cell(summary, key, f"{method} (extended)", f) for f in (factor, 1.0, 2 * factor)),
        )
        seeds = _row(summary, key, f"{method} (extended)", factor)
        row = {**dict(zip(KEY, key)), "factor": factor, "steps": steps}
        for cell, (mean, std) in zip(CELLS, found):
            row.update({cell: mean, f"{cell}_std": std})
        row["n_seeds"] = int(seeds["n_seeds"].iloc[0]) if not seeds.empty else 0
        row["seeds"] = seeds["seeds"].iloc[0] if not seeds.empty else ""
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(KEY, kind="stable").reset_index(drop=True)


def extension_curves(training: pd.DataFrame, table: pd.DataFrame, extended: dict) -> pd.DataFrame:
    """Validation ppl at s x T by step per group (``queries.training``); step 0: zero-shot, from ``table``."""
    if training.empty or not extended:
        return pd.DataFrame()
    val = training[training["val_n"] > 0]
    frames = []
    for (group, parent, enc), (method, factor, _) in extended.items():
        mine = val[(val["group"] == group) & (val["parent"] == parent) & (val["encoding"] == enc)]
        if mine.empty:
            continue
        curve = (
            mine[["step", "val_ppl", "val_ppl_std", "val_n"]]
            .rename(columns={"val_ppl": "ppl_mean", "val_ppl_std": "ppl_std", "val_n": "n_seeds"})
            .sort_values("step")
            .reset_index(drop=True)
        )
        zero = table[(table["group"] == group) & (table["parent"] == parent) & (table["method"] == method)]
        if not zero.empty and math.isfinite(zero["zero_shot"].iloc[0]):
            start = {
                "step": 0,
                "ppl_mean": zero["zero_shot"].iloc[0],
                "ppl_std": zero["zero_shot_std"].iloc[0],
                "n_seeds": zero["n_seeds"].iloc[0],
            }
            curve = pd.concat([pd.DataFrame([start]), curve], ignore_index=True)
        frames.append(curve.assign(group=group, parent=parent, encoding=enc, method=method, factor=factor))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def plot_extension(curves: pd.DataFrame, path: Path, formats: tuple[str, ...] = FORMATS) -> Path | None:
    """One panel per (parent, factor): perplexity at s x T by fine-tuning step, one line per method."""
    if curves.empty:
        return None
    panels = list(dict.fromkeys(zip(curves["parent"], curves["factor"])))
    colors = colors_for(curves["method"])
    fig = Figure(figsize=(5.6 * len(panels) + 2.2, 4.2))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (parent, factor) in zip(axes, panels):
        mine = curves[(curves["parent"] == parent) & (curves["factor"] == factor)]
        _extension_panel(ax, mine, colors, f"{parent} extended to {factor:g}x", f"{factor:g} x T")
    # the legend entry of the hollow step-0 markers, held by the last panel
    ax.plot([], [], color="gray", marker="o", markerfacecolor="white", linestyle="none", label="step 0: zero-shot")
    figure_legend(fig, axes)
    fig.suptitle(
        "Extension: perplexity at the new length during continued training (mean, band ± std over seeds)", fontsize=11
    )
    fig.tight_layout()
    return output.save(fig, path, formats)


def _extension_panel(ax, mine: pd.DataFrame, colors: dict, title: str, length: str) -> None:
    """One (parent, factor) panel: a curve per method (and group, where a method has several)."""
    twice = mine.drop_duplicates(["method", "group"])["method"].duplicated().any()
    for (method, group), g in sorted(mine.groupby(["method", "group"]), key=lambda kv: legend_order(kv[0][0])):
        label = "none (plain RoPE, continued training)" if method == "none" else method
        _method_curve(ax, g.sort_values("step"), colors[method], label + (f" ({group})" if twice else ""))
    ax.set_yscale("log")
    low = (mine["ppl_mean"] - mine["ppl_std"].fillna(0)).clip(lower=mine["ppl_mean"].min() / 2)
    log_ticks(ax, float(low.min()), float((mine["ppl_mean"] + mine["ppl_std"].fillna(0)).max()))
    ax.set_xlabel("fine-tuning steps at the new length")
    ax.set_ylabel(f"perplexity at {length} (log scale)")
    n = int(mine["n_seeds"].max())
    ax.set_title(title + (f" ({n} seeds)" if n > 1 else ""), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)


def _method_curve(ax, g: pd.DataFrame, color, label: str) -> None:
    """One curve: trained steps with a ± std band; step 0 (zero-shot) hollow, dotted to the first step."""
    trained, zero = g[g["step"] > 0], g[g["step"] == 0]
    ax.plot(trained["step"], trained["ppl_mean"], color=color, marker=".", linewidth=1.6, label=label)
    band = trained[trained["ppl_std"].notna()]
    if not band.empty:
        low, high = band["ppl_mean"] - band["ppl_std"], band["ppl_mean"] + band["ppl_std"]
        ax.fill_between(band["step"], low, high, color=color, alpha=0.18, linewidth=0)
    if not zero.empty and not trained.empty:
        first, start = trained.iloc[0], zero["ppl_mean"].iloc[0]
        ax.plot([0, first["step"]], [start, first["ppl_mean"]], color=color, linestyle=":", linewidth=1)
        hollow = {"marker": "o", "markerfacecolor": "white", "capsize": 3, "linestyle": "none"}
        ax.errorbar([0], zero["ppl_mean"], yerr=zero["ppl_std"].fillna(0), color=color, **hollow)
