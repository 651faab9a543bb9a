"""The second edition's headline figure: perplexity against evaluation length for every kind of run,
in four panels a reader can take in at a glance (``headline.png``, ``headline.pdf``).

1. the encodings trained from scratch, no rescaling (learned absolute past its table: interpolated);
2. RoPE with each training option, against plain RoPE;
3. plain RoPE with each frequency method, zero-shot;
4. plain RoPE with each method that acts in attention, zero-shot.

Byte-level runs on the gpt2 block, non-overlapping windows; a point is the mean over seeds, its
bar ± the sample std over seeds, the legend says how many seeds. Colours and markers are the
report's own (``posx.report.figures.palette``); lines that would coincide sit side by side
(``palette.dodge``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from posx.model.rescale import WINDOWED
from posx.report.figures.axes import factor_axis, log_ticks
from posx.report.figures.output import save
from posx.report.figures.palette import color_of, distinct, dodge, marker_of
from posx.rope import METHODS
from scripts.study import sections as study_sections  # the sweep's numbers per kind of run

ENCODINGS = ["rope", "absolute", "sinusoidal", "alibi", "t5", "nope", "fire", "kerple", "cope", "xpos"]
OPTIONS = {
    "rope": "RoPE",
    "rope-partial": "a quarter of the pairs rotating",
    "rope-randomized": "randomized positions",
    "rope-hybrid": "NoPE every 2nd layer",
    "rope-logn": "log-n scaling",
    "rope-ssmax": "Scalable-Softmax",
}
FREQUENCY = [m for m in METHODS if m not in WINDOWED]  # none first, then those that set frequencies
ATTENTION = ["none", *(m for m in METHODS if m in WINDOWED)]  # those that act in attention
CAPTION = (
    "Perplexity against evaluation length (log-log; T dashed), byte-level runs on the gpt2 block, "
    "non-overlapping windows; mean over seeds, bars ± std over seeds, seeds in the legend. Top left: each "
    "encoding trained from scratch, no rescaling (learned absolute past its table: interpolated). Top right: "
    "RoPE trained with each option. Bottom: plain RoPE with each rescaling method, zero-shot; left, the "
    "methods that set frequencies; right, those that act in attention."
)


def _lines(table: pd.DataFrame) -> list[list[tuple]]:
    """Each panel's lines: (kind, method, absolute_beyond, legend name, colour, marker)."""
    beyond = lambda kind: "interpolate" if kind == "absolute" else "none"  # noqa: E731
    encodings = [(k, "none", beyond(k), k if k != "absolute" else "absolute (interpolated)") for k in ENCODINGS]
    panels = [
        [(*line, color_of(line[0]), marker_of(line[0])) for line in encodings],
        [(k, "none", "none", name, c, "o") for (k, name), c in zip(OPTIONS.items(), distinct(len(OPTIONS)))],
        [("rope", m, "none", m, color_of(m), marker_of(m)) for m in FREQUENCY],
        [("rope", m, "none", m, color_of(m), marker_of(m)) for m in ATTENTION],
    ]
    kinds = set(zip(table["kind"], table["method"], table["absolute_beyond"]))
    return [[line for line in panel if line[:3] in kinds] for panel in panels]


TITLES = [
    "Encodings, no rescaling",
    "RoPE with a training option",
    "RoPE + a frequency method, zero-shot",
    "RoPE + an attention-side method, zero-shot",
]


def figure(sweep: pd.DataFrame) -> Figure:
    """The figure of the module docstring from a study's sweep.csv."""
    table = study_sections.cells(sweep, "ppl")
    table = table[table["protocol"] == "nonoverlapping"]
    factors = sorted(table["factor"].unique())
    fig = Figure(figsize=(13, 9.5), layout="constrained")
    axes = list(fig.subplots(2, 2, sharey=True).flat)
    drawn = []
    for ax, title, lines in zip(axes, TITLES, _lines(table)):
        for i, (kind, method, beyond, name, colour, marker) in enumerate(lines):
            g = table[(table["kind"] == kind) & (table["method"] == method) & (table["absolute_beyond"] == beyond)]
            g = g.sort_values("factor")
            x = dodge(g["factor"], i, len(lines), factors)
            seeds = "/".join(str(n) for n in sorted(set(g["count"])))
            ax.plot(x, g["mean"], color=colour, marker=marker, markersize=4, linewidth=1.2, label=f"{name} ({seeds})")
            sd = g["std"].fillna(0)
            ax.vlines(x, g["mean"] - sd, g["mean"] + sd, color=colour, linewidth=0.8, alpha=0.6)
            drawn += [*(g["mean"] - sd), *(g["mean"] + sd)]
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("perplexity (log scale)", fontsize=8)
        ax.set_xlabel("evaluation length (x T, log scale)", fontsize=8)
        factor_axis(ax, factors)
        ax.legend(fontsize=7, frameon=False, loc="upper left", title="(seeds)", title_fontsize=7)
    for ax in axes:  # one range for the shared axis, from every line drawn
        ax.set_yscale("log")
        log_ticks(ax, min(drawn), max(drawn))
    fig.suptitle(
        "Perplexity against evaluation length, byte-level runs, gpt2 block, non-overlapping windows; mean over "
        "seeds, bars ± std over seeds; lines offset sideways a few percent of a factor so equal values stay visible",
        fontsize=9,
    )
    return fig


def draw(sweep: pd.DataFrame, out: Path) -> Path:
    """headline.png and .pdf in ``out``; the PNG's path."""
    return save(figure(sweep), out / "headline.png")
