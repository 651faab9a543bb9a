"""Loss by token position: ``positions.png`` (a panel per group at one factor, ``--factor`` or its
largest, a line per method; ``MAX_PANELS`` to a file) and ``positions_by_encoding.png`` (trained
runs at the longest factor they share, per facet a row: encodings without rescaling | RoPE methods
zero-shot). Lines are a group's mean over seeds, band ± std; points never move, markers are
staggered (``palette.stagger``). Non-overlapping windows where the tables hold both protocols.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from posx.report.figures import output
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
    rows_on,
    sorted_lines,
    split_rows,
)
from posx.report.figures.looks import looks
from posx.report.figures.palette import NATIVE, legend, legend_inches, stagger, wrap

PANEL = ["group", "parent", "encoding"]
LINE = [*PANEL, "method"]


def position_curves(cells: pd.DataFrame, factor: float | None, smooth: int = 1) -> tuple[pd.DataFrame, dict]:
    """(the curves, the factor used per panel): per panel (group x parent x encoding) the cells of
    ``queries.positions`` at ``factor`` (default: its largest), a centred moving mean over ``smooth``
    buckets; non-overlapping windows where both protocols are there (sliding ones score only their
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
    columns = [*LINE, "x", "nll", "nll_std", *(["n"] if "n" in df else [])]
    curves = df.merge(picked, on=[*PANEL, "factor"])[columns].sort_values([*LINE, "x"]).reset_index(drop=True)
    return _smoothed(curves, smooth), chosen


def _smoothed(curves: pd.DataFrame, smooth: int) -> pd.DataFrame:
    if smooth > 1 and not curves.empty:
        curves = curves.copy()
        curves[["nll", "nll_std"]] = curves.groupby(LINE, sort=False)[["nll", "nll_std"]].transform(
            lambda c: c.rolling(smooth, center=True, min_periods=1).mean()
        )
    return curves


def draw_lines(ax, data: pd.DataFrame, facets: Facets) -> str:
    """Each line of ``data`` with its band, markers staggered; returns ``one_band`` of their bands."""
    if "n" not in data:
        data = data.assign(n=1)
    lines = split_rows(data, LINE)
    keys = sorted_lines(data)
    labels = line_labels(facets, keys)
    styles = looks([(k[2], k[:3], k[3]) for k in keys], size=4.5)
    bands = [band_name([int(v) for v in lines[k]["n"]], "one seed, no band") for k in keys]
    shared = one_band(bands)
    for i, (key, label, look, band) in enumerate(zip(keys, labels, styles, bands)):
        g = lines[key].sort_values("x")
        ax.plot(g["x"], g["nll"], label=label if shared else f"{label} ({band})", linewidth=1.4,
                markevery=stagger(i, len(keys), len(g)), **look)  # fmt: skip
        if g["nll_std"].notna().any():
            ax.fill_between(g["x"], g["nll"] - g["nll_std"], g["nll"] + g["nll_std"], color=look["color"],
                            alpha=0.12, linewidth=0)  # fmt: skip
    ax.axvline(1.0, color="gray", linestyle="--", linewidth=1, label="training length T")
    ax.set_xlabel("position in the window (multiples of T)", fontsize=8)
    ax.set_ylabel("mean NLL (nats per token)", fontsize=8)
    ax.grid(True, alpha=0.3)
    handles, texts = ax.get_legend_handles_labels()
    legend(ax, handles, texts, facets.usual(keys), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1)
    return shared


def _smoothing(smooth: int) -> str:
    return f", moving mean over {smooth} buckets" if smooth > 1 else ""


def _band(shared: str) -> str:
    """A panel title's words on the band every line shares ("" when they differ: the labels say)."""
    return "" if not shared else f"; {shared}" if shared.startswith("one seed") else f"; band {shared}"


def plot_positions(
    cells: pd.DataFrame, out_dir: Path, factor: float | None, smooth: int, facets: Facets, formats=output.FORMATS
) -> dict[str, Path]:
    """``positions.png`` (one panel per group, at most MAX_PANELS to a file); {file name: path}."""
    curves, chosen = position_curves(cells, factor, smooth)
    if curves.empty:
        return {}
    panels = []
    for facet, mine in facets.split(curves):
        for panel, data in split_rows(mine, PANEL).items():
            pieces = pack(sorted_lines(data))  # one group's methods, MAX_LINES to a panel
            split = [f"lines {i + 1} of {len(pieces)} panels" if len(pieces) > 1 else "" for i in range(len(pieces))]
            panels += [(facet, panel, rows_on(data, piece), part) for piece, part in zip(pieces, split)]
    files = chunks(panels, MAX_PANELS)
    drawn = {}
    for name, mine in zip(file_names("positions.png", len(files)), files):
        cols = min(3, len(mine))
        rows = -(-len(mine) // cols)
        tallest = max(legend_inches(legend_texts(facets, sorted_lines(data))) for _, _, data, _ in mine)
        fig = Figure(figsize=(5.2 * cols, (4.0 + tallest) * rows), layout="constrained")
        axes = fig.subplots(rows, cols, squeeze=False).ravel()
        for ax in axes[len(mine) :]:
            ax.set_visible(False)
        for ax, (facet, panel, data, part) in zip(axes, mine):
            shared = draw_lines(ax, data, facets)
            group, parent, enc = panel
            names = facets.names([panel])[panel]
            where = " · ".join(p for p in (facet, enc, f"from {parent}" if parent else "", names, part) if p)
            ax.set_title(wrap(f"{where}: at {chosen[panel]:g} T{_band(shared)}"), fontsize=8)
        fig.suptitle(
            f"Loss by token position: one panel per group, mean over its seeds{_smoothing(smooth)}", fontsize=10
        )
        drawn[name] = output.save(fig, out_dir / name, formats)
    return drawn


def longest_per_line(data: pd.DataFrame, keys: list[str], factor: float) -> tuple[pd.DataFrame, list[str]]:
    """Each line's rows at ``factor``, or at its own longest below it; a phrase per line drawn shorter."""
    data = data[data["factor"] == data.groupby(keys)["factor"].transform("max").clip(upper=factor)]
    shorter = data[data["factor"] < factor].drop_duplicates(["encoding", "factor"])
    return data, [f"{r.encoding} drawn at {r.factor:g} x T, its longest" for r in shorter.itertuples()]


def plot_position_encodings(
    cells: pd.DataFrame, factor: float | None, out_dir: Path, smooth: int, facets: Facets, notes: list[str],
    formats=output.FORMATS,
) -> dict[str, Path]:  # fmt: skip
    """``positions_by_encoding.png`` at ``factor`` (``queries.longest_factor``); {file name: path}."""
    if cells.empty or factor is None:
        return {}
    data = cells[(cells["parent"].fillna("") == "") & (cells["protocol"] == "nonoverlapping")]
    data = data.assign(parent="", group=data["group"].fillna(""))
    data, shorter = longest_per_line(data, LINE, factor)
    notes.extend(f"`positions_by_encoding.png`: {said}" for said in shorter)
    data = _smoothed(data[[*LINE, "x", "nll", "nll_std", "n"]].sort_values([*LINE, "x"]), smooth)
    rows = []
    for facet, part in facets.split(data):
        pairs = pair_pieces(part[part["method"].isin(NATIVE)], part[part["encoding"] == "rope"], sorted_lines)
        rows += [
            (panel_title(facet, i, len(pairs)), *pair, facets.among(sorted_lines(part))) for i, pair in enumerate(pairs)
        ]
    files = chunks(rows, 3)
    drawn = {}
    for name, mine in zip(file_names("positions_by_encoding.png", len(files)), files):
        heights = [4.2 + max(legend_inches(legend_texts(named, sorted_lines(p))) for p in pair if p is not None)
                   for _, *pair, named in mine]  # fmt: skip
        fig = Figure(figsize=(12, sum(heights)), layout="constrained")
        axes = fig.subplots(len(mine), 2, squeeze=False, height_ratios=heights)
        for (where, left, right, named), row in zip(mine, axes):
            for ax, lines, what in ((row[0], left, "encodings, no rescaling"), (row[1], right, "RoPE + rescaling")):
                if lines is None:
                    ax.set_visible(False)
                    continue
                shared = draw_lines(ax, lines, named)
                ax.set_title(wrap(f"{where}: {what}, windows of {factor:g} x T{_band(shared)}", 70), fontsize=9)
        fig.suptitle(
            f"Loss by token position, trained runs: one line per group, mean over its seeds{_smoothing(smooth)}"
        )
        drawn[name] = output.save(fig, out_dir / name, formats)
    return drawn
