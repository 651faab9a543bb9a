"""``posx report``: summary tables and figures from the tables runs wrote (no model is loaded).

Runs come through their digests and the report cache (``store``); runs pool only as seeds of
one group (``store.groups``), a row's perplexity the mean and sample std over them, its band
mean ± std or, for one seed, the run's 95% interval over windows. A run without a table is listed
(``missing.csv``), one refused as damaged left out and named (``damaged.csv``, summary.md, the
terminal). Everything is written into a staging folder published whole; run paths are relative
to the folder holding the runs. See docs/evaluation.md, "Reports".
"""

from __future__ import annotations

import math
import time
from functools import partial
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape

from posx.core import files
from posx.core.console import new_console
from posx.core.errors import PosxError, choose
from posx.report.figures import drawing as drawing_
from posx.report.figures import extension, learning, output, task_figures
from posx.report.figures import shown as shown_
from posx.report.figures.facets import facets_of
from posx.report.figures.shown import Shown
from posx.report.store import cache, queries, selection
from posx.report.store.groups import group_runs, relative_names
from posx.report.store.runtables import RunTables, check_evaluations, collect, every_one_damaged, find_run_dirs
from posx.report.tables.writeup import GROUP, KEYS, applicable, figure_notes, markdown, rich_summary
from posx.runs.paths import RESULTS

SUMMARY_COLUMNS = [  # bpb_mean: bits per byte, comparable across tokenizers
    *GROUP, "train_context", "eval_context", "ppl_mean", "ppl_std", "ppl_lo", "ppl_hi", "bpb_mean", "band", "n_seeds",
    "seeds", "ratio_to_1x", "status",
]  # fmt: skip
TERMINAL_LINES = 20  # duplicates, missing tables and notes printed; the files list every one
DAMAGED_LINES = 5  # runs left out as damaged named in the terminal; damaged.csv lists every one
BAND_SEEDS, BAND_WINDOWS = "± std over seeds", "95% interval over windows (one seed)"


def summarize(con) -> pd.DataFrame:
    """Perplexity mean and sample std over a group's runs per cell, its band and ratio to 1x."""
    summary = queries.summary(con)
    one = summary["n_seeds"] == 1
    summary["ppl_lo"] = summary["one_lo"].where(one, summary["ppl_mean"] - summary["ppl_std"])
    summary["ppl_hi"] = summary["one_hi"].where(one, summary["ppl_mean"] + summary["ppl_std"])
    summary["band"] = [(BAND_WINDOWS if n == 1 else BAND_SEEDS) if n else "" for n in summary["n_seeds"]]
    summary["n_seeds"] = summary["n_seeds"].astype(int)
    base = summary[summary["factor"] == 1.0][[*KEYS, "ppl_mean"]].rename(columns={"ppl_mean": "base"})
    summary = summary.merge(base, on=KEYS, how="left")
    summary["ratio_to_1x"] = summary["ppl_mean"] / summary["base"]
    return summary[SUMMARY_COLUMNS].astype(
        {"ppl_mean": float, "ppl_std": float, "ppl_lo": float, "ppl_hi": float, "bpb_mean": float}
    )


def _extensions(runs: list[RunTables]) -> dict:
    """(group, parent, encoding) -> (method, factor, steps) of each group of extended runs."""
    found = {}
    for r in runs:
        ident = r.member.identity
        if r.parent and "extend.method" in ident:
            key = (r.group, r.parent, ident.get("pos.name", ""))
            found[key] = (ident["extend.method"], float(ident["extend.factor"]), int(float(ident.get("steps", 0))))
    return found


