"""Drawing a report's figures: each figure family is one job, the jobs run in worker processes.

A job (``JOBS``: a name, the tables it reads and the function that draws it) gets only its own
tables, already cut to the groups the report draws (``posx.report.figures.shown``), so a worker's memory
follows what it draws, not the number of runs. With at least ``PARALLEL_LINES`` lines to draw
(group and method pairs) and more than one core, the jobs run in as many worker processes as
there are cores (never more than jobs), started fresh (``spawn``: no copy of the report's
database connection or its threads); with fewer lines, one core, or one job, they run here, one
after another. A worker spends seconds starting (it imports matplotlib and pandas): a lone report
of two groups took 20.6 s drawn here and 13.6 s in two workers on a quiet 2-core box, but reports
of a few lines are mostly run many at once (sweeps reported as runs finish, the test suite), where
the workers' start only adds to cores already busy. Each job returns the files it wrote and its notes for
summary.md; the notes are kept in the order of ``JOBS`` whatever order the jobs finish in.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
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
        "ppl_vs_length.png": ppl_figures.ppl_figures(summary, how.facets, notes),
        "encodings.png": ppl_figures.encodings_figures(summary, how.facets, notes),
        "ppl_median_over_groups.png": ppl_figures.median_figure(summary) if how.median else [],
    }
    drawn: dict = {}
    for name, figures in made.items():
        if figures or name != "ppl_median_over_groups.png":
            drawn.update(ppl_figures.save_all(figures, out, how.formats) or {name: None})
    return drawn


def _positions(tables: dict, out: Path, how: Drawing, notes: list[str]) -> dict:
    drawn = position_figures.plot_positions(tables["positions"], out, how.factor, how.smooth, how.facets, notes,
                                            how.formats)  # fmt: skip
    return drawn or {"positions.png": None}


def _positions_by_encoding(tables: dict, out: Path, how: Drawing, notes: list[str]) -> dict:
    drawn = position_figures.plot_position_encodings(
        tables["positions"], tables["longest_factor"], out, how.smooth, how.facets, notes, how.formats
    )
    return drawn or {"positions_by_encoding.png": None}


def _passkey(tables: dict, out: Path, how: Drawing, notes: list[str]) -> dict:
    return plots.plot_passkey(tables["passkey"], out, how.facets, notes, how.formats) or {"passkey.png": None}


def _training(tables: dict, out: Path, how: Drawing, notes: list[str]) -> dict:
    return plots.plot_training(tables["training"], out, how.facets, notes, how.formats) or {"training.png": None}


def _tasks(tables: dict, out: Path, how: Drawing, notes: list[str]) -> dict:
    return task_figures.figures(tables["tasks"], out, how.facets, notes, how.formats)


# name -> (the tables it reads, the function drawing it), in the order the report lists them
JOBS = {
    "ppl": (("summary",), _ppl),
    "positions": (("positions",), _positions),
    "positions_by_encoding": (("positions", "longest_factor"), _positions_by_encoding),
    "passkey": (("passkey",), _passkey),
    "training": (("training",), _training),
    "tasks": (("tasks",), _tasks),
}


PARALLEL_LINES = 24  # lines (group x method) from which the figures are drawn in worker processes


def run_job(name: str, tables: dict, out: Path, how: Drawing) -> tuple[dict, list[str]]:
    """One job: the files it drew ({file name: path or None}) and its notes."""
    notes: list[str] = []
    return JOBS[name][1](tables, out, how, notes), notes


def draw_all(tables: dict, out: Path, how: Drawing, workers: int | None = None) -> tuple[dict, list[str]]:
    """Every job's files and notes (see the module docstring); ``workers``: at most this many
    worker processes (default: the cores, where there are PARALLEL_LINES lines to draw)."""
    names = list(JOBS)
    mine = [{k: tables[k] for k in JOBS[name][0]} for name in names]
    if workers is None:
        summary = tables["summary"]
        lines = len(summary[["group", "method"]].drop_duplicates()) if {"group", "method"} <= set(summary) else 0
        workers = cores() if lines >= PARALLEL_LINES else 1
    workers = min(workers, len(names))
    if workers <= 1:
        results = [run_job(name, t, out, how) for name, t in zip(names, mine)]
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            results = list(pool.map(run_job, names, mine, [out] * len(names), [how] * len(names)))
    drawn: dict = {}
    notes: list[str] = []
    for files, said in results:
        drawn.update(files)
        notes += said
    return drawn, notes
