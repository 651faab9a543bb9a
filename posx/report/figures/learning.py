"""Learning curves: exact answers at T on the held-out task set against training tokens, from the
runs' ``task_curve.csv`` (``posx.train.taskcurve``): ``task_learning.csv`` (per group, encoding,
task and tokens: mean, lowest and highest run, runs, chance level) and ``task_learning.png`` (a
panel per task, a line per group, band lowest to highest run, chance dotted). It tells a task not
learned yet from one learned at T that fails past it (``tasks_vs_length.png`` low at 2x-8x).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from posx.eval.tables import read_table
from posx.report.figures import palette
from posx.report.figures.output import FORMATS, save
from posx.report.figures.palette import legend_inches
from posx.report.store.groups import differences
from posx.report.store.scan import refusal
from posx.runs.paths import TASK_CURVE

KEYS = ["group", "encoding", "task", "tokens"]


def sound(runs, damaged: dict) -> list:
    """The ``runs`` whose task_curve.csv reads; the others join ``damaged`` (never cached: read each report)."""
    kept = []
    for run in runs:
        path = Path(run.path) / TASK_CURVE
        why = refusal(path) if path.exists() or path.is_symlink() else None
        if why is None:
            kept.append(run)
        else:
            damaged[run.path] = why
    return kept


def gather(runs) -> tuple[pd.DataFrame, dict[str, dict]]:
    """(accuracy mean, min, max and runs per group x encoding x task x tokens; each group's identity)."""
    frames, identities = [], {}
    for run in runs:
        path = Path(run.path) / TASK_CURVE
        if not path.exists() and not path.is_symlink():
            continue
        curve = read_table(path)[["tokens", "task", "accuracy", "chance"]].dropna(subset=["accuracy"])  # no trial
        identity = run.member.identity if run.member is not None else {}
        line = (run.group or "-", identity.get("pos.name", ""))  # a group label is unique per encoding
        identities[line] = identity
        frames.append(curve.assign(group=line[0], encoding=line[1]))
    if not frames:
        return pd.DataFrame(columns=[*KEYS, "accuracy_mean", "accuracy_min", "accuracy_max", "runs", "chance"]), {}
    data = pd.concat(frames, ignore_index=True).groupby(KEYS, sort=True)
    out = data["accuracy"].agg(["mean", "min", "max", "count"]).join(data["chance"].mean()).reset_index()
    out = out.rename(columns={"mean": "accuracy_mean", "min": "accuracy_min", "max": "accuracy_max", "count": "runs"})
    return out, identities


def labels(lines: list[tuple], identities: dict[tuple, dict]) -> dict[tuple, str]:
    """Per line (group, encoding) of a panel: its encoding and the keys the panel's groups differ in."""
    known = [line for line in lines if line in identities]
    shown = [k for k in differences([identities[line] for line in known]) if k not in ("pos.name", "seed")]
    out = {}
    for group, encoding in lines:
        ident = identities.get((group, encoding))
        named = ", ".join(f"{k}={ident.get(k, '—')}" for k in shown) if ident is not None else group
        out[(group, encoding)] = " · ".join(part for part in (encoding, named) if part and part != "-") or "-"
    return out


def plot(curves: pd.DataFrame, identities: dict, path: Path, formats: tuple[str, ...] = FORMATS) -> Path | None:
    """``task_learning.png`` from ``gather``'s table (``figure``); None when it is empty."""
    return None if curves.empty else save(figure(curves, identities), path, formats)


def figure(curves: pd.DataFrame, identities: dict) -> Figure:
    """A panel per task, a colour per line, a legend under each."""
    tasks = list(dict.fromkeys(curves["task"]))
    per_task = {}
    for task in tasks:
        rows = curves[curves["task"] == task]
        per_task[task] = labels(list(dict.fromkeys(zip(rows["group"], rows["encoding"]))), identities)
    below = max(legend_inches(list(names.values())) for names in per_task.values()) + 0.9  # legend, x label
    height = 0.8 + 2.8 + below  # title, axes, what goes under them (inches)
    fig = Figure(figsize=(4.6 * len(tasks), height))
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    fig.subplots_adjust(bottom=below / height, top=1 - 0.8 / height, left=0.08 / len(tasks) + 0.04, wspace=0.35)
    for ax, task in zip(axes, tasks):
        names = per_task[task]
        colors = dict(zip(names, palette.distinct(len(names))))
        for line, g in curves[curves["task"] == task].groupby(["group", "encoding"], sort=False):
            g = g.sort_values("tokens")
            ax.plot(g["tokens"], g["accuracy_mean"], color=colors[line], marker=".", linewidth=1.2, label=names[line])
            ax.fill_between(g["tokens"], g["accuracy_min"], g["accuracy_max"], color=colors[line], alpha=0.15)
        levels = curves.loc[curves["task"] == task, "chance"].dropna().unique()  # one per distinct T or setting
        for k, level in enumerate(levels):
            ax.axhline(level, color="grey", linestyle=":", linewidth=1.2, label="_nolegend_" if k else "chance level")
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(task)
        ax.set_xlabel("training tokens")
        ax.set_ylabel("exact answers at T (held-out set)")
        ax.grid(True, alpha=0.3)
        palette.legend(ax, *ax.get_legend_handles_labels(), loc="upper left", bbox_to_anchor=(-0.1, -0.2), fontsize=7)
    fig.suptitle("Learning curves (task_curve.csv): mean over a group's seeds, band from its lowest to its highest")
    return fig


def draw(runs, out_dir: Path, formats: tuple[str, ...] = FORMATS) -> dict[str, Path | None]:
    """task_learning.csv and task_learning.png when some run has a task_curve.csv."""
    curves, identities = gather(runs)
    if not curves.empty:
        curves.to_csv(out_dir / "task_learning.csv", index=False)
    return {"task_learning.png": plot(curves, identities, out_dir / "task_learning.png", formats)}
