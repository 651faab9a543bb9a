"""Measure the extension protocol: zero-shot vs after `posx extend`, and steps to recover.

For each method (default pi, yarn, abf) it extends one trained RoPE run to factor x T with
the same step budget through the real CLI (`python -m posx extend`), validating at the new
length every --eval-every steps, then evaluates in-process (nothing is written into the
parent or the children besides what `posx extend` writes):

* ppl at 1x T and factor x T, zero-shot (the parent with the method's frequencies, no
  training) and extended, with the eval-extrapolate protocol (non-overlapping windows,
  --tokens scored tokens per length);
* the first validation step at which the extended model's perplexity at factor x T is within
  10% of the parent's 1x perplexity. Both sides use the training loop's estimator
  (estimate_val_loss: the same seeded random windows, eval_batches x batch_size sequences),
  the parent's from the last row of its metrics.csv.

From the repository root, with posx installed (``pip install -e .``):

    python -m benchmarks.extend_measure                       # trains the default parent first
    python -m benchmarks.extend_measure --parent results/runs/base --steps 200 --eval-every 20

Timings are noisy on a shared machine; the perplexities are deterministic for a given torch.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from benchmarks.harness import posx
from posx.configure.compose import compose, typed
from posx.core.device import pick_device
from posx.data import store
from posx.eval.extended import evaluate_extended
from posx.eval.extrapolate import evaluate
from posx.runs.paths import resolve_run
from posx.runs.rundir import load_run


def within(metrics: pd.DataFrame, target_loss: float) -> int | None:
    """First step whose validation loss is at or below target_loss (None: never)."""
    val = metrics.dropna(subset=["val_loss"])
    hit = val[val["val_loss"] <= target_loss]
    return int(hit["step"].iloc[0]) if len(hit) else None


@dataclass
class Parent:
    """The run being extended and its figures at its own length."""

    dir: Path
    T: int  # its training length
    val: torch.Tensor  # validation tokens of its data
    ppl_1x: float  # at 1x with the eval-extrapolate protocol
    val_loss: float  # the training loop's estimator, from the last row of its metrics.csv

    @property
    def target(self) -> float:
        """The validation loss of a ppl within 10% of the parent's 1x ppl."""
        return self.val_loss + math.log(1.1)


def parser() -> argparse.ArgumentParser:
    """The command line: the parent, the methods, factor, step budget and evaluation size."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parent", help="a trained RoPE run; default: train one with `posx train name=<--name>`")
    ap.add_argument("--name", default="base", help="name of the parent to train when --parent is not given")
    ap.add_argument("--methods", default="pi,yarn,abf")
    ap.add_argument("--factor", type=float, default=4.0)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=16384, help="scored tokens per length")
    ap.add_argument("--results-dir", default="results")
    ap.add_argument("--device", default="cpu")
    return ap


def parent_run(args, common: list[str]) -> Path:
    """The parent's directory: --parent, or a run trained now with `posx train name=<--name>`."""
    parent = args.parent
    if parent is None:
        posx("train", f"name={args.name}", *common)
        parent = str(Path(args.results_dir) / "runs" / args.name)
    return resolve_run(parent, args.results_dir)


def eval_config(args, common: list[str]):
    """The composed config the evaluations use: 1x only, --tokens per length, none and --methods."""
    return typed(
        compose(
            [
                *common,
                "eval.factors=[1]",
                f"eval.tokens={args.tokens}",
                f"eval.batch_tokens={args.tokens}",
                f"eval.methods=[none,{args.methods}]",
            ]
        )
    )


def measure_parent(parent_dir: Path, cfg, device: torch.device) -> Parent:
    """The parent's length, validation tokens, ppl at 1x and last validation loss."""
    parent_model, parent_meta = load_run(parent_dir, device=device)
    val = store.load(parent_meta.data_config, cfg.data.cache_dir).val
    plain = evaluate(parent_model, parent_meta, val, cfg.eval, device, parent_dir.name).table
    ppl_1x = float(plain[plain["method"] == "none"]["ppl"].iloc[0])
    val_loss = pd.read_csv(parent_dir / "metrics.csv").dropna(subset=["val_loss"])["val_loss"].iloc[-1]
    return Parent(parent_dir, parent_meta.train_context, val, ppl_1x, val_loss)


def extend(parent: Parent, method: str, args, common: list[str], stamp: str) -> tuple[Path, float]:
    """`posx extend` of the parent with ``method``: the child's directory and the wall seconds."""
    name = f"{parent.dir.name}-{method}-x{args.factor:g}-s{args.steps}-{stamp}"
    wall = posx(
        "extend",
        str(parent.dir),
        f"method={method}",
        f"factor={args.factor}",
        f"name={name}",
        f"extend.steps={args.steps}",
        f"extend.eval_every={args.eval_every}",
        *common,
    )
    return Path(args.results_dir) / "runs" / name, wall


def method_row(method: str, child: Path, wall: float, parent: Parent, args, cfg, device: torch.device) -> dict:
    """The row of one method: zero-shot and extended ppl at 1x and factor x T, the steps to the
    target; prints the child's validation curve."""
    T = parent.T
    model, meta = load_run(child, device=device)
    df = evaluate_extended(model, meta, parent.val, cfg.eval, cfg.results_dir, device, child.name).table
    ppl = df.set_index(["stage", "eval_context"])["ppl"]
    L = round(args.factor * T)
    metrics = pd.read_csv(child / "metrics.csv")
    step = within(metrics, parent.target)
    curve = metrics.dropna(subset=["val_loss"])
    print(
        f"  {method}: val ppl at {L} by step: "
        + ", ".join(f"{int(s)}:{math.exp(v):.2f}" for s, v in zip(curve["step"], curve["val_loss"])),
        flush=True,
    )
    return {
        "method": method,
        "zero-shot 1x": ppl[("zero-shot", T)],
        f"zero-shot {args.factor:g}x": ppl[("zero-shot", L)],
        "extended 1x": ppl[("extended", T)],
        f"extended {args.factor:g}x": ppl[("extended", L)],
        "steps to 1.1x ppl(1x)": step if step is not None else f">{args.steps}",
        "extend wall s": round(wall),
    }


def report(rows: list[dict], parent: Parent, args) -> None:
    """The closing summary line and the table of every method."""
    table = pd.DataFrame(rows)
    print(
        f"\nparent {parent.dir.name}, T={parent.T}, factor {args.factor:g} (L={round(args.factor * parent.T)}), "
        f"{args.steps} steps each; plain RoPE ppl at 1x = {parent.ppl_1x:.3f}; "
        f"target val ppl {math.exp(parent.target):.3f} (1.1 x {math.exp(parent.val_loss):.3f})"
    )
    print(table.to_markdown(index=False, floatfmt=".3f"))


def main() -> None:
    args = parser().parse_args()
    common = [f"device={args.device}", f"results_dir={args.results_dir}"]
    parent_dir = parent_run(args, common)
    cfg = eval_config(args, common)
    device = pick_device(cfg.device)
    parent = measure_parent(parent_dir, cfg, device)
    print(
        f"parent {parent_dir}: T={parent.T}, ppl at 1x {parent.ppl_1x:.3f} (eval), "
        f"{math.exp(parent.val_loss):.3f} (val estimator)"
    )

    rows = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for method in args.methods.split(","):
        child, wall = extend(parent, method, args, common, stamp)
        rows.append(method_row(method, child, wall, parent, args, cfg, device))
    report(rows, parent, args)


if __name__ == "__main__":
    main()
