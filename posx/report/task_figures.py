"""The task suite in a report: its summary table and two figures.

* ``tasks_summary.csv``: per group x encoding x method x task x factor, each run's exact-answer
  accuracy over all depths, then the mean and sample std over seeds (``n_seeds``), and for one
  seed the 95% Wilson interval of its accuracy (``posx.tasks.scoring``).
* ``tasks_vs_length.png`` (and .pdf): accuracy by evaluation length, one panel per task, one
  line per encoding x method in the colours and hollow markers of ``posx.report.palette``, a
  band of ± std over seeds (one seed: the Wilson interval). Lines that would coincide (a model
  that never answers scores 0 everywhere) are offset sideways by a few percent of a factor each
  (``palette.dodge``), so every line stays visible; the caption says so.
* ``niah_heatmap.png`` (and .pdf): needle depth x evaluation length, the accuracy (mean over
  seeds) in each cell, one panel per encoding x method, for ``niah`` (``passkey`` when the
  runs have no ``niah`` rows): where in the context, and from which length on, retrieval fails
  (the heatmaps of RULER and of the needle-in-a-haystack tests, Hsieh et al. 2024).

Past ``posx.report.crowd``'s limits (more lines on an axes than a reader can tell apart, more
panels than one figure holds legibly) both figures pool the groups, as the other figures do:
per encoding x method the median over the groups' means (a band from the lowest to the highest
group mean in ``tasks_vs_length``), said in the title and in summary.md; tasks_summary.csv
keeps every group.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from posx.report.axes import STYLES, factor_axis, legend_order
from posx.report.crowd import MAX_LINES, MAX_PANELS, TITLE, crowded, note, pool
from posx.report.output import FORMATS, save
from posx.report.palette import color_of, dodge, dodge_note, fit, hollow, legend
from posx.schema import Task
from posx.tasks.interval import wilson

TASK_GROUP = ["group", "encoding", "method", "task", "factor"]
LINE = ["group", "encoding", "method"]  # a line of tasks_vs_length, a panel of niah_heatmap
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
        .agg(hits=("hits", "sum"), trials=("trials", "sum"), nll_sum=("nll_sum", "sum"))
        .reset_index()
    )
    per_run["accuracy"] = per_run["hits"] / per_run["trials"]
    per_run["answer_nll"] = per_run["nll_sum"] / per_run["trials"]
    out = per_run.groupby(TASK_GROUP).agg(
        accuracy_mean=("accuracy", "mean"),
        accuracy_std=("accuracy", "std"),
        answer_nll_mean=("answer_nll", "mean"),
        answer_nll_std=("answer_nll", "std"),
        hits=("hits", "sum"),
        trials=("trials", "sum"),
        n_seeds=("accuracy", "size"),
    )
    out = out.reset_index()
    bounds = [wilson(h, int(n)) if s == 1 else (math.nan, math.nan) for h, n, s in
              zip(out["hits"], out["trials"], out["n_seeds"])]  # fmt: skip
    out["accuracy_lo"] = [lo if not math.isnan(lo) else m - sd for (lo, _), m, sd in
                          zip(bounds, out["accuracy_mean"], out["accuracy_std"])]  # fmt: skip
    out["accuracy_hi"] = [hi if not math.isnan(hi) else m + sd for (_, hi), m, sd in
                          zip(bounds, out["accuracy_mean"], out["accuracy_std"])]  # fmt: skip
    out["band"] = np.where(out["n_seeds"] == 1, "wilson 95% (one seed)", "± std over seeds")
    return out


def _line(row) -> str:
    name = f"{row.encoding} · {row.method}"
    return name if row.group in ("", "-") else f"{name} ({row.group})"


def _curves(summary: pd.DataFrame, notes: list[str], name: str) -> tuple[pd.DataFrame, bool]:
    """The lines of ``tasks_vs_length``, with ``nll_lo``/``nll_hi`` bounds; past MAX_LINES lines
    the groups pooled (the median of the group means, bounds the lowest and highest), and whether."""
    sd = summary["answer_nll_std"].fillna(0)
    data = summary.assign(nll_lo=summary["answer_nll_mean"] - sd, nll_hi=summary["answer_nll_mean"] + sd)
    if not crowded(data, LINE):
        return data, False
    notes.append(note(name, data, "lines", MAX_LINES).replace("summary.csv", "tasks_summary.csv"))
    keys, point = [*LINE, "task"], ["encoding", "method", "task", "factor"]
    accuracy = pool(data, keys, "factor", "accuracy_mean", "accuracy_lo", "accuracy_hi")
    nll = pool(data, keys, "factor", "answer_nll_mean", "nll_lo", "nll_hi")
    pooled = accuracy.merge(nll[[*point, "answer_nll_mean", "nll_lo", "nll_hi"]], on=point)
    return pooled.assign(n_seeds=int(data["n_seeds"].max()), band="lowest..highest group mean"), True


def plot_task_curves(
    summary: pd.DataFrame, path: Path, notes: list[str], formats: tuple[str, ...] = FORMATS
) -> Path | None:
    """``tasks_vs_length.png``: per task, accuracy (top) and answer NLL (below) by length."""
    if summary.empty:
        return None
    data, pooled = _curves(summary, notes, path.name)
    data = data.assign(line=[_line(r) for r in data.itertuples()])
    tasks = sorted(dict.fromkeys(data["task"]), key=_task_rank)
    lines = sorted(dict.fromkeys(data["line"]), key=lambda n: (n.split(" · ")[0], legend_order(n.split(" · ")[1])))
    groups = list(dict.fromkeys(data["group"]))
    cols = min(4, len(tasks))
    rows = math.ceil(len(tasks) / cols)
    fig = Figure(figsize=(3.6 * cols + 0.4, 5.2 * rows + 0.9), layout="constrained")
    axes = fig.subplots(2 * rows, cols, squeeze=False)
    factors = sorted(data["factor"].unique())
    for k, task in enumerate(tasks):
        top, below = axes[2 * (k // cols)][k % cols], axes[2 * (k // cols) + 1][k % cols]
        mine = data[data["task"] == task]
        for i, line in enumerate(lines):
            g = mine[mine["line"] == line].sort_values("factor")
            x = dodge(g["factor"], i, len(lines))  # side by side, not on top
            style = STYLES[groups.index(g["group"].iloc[0]) % len(STYLES)] if len(g) else "-"
            _points(top, x, g["accuracy_mean"], g["accuracy_lo"], g["accuracy_hi"], line, style)
            _points(below, x, g["answer_nll_mean"], g["nll_lo"], g["nll_hi"], line, style)
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
    handles, labels = axes[0][0].get_legend_handles_labels()
    legend(fig, handles, labels, loc="outside lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    fig.suptitle(_curves_title(data, pooled, len(lines), len(groups)), fontsize=9)
    return save(fig, path, formats)


def _curves_title(data: pd.DataFrame, pooled: bool, lines: int, groups: int) -> str:
    """What ``tasks_vs_length`` draws: seeds, bars, sideways offsets, and line styles only when
    they tell more than one group apart."""
    bars = TITLE if pooled else f"bars: accuracy {data['band'].iloc[0]}, NLL ± std over seeds"
    styles = "line style: group" if groups > 1 else ""
    said = [f"mean over {int(data['n_seeds'].max())} seed(s)", bars, dodge_note(lines), styles]
    return "Tasks vs evaluation length: " + "; ".join(part for part in said if part)


def _points(ax, x, y, lo, hi, line: str, style: str) -> None:
    """One line with a vertical bar lo-hi at each point, in the line's colour and hollow marker."""
    if len(x) == 0:
        return
    look = hollow(line, size=4.5)
    ax.plot(x, y, linewidth=1.2, linestyle=style, label=line, **look)
    ax.vlines(x, lo, hi, color=look["color"], linewidth=0.8, alpha=0.5)


