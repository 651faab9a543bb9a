"""Parametrized tests whose cases cost seconds each: one case in the fast set, the rest slow.

A plain ``pytest`` (the fast set, tests/conftest.py) then still runs each such test once, on
the case that ``fast`` names (by default the first), and CI runs every case."""

from __future__ import annotations

from collections.abc import Iterable

import pytest


def one_fast(values: Iterable, fast=None) -> list:
    """``values`` as pytest params: ``fast`` (default: the first value) as it is, every other
    value marked ``slow``."""
    values = list(values)
    keep = values[0] if fast is None else fast
    if keep not in values:
        raise ValueError(f"{keep!r} is not one of {values!r}")
    return [value if value == keep else pytest.param(value, marks=pytest.mark.slow) for value in values]
