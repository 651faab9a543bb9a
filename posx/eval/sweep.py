"""A sweep's ``sweep.csv``: every job's extrapolation table, rewritten by each job that evaluates
itself. Jobs may run at once, so it is read, combined and replaced atomically under an exclusive
lock on the sweep directory: the last job writes the complete table, no reader sees half of one.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from posx.core import files, lock
from posx.eval.tables import TEXT

TABLE = "extrapolation.csv"


def combine(sweep_dir: Path) -> pd.DataFrame:
    """Every job's table, with the job directory as ``job``."""
    frames = []
    for table in sorted(sweep_dir.glob(f"*/{TABLE}")):
        frame = pd.read_csv(table, dtype=TEXT)
        frame.insert(0, "job", table.parent.name)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def update_sweep_table(sweep_dir: Path) -> Path:
    sweep_dir = Path(sweep_dir)
    with lock.exclusive(sweep_dir):
        df = combine(sweep_dir)
        with files.atomic_path(sweep_dir / "sweep.csv") as tmp:
            df.to_csv(tmp, index=False)
        files.write_text(sweep_dir / "sweep.md", df.to_markdown(index=False, floatfmt=".4g") + "\n")
    return sweep_dir / "sweep.csv"
