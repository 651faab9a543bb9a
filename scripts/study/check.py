"""Does this machine reproduce the committed reference study? Compare runs made again with it.

    python -m scripts.study.reference --only rope-s0 --check      # train, evaluate, compare one run
    python -m scripts.study.check --work results/study/cpu-tiny --reference results/reference/cpu-tiny

Every cell of the reference's ``sweep.csv`` (one perplexity per run, method, protocol, factor,
stage and learned-absolute policy) whose run is under ``--work``'s ``runs/`` is compared with the
same cell of that run's evaluations: the status must match, and the perplexities must differ by
at most ``--tolerance`` standard deviations of that cell over the reference's seeds (the same
run name but for its ``-s<seed>``). Runs are not bit-identical across CPUs (their float32 kernels
round differently, and 800 training steps carry that on), and a cell far past T moves more with
any perturbation than one at T; the seeds' spread measures that per cell, so the check is loose
at 8x where the study's own verdicts are, and tight at 1x. A second CPU came within 0.41 standard
deviations in every cell of ``rope-s0`` (docs/measurements.md, "A second CPU"). Exit 0 when every
compared cell agrees, 1 when one does not (a cell without a seed spread cannot agree) or a run
named has no cell, 2 on bad input.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

from scripts.study.args import OneLineParser

KEYS = ["job", "method", "protocol", "absolute_beyond", "factor", "stage"]  # one cell of sweep.csv
TOLERANCE = 1.0  # seed standard deviations of a cell accepted between the reference and a run made again
SEED = re.compile(r"-s\d+(?=-|$)")  # the seed in a study's run name: rope-s0, rope-s0-yarn-x4


def made_again(runs: Path) -> pd.DataFrame:
    """Every evaluation cell of the runs under ``runs`` (``job`` = run name), as sweep.csv holds them."""
    frames = [pd.read_csv(t).assign(job=t.parents[2].name) for t in sorted(runs.glob("*/eval/*/extrapolation.csv"))]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["job"])


def seed_group(jobs: pd.Series) -> pd.Series:
    """Each run's name without its seed: the runs a cell's seed spread is taken over."""
    return jobs.str.replace(SEED, "", regex=True)


def seed_spread(reference: pd.DataFrame) -> pd.DataFrame:
    """Per cell of each run name without its seed: the perplexity's standard deviation over seeds."""
    ref = reference.assign(group=seed_group(reference["job"]))
    return ref.groupby(["group", *KEYS[1:]], dropna=False)["ppl"].std().rename("seed_std").reset_index()


def compare(reference: pd.DataFrame, here: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """The reference's cells of the jobs ``here`` has, each beside its value here: ``ppl_ref``,
    ``ppl_here``, ``rel`` (here / reference - 1), ``seed_std``, ``stds`` (the difference in seed
    standard deviations) and ``agrees`` (status equal, and |stds| within ``tolerance`` where there is a
    perplexity). A cell missing here does not agree."""
    cols = [*KEYS, "ppl", "status"]
    # NaN never equals NaN in a merge key; a cell evaluated twice counts once
    ref = reference[cols].fillna({"absolute_beyond": "-"}).drop_duplicates(KEYS, keep="last")
    new = here[cols].fillna({"absolute_beyond": "-"}).drop_duplicates(KEYS, keep="last")
    spread = seed_spread(ref)
    ref = ref[ref["job"].isin(set(new["job"]))]
    cells = ref.merge(new, on=KEYS, how="left", suffixes=("_ref", "_here"))
    cells["group"] = seed_group(cells["job"])
    cells = cells.merge(spread, on=["group", *KEYS[1:]], how="left").drop(columns="group")
    cells["rel"] = cells["ppl_here"] / cells["ppl_ref"] - 1.0
    cells["stds"] = (cells["ppl_here"] - cells["ppl_ref"]) / cells["seed_std"]
    both_nan = cells["ppl_ref"].isna() & cells["ppl_here"].isna()
    close = (cells["stds"].abs() <= tolerance) | both_nan
    cells["agrees"] = (cells["status_ref"] == cells["status_here"]) & close
    return cells.reset_index(drop=True)


def summary_lines(cells: pd.DataFrame, tolerance: float) -> list[str]:
    """One line per run: how many cells, the largest difference and where; then every cell that disagrees."""
    lines = []
    for job, group in cells.groupby("job", sort=True):
        scored = group.dropna(subset=["stds"])
        where = ""
        if len(scored):
            worst = scored.loc[scored["stds"].abs().idxmax()]
            where = (
                f", largest {worst['stds']:+.2f} seed std ({worst['rel']:+.2%}; "
                f"{worst['method']} {worst['factor']:g}x {worst['protocol']})"
            )
        verdict = "agrees" if group["agrees"].all() else f"{(~group['agrees']).sum()} cell(s) disagree"
        lines.append(f"{job}: {len(group)} cells{where}; {verdict} (tolerance {tolerance:g} seed std)")
    bad = cells[~cells["agrees"]]
    if len(bad):
        shown = bad[[*KEYS, "status_ref", "status_here", "ppl_ref", "ppl_here", "rel", "stds"]]
        lines += ["", "cells that disagree:", shown.to_string(index=False)]
    return lines


def positive(text: str) -> float:
    """``--tolerance``: a positive number (argparse turns the error into one line and exit 2)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of standard deviations, such as 1")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineParser(prog="python -m scripts.study.check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="the study's work directory (its runs/)")
    parser.add_argument("--reference", type=Path, required=True, help="the committed study (its sweep.csv)")
    parser.add_argument("--tolerance", type=positive, default=TOLERANCE, help="seed standard deviations accepted")
    parser.add_argument("--runs", nargs="+", default=None, metavar="RUN", help="compare only these runs")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Compare, print the verdict; the exit status (module docstring)."""
    args = parse_args(argv)
    sweep = args.reference / "sweep.csv"
    if not sweep.is_file():
        print(
            f"error: {sweep} does not exist; --reference takes a study directory such as results/reference/cpu-tiny",
            file=sys.stderr,
        )
        return 2
    here = made_again(args.work / "runs")
    if args.runs:
        here = here[here["job"].isin(args.runs)]
    if here.empty:
        what = f"evaluation of {' '.join(args.runs)}" if args.runs else "run with an evaluation"
        print(f"no {what} under {args.work / 'runs'} to compare")
        return 1
    reference = pd.read_csv(sweep)
    missing = sorted(set(here["job"]) - set(reference["job"]) | set(args.runs or []) - set(here["job"]))
    cells = compare(reference, here, args.tolerance)
    for line in summary_lines(cells, args.tolerance):
        print(line)
    for job in missing:
        print(f"{job}: no cell of it in both {sweep} and {args.work / 'runs'}")
    return 0 if len(cells) and cells["agrees"].all() and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
