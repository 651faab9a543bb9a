"""The 95% Wilson score interval of a proportion (Wilson 1927), in plain arithmetic so the report
imports no torch."""

from __future__ import annotations

import math

Z95 = 1.959964  # the two-sided 95% quantile of the standard normal


def wilson(hits: float, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion hits / n."""
    if n == 0:
        return math.nan, math.nan
    p = hits / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)
