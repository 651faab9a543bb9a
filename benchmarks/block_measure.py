"""Measure model.block: the default tiny gpt2 against the llama_tiny preset, same everything else.

Both runs use the default `posx train` config (same corpus, seed, batches, 800 steps, T=128);
only the model preset differs (tiny: 0.82M parameters, llama_tiny: 0.82M). Each is then
evaluated with `posx eval-extrapolate` over every RoPE method at 1x-8x. Everything goes through
the real CLI (``benchmarks.harness.posx``), one process at a time, into --results-dir. From the
repository root, with posx installed (``pip install -e .``):

    python -m benchmarks.block_measure                          # trains both, then evaluates
    python -m benchmarks.block_measure --steps 200 --results-dir /tmp/bm/results

Prints, as markdown: parameters, final validation loss, median training tokens/s (steps 6 on,
all steps of a shorter run, from metrics.csv), and perplexity per method and factor for each
block. Timings are noisy on a shared machine; the perplexities are deterministic for a given
torch. Because the two trainings run one after the other, the machine's load can differ between
them; ``--throughput-rounds N`` also measures both blocks in N interleaved rounds (order
shuffled each round, the same random batch, posx's ``train_step``), the way
benchmarks/bench_encodings.py compares encodings, and reports the median tokens/s and the median
per-round ratio llama / gpt2.

    python -m benchmarks.block_measure --throughput-only --throughput-rounds 20
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from functools import partial
from pathlib import Path

import pandas as pd
import torch

from benchmarks.harness import interleaved, posx, repeat, speedups, stepper
from posx.configure.compose import compose, typed
from posx.model.gpt import GPT
from posx.model.spec import ModelSpec
from posx.runs.rundir import load_run
from posx.schema.config import BYTES

METHODS = "none,pi,ntk,dynamic_ntk,yarn,dynamic_yarn,ntk_by_parts,abf,llama3,longrope"
PRESETS = {"gpt2": "tiny", "llama": "llama_tiny"}


def params_of(run: Path) -> int:
    model, _ = load_run(run)
    return model.num_params()


def throughput(rounds: int, steps: int) -> list[dict]:
    """Training tokens/s of both presets in interleaved, shuffled rounds on one random batch."""
    device = torch.device("cpu")
    cases = {}
    for block, preset in PRESETS.items():
        cfg = typed(compose([f"model={preset}"]))
        torch.manual_seed(0)
        model = GPT(ModelSpec.from_config(cfg, BYTES)).train()
        B, T = cfg.train.batch_size, cfg.train.context_length
        x = torch.randint(0, 256, (B, T + 1), generator=torch.Generator().manual_seed(0))  # (B, T + 1)
        cases[block] = stepper(model, cfg, x[:, :-1], x[:, 1:], device)
    interleaved(cases, 1, device, order="fixed")  # warm-up
    times = interleaved({block: partial(repeat, step, steps) for block, step in cases.items()}, rounds, device)
    ratio = statistics.median(speedups(times, "llama", "gpt2"))
    per_round = {block: [steps * B * T / s for s in seconds] for block, seconds in times.items()}
    return [
        {
            "block": block,
            "tokens_per_s_median": round(statistics.median(v)),
            "min": round(min(v)),
            "max": round(max(v)),
            "ratio_to_gpt2": round(ratio, 3) if block == "llama" else 1.0,
        }
        for block, v in per_round.items()
    ]


def parser() -> argparse.ArgumentParser:
    """The command line: where results go, steps, methods, and the interleaved throughput rounds."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results-dir", default="results/block_measure")
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--methods", default=METHODS)
    ap.add_argument("--prefix", default="block")
    ap.add_argument("--throughput-rounds", type=int, default=0, help="interleaved throughput rounds (0: none)")
    ap.add_argument("--throughput-steps", type=int, default=2, help="optimizer steps per block per round")
    ap.add_argument("--throughput-only", action="store_true", help="skip the trainings and evaluations")
    return ap


def report_throughput(rounds: int, steps: int) -> None:
    """Measures and prints the interleaved training throughput of both blocks."""
    rows = throughput(rounds, steps)
    print(f"interleaved throughput, {rounds} rounds x {steps} steps, {torch.get_num_threads()} threads\n")
    print(pd.DataFrame(rows).to_markdown(index=False) + "\n")


def train_block(run: Path, preset: str, steps: int, results: Path) -> float:
    """Trains ``run`` with ``preset`` (or continues it from its checkpoint); its wall seconds, NaN
    when an earlier invocation finished it."""
    if (run / "model.json").is_file():  # trained by an earlier invocation
        return math.nan
    if run.exists():  # stopped part-way: continue it from its checkpoint
        return posx("train", "--resume", str(run), f"results_dir={results}")
    return posx("train", f"model={preset}", f"name={run.name}", f"train.steps={steps}", f"results_dir={results}")


def block_summary(block: str, preset: str, run: Path, wall: float, eval_wall: float) -> dict:
    """One block's summary row: parameters, final validation loss, training tokens/s, wall times."""
    metrics = pd.read_csv(run / "metrics.csv")
    val = metrics.dropna(subset=["val_loss"])["val_loss"].iloc[-1]
    rates = metrics["tokens_per_s"].dropna()
    rates = rates.iloc[5:] if len(rates) > 5 else rates  # the first steps allocate; a short run keeps all
    return {
        "block": block,
        "preset": preset,
        "params": params_of(run),
        "val_loss": round(val, 4),
        "val_ppl": round(math.exp(val), 3),
        "train_tokens_per_s": round(rates.median()),
        "train_wall_s": round(wall, 1),
        "eval_wall_s": round(eval_wall, 1),
    }


def ppl_table(run: Path, methods: str) -> pd.DataFrame:
    """Perplexity per method (rows, in ``methods``' order) and factor (columns) from extrapolation.csv."""
    df = pd.read_csv(run / "extrapolation.csv")
    df["cell"] = df["ppl"].map(lambda p: f"{p:.3f}")
    table = df.pivot(index="method", columns="factor", values="cell").reindex(methods.split(","))
    table.columns = [f"{f:g}x ({int(f * df['train_context'].iloc[0])})" for f in table.columns]
    return table


def main() -> None:
    args = parser().parse_args()
    if args.throughput_rounds:
        report_throughput(args.throughput_rounds, args.throughput_steps)
    if args.throughput_only:
        return
    results = Path(args.results_dir)
    summary, tables = [], []
    for block, preset in PRESETS.items():
        run = results / "runs" / f"{args.prefix}-{block}"
        wall = train_block(run, preset, args.steps, results)
        eval_wall = posx("eval-extrapolate", str(run), f"eval.methods=[{args.methods}]", f"results_dir={results}")
        summary.append(block_summary(block, preset, run, wall, eval_wall))
        tables.append((block, ppl_table(run, args.methods)))
    print()
    print(pd.DataFrame(summary).to_markdown(index=False))
    for block, table in tables:
        print(f"\n{block} ({PRESETS[block]}): perplexity, non-overlapping, 16384 tokens per length\n")
        print(table.to_markdown())
    (results / "block_measure.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
