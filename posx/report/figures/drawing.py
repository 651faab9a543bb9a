"""Drawing a report's figures: each figure family is one job (``JOBS``), given only its own tables
cut to the groups drawn (``posx.report.figures.shown``), so a worker's memory follows what it draws.

From ``PARALLEL_LINES`` lines (group x method pairs) or ``PARALLEL_RUNS`` runs read on, with more
than one core, the jobs run in
``spawn`` worker processes (no copy of the report's database connection or its threads), one per
core; else here, one after another. A worker spends seconds starting (matplotlib, pandas): a lone
report of two groups took 20.6 s here and 13.6 s in two workers on a quiet 2-core box, but small
reports mostly run many at once (sweeps, the test suite), where workers only add to busy cores.
Notes for summary.md keep the order of ``JOBS`` whatever order the jobs finish in.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from posx.core.workers import cores
from posx.report.figures import plots, position_figures, ppl_figures, task_figures
from posx.report.figures.facets import Facets


@dataclass(frozen=True)
class Drawing:
    """How the figures are drawn: ``posx report``'s options."""

    facets: Facets
    formats: tuple[str, ...]
    factor: float | None = None
    smooth: int = 1
    median: bool = False


def _ppl(tables: dict, out: Path, how: Drawing, notes: list[str]) -> dict:
    summary = tables["summary"]
    made = {
        "ppl_vs_length.png": ppl_figures.ppl_figures(summary, how.facets),
        "encodings.png": ppl_figures.encodings_figures(summary, how.facets),
        "ppl_median_over_groups.png": ppl_figures.median_figure(summary) if how.median else [],
    }
    drawn: dict = {}
    for name, figures in made.items():
        if figures or name != "ppl_median_over_groups.png":
            drawn.update(ppl_figures.save_all(figures, out, how.formats) or {name: None})
    return drawn


def _positions(tables: dict, out: Path, how: Drawing, notes: list[str]) -> dict:
    return position_figures.plot_positions(tables["positions"], out, how.factor, how.smooth, how.facets, how.formats)


def _positions_by_encoding(tables: dict, out: Path, how: Drawing, notes: list[str]) -> dict:
    return position_figures.plot_position_encodings(
        tables["positions"], tables["longest_factor"], out, how.smooth, how.facets, notes, how.formats
    )


def _facetted(plot, table: str, tables: dict, out: Path, how: Drawing, notes: list[str]) -> dict:
    """A family drawn from one table by facet: ``plot(tables[table], out, facets, formats)``."""
    return plot(tables[table], out, how.facets, how.formats)


# name -> (the tables it reads, the function drawing it), in the order the report lists them
JOBS = {
    "ppl": (("summary",), _ppl),
    "positions": (("positions",), _positions),
    "positions_by_encoding": (("positions", "longest_factor"), _positions_by_encoding),
    "passkey": (("passkey",), partial(_facetted, plots.plot_passkey, "passkey")),
    "training": (("training",), partial(_facetted, plots.plot_training, "training")),
    "tasks": (("tasks",), partial(_facetted, task_figures.figures, "tasks")),
}


PARALLEL_LINES = 24  # lines (group x method) from which the figures are drawn in worker processes
PARALLEL_RUNS = 200  # runs read from which they are too: such a report is rarely one of many at once


def run_job(name: str, tables: dict, out: Path, how: Drawing) -> tuple[dict, list[str]]:
    """One job's files ({name: path}; ``<job>.png``: None when it drew none) and notes for summary.md."""
    notes: list[str] = []
    return JOBS[name][1](tables, out, how, notes) or {f"{name}.png": None}, notes


def draw_all(tables: dict, out: Path, how: Drawing, runs: int = 0, workers: int | None = None) -> tuple[dict, list]:
    """Every job's files and notes; ``runs``: how many the report read; ``workers``: at most this many
    (default: module docstring)."""
    names = list(JOBS)
    mine = [{k: tables[k] for k in JOBS[name][0]} for name in names]
    if workers is None:
        summary = tables["summary"]
        lines = len(summary[["group", "method"]].drop_duplicates()) if {"group", "method"} <= set(summary) else 0
        workers = cores() if lines >= PARALLEL_LINES or runs >= PARALLEL_RUNS else 1
    workers = min(workers, len(names))
    if workers <= 1:
        results = [run_job(name, t, out, how) for name, t in zip(names, mine)]
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            results = list(pool.map(run_job, names, mine, [out] * len(names), [how] * len(names)))
    drawn = {name: path for files, _ in results for name, path in files.items()}
    return drawn, [note for _, said in results for note in said]
