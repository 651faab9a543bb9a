"""``posx report``: summary tables and plots from the tables runs wrote (no model is loaded).

Inputs are run directories, or directories holding runs (a sweep, or results/runs). Each
run contributes its ``extrapolation.csv``, ``positions.csv`` and ``passkey.csv``; its seed
comes from its ``config.yaml`` and its encoding from the ``pos`` column of its tables. Runs are
pooled only with runs of the same experimental identity (``posx.report.groups``: everything but
the seed equal); within a group, rows line up by method x protocol x factor, and a row's
perplexity is the mean and the sample standard deviation (n - 1) over its runs, one run per
seed. Its band (``ppl_lo``, ``ppl_hi``) is mean ± std over seeds, or for a single seed the
run's own 95% interval over windows. A run without a table is listed in ``missing.csv`` and in
the terminal, never dropped silently. Run paths in the written files are relative to the folder
holding every reported run, so a report names no absolute path of the machine it was made on.

Writes summary.csv/.md, groups.csv, duplicates.csv, passkey_summary.csv, missing.csv, for
extended runs extension.csv (``posx.report.extension``), and the PNGs of posx.report.plots and
extension.png into a fresh directory (default results/reports/<time>/); an existing
report is never overwritten.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from posx.core import files
from posx.core.console import new_console
from posx.core.errors import PosxError
from posx.report import extension, figures, output, plots, task_figures
from posx.report.groups import explain, group_runs, relative_names
from posx.report.runtables import EVALUATIONS, RunTables, find_run_dirs, load_run_tables

# parent is "" for a trained run and the parent for a `posx extend` run (posx.report.runtables), so
# extended runs are grouped by what they came from; their method reads "<method> (extended)" or
# "<method> (zero-shot)" after the table's stage.
GROUP = ["group", "parent", "encoding", "method", "protocol", "factor"]
KEYS = GROUP[:-1]  # a curve: everything but the factor
SUMMARY_COLUMNS = [
    *GROUP,
    "train_context",
    "eval_context",
    "ppl_mean",
    "ppl_std",
    "ppl_lo",
    "ppl_hi",
    "bpb_mean",
    "band",
    "n_seeds",
    "seeds",
    "ratio_to_1x",
    "status",
]
PASSKEY_GROUP = ["group", "encoding", "method", "variant", "factor"]
BAND_SEEDS, BAND_WINDOWS = "± std over seeds", "95% interval over windows (one seed)"


def _combined(runs: list[RunTables], name: str) -> pd.DataFrame:
    """One table over all runs that have it, with run_dir and seed columns."""
    frames = [
        r.tables[name].assign(run_dir=str(r.path), seed=r.seed, parent=r.parent, group=r.group)
        for r in runs
        if name in r.tables
    ]
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True).rename(columns={"pos": "encoding"})
    if "absolute_beyond" in df:  # learned absolute past its table: clamp and interpolate are methods of their own
        beyond = (df["encoding"] == "absolute") & (df["method"] == "none") & ~df["absolute_beyond"].isin(["none", ""])
        df.loc[beyond, "method"] = df.loc[beyond, "absolute_beyond"]
    if name in ("extrapolation.csv", "positions.csv"):  # read_table gives both a stage column
        extended = df["parent"] != ""
        df.loc[extended, "method"] = df.loc[extended, "method"] + " (" + df.loc[extended, "stage"] + ")"
    return df


def _joined(values) -> str:
    return ",".join(str(v) for v in sorted(set(values), key=lambda v: (str(type(v)), v)))


def _statuses(series: pd.Series) -> str:
    counts = series.value_counts()
    if list(counts.index) == ["ok"]:
        return "ok"
    return ", ".join(f"{status} {n}" for status, n in counts.items())


def summarize(ext: pd.DataFrame) -> pd.DataFrame:
    """Perplexity mean and sample std over the runs of a group per method x protocol x factor,
    and its band: mean ± std over seeds, or the one run's interval over windows."""
    rows = []
    for key, g in ext.groupby(GROUP, sort=True):
        ok = g[g["status"] == "ok"]
        ppl = ok["ppl"].tolist()
        mean = sum(ppl) / len(ppl) if ppl else math.nan
        std = pd.Series(ppl).std(ddof=1) if len(ppl) > 1 else math.nan
        one = len(ppl) == 1
        rows.append(
            {
                **dict(zip(GROUP, key)),
                "train_context": _joined(g["train_context"]),
                "eval_context": _joined(g["eval_context"]),
                "ppl_mean": mean,
                "ppl_std": std,
                "ppl_lo": float(ok["ppl_lo"].iloc[0]) if one else mean - std,
                "ppl_hi": float(ok["ppl_hi"].iloc[0]) if one else mean + std,
                "bpb_mean": float(ok["bpb"].mean()) if "bpb" in ok and ppl else math.nan,  # bits per byte
                "band": (BAND_WINDOWS if one else BAND_SEEDS) if ppl else "",
                "n_seeds": len(ppl),
                "seeds": _joined(int(s) for s in ok["seed"] if pd.notna(s)),
                "status": _statuses(g["status"]),
            }
        )
    summary = pd.DataFrame(rows, columns=[c for c in SUMMARY_COLUMNS if c != "ratio_to_1x"])
    base = summary[summary["factor"] == 1.0].set_index(KEYS)["ppl_mean"]
    summary["ratio_to_1x"] = [
        row.ppl_mean / base.get((row.group, row.parent, row.encoding, row.method, row.protocol), math.nan)
        for row in summary.itertuples()
    ]
    return summary[SUMMARY_COLUMNS]


