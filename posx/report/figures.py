"""The report's two paper figures: every encoding and every RoPE method on shared axes.

* ``encodings.png``: perplexity by evaluation length (log-log), one row per protocol; left,
  every encoding without rescaling (one colour and marker per encoding; learned absolute's
  ``clamp`` and ``interpolate`` past its table dashed and dotted, with their own markers);
  right, the RoPE runs with each rescaling method zero-shot (one colour and marker per method,
  one line style per group, e.g. per block). Mean over seeds with a band of ± std over seeds
  (one seed: its 95% interval over windows). Lines that coincide (every method equals plain
  RoPE at 1x) stay visible: markers are hollow and the lines of a panel sit side by side, a few
  percent of a factor apart (``posx.report.palette.dodge``); the title says so.
* ``positions_by_encoding.png``: mean NLL by position in the window at the longest factor all
  trained runs share, non-overlapping windows, the same two panels (band ± std over seeds);
  no point moved, each line's markers staggered against the others' (``palette.stagger``).

Trained runs only; extended runs have extension.png (``posx.report.extension``). Past
``MAX_LINES`` lines in a panel, or more groups of RoPE runs than line styles, the groups are
pooled (``posx.report.crowd``) and the figure says so.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from posx.report.axes import STYLES, factor_axis, legend_order, log_ticks
from posx.report.crowd import MAX_LINES, TITLE, note, pool
from posx.report.output import FORMATS, save
from posx.report.palette import dodge, dodge_note, hollow, legend, marker_of, stagger

NATIVE = ["none", "clamp", "interpolate"]  # an encoding on its own (absolute: three ways past its table)


def _crowded(data: pd.DataFrame) -> bool:
    """More lines on the left than MAX_LINES, or more RoPE groups on the right than line styles."""
    left = data[data["method"].isin(NATIVE)].drop_duplicates(["group", "encoding", "method", "protocol"])
    rope = data[data["encoding"] == "rope"]["group"].nunique()
    return len(left) > MAX_LINES * data["protocol"].nunique() or rope > len(STYLES)


def plot_encodings(
    summary: pd.DataFrame, path: Path, notes: list[str], formats: tuple[str, ...] = FORMATS
) -> Path | None:
    """The paper figure (``encodings_figure``) saved as ``path`` (PNG and PDF)."""
    fig = encodings_figure(summary, notes, path.name)
    return None if fig is None else save(fig, path, formats)


def encodings_figure(summary: pd.DataFrame, notes: list[str], name: str = "encodings.png") -> Figure | None:
    """One row per protocol; left, every encoding without rescaling (one colour and marker per
    encoding; learned absolute's clamp and interpolate dashed and dotted, with their own markers);
    right, the RoPE runs with each rescaling method zero-shot (one colour and marker per method,
    one line style per group). Hollow markers, lines of a panel side by side (``palette.dodge``)."""
    data = summary[(summary["n_seeds"] > 0) & (summary["parent"] == "")]
    if data.empty:
        return None
    train_context = _t(data)
    pooled = _crowded(data)
    if pooled:
        notes.append(note(name, data, "lines", MAX_LINES))
        seeds = int(data["n_seeds"].max())
        data = pool(data, ["group", "encoding", "method", "protocol"], "factor", "ppl_mean", "ppl_lo", "ppl_hi")
        data = data.assign(n_seeds=seeds, parent="")
    protocols = sorted(data["protocol"].unique(), key=lambda p: (p != "nonoverlapping", p))
    rope = data[data["encoding"] == "rope"]
    panels = 2 if not rope.empty and (rope["method"] != "none").any() else 1
    fig = Figure(figsize=(6.0 * panels + 1.0, 4.6 * len(protocols)))
    axes = fig.subplots(len(protocols), panels, squeeze=False)
    data = _with_lines(data)
    rope_groups = list(dict.fromkeys(rope["group"]))
    top = float(data["ppl_hi"].where(data["ppl_hi"].notna(), data["ppl_mean"]).max())  # a line without a band too
    low = float(data["ppl_lo"].where(data["ppl_lo"].notna(), data["ppl_mean"]).min())
    most = 0  # lines in the fullest panel
    for row, protocol in enumerate(protocols):
        mine = data[data["protocol"] == protocol]
        most = max(most, _left_panel(axes[row][0], mine[mine["method"].isin(NATIVE)], _band_line))
        axes[row][0].set_title(f"encodings, no rescaling ({protocol} windows)", fontsize=11)
        if panels == 2:
            most = max(most, _right_panel(axes[row][1], mine[mine["encoding"] == "rope"], rope_groups, _band_line))
            axes[row][1].set_title(f"RoPE + rescaling, zero-shot ({protocol} windows)", fontsize=11)
        for ax in axes[row]:
            _dress(ax, low, top, sorted(data["factor"].unique()), train_context)
    seeds = int(data["n_seeds"].max())
    band = TITLE if pooled else "band ± std over seeds"
    dodged = f"\n{dodge_note(most)} (a panel's lines at one length)" if most > 1 else ""
    fig.suptitle(f"Perplexity vs evaluation length: mean over {seeds} seed(s), {band}{dodged}", fontsize=11)
    fig.tight_layout()
    return fig


def _left_panel(ax, left: pd.DataFrame, draw) -> int:
    """Every encoding without rescaling: its colour; absolute's ways past T by style and marker.
    ``draw(ax, rows, i, n, look, style, label)`` draws the i-th of n lines; returns n."""
    lines = list(left.groupby(["line", "method"], sort=True))
    for i, ((line, method), g) in enumerate(lines):
        look = {**hollow(line), "marker": marker_of(line if method == "none" else method)}
        label = line if method == "none" else f"{line}, {method} past T"
        draw(ax, g, i, len(lines), look, STYLES[NATIVE.index(method)], label)
    return len(lines)


def _right_panel(ax, right: pd.DataFrame, groups: list, draw) -> int:
    """The RoPE runs: one colour and marker per method, one line style per group (``draw``: as
    for ``_left_panel``). Returns how many lines it drew."""
    lines = sorted(
        right.groupby(["group", "method"], sort=False),
        key=lambda kv: (groups.index(kv[0][0]), legend_order(kv[0][1])),
    )
    for n, ((group, method), g) in enumerate(lines):
        i = groups.index(group)  # one legend entry per method, one per line style
        draw(ax, g, n, len(lines), hollow(method), STYLES[i % 4], method if i == 0 else None)
    for i, group in enumerate(groups if len(groups) > 1 else []):
        ax.plot([], [], color="gray", linestyle=STYLES[i % 4], label=f"line style: {group}")
    return len(lines)


def _dress(ax, low: float, top: float, factors: list, train_context: str) -> None:
    ax.set_yscale("log")
    log_ticks(ax, low, top)
    factor_axis(ax, factors)
    ax.set_xlabel(f"evaluation length (multiples of {train_context}, log scale)")
    ax.set_ylabel("perplexity (log scale)")
    handles, labels = ax.get_legend_handles_labels()
    legend(ax, handles, labels, fontsize=8.5, loc="best", ncol=2 if len(labels) > 7 else 1)
    ax.tick_params(labelsize=10)


def _band_line(ax, g: pd.DataFrame, i: int, n: int, look: dict, style: str, label: str | None) -> None:
    """The i-th of a panel's n perplexity lines with its band, moved sideways (``palette.dodge``);
    ``look``: ``palette.hollow``."""
    g = g.sort_values("factor")
    x = dodge(g["factor"], i, n)
    ax.plot(x, g["ppl_mean"], linestyle=style, linewidth=1.6, label=label, **look)
    band = g["ppl_lo"].notna() & g["ppl_hi"].notna()
    if band.any():
        ax.fill_between(x[band], g["ppl_lo"][band], g["ppl_hi"][band], color=look["color"], alpha=0.15, linewidth=0)


def _with_lines(data: pd.DataFrame) -> pd.DataFrame:
    """``data`` with each row's line label: its encoding, and its group where there is one."""
    return data.assign(line=[e if g in ("", "-") else f"{e} ({g})" for e, g in zip(data["encoding"], data["group"])])


def _panels(data: pd.DataFrame):
    """(left rows, right rows): encodings without rescaling vs RoPE methods, with their line labels."""
    data = _with_lines(data)
    return data[data["method"].isin(NATIVE)], data[data["encoding"] == "rope"]


def longest_per_line(data: pd.DataFrame, keys: list[str], factor: float) -> tuple[pd.DataFrame, list[str]]:
    """Each line's rows at ``factor``, or at its own longest where it has none that long (learned
    absolute past its table); and what was drawn shorter, one phrase per encoding and factor."""
    data = data[data["factor"] == data.groupby(keys)["factor"].transform("max").clip(upper=factor)]
    shorter = data[data["factor"] < factor].drop_duplicates(["encoding", "factor"])
    return data, [f"{r.encoding} drawn at {r.factor:g} x T, its longest" for r in shorter.itertuples()]


def _position_curves(cells: pd.DataFrame, factor: float, smooth: int, notes: list[str], name: str):
    """Trained runs' curves at ``factor`` (non-overlapping windows), band ± std over seeds; a line
    with no window that long (learned absolute past its table) at its own longest; pooled over
    groups when crowded. Returns (curves with lo/hi, whether pooled, what was drawn shorter)."""
    data = cells[(cells["parent"].fillna("") == "") & (cells["protocol"] == "nonoverlapping")]
    keys = ["group", "encoding", "method"]
    data, shorter = longest_per_line(data, keys, factor)
    curves = data[[*keys, "x", "nll", "nll_std"]].sort_values([*keys, "x"]).reset_index(drop=True)
    if smooth > 1:
        curves[["nll", "nll_std"]] = curves.groupby(keys, sort=False)[["nll", "nll_std"]].transform(
            lambda c: c.rolling(smooth, center=True, min_periods=1).mean()
        )
    if not _crowded(curves.assign(protocol="nonoverlapping")):
        return curves.assign(lo=curves["nll"] - curves["nll_std"], hi=curves["nll"] + curves["nll_std"]), False, shorter
    notes.append(note(name, curves, "lines", MAX_LINES))
    return pool(curves, keys, "x", "nll", "lo", "hi").assign(nll_std=float("nan")), True, shorter


def plot_position_encodings(
    cells: pd.DataFrame,
    factor: float | None,
    path: Path,
    smooth: int,
    notes: list[str],
    formats: tuple[str, ...] = FORMATS,
) -> Path | None:
    """``cells``: ``posx.report.queries.positions``; ``factor``: the longest a trained run has
    (``posx.report.queries.longest_factor``; None: no trained run has per-position rows)."""
    if cells.empty or factor is None:
        return None
    train_context = _t(cells[cells["parent"].fillna("") == ""])
    curves, pooled, drawn_shorter = _position_curves(cells, factor, smooth, notes, path.name)
    notes.extend(f"{path.name}: {said}" for said in drawn_shorter)
    shorter = " (or a run's longest: notes)" if drawn_shorter else ""
    if curves.empty:
        return None
    left, right = _panels(curves)
    fig = Figure(figsize=(13, 5.0))
    axes = fig.subplots(1, 2)
    _left_panel(axes[0], left, _band)
    _right_panel(axes[1], right, list(dict.fromkeys(right["group"])), _band)
    for ax, title in zip(axes, ("encodings, no rescaling", "RoPE + rescaling, zero-shot")):
        ax.axvline(1.0, color="gray", linestyle="--", linewidth=1, label="training length T")
        ax.set_title(f"{title}: windows of {factor:g} x T{shorter}", fontsize=11)
        ax.set_xlabel(f"position in the window (multiples of {train_context})")
        ax.set_ylabel("mean NLL (nats per token)")
        ax.grid(True, alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        legend(ax, handles, labels, fontsize=8.5, loc="best", ncol=2 if len(labels) > 7 else 1)
        ax.tick_params(labelsize=10)
    smoothed = f", moving mean over {smooth} buckets" if smooth > 1 else ""
    band = TITLE if pooled else "mean over seeds, band ± std over seeds"
    fig.suptitle(f"Loss by token position ({band}{smoothed})", fontsize=11)
    fig.tight_layout()
    return save(fig, path, formats)


def _t(data: pd.DataFrame) -> str:
    """T, in tokens when every row shares one."""
    ts = set(",".join(data["train_context"].astype(str)).split(","))
    return f"T = {ts.pop()} tokens" if len(ts) == 1 else "T"


def _band(ax, g: pd.DataFrame, i: int, n: int, look: dict, style: str, label: str | None) -> None:
    """The i-th of a panel's n per-position lines with its band; its markers staggered against
    the other lines' (``palette.stagger``), so lines that coincide show each one's."""
    g = g.sort_values("x")
    every = stagger(i, n, len(g))
    ax.plot(g["x"], g["nll"], linestyle=style, linewidth=1.4, label=label, markevery=every, **look)
    if g["lo"].notna().any():
        ax.fill_between(g["x"], g["lo"], g["hi"], color=look["color"], alpha=0.15, linewidth=0)