def heatmap_task(tasks: pd.DataFrame) -> str | None:
    """The task the heatmap shows: niah, else passkey, else none."""
    present = set(tasks["task"]) if not tasks.empty else set()
    return next((t for t in ("niah", "passkey") if t in present), None)


def _heatmap_cells(data: pd.DataFrame, notes: list[str], name: str) -> tuple[pd.DataFrame, bool]:
    """Accuracy per panel (``line``), depth and factor: the mean over each group's seeds; past
    MAX_PANELS panels, per encoding x method the median of the group means. And whether pooled."""
    cells = data.groupby([*LINE, "depth_lo", "factor"])["accuracy"].mean().reset_index()
    pooled = crowded(cells, LINE, MAX_PANELS)
    if pooled:
        said = note(name, cells, "panels", MAX_PANELS)
        said = said.replace(", band from the lowest to the highest group mean", "").replace("per line", "per panel")
        notes.append(said.replace("summary.csv", "tasks_summary.csv"))
        cells = pool(cells, [*LINE, "depth_lo"], "factor", "accuracy", "lowest", "highest")
    return cells.assign(line=[_line(r) for r in cells.itertuples()]), pooled


def plot_niah_heatmaps(
    tasks: pd.DataFrame, path: Path, notes: list[str], formats: tuple[str, ...] = FORMATS
) -> Path | None:
    """``niah_heatmap.png``: depth x length accuracy per encoding x method (module docstring)."""
    task = heatmap_task(tasks)
    if task is None:
        return None
    cells, pooled = _heatmap_cells(tasks[(tasks["task"] == task) & (tasks["status"] == "ok")], notes, path.name)
    lines = sorted(dict.fromkeys(cells["line"]), key=lambda n: (n.split(" · ")[0], legend_order(n.split(" · ")[1])))
    if not lines:
        return None
    factors, depths = sorted(cells["factor"].unique()), sorted(cells["depth_lo"].unique())
    cols = min(3, len(lines))
    rows = math.ceil(len(lines) / cols)
    fig = Figure(figsize=(3.4 * cols + 1.2, 2.9 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    image = None
    for ax, line in zip(axes.flat, lines):
        grid = cells[cells["line"] == line].pivot(index="depth_lo", columns="factor", values="accuracy")
        grid = grid.reindex(index=depths, columns=factors)
        image = ax.imshow(grid.to_numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="upper")
        for (r, c), v in np.ndenumerate(grid.to_numpy()):
            text = "–" if np.isnan(v) else f"{v:.0%}"
            ax.text(c, r, text, ha="center", va="center", fontsize=7, color="white" if v != v or v < 0.6 else "black")
        ax.set_xticks(range(len(factors)), [f"{f:g}x" for f in factors], fontsize=8)
        step = 1 / len(depths)
        ax.set_yticks(range(len(depths)), [f"{d:.0%}–{d + step:.0%}" for d in depths], fontsize=8)
        ax.set_title("\n".join(textwrap.wrap(fit(line), 40)), fontsize=9, color=color_of(line))  # a panel's width
        ax.set_xlabel("evaluation length (x T)", fontsize=8)
        ax.set_ylabel("needle depth (share of the text before it)", fontsize=8)
    for ax in axes.flat[len(lines) :]:
        ax.set_visible(False)
    over = "median over groups" if pooled else "mean over seeds"
    fig.colorbar(image, ax=axes, shrink=0.8, label=f"exact-answer accuracy ({over})")
    pooling = f"; {cells['group'].iloc[0]}: the median of their means over seeds" if pooled else ""
    fig.suptitle(f"{task}: accuracy by needle depth and evaluation length (– : not scored){pooling}", fontsize=10)
    return save(fig, path, formats)


def draw(
    tasks: pd.DataFrame, out_dir: Path, notes: list[str], formats: tuple[str, ...] = FORMATS
) -> dict[str, Path | None]:
    """tasks_summary.csv and the two figures, when the runs have tasks.csv rows; ``notes`` gets a
    line for each figure that pooled groups."""
    summary = summarize_tasks(tasks)
    if not summary.empty:
        summary.to_csv(out_dir / "tasks_summary.csv", index=False)
    curves = plot_task_curves(summary, out_dir / "tasks_vs_length.png", notes, formats)
    heatmap = plot_niah_heatmaps(tasks, out_dir / "niah_heatmap.png", notes, formats) if not tasks.empty else None
    return {"tasks_vs_length.png": curves, "niah_heatmap.png": heatmap}


def tokenizer_note(identities: list[dict]) -> str | None:
    """A line for the report when its runs use different tokenizers: per-token perplexities do not
    compare across them, bits per byte do (``posx.eval.bytecount``)."""
    kinds = sorted({i.get("data.tokenizer", "byte") for i in identities})
    sizes = sorted({i.get("data.vocab_size", "") for i in identities if i.get("data.tokenizer") == "bpe"})
    if len(kinds) < 2 and len(sizes) < 2:
        return None
    return (
        f"the runs use different tokenizers ({', '.join(kinds)}"
        + (f"; bpe vocabularies {', '.join(sizes)}" if len(sizes) > 1 else "")
        + "): compare them in bits per byte (bpb_mean in summary.csv), not in perplexity per token"
    )
