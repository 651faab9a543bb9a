"""The retrieval comparison's figure: exact answers against evaluation length, one panel per task.

Input: ``posx.report.task_claims.exact_shares`` rows (one per encoding, method, seed, task,
factor). Each line is one encoding evaluated with one method (RoPE also with PI and YaRN,
zero-shot), its points the mean exact share over seeds, its bars ± the sample std over seeds
(no bar for one seed: the legend entry says how many seeds each line has). Colour: the encoding
(a shade of RoPE's for each RoPE variant); marker and line style: the method
(``posx.report.looks``). Lines that would coincide sit side by side (``palette.dodge``); the
title says by how much.
"""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

from posx.report.axes import factor_axis, legend_order
from posx.report.looks import looks
from posx.report.palette import dodge, dodge_note, legend, legend_inches, wrap

CELL = ["encoding", "method", "task", "factor"]
METHOD_NAMES = {"pi": "PI", "yarn": "YaRN", "ntk": "NTK", "abf": "ABF"}  # as the papers write them


def summarize(shares: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample std and number of seeds of the exact share per (encoding, method, task, factor)."""
    return shares.groupby(CELL)["exact"].agg(exact_mean="mean", exact_std="std", n_seeds="size").reset_index()


def _lines(summary: pd.DataFrame, order: list[str]) -> list[tuple[str, str]]:
    """(encoding, method) of every line, encodings in ``order`` (then any other), methods in legend order."""
    keys = dict.fromkeys(summary[["encoding", "method"]].itertuples(index=False, name=None))
    rank = {e: i for i, e in enumerate(order)}
    return sorted(keys, key=lambda k: (rank.get(k[0], len(rank)), k[0], legend_order(k[1])))


def label_of(encoding: str, method: str, labels: dict[str, str], seeds: list[int]) -> str:
    """A legend entry: the encoding's label, the method when there is one, the seeds it averages."""
    name = labels.get(encoding, encoding)
    method_text = "" if method == "none" else f" + {METHOD_NAMES.get(method, method)} (zero-shot)"
    counts = sorted(set(seeds))
    many = "seed" if counts == [1] else "seeds"
    return f"{name}{method_text}, {'/'.join(str(c) for c in counts)} {many}"


def figure(shares: pd.DataFrame, labels: dict[str, str], families: dict[str, str], tasks: list[str]) -> Figure:
    """The figure of the module docstring. ``labels``: encoding -> legend text; ``families``:
    encoding -> the encoding whose colour it takes a shade of (a RoPE variant -> ``rope``);
    ``tasks``: the panels, in order."""
    summary = summarize(shares)
    keys = _lines(summary, list(labels))
    seeds = {k: list(summary[(summary["encoding"] == k[0]) & (summary["method"] == k[1])]["n_seeds"]) for k in keys}
    texts = [label_of(e, m, labels, seeds[(e, m)]) for e, m in keys]
    styles = looks([(families.get(e, e), e, m) for e, m in keys], size=4.5)
    factors = sorted(summary["factor"].unique())
    cols = min(3, max(1, len(tasks)))
    rows = math.ceil(len(tasks) / cols)
    fig = Figure(figsize=(3.8 * cols + 0.4, 3.2 * rows + 0.8 + legend_inches(texts, 3)), layout="constrained")
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    for ax, task in zip(axes, tasks):
        _panel(ax, summary[summary["task"] == task], list(zip(keys, texts, styles)), factors)
        ax.set_title(task, fontsize=10)
    for ax in axes[len(tasks) :]:
        ax.set_visible(False)
    handles, names = axes[0].get_legend_handles_labels()
    legend(fig, handles, names, loc="outside lower center", ncol=min(3, len(names)), fontsize=8, frameon=False)
    said = [
        "Exact answers vs evaluation length, one line per encoding and method, mean over seeds",
        "bars ± std over seeds (none for one seed)",
        "each run trained on its panel's task alone",
        dodge_note(len(keys), factors),
    ]
    fig.suptitle(wrap("; ".join(s for s in said if s), 110), fontsize=9)
    return fig


def _panel(ax, summary: pd.DataFrame, lines: list[tuple], factors: list[float]) -> None:
    """One task's lines: ``lines`` holds ((encoding, method), legend text, look) of every line of
    the figure, so each keeps its place in the sideways offsets and the legend in every panel."""
    for i, ((encoding, method), text, look) in enumerate(lines):
        g = summary[(summary["encoding"] == encoding) & (summary["method"] == method)].sort_values("factor")
        x = dodge(g["factor"], i, len(lines), factors)
        ax.plot(x, g["exact_mean"], linewidth=1.2, label=text, **look)
        sd = g["exact_std"].fillna(0)
        ax.vlines(x, g["exact_mean"] - sd, g["exact_mean"] + sd, color=look["color"], linewidth=0.8, alpha=0.6)
    ax.set_ylim(-0.04, 1.04)
    ax.set_ylabel("exact answers (share of samples)", fontsize=8)
    ax.set_xlabel("evaluation length (x T, log scale)", fontsize=8)
    factor_axis(ax, factors)
    ax.tick_params(labelsize=8)
