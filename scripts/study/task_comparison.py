"""The retrieval comparison's figure: exact answers against evaluation length, one panel per task.

Input: ``scripts.study.task_claims.exact_shares`` rows (one per encoding, method, seed, task,
factor). Each line is one encoding evaluated with one method (RoPE also with PI and YaRN,
zero-shot), its points the mean exact share over seeds, its bars ± the sample std over seeds
(no bar for one seed: the legend entry says how many seeds each line has). Colour: the encoding
(a shade of RoPE's for each RoPE variant, which also has a dash pattern of its own); marker and
line style: the method (``posx.report.figures.looks``). Lines that would coincide sit side by side
(``palette.dodge``); the title says by how much.
"""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure
from omegaconf import OmegaConf

from posx.report.figures.axes import factor_axis, legend_order
from posx.report.figures.looks import SPARE_STYLES, looks
from posx.report.figures.palette import dodge, dodge_note, legend, legend_inches, wrap
from posx.schema.config import evaluated_length
from posx.schema.tasks import TaskOptions
from posx.tasks.chance import chance

CELL = ["encoding", "method", "task", "factor"]
AXES = {"mqar": ("mqar", "mqar_more")}  # varied layout: a task past T made longer, and made harder
TITLES = {  # a panel's title where the task is one of two axes past T
    "mqar": "mqar, longer past T (the pairs of T, more filler)",
    "mqar_more": "mqar_more, harder past T (pairs grow with the length)",
}
CHANCE_COLUMNS = ["task", "factor", "chance"]


def _title(task: str, tasks: list[str]) -> str:
    """A panel's title: which axis past T it is where the figure shows both axes of its task (with
    the fixed layout, MQAR past T has more pairs, and ``mqar`` alone is no "longer" axis)."""
    pair = next((both for both in AXES.values() if task in both), ())
    return TITLES[task] if pair and set(pair) <= set(tasks) else task


def chance_levels(task_options, T: int, tasks: list[str], factors) -> pd.DataFrame:
    """(task, factor, chance) of ``posx.tasks.chance`` for ``tasks`` at ``factors`` x ``T`` with
    a run's ``eval.task_options`` (a mapping); NaN where no chance level is stated."""
    opts = OmegaConf.merge(OmegaConf.structured(TaskOptions), task_options)
    rows = [(t, float(f), chance(t, opts, evaluated_length(f, T))) for t in tasks for f in factors]
    return pd.DataFrame(rows, columns=CHANCE_COLUMNS)


METHOD_NAMES = {"pi": "PI", "yarn": "YaRN", "ntk": "NTK", "abf": "ABF"}  # as the papers write them


