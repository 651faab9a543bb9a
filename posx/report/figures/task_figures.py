"""The task suite in a report: ``tasks_summary.csv`` (per group x encoding x method x task x factor:
each run's accuracy over all depths, mean and std over seeds, for one seed its 95% Wilson
interval), ``tasks_vs_length.png`` (a file per facet, a panel per task, a line per group x encoding
x method, bars ± std over seeds) and ``niah_heatmap.png`` (needle depth x length, a panel per group,
``HEATMAP_PANELS`` to a file: the heatmaps of RULER and of needle-in-a-haystack tests, Hsieh et al.
2024). No figure pools groups. See docs/evaluation.md.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from posx.report.figures.axes import factor_axis, legend_entries
from posx.report.figures.facets import Facets, band_name, chunks, file_names, line_labels, one_band, sorted_lines
from posx.report.figures.looks import looks
from posx.report.figures.output import FORMATS, save
from posx.report.figures.palette import dodge, dodge_note, legend, legend_inches, wrap
from posx.schema.config import Task
from posx.tasks.interval import wilson

TASK_GROUP = ["group", "encoding", "method", "task", "factor"]
TASK_ORDER = Task.values()  # panels in the schema's order of the tasks, whatever the rows' order


def _task_rank(task: str) -> int:
    return TASK_ORDER.index(task) if task in TASK_ORDER else len(TASK_ORDER)


def summarize_tasks(tasks: pd.DataFrame) -> pd.DataFrame:
    """Accuracy over all depths per run, then mean and std over runs (see the module docstring)."""
    if tasks.empty:
        return pd.DataFrame()
    ok = tasks[tasks["status"] == "ok"].assign(
        hits=lambda d: d["accuracy"] * d["trials"], nll_sum=lambda d: d["answer_nll"] * d["trials"]
    )
    per_run = (
        ok.groupby([*TASK_GROUP, "run_dir"])
        .agg(hits=("hits", "sum"), trials=("trials", "sum"), nll_sum=("nll_sum", "sum"), chance=("chance", "mean"))
        .reset_index()
    )
    per_run["accuracy"] = per_run["hits"] / per_run["trials"]
    per_run["answer_nll"] = per_run["nll_sum"] / per_run["trials"]
    out = per_run.groupby(TASK_GROUP).agg(
        accuracy_mean=("accuracy", "mean"), accuracy_std=("accuracy", "std"), answer_nll_mean=("answer_nll", "mean"),
        answer_nll_std=("answer_nll", "std"), hits=("hits", "sum"), trials=("trials", "sum"),
        n_seeds=("accuracy", "size"), chance=("chance", "mean"),  # chance: NaN in tables from before it was kept
    )  # fmt: skip
    out = out.reset_index()
    bounds = [wilson(h, int(n)) if s == 1 else (math.nan, math.nan) for h, n, s in
              zip(out["hits"], out["trials"], out["n_seeds"])]  # fmt: skip
    out["accuracy_lo"] = [lo if not math.isnan(lo) else m - sd for (lo, _), m, sd in
                          zip(bounds, out["accuracy_mean"], out["accuracy_std"])]  # fmt: skip
    out["accuracy_hi"] = [hi if not math.isnan(hi) else m + sd for (_, hi), m, sd in
                          zip(bounds, out["accuracy_mean"], out["accuracy_std"])]  # fmt: skip
    out["band"] = np.where(out["n_seeds"] == 1, "wilson 95% (one seed)", "± std over seeds")
    return out


def plot_task_curves(summary: pd.DataFrame, out_dir: Path, facets: Facets, formats=FORMATS) -> dict[str, Path]:
    """``tasks_vs_length.png`` (one file per facet): per task, accuracy (top) and answer NLL (below)."""
    if summary.empty:
        return {}
    split = facets.split(summary.assign(parent=""))
    return {
        name: save(_curves_figure(data, facets, facet), out_dir / name, formats)
        for name, (facet, data) in zip(file_names("tasks_vs_length.png", len(split)), split)
    }


def _curves_figure(data: pd.DataFrame, facets: Facets, facet: str) -> Figure:
    tasks = sorted(dict.fromkeys(data["task"]), key=_task_rank)
    keys = sorted_lines(data)
    cells = _by_line(data)  # (group, "", encoding, method, task) -> its rows by factor: the rows split once
    seeds: dict[tuple, list[int]] = {}
    for (*line, _), g in cells.items():
        seeds.setdefault(tuple(line), []).extend(g["n_seeds"].astype(int))
    bands = [band_name(seeds[k], WILSON) for k in keys]
    shared = one_band(bands)
    labels = [label if shared else f"{label} (bars {band})" for label, band in zip(line_labels(facets, keys), bands)]
    styles = looks([(k[2], k[:3], k[3]) for k in keys], size=4.5)
    cols = min(4, len(tasks))
    rows = math.ceil(len(tasks) / cols)
    below = legend_inches([*labels, facets.usual(keys)], columns=min(3, len(labels)))  # the legend under the panels
    fig = Figure(figsize=(3.6 * cols + 0.4, 5.2 * rows + 1.0 + below), layout="constrained")
    axes = fig.subplots(2 * rows, cols, squeeze=False)
    factors = sorted(data["factor"].unique())
    for k, task in enumerate(tasks):
        top, below = axes[2 * (k // cols)][k % cols], axes[2 * (k // cols) + 1][k % cols]
        for i, (key, label, look) in enumerate(zip(keys, labels, styles)):
            g = cells.get((*key, task), data.iloc[:0])
            x = dodge(g["factor"], i, len(keys), factors)
            sd = g["answer_nll_std"].fillna(0)
            _points(top, x, g["accuracy_mean"], g["accuracy_lo"], g["accuracy_hi"], label, look)
            _points(below, x, g["answer_nll_mean"], g["answer_nll_mean"] - sd, g["answer_nll_mean"] + sd, label, look)
        _chance(top, data[data["task"] == task])
        top.set_ylim(-0.04, 1.04)
        top.set_title(task, fontsize=10)
        top.set_ylabel("exact-answer accuracy", fontsize=8)
        below.set_ylabel("answer NLL (nats/token)", fontsize=8)
        below.set_xlabel("evaluation length (x T, log scale)", fontsize=8)
        for ax in (top, below):
            factor_axis(ax, factors)
            ax.tick_params(labelsize=8)
    for k in range(len(tasks), rows * cols):  # empty cells of the last row
        axes[2 * (k // cols)][k % cols].set_visible(False)
        axes[2 * (k // cols) + 1][k % cols].set_visible(False)
    drawn = legend_entries(fig.axes)  # every panel's: a group may have rows for some tasks only
    texts = [label for label in [*labels, CHANCE] if label in drawn]
    legend(fig, [drawn[t] for t in texts], texts, facets.usual(keys), loc="outside lower center",
           ncol=min(3, len(texts)), fontsize=8, frameon=False)  # fmt: skip
    fig.suptitle(wrap(_curves_title(shared, facet, len(keys), factors), 110), fontsize=9)
    return fig


WILSON = "95% Wilson interval (one seed)"


def _by_line(data: pd.DataFrame) -> dict[tuple, pd.DataFrame]:
    """(group, "", encoding, method, task) -> its rows by factor, from one pass over ``data``."""
    keys = [data["group"].astype(str), data["encoding"].astype(str), data["method"].astype(str), data["task"]]
    return {(g, "", e, m, t): rows.sort_values("factor") for (g, e, m, t), rows in data.groupby(keys, sort=False)}


def _curves_title(shared: str, facet: str, lines: int, factors: list) -> str:
    """The title of ``tasks_vs_length``: facet, seeds, bars (``shared``: every line's, or ""), offsets."""
    bars = f"bars: accuracy {shared or 'as each entry says'}, NLL ± std over seeds (none for one seed)"
    said = [facet or "all groups", "one line per group, mean over its seeds", bars, dodge_note(lines, factors)]
    return "Tasks vs evaluation length: " + "; ".join(part for part in said if part)


def _chance(ax, rows: pd.DataFrame) -> None:
    """The task's chance level against length: a grey dotted line per distinct one among the lines."""
    known = rows.dropna(subset=["chance"]).sort_values("factor")
    lines = {tuple(zip(g["factor"], g["chance"])) for _, g in known.groupby(["group", "encoding", "method"])}
    for line in sorted(lines):
        ax.plot(*zip(*line), color="grey", linestyle=":", linewidth=1.2, label=CHANCE)


CHANCE = "chance level"  # one planted candidate picked at random per question (posx.tasks.chance)


def _points(ax, x, y, lo, hi, label: str, look: dict) -> None:
    """One line with a vertical bar lo-hi at each point, in the line's look."""
    if len(x) == 0:
        return
    ax.plot(x, y, linewidth=1.2, label=label, **look)
    ax.vlines(x, lo, hi, color=look["color"], linewidth=0.8, alpha=0.5)


HEATMAP_PANELS = 9  # panels in one heatmap file; more go on in further files


def plot_niah_heatmaps(tasks: pd.DataFrame, out_dir: Path, facets: Facets, formats=FORMATS) -> dict[str, Path]:
    """``niah_heatmap.png`` (module docstring): a panel per group x encoding x method, by facet."""
    present = set(tasks["task"]) if not tasks.empty else set()
    task = next((t for t in ("niah", "passkey") if t in present), None)  # niah, else passkey, else none
    if task is None:
        return {}
    rows = tasks[(tasks["task"] == task) & (tasks["status"] == "ok")]
    cells = rows.groupby(["group", "encoding", "method", "depth_lo", "factor"])["accuracy"].mean().reset_index()
    if cells.empty:
        return {}
    panels = []
    for facet, mine in facets.split(cells.assign(parent="")):
        keys = sorted_lines(mine)
        usual = facets.usual(keys)  # what a panel's label leaves unsaid, said on each
        for key, label in zip(keys, line_labels(facets, keys)):
            at = (mine["group"].astype(str) == key[0]) & (mine["encoding"] == key[2]) & (mine["method"] == key[3])
            panels.append((" · ".join(p for p in (facet, label, usual) if p), mine[at]))
    files = chunks(panels, HEATMAP_PANELS)
    shape = (sorted(cells["factor"].unique()), sorted(cells["depth_lo"].unique()))
    return {
        name: save(_heatmap_figure(mine, task, *shape), out_dir / name, formats)
        for name, mine in zip(file_names("niah_heatmap.png", len(files)), files)
    }


def _heatmap_figure(panels: list, task: str, factors: list, depths: list) -> Figure:
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(3.6 * cols + 1.2, 3.1 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    image = None
    for ax, (title, cells) in zip(axes.flat, panels):
        grid = cells.pivot(index="depth_lo", columns="factor", values="accuracy").reindex(index=depths, columns=factors)
        image = ax.imshow(grid.to_numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="upper")
        for (r, c), v in np.ndenumerate(grid.to_numpy()):
            text = "–" if np.isnan(v) else f"{v:.0%}"
            ax.text(c, r, text, ha="center", va="center", fontsize=7, color="white" if v != v or v < 0.6 else "black")
        ax.set_xticks(range(len(factors)), [f"{f:g}x" for f in factors], fontsize=8)
        step = 1 / len(depths)
        ax.set_yticks(range(len(depths)), [f"{d:.0%}–{d + step:.0%}" for d in depths], fontsize=8)
        ax.set_title(wrap(title, 40), fontsize=8)  # a panel's width
        ax.set_xlabel("evaluation length (x T)", fontsize=8)
        ax.set_ylabel("needle depth (share of the text before it)", fontsize=8)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    fig.colorbar(image, ax=axes, shrink=0.8, label="exact-answer accuracy (mean over the group's seeds)")
    fig.suptitle(f"{task}: accuracy by needle depth and evaluation length, one panel per group (– : not scored)",
                 fontsize=10)  # fmt: skip
    return fig


def figures(tasks: pd.DataFrame, out_dir: Path, facets: Facets, formats=FORMATS) -> dict[str, Path | None]:
    """The two figures from the runs' tasks.csv rows (a figure with no rows maps to None)."""
    curves = plot_task_curves(summarize_tasks(tasks), out_dir, facets, formats)
    heatmaps = plot_niah_heatmaps(tasks, out_dir, facets, formats) if not tasks.empty else {}
    return {**(curves or {"tasks_vs_length.png": None}), **(heatmaps or {"niah_heatmap.png": None})}


def draw(tasks: pd.DataFrame, out_dir: Path, facets: Facets, formats=FORMATS) -> dict[str, Path | None]:
    """tasks_summary.csv and the two figures, when the runs have tasks.csv rows."""
    summary = summarize_tasks(tasks)
    if not summary.empty:
        summary.to_csv(out_dir / "tasks_summary.csv", index=False)
    return figures(tasks, out_dir, facets, formats)


def tokenizer_note(identities: list[dict]) -> str | None:
    """A line when the runs' tokenizers differ: per-token perplexities do not compare, bits per byte do."""
    kinds = sorted({i.get("data.tokenizer", "byte") for i in identities})
    sizes = sorted({i.get("data.vocab_size", "") for i in identities if i.get("data.tokenizer") == "bpe"})
    if len(kinds) < 2 and len(sizes) < 2:
        return None
    return (
        f"the runs use different tokenizers ({', '.join(kinds)}"
        + (f"; bpe vocabularies {', '.join(sizes)}" if len(sizes) > 1 else "")
        + "): compare them in bits per byte (bpb_mean in summary.csv), not in perplexity per token"
    )