def _load(paths: list[str | Path], evaluations: str, reports: Path, where: list[tuple[str, str]]):
    """(selected runs, counted runs, their grouping, the gathered tables with view ``runs``)."""
    loaded, gathered = collect(find_run_dirs(paths), evaluations, reports / cache.CACHE)
    try:
        loaded = learning.sound(loaded, gathered.damaged)
        if not loaded:
            raise every_one_damaged(gathered.damaged)
        kept = selection.keep([r.member.identity if r.member else {} for r in loaded], where)
        loaded = [r for r, keep in zip(loaded, kept) if keep]
        con = gathered.con
        grouping = group_runs([r.member for r in loaded])
        for r in loaded:
            r.group = grouping.labels.get(r.member.path, "")
        runs = [r for r in loaded if r.member.path in grouping.labels]  # duplicates of a seed count once
        con.register(
            "runs",
            pd.DataFrame(
                {
                    "run": [str(r.path) for r in runs],
                    "group": [r.group for r in runs],
                    "seed": pd.array([r.seed for r in runs], dtype="Int64"),
                    "parent": [r.parent for r in runs],
                    "encoding": [r.member.identity.get("pos.name", "") for r in runs],
                }
            ),
        )
        queries.extrapolation_rows(con)
    except BaseException:
        cache.discard(gathered)
        raise
    return loaded, runs, grouping, gathered


def _tables_csv(staging: Path, tables: dict, grouping, ranked: pd.DataFrame) -> None:
    """The report's CSV tables, every group in each."""
    for key in ("summary", "missing", "damaged"):
        tables[key].to_csv(staging / f"{key}.csv", index=False)
    pd.DataFrame(grouping.groups).to_csv(staging / "groups.csv", index=False)
    ranked.to_csv(staging / "groups_ranked.csv", index=False)
    pd.DataFrame(grouping.duplicates, columns=["run", "seed", "group", "counted"]).to_csv(
        staging / "duplicates.csv", index=False
    )
    for key, name in (("passkey", "passkey_summary.csv"), ("extension", "extension.csv")):
        if not tables[key].empty:
            tables[key].to_csv(staging / name, index=False)
    tasks = task_figures.summarize_tasks(tables["tasks"])
    if not tasks.empty:
        tasks.to_csv(staging / "tasks_summary.csv", index=False)


def _write(staging: Path, tables: dict, runs, grouping, names, shown: Shown, drawing: drawing_.Drawing) -> dict:
    """Every file of the report into ``staging``; returns the PNGs drawn (name -> path or None)."""
    _tables_csv(staging, tables, grouping, tables["ranked"])
    text = markdown(tables["summary"], tables, runs, grouping, names, shown)
    (staging / "summary.md").write_text(text, encoding="utf-8")  # the figures come after it
    learned, identities = learning.gather(runs)
    if not learned.empty:
        learned.to_csv(staging / "task_learning.csv", index=False)
    if not drawing.formats:  # --format none: the tables alone
        drawn, notes = {}, ["no figures: `--format none` asked for the tables alone"]
    else:
        drawn, notes = _figures(staging, tables, shown, drawing, len(runs))
        drawn["task_learning.png"] = learning.plot(shown.rows(learned), identities, staging / "task_learning.png",
                                                   drawing.formats)  # fmt: skip
    with open(staging / "summary.md", "a", encoding="utf-8") as f:
        f.write(figure_notes(notes))
    return drawn


def _figures(staging: Path, tables: dict, shown: Shown, drawing: drawing_.Drawing, runs: int) -> tuple[dict, list[str]]:
    """The figures of the groups ``shown`` draws, and the notes summary.md gives under them."""
    drawn_tables = {k: shown.rows(v) if isinstance(v, pd.DataFrame) else v for k, v in tables.items()}
    drawn, notes = drawing_.draw_all(drawn_tables, staging, drawing, runs)
    if drawing.facets.keys:
        differ = ", ".join(drawing.facets.keys)
        notes.append(f"groups differ in {differ}: no figure pools them; each facet has its own panels or files")
    curves = extension.extension_curves(tables["training"], tables["extension"], tables["extended"])  # none: empty
    drawn["extension.png"] = extension.plot_extension(curves, staging / "extension.png", drawing.formats)
    return drawn, notes


