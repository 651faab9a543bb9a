"""benchmarks/block_measure.py: a run's summary row, also for a run shorter than the warm-up it skips."""

from __future__ import annotations

import math
import shutil

import pandas as pd

from benchmarks.block_measure import block_summary  # repository root on pythonpath


def test_a_short_run_still_has_a_training_rate(trained_runs, tmp_path):
    run = shutil.copytree(trained_runs["rope"], tmp_path / "rope")
    metrics = pd.read_csv(run / "metrics.csv").iloc[:4]  # four steps: fewer than the five the rate leaves out
    metrics.to_csv(run / "metrics.csv", index=False)
    rates = metrics["tokens_per_s"].dropna()
    assert len(rates) == 4 and metrics["val_loss"].notna().any()
    row = block_summary("gpt2", "tiny", run, 1.0, 2.0)
    assert row["train_tokens_per_s"] == round(rates.median()) > 0
    assert row["params"] > 0 and math.isfinite(row["val_loss"])