def summarize_passkey(pk: pd.DataFrame) -> pd.DataFrame:
    """Accuracy over all depths per run, then mean and sample std over runs."""
    if pk.empty:
        return pd.DataFrame()
    ok = pk[pk["status"] == "ok"].assign(
        hits=lambda d: d["accuracy"] * d["trials"], nll_sum=lambda d: d["key_nll"] * d["trials"]
    )
    per_run = (
        ok.groupby([*PASSKEY_GROUP, "run_dir"])
        .agg(hits=("hits", "sum"), trials=("trials", "sum"), nll_sum=("nll_sum", "sum"))
        .reset_index()
    )
    per_run["accuracy"] = per_run["hits"] / per_run["trials"]
    per_run["key_nll"] = per_run["nll_sum"] / per_run["trials"]
    stats = per_run.groupby(PASSKEY_GROUP).agg(
        accuracy_mean=("accuracy", "mean"),
        accuracy_std=("accuracy", "std"),  # std: n - 1
        key_nll_mean=("key_nll", "mean"),
        trials_per_run=("trials", _joined),
        n_seeds=("accuracy", "size"),
    )
    # one status per run and group (its depth buckets share it unless some are too short)
    status = (
        pk.drop_duplicates([*PASSKEY_GROUP, "run_dir", "status"])
        .groupby(PASSKEY_GROUP)["status"]
        .agg(_statuses)
        .rename("status")
    )
    out = stats.join(status, how="right").reset_index()
    out["n_seeds"] = out["n_seeds"].fillna(0).astype(int)
    return out


def _inapplicable(g: pd.DataFrame) -> bool:
    """Every cell of the group is not_applicable (a RoPE method on a model without RoPE)."""
    return bool(g["status"].str.startswith("not_applicable").all() and (g["n_seeds"] == 0).all())


