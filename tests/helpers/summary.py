"""Synthetic per-seed cells (``scripts.study.seed_cells`` rows) for tests of the claims."""

from __future__ import annotations

import pandas as pd

SPREAD = (-1.0, 0.0, 1.0)  # three seeds at mean + std * z: sample mean and std exactly as given


def per_seed(cells: dict, parent: str = "") -> pd.DataFrame:
    """cells: (encoding, group label, factor[, method]) -> (mean, std), seeds 0, 1, 2 each. Cell i
    puts its seeds at a rotation of SPREAD by i, so two cells paired by seed differ by seed too."""
    rows = []
    for i, (key, (mean, std)) in enumerate(cells.items()):
        e, g, f, *m = key
        z = SPREAD[i % 3 :] + SPREAD[: i % 3]
        rows += [
            {"group": g, "parent": parent, "encoding": e, "method": m[0] if m else "none",
             "protocol": "nonoverlapping", "factor": float(f), "seed": s, "ppl": mean + std * z[s]}
            for s in range(3)
        ]  # fmt: skip
    return pd.DataFrame(rows)
