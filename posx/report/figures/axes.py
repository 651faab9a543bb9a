"""What the axes of every report figure share: the legend order of methods, one colour per line
name, readable log ticks, the factor axis with T marked, one legend per figure."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter, NullFormatter

from posx.report.figures import palette
from posx.schema.config import EvalConfig
from posx.schema.methods import METHOD_PARAMS

# Legend order: the methods evaluated by default, the other RoPE methods in the order
# posx.schema.methods declares them, then the learned table's interpolate.
_DEFAULT_METHODS = EvalConfig().methods
METHOD_ORDER = [*_DEFAULT_METHODS, *(m for m in METHOD_PARAMS if m not in _DEFAULT_METHODS), "interpolate"]


def legend_order(name: str) -> tuple:
    """Legend order: none, pi, ntk, yarn, abf, ... (a stage suffix sorts after its method)."""
    base = name.split(" ")[0]
    return (METHOD_ORDER.index(base) if base in METHOD_ORDER else len(METHOD_ORDER), name)


def colors_for(names) -> dict:
    """One colour per name (encoding x method), the same in every figure (``posx.report.figures.palette``)."""
    return palette.colors_for(sorted(set(names), key=legend_order))


def log_ticks(ax, lo: float, hi: float) -> None:
    """Readable labels on a log axis, also when the data span less than a decade."""
    lo, hi = max(lo, 1e-12), max(hi, lo * 1.01)
    for digits in (2, 3, 4, 5):  # enough digits for the ticks to differ over a narrow span
        ticks = sorted({float(f"{t:.{digits}g}") for t in np.geomspace(lo, hi, 6)})
        if len(ticks) >= 4:
            break
    ax.set_yticks(ticks)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def factor_axis(ax, factors, lengths: dict | None = None) -> None:
    """Factors on a log2 axis; a factor whose rows share one length also shows it in tokens."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(factors)
    ax.set_xticklabels([f"{f:g}x\n(L={lengths[f]})" if lengths and f in lengths else f"{f:g}x" for f in factors])
    ax.minorticks_off()
    ax.axvline(1.0, color="gray", linestyle="--", linewidth=1, label="training length T")
    ax.grid(True, which="major", alpha=0.3)


def legend_entries(axes) -> dict:
    """label -> handle of every line on ``axes``, each label once (its first)."""
    entries: dict = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    return entries


def figure_legend(fig, axes) -> None:
    """One legend for all panels, right of the last, each label once."""
    entries = legend_entries(axes)
    palette.legend(fig, list(entries.values()), list(entries), loc="upper left", bbox_to_anchor=(1.0, 0.93), fontsize=9)
