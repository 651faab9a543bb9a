"""benchmarks/harness.py: the interleaved timer's ratios and the time-to-equal-loss figure."""

from __future__ import annotations

import pytest
import torch

from benchmarks.harness import interleaved, speedups, to_equal_loss, trailing_mean  # repository root on pythonpath


def test_trailing_mean_is_the_mean_of_the_last_window_values():
    values = [4.0, 2.0, 6.0, 0.0, 8.0]
    want = [sum(values[max(0, i - 1) : i + 1]) / len(values[max(0, i - 1) : i + 1]) for i in range(len(values))]
    assert trailing_mean(values, 2) == pytest.approx(want)
    assert trailing_mean(values, 1) == pytest.approx(values)
    assert trailing_mean(values, 99)[-1] == pytest.approx(sum(values) / len(values))


def test_to_equal_loss_times_both_runs_to_the_worse_final_loss():
    # "fast" takes 2 s a step and reaches 2.0 after 3 steps; "slow" takes 1 s a step and ends at 2.0.
    losses = {"fast": [5.0, 3.0, 2.0, 1.0, 1.0], "slow": [5.0, 4.0, 3.0, 2.5, 2.0]}
    times = {"fast": [2.0] * 5, "slow": [1.0] * 5}
    got = to_equal_loss(times, losses, "fast", "slow", window=1)
    assert got["target_loss"] == 2.0
    assert got["fast"] == {"steps": 3, "seconds": 6.0}
    assert got["slow"] == {"steps": 5, "seconds": 5.0}
    assert got["speedup"] == pytest.approx(5.0 / 6.0)
    swapped = to_equal_loss(times, losses, "slow", "fast", window=1)
    assert swapped["speedup"] == pytest.approx(1 / got["speedup"])


def test_to_equal_loss_smooths_a_lucky_step_away():
    """One low loss early does not count as reaching the target: the trailing mean must get there."""
    losses = {"a": [5.0, 0.5, 5.0, 5.0, 2.0, 2.0, 2.0], "b": [5.0] * 4 + [2.0] * 3}
    times = {"a": [1.0] * 7, "b": [1.0] * 7}
    got = to_equal_loss(times, losses, "a", "b", window=3)
    assert got["a"]["steps"] == got["b"]["steps"] == 7
    assert got["speedup"] == pytest.approx(1.0)


def test_interleaved_alternates_who_goes_first_and_speedups_pair_rounds():
    calls: list[str] = []
    cases = {"x": lambda r: calls.append("x"), "y": lambda r: calls.append("y")}
    times = interleaved(cases, 4, device=torch.device("cpu"), order="alternate")
    assert calls == ["x", "y", "y", "x", "x", "y", "y", "x"]
    assert len(speedups(times, "x", "y", skip=1)) == 3
