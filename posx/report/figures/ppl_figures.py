"""Perplexity against evaluation length: ``ppl_vs_length.png``, the paper figure ``encodings.png``
and, asked for by name only, ``ppl_median_over_groups.png`` (it pools unlike groups by
construction). A panel per facet and protocol, a line per group x method with a band that says
what it is; crowded panels and files go on in further ones. See docs/evaluation.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from posx.report.figures import output
from posx.report.figures.axes import factor_axis, legend_order, log_ticks
from posx.report.figures.facets import (
    MAX_PANELS,
    Facets,
    band_name,
    chunks,
    file_names,
    legend_texts,
    line_labels,
    one_band,
    pack,
    pair_pieces,
    panel_title,
    rows_of,
    split_rows,
)
from posx.report.figures.looks import looks
from posx.report.figures.palette import NATIVE, dodge, dodge_note, legend, legend_inches, wrap

LINE = ["group", "parent", "encoding", "method"]


def _lines(data: pd.DataFrame) -> list[tuple]:
    """The panel's lines (``LINE``), by encoding, group and method order."""
    keys = list(dict.fromkeys(data[LINE].fillna("").astype(str).itertuples(index=False, name=None)))
    groups = {g: i for i, g in enumerate(dict.fromkeys(k[:3] for k in keys))}
    return sorted(keys, key=lambda k: (k[2], groups[k[:3]], legend_order(k[3])))


def _rows(data: pd.DataFrame, key: tuple) -> pd.DataFrame:
    return rows_of(data, LINE, key).sort_values("factor")


