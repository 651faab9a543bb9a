"""Read a run's positions.csv and say where past T the per-position loss starts to climb.

For one method at one factor it prints the mean NLL of every position bucket and marks the
first bucket, at or past T, whose NLL exceeds the mean over the buckets of the second half of
the trained range [T/2, T) by more than ``--threshold`` nats (default 0.05).

    python -m benchmarks.where_it_climbs results/runs/<run> [--factor 4] [--method none]   # from the repository root
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--factor", type=float, default=4.0)
    parser.add_argument("--method", default="none")
    parser.add_argument("--threshold", type=float, default=0.05)
    args = parser.parse_args()
    df = pd.read_csv(args.run / "positions.csv")
    curve = df[(df["factor"] == args.factor) & (df["method"] == args.method)].sort_values("bucket_start")
    if curve.empty:
        have = sorted(set(zip(df["method"], df["factor"])))
        raise SystemExit(f"no rows for method {args.method} at {args.factor:g}x in {args.run}; it has {have}")
    T = int(curve["train_context"].iloc[0])
    inside = curve[(curve["bucket_start"] >= T // 2) & (curve["bucket_end"] <= T)]
    base = (inside["nll"] * inside["tokens"]).sum() / inside["tokens"].sum()
    climb = curve[(curve["bucket_start"] >= T) & (curve["nll"] > base + args.threshold)]
    first = int(climb["bucket_start"].iloc[0]) if not climb.empty else None
    print(f"{args.run.name}: {args.method} at {args.factor:g}x (T={T}), baseline NLL over [T/2, T) {base:.3f}")
    for r in curve.itertuples():
        mark = "  <- first bucket past T above baseline + threshold" if r.bucket_start == first else ""
        print(
            f"  positions {r.bucket_start:5d}-{r.bucket_end - 1:5d} ({r.bucket_start / T:5.2f} T)  "
            f"NLL {r.nll:.3f}  ({r.nll - base:+.3f}){mark}"
        )
    print("loss starts to climb at position", first if first is not None else "never (within this factor)")


if __name__ == "__main__":
    main()
