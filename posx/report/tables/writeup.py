"""The words of a report: ``summary.md`` (damaged runs, how the drawn groups were chosen, one table
per method and protocol of the groups drawn, the groups and why, passkey, extension, missing
tables, the runs, notes on the figures) and the terminal table (``TERMINAL_ROWS`` rows)."""

from __future__ import annotations

import pandas as pd
from rich.table import Table
from rich.text import Text

from posx.report.figures.extension import CELLS
from posx.report.figures.shown import Shown
from posx.report.store.groups import Grouping
from posx.report.store.queries import PASSKEY_KEYS as PASSKEY_GROUP
from posx.report.store.queries import SUMMARY_KEYS as GROUP
from posx.report.store.runtables import RunTables
from posx.report.tables.mdtable import md_table

KEYS = GROUP[:-1]  # a curve: everything but the factor
TERMINAL_ROWS = 40  # rows of the terminal table; summary.md and summary.csv have every row


def applicable(summary: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The summary without groups that are not_applicable at every factor."""
    if summary.empty:
        return summary
    na = summary["status"].str.startswith("not_applicable") & (summary["n_seeds"] == 0)
    return summary[~na.groupby([summary[k] for k in keys]).transform("all")]


def mean_std(mean: float, std: float, digits: int = 3) -> str:
    if mean != mean:
        return "—"
    return f"{mean:.{digits}f}" if std != std else f"{mean:.{digits}f} ± {std:.{digits}f}"


def ppl_cell(row, digits: int = 3) -> str:
    """``mean ± std`` over seeds, or ``ppl [lo, hi]`` (the 95% interval) for one seed."""
    if row["n_seeds"] == 1 and row["ppl_lo"] == row["ppl_lo"]:
        return f"{row['ppl_mean']:.{digits}f} [{row['ppl_lo']:.{digits}f}, {row['ppl_hi']:.{digits}f}]"
    return mean_std(row["ppl_mean"], row["ppl_std"], digits)


def markdown(summary: pd.DataFrame, tables: dict, runs: list[RunTables], grouping, names: dict[str, str],
             shown: Shown) -> str:  # fmt: skip
    """summary.md; ``names``: run path -> the relative path written; ``shown``: the groups drawn."""
    pk_summary, missing, ext_table = tables["passkey"], tables["missing"], tables["extension"]
    lines = [
        "# posx report",
        "",
        *_damaged_section(tables["damaged"]),
        *_summary_section(shown.rows(applicable(summary, KEYS)), len(runs), len(grouping.groups), shown),
        *explain(grouping, len(runs), None if shown.lines is None else {k[0] for k in shown.lines}),
        *_passkey_section(shown.rows(applicable(pk_summary, PASSKEY_GROUP[:4]))),
        *_extension_section(ext_table),
    ]
    if not missing.empty:
        lines += ["## Runs missing tables", "", *_listed(missing, "missing.csv")]
    lines += ["## Runs", ""]
    if len(runs) > LISTED:
        return "\n".join([*lines, f"{len(runs)} runs: groups.csv lists each group's run folders and seeds."]) + "\n"
    lines += [f"- `{names[str(r.path)]}` (seed {r.seed})" for r in runs]
    return "\n".join(lines) + "\n"


LISTED = 200  # runs and missing tables summary.md lists one by one; past that it points to the CSVs


def _damaged_section(damaged: pd.DataFrame) -> list[str]:
    """The runs left out because a file of theirs is damaged, each with why and how to fix it."""
    if damaged.empty:
        return []
    return [
        "## Runs left out as damaged",
        "",
        f"{len(damaged)} run(s) are not in this report: posx refused a file of each (below, what is damaged "
        "and how to fix it; damaged.csv lists every one). Fix them and report again to include them.",
        "",
        *_listed(damaged, "damaged.csv"),
    ]


def _listed(table: pd.DataFrame, csv: str) -> list[str]:
    """``table``'s first LISTED rows as Markdown lines, and how many more ``csv`` lists."""
    more = len(table) - LISTED
    return [
        md_table(table.head(LISTED)),
        "",
        *([f"... and {more} more: {csv} lists every one", ""] if more > 0 else []),
    ]


def pivot(summary: pd.DataFrame) -> list[str]:
    """Per method x protocol a Markdown table: a row per group, a column per factor (``ppl_cell``)."""
    if summary.empty:
        return []
    table = summary.assign(ppl=[ppl_cell(r) for r in summary.to_dict("records")], parent=summary["parent"].fillna(""))
    factors = sorted(table["factor"].unique())
    out = []
    for (method, protocol), rows in table.groupby(["method", "protocol"], sort=True):
        wide = rows.pivot(index=["encoding", "parent", "group"], columns="factor", values="ppl")
        order = list(dict.fromkeys(zip(rows["encoding"], rows["parent"], rows["group"])))
        wide = wide.reindex(columns=factors).reindex(order)
        wide.columns = [f"{f:g}x" for f in factors]
        wide = wide.astype(object).fillna("—").reset_index()  # a factor no group of this method reached: all NaN
        if not wide["parent"].astype(bool).any():
            wide = wide.drop(columns="parent")
        out += [f"### method {method}, {protocol} windows", "", md_table(wide), ""]
    return out


def _summary_section(summary: pd.DataFrame, runs: int, groups: int, shown: Shown) -> list[str]:
    """The title, what the numbers are, and the summary tables (one per method), as markdown lines."""
    said = "the groups the figures draw" if shown.lines is not None else "every group"
    return [
        *([shown.note, ""] if shown.note else []),
        f"{runs} run(s) in {groups} group(s) (see Groups below). Perplexity is the mean "
        "± sample standard deviation (n − 1) over the runs of a group, one run per seed; for a single seed "
        "it is the run's perplexity [95% interval over its scored windows]. Below, one table per method and "
        f"protocol, {said} by rows, the evaluation length (x T) by columns; summary.csv has every row "
        "(with `ratio_to_1x`, the seeds and the status). Methods that do not apply to an encoding (RoPE "
        "rescalings of a model without RoPE) are left out here.",
        "",
        *pivot(summary),
    ]


def _passkey_section(pk_summary: pd.DataFrame) -> list[str]:
    """The passkey section's markdown lines; none without passkey rows."""
    if pk_summary.empty:
        return []
    pk = pk_summary.assign(
        accuracy=[mean_std(m, s, 2) for m, s in zip(pk_summary["accuracy_mean"], pk_summary["accuracy_std"])]
    )
    table = md_table(pk[[*PASSKEY_GROUP, "accuracy", "key_nll_mean", "trials_per_run", "n_seeds", "status"]], ".4g")
    return _section("## Passkey retrieval", "Exact-match accuracy over all depths, mean ± std over runs.", table)


# The extension section's columns: (heading, mean column, std column) of extension.csv.
HEADINGS = ("zero-shot at s·T", "extended at s·T", "extended at T", "extended at 2s·T")
EXTENSION_CELLS = [(heading, cell, f"{cell}_std") for heading, cell in zip(HEADINGS, CELLS)]


def _extension_section(ext_table: pd.DataFrame | None) -> list[str]:
    """The extension section's markdown lines; none without extension experiments."""
    if ext_table is None or ext_table.empty:
        return []
    shown = pd.DataFrame(
        {
            **{key: ext_table[key] for key in ("parent", "method", "factor", "steps")},
            **{
                heading: [mean_std(m, s) for m, s in zip(ext_table[mean], ext_table[std])]
                for heading, mean, std in EXTENSION_CELLS
            },
            "n_seeds": ext_table["n_seeds"],
        }
    )
    said = (
        "Perplexity of each `posx extend` experiment (mean ± std over seeds): "
        "zero-shot is the parent with the method's frequencies and no training."
    )
    return _section("## Extension", said, md_table(shown))


def _section(heading: str, said: str, table: str) -> list[str]:
    """Markdown lines of a section: its heading, what it says, its table."""
    return [heading, "", said, "", table, ""]


def figure_notes(notes: list[str]) -> str:
    """The section summary.md ends with: what the figures say beyond their titles."""
    return "\n".join(["", "## Figures", "", *(f"- {note}" for note in notes)]) + "\n" if notes else ""


def rich_summary(summary: pd.DataFrame) -> Table:
    """Encoding x method (x protocol, when several) by rows, factors by columns."""
    factors = sorted(summary["factor"].unique())
    keys = [k for k in KEYS if summary[k].nunique() > 1 or k in ("encoding", "method")]
    protocol = "" if "protocol" in keys else f", {summary['protocol'].iloc[0]}"
    table = Table(title=f"perplexity, mean ± std over seeds or [95% interval] of one seed{protocol}")
    for name in keys:
        table.add_column(name)
    table.add_column("n", justify="right")
    for f in factors:
        table.add_column(f"{f:g}x", justify="right")
    shown = 0
    for key, g in summary.groupby(keys, sort=True):
        if g["status"].str.startswith("not_applicable").all() and (g["n_seeds"] == 0).all():  # a RoPE method, no RoPE
            continue
        shown += 1
        if shown > TERMINAL_ROWS:
            continue
        cells = []
        for f in factors:
            r = g[g["factor"] == f]
            if r.empty:
                cells.append("")
            elif r["n_seeds"].iloc[0] == 0:
                status = r["status"].iloc[0].split()[0].replace("not_applicable", "n/a")
                cells.append(f"[dim]{status}[/]")
            else:
                cells.append(ppl_cell(r.iloc[0]).replace(" ± ", "±"))
        # Text: a group label holds list values such as [none,pi], which markup would swallow
        table.add_row(*(Text(str(k)) for k in key), str(g["n_seeds"].max()), *cells)
    if shown > TERMINAL_ROWS:
        table.caption = f"the first {TERMINAL_ROWS} of {shown} rows; summary.md and summary.csv have all of them"
    return table


def explain(grouping: Grouping, runs: int, shown: set | None = None) -> list[str]:
    """Markdown lines: what was grouped and why, a table of the groups in ``shown`` (None: all)."""
    lines = [
        "## Groups",
        "",
        f"{runs} run(s) form {len(grouping.groups)} group(s). Runs are pooled as seeds of one experiment only "
        "when everything but the seed is equal: model size and encoding, T, training steps and settings, "
        "the corpus fingerprint, the evaluation settings (tokens, protocol, stride, methods and their "
        "parameters) and, for extended runs, parent, method and factor (posx/report/store/groups.py lists the keys).",
    ]
    if grouping.varying:
        lines += ["", "The groups differ in: " + ", ".join(f"`{k}`" for k in grouping.varying) + "."]
    listed = [g for g in grouping.groups if shown is None or g["label"] in shown]
    if len(listed) < len(grouping.groups):
        lines += ["", f"The {len(listed)} group(s) the figures draw; groups.csv lists all {len(grouping.groups)}:"]
    lines += ["", md_table(pd.DataFrame(listed)), ""]
    if grouping.duplicates:
        said = "These runs repeat a seed of their group (the same experiment twice); each is counted once, as the run "
        lines += _section("### Duplicate seeds", said + "evaluated last:", md_table(pd.DataFrame(grouping.duplicates)))
    return lines