def summarize(shares: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample std and number of seeds of the exact share per (encoding, method, task, factor)."""
    return shares.groupby(CELL)["exact"].agg(exact_mean="mean", exact_std="std", n_seeds="size").reset_index()


def exact_table(shares: pd.DataFrame, encodings: list[str], chance: pd.DataFrame) -> pd.DataFrame:
    """Encoding x method x task by rows, factors by columns: mean ± std of the exact share (n
    seeds); each task's chance level (``chance``) in a row of its own, encoding ``chance``."""
    summary = summarize(shares)
    summary["cell"] = [
        f"{m:.1%}" + (f" ± {s:.1%}" if s == s else "") + f" ({n})"
        for m, s, n in zip(summary["exact_mean"], summary["exact_std"], summary["n_seeds"])
    ]
    levels = chance.dropna().assign(encoding="chance", method="-")
    levels["cell"] = [f"{c:.1%}" if c >= 1e-3 else f"{c:.1e}" for c in levels["chance"]]
    summary = pd.concat([summary, levels[[*CELL, "cell"]]], ignore_index=True)
    table = summary.pivot(index=["encoding", "method", "task"], columns="factor", values="cell").reset_index()
    table.columns = [c if isinstance(c, str) else f"{c:g}x" for c in table.columns]
    rank = {e: i for i, e in enumerate(encodings)}
    return table.sort_values(["encoding", "task"], key=lambda c: c.map(rank) if c.name == "encoding" else c)


def _lines(summary: pd.DataFrame, order: list[str]) -> list[tuple[str, str]]:
    """(encoding, method) of every line, encodings in ``order`` (then any other), methods in legend order."""
    keys = dict.fromkeys(summary[["encoding", "method"]].itertuples(index=False, name=None))
    rank = {e: i for i, e in enumerate(order)}
    return sorted(keys, key=lambda k: (rank.get(k[0], len(rank)), k[0], legend_order(k[1])))


def label_of(encoding: str, method: str, labels: dict[str, str], seeds: list[int], two: bool = False) -> str:
    """A legend entry: the encoding's label, the method when there is one, the seeds it averages;
    ``two``: the encoding is scored on sampled positions (method none) and on dense ones (``dense``)."""
    name = labels.get(encoding, encoding)
    method_text = "" if method == "none" else f" + {METHOD_NAMES.get(method, method)} (zero-shot)"
    if two:  # randomized positions (task_arms.SAMPLED_AT_TEST): as published, and dense beside it
        method_text = ", scored on dense positions" if method == "dense" else ", scored on sampled positions"
    counts = sorted(set(seeds))
    many = "seed" if counts == [1] else "seeds"
    return f"{name}{method_text}, {'/'.join(str(c) for c in counts)} {many}"


def figure(
    shares: pd.DataFrame, labels: dict[str, str], families: dict[str, str], tasks: list[str], chance=None
) -> Figure:
    """The figure of the module docstring. ``labels``: encoding -> legend text; ``families``:
    encoding -> the encoding whose colour it takes a shade of (a RoPE variant -> ``rope``);
    ``tasks``: the panels, in order; ``chance``: ``chance_levels`` rows, drawn as a grey dotted
    line in each panel whose task has them."""
    summary = summarize(shares)
    keys = _lines(summary, list(labels))
    seeds = {k: list(summary[(summary["encoding"] == k[0]) & (summary["method"] == k[1])]["n_seeds"]) for k in keys}
    both = {e for e, m in keys if m == "dense"}
    texts = [label_of(e, m, labels, seeds[(e, m)], e in both and m in ("none", "dense")) for e, m in keys]
    styles = looks([(families.get(e, e), e, m) for e, m in keys], size=4.5)
    variants = list(dict.fromkeys(e for e, _m in keys if families.get(e, e) != e))
    for (e, _m), look in zip(keys, styles):
        if e in variants:  # shades of one colour are close: a variant also has a dash pattern of its own
            look["linestyle"] = SPARE_STYLES[variants.index(e) % len(SPARE_STYLES)]
    factors = sorted(summary["factor"].unique())
    cols = min(3, max(1, len(tasks)))
    rows = math.ceil(len(tasks) / cols)
    fig = Figure(figsize=(3.8 * cols + 0.4, 3.2 * rows + 0.8 + legend_inches(texts, 3)), layout="constrained")
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    for ax, task in zip(axes, tasks):
        _panel(ax, summary[summary["task"] == task], list(zip(keys, texts, styles)), factors)
        if chance is not None:
            _chance(ax, chance[chance["task"] == task].dropna().sort_values("factor"))
        ax.set_title(wrap(_title(task, tasks), 40), fontsize=9)
    for ax in axes[len(tasks) :]:
        ax.set_visible(False)
    handles, names = axes[0].get_legend_handles_labels()
    legend(fig, handles, names, loc="outside lower center", ncol=min(3, len(names)), fontsize=8, frameon=False)
    said = [
        "Exact answers vs evaluation length, one line per encoding and method, mean over seeds",
        "bars ± std over seeds (none for one seed)",
        "each run trained on its panel's task alone",
        "grey dotted: chance (posx.tasks.chance)" if chance is not None else "",
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


def _chance(ax, levels: pd.DataFrame) -> None:
    """The chance level against length: a grey dotted line, named in the legend once."""
    if levels.empty:
        return
    ax.plot(levels["factor"], levels["chance"], color="0.5", linestyle=":", linewidth=1.2, label="chance")