def _finite(data: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the rows of finite mean, bounds past exp or at 0 as NaN; the rows of mean inf: diverged)."""
    inf = data["ppl_mean"] == np.inf
    kept = data[~inf].copy()
    for column in ("ppl_lo", "ppl_hi"):
        kept[column] = kept[column].where(np.isfinite(kept[column]) & (kept[column] > 0))
    return kept, data[inf]


def _edge(values: pd.Series, pick) -> float:
    """The lowest or highest (``pick``) positive finite value; 1 when there is none."""
    finite = [float(v) for v in values if np.isfinite(v) and v > 0]
    return pick(finite) if finite else 1.0


def draw_panel(ax, data: pd.DataFrame, facets: Facets, factors: list, gone=None, band: str = "") -> str:
    """One panel (``gone``: unscored rows, an x at the top; ``band``: the bands' name); returns ``one_band``."""
    lines = _lines(data)
    labels = line_labels(facets, lines)
    styles = looks([(k[2], k[:3], k[3]) for k in lines])
    bands = [band or band_name(list(_rows(data, k)["n_seeds"].astype(int))) for k in lines]
    shared = one_band(bands)
    data, diverged = _finite(data)
    top = _edge(data["ppl_hi"].where(data["ppl_hi"].notna(), data["ppl_mean"]), max)
    for n, (key, label, look, band) in enumerate(zip(lines, labels, styles, bands)):
        g = _rows(data, key)
        x = dodge(g["factor"], n, len(lines), factors)
        past = _rows(diverged, key)
        if not past.empty:  # ppl inf (a diverged run): marked at the panel's top edge, off the perplexity scale
            ax.plot(dodge(past["factor"], n, len(lines), factors), [0.97] * len(past), linestyle="none", marker="^",
                    color=look["color"], markersize=8, label=f"{label}: ppl inf (diverged)",
                    transform=ax.get_xaxis_transform(), clip_on=False)  # fmt: skip
        ax.plot(x, g["ppl_mean"], label=label if shared else f"{label} (band {band})", linewidth=1.5, **look)
        has = g["ppl_lo"].notna() & g["ppl_hi"].notna()
        if has.any():
            ax.fill_between(x[has], g["ppl_lo"][has], g["ppl_hi"][has], color=look["color"], alpha=0.12, linewidth=0)
        missed = _rows(gone, key) if gone is not None and not gone.empty else None
        if missed is not None and not missed.empty:  # not scored there: marked at the top, not dropped
            ax.plot(dodge(missed["factor"], n, len(lines), factors), [top] * len(missed), linestyle="none",
                    marker="x", color=look["color"], markersize=8)  # fmt: skip
    low = _edge(data["ppl_lo"].where(data["ppl_lo"].notna(), data["ppl_mean"]), min)
    ax.set_yscale("log")
    log_ticks(ax, low, top)
    factor_axis(ax, factors)
    ax.set_ylabel("perplexity (log scale)")
    return shared


def _height(data: pd.DataFrame, facets: Facets) -> float:
    """A panel's height in inches: 4.2, or what its legend (wrapped, with bands) needs beside it."""
    if data is None or data.empty:
        return 4.2
    labels = legend_texts(facets, _lines(data))
    return max(4.2, legend_inches([f"{label} (band ± std over 10 seeds)" for label in labels]) + 1.0)


def _dress(ax, title: str, shared: str, lines: list[tuple], factors: list, unit: str, facets: Facets) -> None:
    band = f"; band {shared}" if shared else ""
    dodged = f"\n{dodge_note(len(lines), factors)}" if len(lines) > 1 else ""
    ax.set_title(f"{wrap(title + band, 75)}{dodged}", fontsize=9)
    ax.set_xlabel(f"evaluation length (multiples of {unit}, log scale)", fontsize=9)
    usual = facets.usual([line[:3] for line in lines])
    legend(ax, *ax.get_legend_handles_labels(), usual, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7.5)


def _unit(data: pd.DataFrame) -> str:
    ts = set(",".join(data["train_context"].astype(str)).split(",")) if "train_context" in data else set()
    return f"T = {ts.pop()} tokens" if len(ts) == 1 else "each run's T"


def _panels(summary: pd.DataFrame, facets: Facets) -> list[tuple[str, pd.DataFrame, pd.DataFrame, Facets]]:
    """(title, scored rows, unscored rows, naming facets) per facet x protocol x piece of MAX_LINES."""
    scored = summary[summary["n_seeds"] > 0]
    protocols = sorted(scored["protocol"].unique(), key=lambda p: (p != "nonoverlapping", p))
    out = []
    for facet, mine in facets.split(scored):
        for protocol in protocols:
            rows = mine[mine["protocol"] == protocol]
            pieces = pack(_lines(rows)) if not rows.empty else []
            named = facets.among(_lines(rows))
            split = split_rows(rows, LINE)
            gone = summary[(summary["n_seeds"] == 0) & (summary["protocol"] == protocol)]
            for i, piece in enumerate(pieces):
                part = pd.concat([split[k] for k in piece])
                title = f"{panel_title(facet, i, len(pieces))} · {protocol} windows"
                out.append((title, part, gone, named))
    return out


def ppl_figures(summary: pd.DataFrame, facets: Facets, name: str = "ppl_vs_length.png") -> list[tuple[str, Figure]]:
    """``ppl_vs_length.png`` (and further files when crowded) as (file name, figure)."""
    if summary.empty or not (summary["n_seeds"] > 0).any():
        return []
    panels = _panels(summary, facets)
    factors = sorted(summary["factor"].unique())
    files = chunks(panels, MAX_PANELS)
    out = []
    for file_name, mine in zip(file_names(name, len(files)), files):
        heights = [_height(data, named) for _, data, _, named in mine]
        fig = Figure(figsize=(9.5, sum(heights)), layout="constrained")
        axes = fig.subplots(len(mine), 1, squeeze=False, height_ratios=heights)[:, 0]
        for ax, (title, data, gone, named) in zip(axes, mine):
            shared = draw_panel(ax, data, named, factors, gone)
            _dress(ax, title, shared, _lines(data), factors, _unit(data), named)
        fig.suptitle("Perplexity vs evaluation length: one line per group (mean over its seeds)", fontsize=11)
        out.append((file_name, fig))
    return out


def _encoding_rows(data: pd.DataFrame, facets: Facets) -> list[tuple]:
    """(title, left, right, naming facets) per facet x protocol x piece (``pair_pieces``)."""
    rows = []
    for facet, mine in facets.split(data):
        for protocol in sorted(mine["protocol"].unique(), key=lambda p: (p != "nonoverlapping", p)):
            here = mine[mine["protocol"] == protocol]
            rope = here[here["encoding"] == "rope"]
            left = here[here["method"].isin(NATIVE)]
            right = pd.concat([rope[rope["method"] == "none"], rope[~rope["method"].isin(NATIVE)]])
            named = facets.among(_lines(here))
            pairs = pair_pieces(left, right if (right["method"] != "none").any() else right.iloc[:0], _lines)
            rows += [(f"{panel_title(facet, i, len(pairs))} · {protocol} windows", *pair, named)
                     for i, pair in enumerate(pairs)]  # fmt: skip
    return rows


def encodings_figures(summary: pd.DataFrame, facets: Facets, name: str = "encodings.png") -> list[tuple[str, Figure]]:
    """``encodings.png`` (trained runs): encodings without rescaling | RoPE methods zero-shot."""
    data = summary[(summary["n_seeds"] > 0) & (summary["parent"].fillna("") == "")]
    if data.empty:
        return []
    factors = sorted(data["factor"].unique())
    files = chunks(_encoding_rows(data, facets), 3)
    out = []
    for file_name, mine in zip(file_names(name, len(files)), files):
        cols = 2 if any(right is not None for _, _, right, _ in mine) else 1
        heights = [max(_height(part, named) for part in pair if part is not None) for _, *pair, named in mine]
        fig = Figure(figsize=(7.5 * cols, sum(heights)), layout="constrained")
        axes = fig.subplots(len(mine), cols, squeeze=False, height_ratios=heights)
        for (title, left, right, named), row in zip(mine, axes):
            for ax, part, what in zip(row, (left, right), ("encodings, no rescaling", "RoPE + rescaling")):
                if part is None:
                    ax.set_visible(False)
                    continue
                shared = draw_panel(ax, part, named, factors)
                _dress(ax, f"{title}: {what}", shared, _lines(part), factors, _unit(part), named)
        fig.suptitle("Perplexity vs evaluation length, trained runs: one line per group (mean over its seeds)")
        out.append((file_name, fig))
    return out


def median_figure(summary: pd.DataFrame, name: str = "ppl_median_over_groups.png") -> list[tuple[str, Figure]]:
    """Per encoding x method x protocol the median over groups (asked for by name only)."""
    data = summary[summary["n_seeds"] > 0]
    if data.empty:
        return []
    keys = ["encoding", "method", "protocol"]
    pooled = data.groupby([*keys, "factor"], sort=False).agg(
        ppl_mean=("ppl_mean", "median"), ppl_lo=("ppl_mean", "min"), ppl_hi=("ppl_mean", "max"),
        n=("group", "size"),
    ).reset_index()  # fmt: skip
    counts = data.drop_duplicates([*LINE, "protocol"]).groupby(keys).size()
    pooled["group"] = [f"median of {counts[tuple(r)]} group(s)" for r in pooled[keys].itertuples(index=False)]
    pooled = pooled.assign(parent="", n_seeds=1)
    protocols = sorted(pooled["protocol"].unique())
    factors = sorted(pooled["factor"].unique())
    fig = Figure(figsize=(9.5, 4.2 * len(protocols)), layout="constrained")
    for ax, protocol in zip(fig.subplots(len(protocols), 1, squeeze=False)[:, 0], protocols):
        mine = pooled[pooled["protocol"] == protocol]
        shared = draw_panel(ax, mine, Facets(), factors, band="lowest..highest group mean")
        _dress(ax, f"{protocol} windows", shared, _lines(mine), factors, "each run's T", Facets())
    fig.suptitle("Median over groups of different settings (asked for with --median-over-groups): not one model")
    return [(name, fig)]


def save_all(figures: list[tuple[str, Figure]], out_dir: Path, formats: tuple[str, ...]) -> dict[str, Path]:
    """Each (file name, figure) saved into ``out_dir``; returns {file name: path}."""
    return {file_name: output.save(fig, out_dir / file_name, formats) for file_name, fig in figures}
