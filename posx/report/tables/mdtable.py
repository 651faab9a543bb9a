"""Markdown tables written straight from a DataFrame: one pass over the rows, no type inference
(a report's summary.md holds tables of thousands of rows)."""

from __future__ import annotations

import math
from numbers import Integral, Real

import pandas as pd


def _cell(value, floatfmt: str) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return format(value, floatfmt)
    if isinstance(value, Real) and not isinstance(value, Integral) and math.isfinite(value):
        return format(float(value), floatfmt)
    return str(value).replace("|", "\\|").replace("\n", " ")


def md_table(df: pd.DataFrame, floatfmt: str = "g") -> str:
    """``df`` as a Markdown table; finite floats formatted with ``floatfmt``."""
    lines = ["| " + " | ".join(str(c) for c in df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(_cell(v, floatfmt) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)
