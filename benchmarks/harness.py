"""What the measurement scripts share: the CLI runner, the interleaved timer, the training step.

* ``posx(*args)`` runs ``python -m posx ARGS`` in a subprocess, the way a user does, and returns
  its wall time; ``posx_command`` is that command line, for scripts that wrap it themselves.
* ``interleaved(cases, rounds)`` times several cases in one process, in rounds that alternate
  them (order shuffled, alternated or fixed per round), so a busy machine slows all of them
  alike; ``speedups`` turns the per-round times into per-round ratios against a reference.
* ``to_equal_loss(times, losses, ...)``: the wall time each of two training runs on the same
  batches takes to reach the loss the worse of them ends at (time to equal perplexity).
* ``stepper(model, cfg, x, y, device)``: one posx ``train_step`` (``posx.train.steps``, the step
  the training loop and ``posx extend`` take) with posx's AdamW, on a fixed batch.
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from posx.schema.config import Config
from posx.train.steps import make_optimizer, train_step

ORDERS = ("shuffle", "alternate", "fixed")


def posx_command(*args: str) -> list[str]:
    """``python -m posx ARGS`` with this interpreter (the installed posx)."""
    return [sys.executable, "-m", "posx", *args]


def posx(*args: str, quiet: bool = True) -> float:
    """Run ``python -m posx ARGS`` (its output hidden when ``quiet``); its wall time in seconds."""
    print("$ python -m posx " + " ".join(args), flush=True)
    start = time.perf_counter()
    subprocess.run(posx_command(*args), check=True, stdout=subprocess.DEVNULL if quiet else None)
    return time.perf_counter() - start


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA), so a timer measures it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved(
    cases: dict[str, Callable[[int], object]], rounds: int, device: torch.device, order: str = "shuffle", seed: int = 0
) -> dict[str, list[float]]:
    """Seconds of each case in each round; ``cases[name](round)`` does one round's work.

    ``order``: ``shuffle`` (a new random order each round, seeded), ``alternate`` (the given order,
    reversed every other round: who goes first alternates) or ``fixed``."""
    if order not in ORDERS:
        raise ValueError(f"order={order!r}; choose one of {', '.join(ORDERS)}")
    names, rng = list(cases), random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(rounds):
        if order == "shuffle":
            rng.shuffle(names)
        turn = names[::-1] if order == "alternate" and r % 2 else names
        for name in turn:
            synchronize(device)
            start = time.perf_counter()
            cases[name](r)
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return times


def repeat(case: Callable[[int], object], n: int, round_: int) -> None:
    """``case`` ``n`` times in one round (``functools.partial(repeat, case, n)`` is a case)."""
    for _ in range(n):
        case(round_)


def speedups(times: dict[str, list[float]], name: str, ref: str, skip: int = 0) -> list[float]:
    """Per round (from round ``skip`` on): how many times faster ``name`` ran than ``ref``."""
    return [b / a for a, b in zip(times[name][skip:], times[ref][skip:], strict=True)]


def trailing_mean(values: list[float], window: int) -> list[float]:
    """At each step, the mean of the last ``window`` values (fewer at the start)."""
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def to_equal_loss(
    times: dict[str, list[float]], losses: dict[str, list[float]], name: str, ref: str, window: int
) -> dict:
    """Seconds each of two runs on the same batches takes to reach the same training loss.

    The target is the higher of the two final losses (each a trailing mean over ``window`` steps),
    so both runs reach it. For each run: the first step whose trailing mean is at or below it, and
    the wall time up to and including that step (every step counts: warm-up and compiling too).
    ``speedup``: ``ref``'s seconds over ``name``'s (above 1: ``name`` gets there sooner)."""
    smooth = {n: trailing_mean(losses[n], window) for n in (name, ref)}
    target = max(smooth[name][-1], smooth[ref][-1])
    out: dict = {"target_loss": target, "window": window}
    for n in (name, ref):
        step = next(i for i, loss in enumerate(smooth[n]) if loss <= target)
        out[n] = {"steps": step + 1, "seconds": sum(times[n][: step + 1])}
    out["speedup"] = out[ref]["seconds"] / out[name]["seconds"]
    return out


def summary(times: dict[str, list[float]], ref: str, work: float, skip: int = 0) -> dict[str, dict]:
    """Per case: the median throughput (``work`` units per round over its seconds) and the median,
    least and most of its per-round speed-ups over ``ref``."""
    out = {}
    for name, seconds in times.items():
        ratios = speedups(times, name, ref, skip)
        out[name] = {
            "per_s": work / statistics.median(seconds[skip:]),
            "vs_ref": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
    return out


def stepper(
    model: torch.nn.Module,
    cfg: Config,
    x: torch.Tensor,
    y: torch.Tensor,
    device: torch.device,
    grad_clip: float = 0.0,
) -> Callable[[int], torch.Tensor]:
    """A case for ``interleaved``: one posx ``train_step`` of ``model`` on (x, y) with posx's AdamW
    (``make_optimizer`` of ``cfg``); returns the step's loss."""
    optimizer = make_optimizer(model, cfg, device)
    return lambda _round: train_step(model, optimizer, x, y, device, grad_clip=grad_clip)
