"""Learning curves: exact answers at T on the held-out task set against training tokens.

Every run trained with a task mix keeps ``task_curve.csv`` (``posx.train.taskcurve``): at each
validation, per task, the share of exact answers on a fixed held-out set at the training
length. The report gathers them (``task_learning.csv``: per group, encoding, task and tokens,
the mean over the group's runs, the lowest and highest run, and how many runs) and draws
``task_learning.png``: one panel per task, one line per group and encoding, a band from the
lowest run to the highest. So a task no run has learned yet (every curve low at 1x) reads
apart from one learned at T that fails past it (the curve high here, the cells of
``tasks_vs_length.png`` low at 2x-8x).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from posx.report.axes import figure_legend
from posx.report.output import FORMATS, save
from posx.runs.paths import TASK_CURVE

KEYS = ["group", "encoding", "task", "tokens"]


def gather(runs) -> pd.DataFrame:
    """Per group x encoding x task x tokens: accuracy mean, lowest, highest and runs, over the
    ``runs`` (``posx.report.runtables.RunTables``) that have a task_curve.csv; empty without."""
    frames = []
    for run in runs:
        path = Path(run.path) / TASK_CURVE
        if not path.is_file():
            continue
        curve = pd.read_csv(path, usecols=["tokens", "task", "accuracy"])
        encoding = run.member.identity.get("pos.name", "") if run.member is not None else ""
        frames.append(curve.assign(group=run.group or "-", encoding=encoding))
    if not frames:
        return pd.DataFrame(columns=[*KEYS, "accuracy_mean", "accuracy_min", "accuracy_max", "runs"])
    data = pd.concat(frames, ignore_index=True)
    out = data.groupby(KEYS, sort=True)["accuracy"].agg(["mean", "min", "max", "count"]).reset_index()
    return out.rename(columns={"mean": "accuracy_mean", "min": "accuracy_min", "max": "accuracy_max", "count": "runs"})


def plot(curves: pd.DataFrame, path: Path, formats: tuple[str, ...] = FORMATS) -> Path | None:
    """``task_learning.png`` from ``gather``'s table; None when it is empty."""
    if curves.empty:
        return None
    tasks = list(dict.fromkeys(curves["task"]))
    data = curves.assign(line=[e if g == "-" else f"{e} · {g}" for e, g in zip(curves["encoding"], curves["group"])])
    colors = {line: f"C{i % 10}" for i, line in enumerate(dict.fromkeys(data["line"]))}  # one colour per line
    fig = Figure(figsize=(4.2 * len(tasks), 3.8))
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    for ax, task in zip(axes, tasks):
        for line, g in data[data["task"] == task].groupby("line", sort=False):
            g = g.sort_values("tokens")
            ax.plot(g["tokens"], g["accuracy_mean"], color=colors[line], marker=".", linewidth=1.2, label=line)
            ax.fill_between(g["tokens"], g["accuracy_min"], g["accuracy_max"], color=colors[line], alpha=0.15)
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(task)
        ax.set_xlabel("training tokens")
        ax.set_ylabel("exact answers at T (held-out set)")
        ax.grid(True, alpha=0.3)
    figure_legend(fig, axes)
    fig.suptitle("Learning curves (task_curve.csv): mean over a group's runs, band from its lowest run to its highest")
    fig.tight_layout()
    return save(fig, path, formats)


def draw(runs, out_dir: Path, formats: tuple[str, ...] = FORMATS) -> dict[str, Path | None]:
    """task_learning.csv and task_learning.png when some run has a task_curve.csv."""
    curves = gather(runs)
    if not curves.empty:
        curves.to_csv(out_dir / "task_learning.csv", index=False)
    return {"task_learning.png": plot(curves, out_dir / "task_learning.png", formats)}
