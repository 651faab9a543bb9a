"""The figures of ``posx report`` (matplotlib figures drawn straight to files: no pyplot, no
display), and two of them: ``passkey.png`` (accuracy and key NLL by evaluation length, a column per
variant, a file per facet) and ``training.png`` (training and validation loss by step, a row per
facet, a line per group). The others: ``ppl_figures``, ``position_figures``, ``task_figures``,
``extension``; ``drawing`` draws them. No figure pools groups (``facets``). See docs/evaluation.md.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from posx.report.figures import output
from posx.report.figures.axes import factor_axis
from posx.report.figures.facets import (
    Facets,
    band_name,
    chunks,
    file_names,
    legend_texts,
    line_labels,
    pack,
    panel_title,
    rows_of,
    sorted_lines,
    split_rows,
)
from posx.report.figures.looks import looks
from posx.report.figures.output import FORMATS
from posx.report.figures.palette import dodge, dodge_note, legend, legend_inches

PASSKEY_LINE = ["group", "parent", "encoding", "method"]


def plot_passkey(pk: pd.DataFrame, out_dir: Path, facets: Facets, formats=FORMATS) -> dict[str, Path]:
    """``passkey.png`` per facet: accuracy over key NLL (chance ln 10); NLL alone when nothing is found."""
    data = pk[pk["n_seeds"] > 0] if not pk.empty else pk
    if data.empty:
        return {}
    data = data.assign(parent="") if "parent" not in data else data
    split = facets.split(data)
    factors = sorted(pk["factor"].unique())
    return {
        name: output.save(_passkey_figure(mine, facets, facet, factors), out_dir / name, formats)
        for name, (facet, mine) in zip(file_names("passkey.png", len(split)), split)
    }


def _passkey_figure(data: pd.DataFrame, facets: Facets, facet: str, factors: list) -> Figure:
    variants = list(dict.fromkeys(data["variant"]))
    none_found = bool((data["accuracy_mean"].fillna(0) == 0).all())
    keys = sorted_lines(data)
    below = legend_inches(legend_texts(facets, keys), columns=2)  # the legend under the panels
    usual = facets.usual(keys)
    fig = Figure(figsize=(6.0 * len(variants), (4.6 if none_found else 8.4) + below), layout="constrained")
    axes = fig.subplots(1 if none_found else 2, len(variants), squeeze=False)
    rows = [None, axes[0]] if none_found else [axes[0], axes[1]]
    most, bands = 0, set()
    for col, variant in enumerate(variants):
        mine = data[data["variant"] == variant]
        keys = sorted_lines(mine)
        most = max(most, len(keys))
        styles = looks([(k[2], k[:3], k[3]) for k in keys])
        for n, (key, label, look) in enumerate(zip(keys, line_labels(facets, keys), styles)):
            g = rows_of(mine, PASSKEY_LINE, key).sort_values("factor")
            bands.add(band_name(list(g["n_seeds"].astype(int)), "no bar (one seed)"))
            x = dodge(g["factor"], n, len(keys), factors)
            if rows[0] is not None:
                spread = g["accuracy_std"].fillna(0)
                rows[0][col].errorbar(x, g["accuracy_mean"], yerr=spread, capsize=3, label=label, **look)
            rows[1][col].plot(x, g["key_nll_mean"], label=label, **look)
        _passkey_axes(rows[0][col] if rows[0] is not None else None, rows[1][col], variant, factors)
    handles, labels = rows[1][0].get_legend_handles_labels()
    legend(fig, handles, labels, usual, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    nothing = "; exact match 0 everywhere, so only the key NLL is shown" if none_found else ""
    bars = "" if none_found else f" (accuracy bars: {', '.join(sorted(bands))})"
    dodged = f"\n{dodge_note(most, factors)}" if most > 1 else ""
    where = facet or "all groups"
    fig.suptitle(f"Passkey retrieval by evaluation length, {where}{bars}{nothing}{dodged}", fontsize=10)
    return fig


def _passkey_axes(top, bottom, variant: str, factors: list) -> None:
    for ax in (top, bottom):
        if ax is not None:
            factor_axis(ax, factors)
            ax.set_xlabel("evaluation length (multiples of T)")
    bottom.axhline(math.log(10), color="black", linestyle=":", linewidth=1, label="chance over digits (ln 10)")
    bottom.set_title(f"passkey, {variant} variant: key NLL")
    bottom.set_ylabel("mean NLL of the key digits (nats)")
    if top is not None:
        top.set_ylim(-0.05, 1.05)
        top.set_title(f"passkey, {variant} variant: exact match")
        top.set_ylabel("exact-match accuracy")


TRAINING_LINE = ["group", "parent", "encoding"]


def plot_training(training: pd.DataFrame, out_dir: Path, facets: Facets, formats=FORMATS) -> dict[str, Path]:
    """``training.png``: per facet a row (training loss | validation loss), one line per group."""
    if training.empty:
        return {}
    rows = chunks(_training_rows(training.assign(parent=training["parent"].fillna("")), facets), 3)
    drawn = {}
    for name, mine in zip(file_names("training.png", len(rows)), rows):
        heights = [max(4.4, legend_inches(legend_texts(named, _training_keys(data))) + 1.0) for _, data, named in mine]
        fig = Figure(figsize=(13, sum(heights)), layout="constrained")
        axes = fig.subplots(len(mine), 2, squeeze=False, height_ratios=heights)
        for (title, data, named), pair in zip(mine, axes):
            _training_row(pair, data, named, title)
        fig.suptitle("Training curves (metrics.csv): one line per group, mean over its runs, band ± std over them")
        drawn[name] = output.save(fig, out_dir / name, formats)
    return drawn


def _training_rows(training: pd.DataFrame, facets: Facets) -> list[tuple[str, pd.DataFrame, Facets]]:
    """(title, rows, the facets naming its lines) per facet x piece of at most MAX_LINES groups."""
    out = []
    for facet, data in facets.split(training):
        keys = _training_keys(data)
        pieces = pack(keys)
        split = split_rows(data, TRAINING_LINE)
        for i, piece in enumerate(pieces):
            mine = pd.concat([split[k[:3]] for k in piece])
            out.append((panel_title(facet, i, len(pieces)), mine, facets.among(keys)))
    return out


def _training_keys(data: pd.DataFrame) -> list[tuple]:
    """The lines of one row of training.png (one per group), keyed as a method-less line."""
    return [(*k, "none") for k in dict.fromkeys(data[TRAINING_LINE].astype(str).itertuples(index=False, name=None))]


def _training_row(pair, data: pd.DataFrame, facets: Facets, title: str) -> None:
    lines = _training_keys(data)
    keys, labels = [k[:3] for k in lines], [label.replace(" · none", "", 1) for label in line_labels(facets, lines)]
    for key, label, look in zip(keys, labels, looks([(k[2], k, "none") for k in keys])):
        g = rows_of(data, TRAINING_LINE, key).sort_values("step")
        for ax, what in ((pair[0], "train"), (pair[1], "val")):
            part = g.dropna(subset=[f"{what}_loss"])
            marker = "." if what == "val" else None  # validation: a few points, each shown
            ax.plot(part["step"], part[f"{what}_loss"], color=look["color"], marker=marker, linewidth=1.2, label=label)
            spread = part[f"{what}_std"]
            if spread.notna().any():
                ax.fill_between(part["step"], part[f"{what}_loss"] - spread, part[f"{what}_loss"] + spread,
                                color=look["color"], alpha=0.15)  # fmt: skip
    for ax, what in zip(pair, ("training loss", "validation loss")):
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(f"{what} (nats per token)")
        ax.set_title(f"{title}: {what}", fontsize=10)
        ax.grid(True, alpha=0.3)
    handles, labels = pair[1].get_legend_handles_labels()
    legend(pair[1], handles, labels, facets.usual(keys), loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