def _tell(console: Console, summary: pd.DataFrame, runs: list[RunTables], grouping, figures: dict, out_dir: Path):
    """What the report prints: the summary's first rows, the groups, duplicates, missing tables, files."""
    console.print(rich_summary(summary))
    say = partial(console.print, highlight=False)
    varying = f"; they differ in {escape(', '.join(grouping.varying))}" if grouping.varying else ""
    say(f"{len(runs)} run(s) in {len(grouping.groups)} group(s) of equal settings but the seed{varying} "
        f"(groups.csv, summary.md)")  # fmt: skip
    # escape(): run paths and notes print as written, [brackets] included
    said = [
        f"[yellow]duplicate seed[/] {d['seed']} in {escape(str(d['group']))}: {escape(d['run'])} is the "
        f"same experiment as {escape(d['counted'])}; counted once"
        for d in grouping.duplicates
    ]
    for r in runs:
        said += [f"[yellow]missing[/] {', '.join(r.missing)} in {escape(str(r.path))}"] if r.missing else []
        said += [f"[yellow]note[/] {escape(str(r.path))}: {escape(note)}" for note in r.notes]
    for line in said[:TERMINAL_LINES]:
        say(line)
    if len(said) > TERMINAL_LINES:
        say(f"... and {len(said) - TERMINAL_LINES} more (duplicates.csv, missing.csv)")
    for name, paths in figures.items():  # the files of each figure, in the formats kept
        drawn = escape(", ".join(str(p) for p in paths))
        stem = Path(name).stem
        say(f"{stem}: {drawn}" if paths else f"[yellow]{stem}: not drawn[/] (no data)")
    sizes = [p.stat().st_size for p in out_dir.rglob("*") if p.is_file()]
    say(f"wrote {escape(str(out_dir))} ({len(sizes)} files, {sum(sizes) / 1e6:.1f} MB)")


def _tell_after(say, damaged: dict, summary: pd.DataFrame, runs: list[RunTables]) -> None:
    """After the files: a line per run left out as damaged (past ``DAMAGED_LINES``, the count and the
    first few), then notes on tokenizers that differ and on runs that diverged."""
    if len(damaged) > DAMAGED_LINES:
        say(f"[yellow]left out[/] {len(damaged)} damaged run(s) (damaged.csv); the first:")
    for why in list(damaged.values())[:DAMAGED_LINES]:
        say(f"[yellow]left out[/] a damaged run: {escape(why)}")
    if len(damaged) > DAMAGED_LINES:
        say(f"... and {len(damaged) - DAMAGED_LINES} more (damaged.csv)")
    note = task_figures.tokenizer_note([r.member.identity for r in runs])
    if note:
        say(f"[yellow]note[/] {escape(note)}")
    diverged = sorted(set(summary.loc[summary["ppl_mean"] == math.inf, "group"].astype(str)))
    if diverged:
        say(f"[yellow]note[/] ppl inf in {escape(', '.join(diverged))}: a run's mean NLL is past what exp holds "
            "(it diverged); summary.csv keeps inf, the figures mark it with a triangle at the top")  # fmt: skip


def check_factor(factor: float | None, positions: pd.DataFrame, summary: pd.DataFrame) -> None:
    """``--factor`` must be a factor of the tables, else the plot would quietly draw another."""
    have = sorted(set((positions if not positions.empty else summary)["factor"].astype(float)))
    if factor is None or any(math.isclose(factor, f) for f in have):
        return
    raise PosxError(f"--factor {factor:g} is not a factor the runs were evaluated at; {choose(f'{f:g}' for f in have)}")


