"""The PNGs of ``posx report`` (matplotlib figures drawn straight to PNG: no pyplot, no
backend switch, no display needed).

* ``ppl_vs_length.png``: perplexity (log scale) by evaluation length in multiples of T, one line
  per group x encoding x method (x protocol when several; groups: ``posx.report.groups``), the
  mean over seeds with a band: ± std over seeds, or the 95% interval over windows for one seed.
  Lengths a line could not score (out of range, non-finite) are marked with an x on the axis.
* ``positions.png``: mean NLL by position in the window (in multiples of T) at one factor,
  one panel per group x encoding (x parent), one line per method (its hollow marker on every
  few buckets, staggered between lines, ``palette.stagger``).
* ``training.png``: training and validation loss by step from the runs' metrics.csv, one line
  per group x encoding (x parent), the mean over its runs with a band of ± std over them.
* ``passkey.png``: passkey exact-match accuracy and key NLL by evaluation length, one column
  per variant.

Lines against the evaluation length (``ppl_vs_length.png``, ``passkey.png``) carry their
encoding's or method's colour and marker (``posx.report.palette``), the marker hollow, and
the lines of one panel sit a few percent of a factor apart (``palette.dodge``): lines that
coincide (every RoPE method equals plain RoPE at 1x; a model that never retrieves a key) all
stay visible with their legend entries, and the title says they were moved.

Every figure draws groups, never runs: its cost does not grow with the seeds. A figure with more
lines or panels than can be told apart pools its groups (``posx.report.crowd``) and says so.
The training length is marked in every plot by a dashed vertical line at 1x. What the axes of
every report figure share (method order, colours, log ticks, the factor axis, one legend) is in
``posx.report.axes``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from posx.report import output, palette
from posx.report.axes import STYLES, colors_for, factor_axis, figure_legend, legend_order, log_ticks
from posx.report.crowd import MAX_LINES, MAX_PANELS, TITLE, crowded, note, pool, pooled_label
from posx.report.output import FORMATS


def _line_label(enc: str, method: str, group: str, parent: str, extras: bool) -> str:
    label = f"{enc} · {method}"
    if parent:
        label += f" · from {parent}"
    return label + (f" · {group}" if extras and group not in ("", "-") else "")


LINE = ["group", "parent", "encoding", "method", "protocol"]  # one line of ppl_vs_length.png


def plot_ppl(summary: pd.DataFrame, path: Path, notes: list[str], formats: tuple[str, ...] = FORMATS) -> Path | None:
    """``ppl_vs_length.png`` (``ppl_figure``) saved as ``path`` (PNG and PDF)."""
    fig = ppl_figure(summary, notes, path.name)
    return None if fig is None else output.save(fig, path, formats)


def ppl_figure(summary: pd.DataFrame, notes: list[str], name: str = "ppl_vs_length.png") -> Figure | None:
    """One line per group x encoding x method (x protocol): its colour and hollow marker
    (``posx.report.palette``), a line style per group, the lines side by side (``palette.dodge``)."""
    data = summary[summary["n_seeds"] > 0]
    if data.empty:
        return None
    seeds = int(data["n_seeds"].max())
    pooled = crowded(data, LINE)
    if pooled:
        notes.append(note(name, data, "lines", MAX_LINES))
        data = pool(data, LINE, "factor", "ppl_mean", "ppl_lo", "ppl_hi").assign(n_seeds=seeds)
    several = data["protocol"].nunique() > 1
    groups = list(dict.fromkeys(zip(data["group"], data["parent"])))
    fig = Figure(figsize=(10, 5.5))
    ax = fig.subplots()
    order = sorted(data.groupby(LINE, sort=False).groups, key=lambda k: (groups.index(k[:2]), k[2], legend_order(k[3])))
    hi_all = float(data["ppl_hi"].where(data["ppl_hi"].notna(), data["ppl_mean"]).max())  # lines without a band too
    for n, key in enumerate(order):
        group, parent, enc, method, protocol = key
        g = data[(data[LINE] == pd.Series(key, index=LINE)).all(axis=1)].sort_values("factor")
        label = _line_label(enc, method, group, parent, len(groups) > 1) + (f" · {protocol}" if several else "")
        look = palette.hollow(f"{enc} · {method}")
        x = palette.dodge(g["factor"], n, len(order))
        ax.plot(x, g["ppl_mean"], label=label, linestyle=STYLES[groups.index((group, parent)) % 4], **look)
        band = g["ppl_lo"].notna() & g["ppl_hi"].notna()
        if band.any():
            ax.fill_between(x[band], g["ppl_lo"][band], g["ppl_hi"][band], color=look["color"], alpha=0.15, linewidth=0)
        gone = summary[(summary[LINE] == pd.Series(key, index=LINE)).all(axis=1) & (summary["n_seeds"] == 0)]
        if not gone.empty:  # not scored there: marked at the top, not dropped
            x = palette.dodge(gone["factor"], n, len(order))
            ax.plot(x, [hi_all] * len(gone), linestyle="none", marker="x", color=look["color"], markersize=9)
    if (summary["n_seeds"] == 0).any():
        ax.plot([], [], linestyle="none", marker="x", color="gray", label="not scored (out of range, non-finite)")
    _ppl_axes(ax, summary, data, hi_all)
    band = "band: ± std over seeds" if seeds > 1 else "band: 95% interval over windows"
    if seeds > 1 and (data["n_seeds"] == 1).any():
        band += " (one-seed lines: 95% interval over windows)"
    band = f"{groups[0][0]}: {TITLE}" if pooled else band
    dodged = f"\n{palette.dodge_note(len(order))}" if len(order) > 1 else ""
    ax.set_title(f"Perplexity vs evaluation length ({'mean over seeds, ' if seeds > 1 else ''}{band}){dodged}")
    palette.legend(ax, *ax.get_legend_handles_labels(), loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig


def _ppl_axes(ax, summary: pd.DataFrame, data: pd.DataFrame, hi_all: float) -> None:
    """Log perplexity ticks, the factors (with their length in tokens where one) and the labels."""
    ax.set_yscale("log")
    lo = data["ppl_lo"].where(data["ppl_lo"].notna(), data["ppl_mean"])
    log_ticks(ax, float(lo.min()), hi_all)
    lengths = {
        f: g.iloc[0]
        for f, g in summary.groupby("factor")["eval_context"]
        if g.astype(str).nunique() == 1 and "," not in str(g.iloc[0])
    }
    factor_axis(ax, sorted(summary["factor"].unique()), lengths)
    ts = set(",".join(summary["train_context"].astype(str)).split(","))
    ax.set_xlabel(
        "evaluation length (multiples of the training length T"
        + (f" = {ts.pop()})" if len(ts) == 1 else f"; T = {', '.join(sorted(ts, key=int))})")
    )
    ax.set_ylabel("perplexity (log scale)")


PANEL = ["group", "parent", "encoding"]


def position_curves(cells: pd.DataFrame, factor: float | None, smooth: int = 1) -> tuple[pd.DataFrame, dict]:
    """The per-position curves to draw from ``cells`` (``posx.report.queries.positions``: mean NLL
    and its std over runs per group x parent x encoding x method x protocol x factor x position/T):
    per panel (group x parent x encoding) the cells at ``factor`` (default: the largest factor it
    has); returns the curves (``nll``, ``nll_std``) and the factor used per panel. With ``smooth``
    > 1 a curve is a centred moving mean over that many buckets. Where the tables hold both
    protocols, the non-overlapping windows' positions are drawn (sliding windows score only their
    last tokens)."""
    if cells.empty:
        return cells, {}
    if cells["protocol"].nunique() > 1:  # one protocol's positions per curve
        cells = cells[cells["protocol"] == "nonoverlapping"]
    df = cells.assign(**{c: cells[c].fillna("") for c in PANEL})
    chosen = {}
    for panel, have in df.groupby(PANEL, sort=True)["factor"]:
        have = sorted(have.unique())
        fits = [f for f in have if factor is None or f <= factor]
        chosen[panel] = fits[-1] if fits else have[0]
    picked = pd.DataFrame([(*p, f) for p, f in chosen.items()], columns=[*PANEL, "factor"])
    curves = df.merge(picked, on=[*PANEL, "factor"])[[*PANEL, "method", "x", "nll", "nll_std"]]
    curves = curves.sort_values([*PANEL, "method", "x"]).reset_index(drop=True)
    if smooth > 1:
        rolled = curves.groupby([*PANEL, "method"], sort=False)[["nll", "nll_std"]].transform(
            lambda c: c.rolling(smooth, center=True, min_periods=1).mean()
        )
        curves[["nll", "nll_std"]] = rolled
    return curves, chosen


def _position_panels(curves: pd.DataFrame, chosen: dict, notes: list[str], name: str):
    """(curves with a band lo..hi, panel -> title's factor text): per group, or, past MAX_PANELS
    panels, pooled over groups (``posx.report.crowd``)."""
    if len(chosen) <= MAX_PANELS:
        band = curves.assign(lo=curves["nll"] - curves["nll_std"], hi=curves["nll"] + curves["nll_std"])
        return band, {panel: f"{f:g}x" for panel, f in chosen.items()}
    notes.append(note(name, curves, "panels", MAX_PANELS))
    pooled = pool(curves, [*PANEL, "method"], "x", "nll", "lo", "hi").assign(nll_std=float("nan"))
    factors: dict = {}
    for (_group, parent, enc), f in chosen.items():
        factors.setdefault((pooled["group"].iloc[0], parent, enc), set()).add(f)
    return pooled, {panel: ", ".join(f"{f:g}x" for f in sorted(fs)) for panel, fs in factors.items()}


def plot_positions(
    cells: pd.DataFrame,
    path: Path,
    factor: float | None,
    smooth: int,
    notes: list[str],
    formats: tuple[str, ...] = FORMATS,
) -> Path | None:
    curves, chosen = position_curves(cells, factor, smooth)
    if curves.empty:
        return None
    curves, at = _position_panels(curves, chosen, notes, path.name)
    panels = list(at)
    cols = min(len(panels), 4)
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(5.0 * cols + 1.5, 3.9 * rows))
    axes = fig.subplots(rows, cols, squeeze=False).reshape(1, -1)
    for ax in axes[0][len(panels) :]:
        ax.set_visible(False)
    several = len({p[:2] for p in panels}) > 1 or len(panels) < len(chosen)
    for ax, panel in zip(axes[0], panels):
        mine = curves[(curves[PANEL] == pd.Series(panel, index=PANEL)).all(axis=1)]
        methods = sorted(mine["method"].unique(), key=legend_order)
        for i, method in enumerate(methods):  # markers staggered: lines that coincide show each one's
            g = mine[mine["method"] == method].sort_values("x")
            every, look = palette.stagger(i, len(methods), len(g)), palette.hollow(method, 4.5)
            ax.plot(g["x"], g["nll"], label=method, linewidth=1.5, markevery=every, **look)
            if g["lo"].notna().any():  # spread over seeds (or over groups, pooled)
                ax.fill_between(g["x"], g["lo"], g["hi"], color=look["color"], alpha=0.15, linewidth=0)
        ax.axvline(1.0, color="gray", linestyle="--", linewidth=1, label="training length T")
        group, parent, enc = panel
        where = (f" from {parent}" if parent else "") + (
            f"\n{palette.fit(group)}" if several and group not in ("", "-") else ""
        )
        ax.set_title(f"{enc}{where}: at {at[panel]} T", fontsize=10)
        ax.set_xlabel("position in the window (multiples of T)")
        ax.set_ylabel("mean NLL (nats per token)")
        ax.grid(True, alpha=0.3)
    figure_legend(fig, axes[0][: len(panels)])
    smoothed = f", moving mean over {smooth} buckets" if smooth > 1 else ""
    what = TITLE if len(panels) < len(chosen) else "mean over the seeds of each group, band ± std over seeds"
    fig.suptitle(f"Loss by token position ({what}{smoothed})")
    fig.tight_layout()
    return output.save(fig, path, formats)


def _pooled_passkey(data: pd.DataFrame) -> pd.DataFrame:
    """Past MAX_LINES lines: per encoding x method x variant x factor, the median over groups."""
    keys = ["encoding", "method", "variant", "factor"]
    pooled = data.groupby(keys, sort=False).agg(
        accuracy_mean=("accuracy_mean", "median"), key_nll_mean=("key_nll_mean", "median"), n_seeds=("n_seeds", "max")
    )
    return pooled.reset_index().assign(accuracy_std=float("nan"), group=pooled_label(data))


def _passkey_lines(pk_summary: pd.DataFrame, notes: list[str], name: str) -> tuple[pd.DataFrame, bool]:
    """The scored rows to draw, past MAX_LINES pooled over groups, and whether they were pooled."""
    data = pk_summary[pk_summary["n_seeds"] > 0]
    if not crowded(data, ["group", "encoding", "method"]):
        return data, False
    said = note(name, data, "lines", MAX_LINES)
    notes.append(said.replace("band from the lowest to the highest group mean", "no band"))
    return _pooled_passkey(data), True


def plot_passkey(
    pk_summary: pd.DataFrame, path: Path, notes: list[str], formats: tuple[str, ...] = FORMATS
) -> Path | None:
    """Top row: exact-match accuracy; bottom row: mean NLL of the key digits (chance: ln 10).
    When no run retrieved a single key, only the key NLL row is drawn (the title says so)."""
    if pk_summary.empty or (pk_summary["n_seeds"] == 0).all():
        return None
    data, pooled = _passkey_lines(pk_summary, notes, path.name)
    variants = list(dict.fromkeys(data["variant"]))
    groups = list(dict.fromkeys(data["group"]))
    factors = sorted(pk_summary["factor"].unique())
    none_found = bool((data["accuracy_mean"].fillna(0) == 0).all())
    fig = Figure(figsize=(5.5 * len(variants) + 2, 4.5 if none_found else 8))
    axes = fig.subplots(1 if none_found else 2, len(variants), squeeze=False)
    if none_found:  # an all-zero accuracy row says nothing: draw into a figure that is not saved
        axes = [Figure().subplots(1, len(variants), squeeze=False)[0], axes[0]]
    columns = [list(data[data["variant"] == v].groupby(["group", "encoding", "method"], sort=False)) for v in variants]
    for col, (variant, lines) in enumerate(zip(variants, columns)):
        _passkey_column(axes[0][col], axes[1][col], variant, lines, groups, factors)
    figure_legend(fig, list(axes[1]))
    most = max(len(lines) for lines in columns)  # lines in the fullest column
    spread = " (mean ± std over seeds)" if data["n_seeds"].max() > 1 else " (one seed)"
    spread = f" ({data['group'].iloc[0]}: median over groups)" if pooled else spread
    nothing = "; exact match 0 everywhere, so only the key NLL is shown" if none_found else ""
    dodged = f"\n{palette.dodge_note(most)}" if most > 1 else ""
    fig.suptitle(f"Passkey retrieval by evaluation length{spread}{nothing}{dodged}")
    fig.tight_layout()
    return output.save(fig, path, formats)


def _passkey_column(top, bottom, variant: str, lines: list, groups: list, factors: list) -> None:
    """Draws one variant: its accuracy lines into ``top``, its key NLL lines into ``bottom``."""
    for n, ((group, enc, method), g) in enumerate(lines):
        g = g.sort_values("factor")
        x = palette.dodge(g["factor"], n, len(lines))  # lines at one value side by side
        style = dict(
            label=_line_label(enc, method, group, "", len(groups) > 1),
            linestyle=STYLES[groups.index(group) % 4],
            **palette.hollow(f"{enc} · {method}"),
        )
        top.errorbar(x, g["accuracy_mean"], yerr=g["accuracy_std"].fillna(0), capsize=3, **style)
        bottom.plot(x, g["key_nll_mean"], **style)
    for ax in (top, bottom):
        factor_axis(ax, factors)
        ax.set_xlabel("evaluation length (multiples of T)")
    bottom.axhline(math.log(10), color="black", linestyle=":", linewidth=1, label="chance over digits (ln 10)")
    top.set_ylim(-0.05, 1.05)
    top.set_title(f"passkey, {variant} variant: exact match")
    top.set_ylabel("exact-match accuracy")
    bottom.set_title(f"passkey, {variant} variant: key NLL")
    bottom.set_ylabel("mean NLL of the key digits (nats)")


TRAINING_LINE = ["group", "parent", "encoding"]


def _training_lines(training: pd.DataFrame, notes: list[str], name: str) -> tuple[pd.DataFrame, bool]:
    """Per group (mean over its runs, band ± std), or past MAX_LINES pooled over groups."""
    if not crowded(training, TRAINING_LINE):
        return training.assign(
            train_lo=training["train_loss"] - training["train_std"],
            train_hi=training["train_loss"] + training["train_std"],
            val_lo=training["val_loss"] - training["val_std"],
            val_hi=training["val_loss"] + training["val_std"],
        ), False
    notes.append(note(name, training, "lines", MAX_LINES))
    train = pool(training, TRAINING_LINE, "step", "train_loss", "train_lo", "train_hi")
    val = pool(training.dropna(subset=["val_loss"]), TRAINING_LINE, "step", "val_loss", "val_lo", "val_hi")
    return train.merge(val.drop(columns=["n_groups"]), on=["group", "parent", "encoding", "step"], how="left"), True


def plot_training(
    training: pd.DataFrame, path: Path, notes: list[str], formats: tuple[str, ...] = FORMATS
) -> Path | None:
    """Training and validation loss by step (``posx.report.queries.training``): one line per
    group x encoding (x parent), the mean over its runs with a band of ± std over them."""
    if training.empty:
        return None
    data, pooled = _training_lines(training, notes, path.name)
    data = data.assign(
        line=[
            " · ".join(x for x in (e, f"from {p}" if p else "", "" if g == "-" else g) if x)
            for e, g, p in zip(data["encoding"], data["group"], data["parent"])
        ]
    )
    colors = colors_for(data["line"])
    fig = Figure(figsize=(13, 4.5))
    axes = fig.subplots(1, 2, squeeze=False)[0]
    for line, g in data.groupby("line", sort=False):
        g = g.sort_values("step")
        val = g.dropna(subset=["val_loss"])
        for ax, part, what, marker in ((axes[0], g, "train", None), (axes[1], val, "val", ".")):
            ax.plot(part["step"], part[f"{what}_loss"], color=colors[line], marker=marker, linewidth=1.2, label=line)
            band = part.dropna(subset=[f"{what}_lo", f"{what}_hi"])
            if not band.empty:
                ax.fill_between(band["step"], band[f"{what}_lo"], band[f"{what}_hi"], color=colors[line], alpha=0.15)
    for ax, what in zip(axes, ("training loss", "validation loss")):
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(f"{what} (nats per token)")
        ax.set_title(what)
        ax.grid(True, alpha=0.3)
    figure_legend(fig, axes)
    spread = TITLE if pooled else "one line per group: mean over its runs, band ± std over them"
    fig.suptitle(f"Training curves (metrics.csv), {spread}")
    fig.tight_layout()
    return output.save(fig, path, formats)


def draw_all(
    summary: pd.DataFrame,
    positions: pd.DataFrame,
    pk_summary: pd.DataFrame,
    out_dir: Path,
    factor: float | None,
    training: pd.DataFrame,
    smooth: int,
    notes: list[str],
    formats: tuple[str, ...] = FORMATS,
) -> dict[str, Path | None]:
    """Every plot there is data for; a name maps to None when its data is missing everywhere.
    ``positions`` and ``training`` are per-group cells (``posx.report.queries``); ``notes`` gets a
    line for each figure that pooled its groups."""
    return {
        "ppl_vs_length.png": plot_ppl(summary, out_dir / "ppl_vs_length.png", notes, formats),
        "positions.png": plot_positions(positions, out_dir / "positions.png", factor, smooth, notes, formats),
        "passkey.png": plot_passkey(pk_summary, out_dir / "passkey.png", notes, formats),
        "training.png": plot_training(training, out_dir / "training.png", notes, formats),
    }
