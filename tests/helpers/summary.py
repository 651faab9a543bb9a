"""Synthetic report summaries (summary.csv rows) for tests of the claims."""

from __future__ import annotations

import pandas as pd


def summary(cells: dict) -> pd.DataFrame:
    """cells: (encoding, group label, factor) -> (mean, std), three seeds each, method none."""
    return pd.DataFrame(
        [
            {
                "group": g,
                "parent": "",
                "encoding": e,
                "method": "none",
                "protocol": "nonoverlapping",
                "factor": float(f),
                "ppl_mean": mean,
                "ppl_std": std,
                "n_seeds": 3,
            }
            for (e, g, f), (mean, std) in cells.items()
        ]
    )