def _publish(loaded, runs, grouping, gathered, out, results_dir, top, options):
    """Every table into a staging folder, published whole: (its folder, summary, PNGs drawn, formats)."""
    con = gathered.con
    names = relative_names([r.path for r in loaded] + list(gathered.damaged))
    damaged = pd.DataFrame(
        [{"run": names[str(p)], "reason": why} for p, why in gathered.damaged.items()], columns=["run", "reason"]
    )
    missing = pd.DataFrame(
        [{"run": names[str(r.path)], "missing": name} for r in runs for name in r.missing], columns=["run", "missing"]
    )
    if con.execute("SELECT count(*) FROM ext_rows").fetchone()[0] == 0:
        raise PosxError(
            f"none of the {len(runs)} run(s) has extrapolation.csv; evaluate them first with posx eval-extrapolate"
        )
    summary = summarize(con)
    extended = _extensions(runs)
    tables = {
        "summary": summary,
        "passkey": queries.passkey(con),
        "missing": missing,
        "damaged": damaged,
        "positions": queries.positions(con),
        "longest_factor": queries.longest_factor(con),
        "training": queries.training(con),
        "tasks": queries.tasks(con),
        "extended": extended,
        "extension": extension.extension_table(summary, extended),
        "ranked": shown_.rank(applicable(summary, KEYS)),
    }
    check_factor(options["factor"], tables["positions"], summary)
    shown = shown_.choose(tables["ranked"], *top)
    formats = options["formats"]
    if formats is None:  # the default: both, PNG only when the figures draw a choice of the groups
        formats = LARGE_FORMATS if shown.lines is not None else output.FORMATS
    lines = grouping.identities
    facets = facets_of({k: v for k, v in lines.items() if shown.lines is None or tuple(map(str, k)) in shown.lines})
    facets = shown_.titled(facets, shown)
    how = drawing_.Drawing(facets, formats, options["factor"], options["smooth"], options["median"])
    # Written into a staging directory that becomes the report only when complete.
    with files.staged_dir(
        None if out is None else Path(out), Path(results_dir) / "reports", time.strftime("%Y%m%d-%H%M%S")
    ) as (staging, published):
        drawn = _write(staging, tables, runs, grouping, names, shown, how)
    return published[0], shown.rows(summary), drawn, formats  # the terminal shows the groups drawn


LARGE_FORMATS = ("png",)  # a report with more groups than it draws: PNG only unless --format asks for PDF


def report(
    paths: list[str | Path],
    out: str | Path | None = None,
    results_dir: str | Path = RESULTS,
    factor: float | None = None,
    console: Console | None = None,
    smooth: int = 1,
    evaluations: str = "current",
    formats: str | None = None,
    where: list[str] | None = None,
    median: bool = False,
    top: str | int | None = None,
) -> Path:
    """Build the report; returns its directory. ``formats``: ``--format`` (None: PNG and PDF, PNG
    only when the figures draw a choice of the groups); ``where``: ``--where``; ``median``:
    ``--median-over-groups``; ``top``: ``--top`` (None: the default)."""
    console = console or new_console()
    if smooth < 1:
        raise PosxError(f"--smooth {smooth} must be at least 1 (buckets in the moving mean)")
    if factor is not None and not (math.isfinite(factor) and factor > 0):
        raise PosxError(f"--factor {factor:g} must be a finite number above 0 (an evaluated factor, e.g. 4)")
    check_evaluations(evaluations)
    conditions = selection.parse(where)
    kept = None if formats is None else output.parse_formats(formats)  # a bad --format fails before any work
    groups = shown_.parse_top(top)
    if out is not None:  # new or an empty directory: a report is never overwritten
        files.new_dir(out, "--out")
    reports = Path(out).parent if out is not None else Path(results_dir) / "reports"
    files.check_dir(reports / cache.CACHE, "the report cache")  # before any work, not once the report is out
    loaded, runs, grouping, gathered = _load(paths, evaluations, reports, conditions)
    options = {"factor": factor, "smooth": smooth, "formats": kept, "median": median}
    try:
        out_dir, summary, drawn, kept = _publish(
            loaded, runs, grouping, gathered, out, results_dir, (groups, top is not None), options
        )
    except BaseException:
        cache.discard(gathered)
        raise
    cache.keep(gathered)
    figures = {
        name: [] if path is None else [out_dir / f"{path.stem}.{fmt}" for fmt in kept] for name, path in drawn.items()
    }
    _tell(console, summary, runs, grouping, figures, out_dir)
    _tell_after(partial(console.print, highlight=False), gathered.damaged, summary, runs)
    return out_dir