def _applicable(summary: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
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


def check_out(out: str | Path | None) -> None:
    """--out must be new or an empty directory: a report is never overwritten."""
    if out is not None:
        out = Path(out)
        if out.is_symlink() or out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise PosxError(
                f"{out} already exists and is not empty; choose a new --out (a report is never overwritten)"
            )


def markdown(
    summary: pd.DataFrame,
    pk_summary: pd.DataFrame,
    missing: pd.DataFrame,
    runs: list[RunTables],
    grouping,
    ext_table: pd.DataFrame | None,
    names: dict[str, str],
) -> str:
    """summary.md; ``names`` maps each run's path to the relative path the report writes."""
    summary = _applicable(summary, KEYS)
    pk_summary = _applicable(pk_summary, PASSKEY_GROUP[:4])
    table = summary.assign(ppl=[ppl_cell(r) for _, r in summary.iterrows()])
    table = table[[*GROUP, "train_context", "ppl", "n_seeds", "seeds", "ratio_to_1x", "status"]]
    lines = [
        "# posx report",
        "",
        f"{len(runs)} run(s) in {len(grouping.groups)} group(s) (see Groups below). Perplexity is the mean "
        "± sample standard deviation (n − 1) over the runs of a group, one run per seed; for a single seed "
        "it is the run's perplexity [95% interval over its scored windows]. `ratio_to_1x` is the mean "
        "perplexity over the mean at 1x of the same group, encoding, method and protocol. Methods that do "
        "not apply to an encoding (RoPE rescalings of a model without RoPE) are left out here; summary.csv "
        "has every row.",
        "",
        table.to_markdown(index=False, floatfmt=".4g"),
        "",
        *explain(grouping, len(runs)),
    ]
    if not pk_summary.empty:
        pk = pk_summary.assign(
            accuracy=[mean_std(m, s, 2) for m, s in zip(pk_summary["accuracy_mean"], pk_summary["accuracy_std"])]
        )
        lines += [
            "## Passkey retrieval",
            "",
            "Exact-match accuracy over all depths, mean ± std over runs.",
            "",
            pk[[*PASSKEY_GROUP, "accuracy", "key_nll_mean", "trials_per_run", "n_seeds", "status"]].to_markdown(
                index=False, floatfmt=".4g"
            ),
            "",
        ]
    if ext_table is not None and not ext_table.empty:
        shown = pd.DataFrame(
            {
                "parent": ext_table["parent"],
                "method": ext_table["method"],
                "factor": ext_table["factor"],
                "steps": ext_table["steps"],
                "zero-shot at s·T": [
                    mean_std(m, s) for m, s in zip(ext_table["zero_shot"], ext_table["zero_shot_std"])
                ],
                "extended at s·T": [mean_std(m, s) for m, s in zip(ext_table["extended"], ext_table["extended_std"])],
                "extended at T": [
                    mean_std(m, s) for m, s in zip(ext_table["extended_1x"], ext_table["extended_1x_std"])
                ],
                "extended at 2s·T": [
                    mean_std(m, s) for m, s in zip(ext_table["extended_2x_new"], ext_table["extended_2x_new_std"])
                ],
                "n_seeds": ext_table["n_seeds"],
            }
        )
        lines += [
            "## Extension",
            "",
            "Perplexity of each `posx extend` experiment (mean ± std over seeds): "
            "zero-shot is the parent with the method's frequencies and no training.",
            "",
            shown.to_markdown(index=False),
            "",
        ]
    if not missing.empty:
        lines += ["## Runs missing tables", "", missing.to_markdown(index=False), ""]
    lines += ["## Runs", ""] + [f"- `{names[str(r.path)]}` (seed {r.seed})" for r in runs]
    return "\n".join(lines) + "\n"


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
    for key, g in summary.groupby(keys, sort=True):
        if _inapplicable(g):
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
        table.add_row(*key, str(g["n_seeds"].max()), *cells)
    return table


def _extensions(runs: list[RunTables]) -> dict:
    """(group, parent, encoding) -> (method, factor, steps) of each group of extended runs."""
    found = {}
    for r in runs:
        ident = r.member.identity
        if r.parent and "extend.method" in ident:
            found[(r.group, r.parent, ident.get("pos.name", ""))] = (
                ident["extend.method"],
                float(ident["extend.factor"]),
                int(float(ident.get("steps", 0))),
            )
    return found


def report(
    paths: list[str | Path],
    out: str | Path | None = None,
    results_dir: str | Path = "results",
    factor: float | None = None,
    console: Console | None = None,
    smooth: int = 1,
    evaluations: str = "current",
    formats: str = "png,pdf",
) -> Path:
    """Build the report; returns its directory. ``formats``: the figure formats kept (``posx.report.output``)."""
    console = console or new_console()
    output.parse_formats(formats)  # a bad --format fails before any work
    if smooth < 1:
        raise PosxError(f"--smooth {smooth} must be at least 1 (buckets in the moving mean)")
    if evaluations not in EVALUATIONS:
        raise PosxError(f"--evaluations {evaluations} is not one of {', '.join(EVALUATIONS)}")
    loaded = [load_run_tables(p, evaluations) for p in find_run_dirs(paths)]
    grouping = group_runs([r.member for r in loaded])
    for r in loaded:
        r.group = grouping.labels.get(r.member.path, "")
    runs = [r for r in loaded if r.member.path in grouping.labels]  # duplicates of a seed count once
    names = relative_names([r.path for r in loaded])
    missing = pd.DataFrame(
        [{"run": names[str(r.path)], "missing": name} for r in runs for name in r.missing], columns=["run", "missing"]
    )
    ext = _combined(runs, "extrapolation.csv")
    if ext.empty:
        raise PosxError(
            f"none of the {len(runs)} run(s) has extrapolation.csv; evaluate them first with posx eval-extrapolate"
        )
    check_out(out)
    summary = summarize(ext)
    pk_summary = summarize_passkey(_combined(runs, "passkey.csv"))
    # Written into a staging directory that becomes the report only when complete.
    metrics = _combined(runs, "metrics.csv")
    if not metrics.empty:
        encodings = {r.path: r.member.identity.get("pos.name", "") for r in runs}
        metrics["encoding"] = [encodings.get(Path(p), "") for p in metrics["run_dir"]]
    extended = _extensions(runs)
    ext_table = extension.extension_table(summary, extended)
    with files.staged_dir(
        None if out is None else Path(out), Path(results_dir) / "reports", time.strftime("%Y%m%d-%H%M%S")
    ) as (staging, published):
        summary.to_csv(staging / "summary.csv", index=False)
        missing.to_csv(staging / "missing.csv", index=False)
        pd.DataFrame(grouping.groups).to_csv(staging / "groups.csv", index=False)
        pd.DataFrame(grouping.duplicates, columns=["run", "seed", "group", "counted"]).to_csv(
            staging / "duplicates.csv", index=False
        )
        if not pk_summary.empty:
            pk_summary.to_csv(staging / "passkey_summary.csv", index=False)
        if not ext_table.empty:
            ext_table.to_csv(staging / "extension.csv", index=False)
        (staging / "summary.md").write_text(
            markdown(summary, pk_summary, missing, runs, grouping, ext_table, names), encoding="utf-8"
        )
        positions = _combined(runs, "positions.csv")
        drawn = plots.draw_all(summary, positions, pk_summary, staging, factor, metrics, smooth)
        drawn["encodings.png"] = figures.plot_encodings(summary, staging / "encodings.png")
        drawn["positions_by_encoding.png"] = figures.plot_position_encodings(
            positions, staging / "positions_by_encoding.png", smooth
        )
        drawn.update(task_figures.draw(_combined(runs, "tasks.csv"), staging))
        drawn["extension.png"] = (
            extension.plot_extension(
                extension.extension_curves(metrics, ext_table, extended), staging / "extension.png"
            )
            if extended
            else None
        )
        output.keep_formats(staging, output.parse_formats(formats))
    out_dir = published[0]
    pngs = {name: None if path is None else out_dir / path.name for name, path in drawn.items()}
    console.print(rich_summary(summary))
    varying = f"; they differ in {', '.join(grouping.varying)}" if grouping.varying else ""
    console.print(
        f"{len(runs)} run(s) in {len(grouping.groups)} group(s) of equal settings but the seed{varying} "
        f"(groups.csv, summary.md)",
        highlight=False,
    )
    note = task_figures.tokenizer_note([r.member.identity for r in runs])
    if note:
        console.print(f"[yellow]note[/] {note}", highlight=False)
    for d in grouping.duplicates:
        console.print(
            f"[yellow]duplicate seed[/] {d['seed']} in {d['group']}: {d['run']} is the same experiment "
            f"as {d['counted']}; counted once",
            highlight=False,
        )
    for r in runs:
        if r.missing:
            console.print(f"[yellow]missing[/] {', '.join(r.missing)} in {r.path}", highlight=False)
        for note in r.notes:
            console.print(f"[yellow]note[/] {r.path}: {note}", highlight=False)
    for name, path in pngs.items():
        console.print(f"{name}: {path}" if path else f"[yellow]{name}: not drawn[/] (no data)", highlight=False)
    console.print(f"wrote {out_dir}", highlight=False)
    return out_dir
