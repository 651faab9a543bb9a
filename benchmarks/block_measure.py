"""Measure model.block: the default tiny gpt2 against the llama_tiny preset, same everything else.

Both runs use the default `posx train` config (same corpus, seed, batches, 800 steps, T=128);
only the model preset differs (tiny: 0.82M parameters, llama_tiny: 0.82M). Each is then
evaluated with `posx eval-extrapolate` over every RoPE method at 1x-8x. Everything goes through
the real CLI, one process at a time, into --results-dir.

    python scripts/block_measure.py                          # trains both, then evaluates
    python scripts/block_measure.py --steps 200 --results-dir /tmp/bm/results

Prints, as markdown: parameters, final validation loss, median training tokens/s (steps 6 on,
from metrics.csv), and perplexity per method and factor for each block. Timings are noisy on a
shared machine; the perplexities are deterministic for a given torch. Because the two trainings
run one after the other, the machine's load can differ between them; ``--throughput-rounds N``
also measures both blocks in N interleaved rounds (order shuffled each round, the same random
batch, the real optimizer step), the way scripts/bench_encodings.py compares encodings, and
reports the median tokens/s and the median per-round ratio llama / gpt2.

    python scripts/block_measure.py --throughput-only --throughput-rounds 20
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import random
import statistics

import pandas as pd
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from posx.config.compose import compose  # noqa: E402  (the checkout this script lives in)
from posx.model.gpt import GPT  # noqa: E402
from posx.runs.rundir import load_run  # noqa: E402
from posx.train.loop import gpt_config, make_optimizer  # noqa: E402

METHODS = "none,pi,ntk,dynamic_ntk,yarn,dynamic_yarn,ntk_by_parts,abf,llama3,longrope"
PRESETS = {"gpt2": "tiny", "llama": "llama_tiny"}


def posx(*args: str) -> float:
    """Run `python -m posx ARGS`; returns its wall time in seconds."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    print("$ python -m posx " + " ".join(args), flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "posx", *args], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def params_of(run: Path) -> int:
    model, _ = load_run(run)
    return model.num_params()


def throughput(rounds: int, steps: int) -> list[dict]:
    """Training tokens/s of both presets in interleaved, shuffled rounds on one random batch."""
    device = torch.device("cpu")
    setups = {}
    for block, preset in PRESETS.items():
        cfg = compose([f"model={preset}"])
        torch.manual_seed(0)
        model = GPT(gpt_config(cfg)).train()
        setups[block] = (model, make_optimizer(model, cfg, device))
    B, T = cfg.train.batch_size, cfg.train.context_length
    x = torch.randint(0, 256, (B, T + 1), generator=torch.Generator().manual_seed(0))  # (B, T + 1)

    def step(model, opt) -> None:
        _, loss = model(x[:, :-1], x[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for model, opt in setups.values():  # warm-up
        step(model, opt)
    per_round: dict[str, list[float]] = {block: [] for block in PRESETS}
    order, rng = list(PRESETS), random.Random(0)
    for _ in range(rounds):
        rng.shuffle(order)
        for block in order:
            start = time.perf_counter()
            for _ in range(steps):
                step(*setups[block])
            per_round[block].append(steps * B * T / (time.perf_counter() - start))
    ratios = [a / b for a, b in zip(per_round["llama"], per_round["gpt2"])]
    return [{"block": block, "tokens_per_s_median": round(statistics.median(v)), "min": round(min(v)),
             "max": round(max(v)), "ratio_to_gpt2": round(statistics.median(ratios), 3) if block == "llama" else 1.0}
            for block, v in per_round.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results-dir", default="results/block_measure")
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--methods", default=METHODS)
    ap.add_argument("--prefix", default="block")
    ap.add_argument("--throughput-rounds", type=int, default=0, help="interleaved throughput rounds (0: none)")
    ap.add_argument("--throughput-steps", type=int, default=2, help="optimizer steps per block per round")
    ap.add_argument("--throughput-only", action="store_true", help="skip the trainings and evaluations")
    args = ap.parse_args()
    if args.throughput_rounds:
        rows = throughput(args.throughput_rounds, args.throughput_steps)
        print(f"interleaved throughput, {args.throughput_rounds} rounds x {args.throughput_steps} steps, "
              f"{torch.get_num_threads()} threads\n")
        print(pd.DataFrame(rows).to_markdown(index=False) + "\n")
    if args.throughput_only:
        return
    results = Path(args.results_dir)
    summary, tables = [], []
    for block, preset in PRESETS.items():
        name = f"{args.prefix}-{block}"
        run = results / "runs" / name
        if (run / "model.json").is_file():  # trained by an earlier invocation
            wall = math.nan
        elif run.exists():  # stopped part-way: continue it from its checkpoint
            wall = posx("train", "--resume", str(run), f"results_dir={results}")
        else:
            wall = posx("train", f"model={preset}", f"name={name}", f"train.steps={args.steps}",
                        f"results_dir={results}")
        eval_wall = posx("eval-extrapolate", str(run), f"eval.methods=[{args.methods}]", f"results_dir={results}")
        metrics = pd.read_csv(run / "metrics.csv")
        val = metrics.dropna(subset=["val_loss"])["val_loss"].iloc[-1]
        summary.append({"block": block, "preset": preset, "params": params_of(run), "val_loss": round(val, 4),
                        "val_ppl": round(math.exp(val), 3),
                        "train_tokens_per_s": round(metrics["tokens_per_s"].iloc[5:].median()),
                        "train_wall_s": round(wall, 1), "eval_wall_s": round(eval_wall, 1)})
        df = pd.read_csv(run / "extrapolation.csv")
        df["cell"] = df["ppl"].map(lambda p: f"{p:.3f}")
        table = df.pivot(index="method", columns="factor", values="cell").reindex(args.methods.split(","))
        table.columns = [f"{f:g}x ({int(f * df['train_context'].iloc[0])})" for f in table.columns]
        tables.append((block, table))
    print()
    print(pd.DataFrame(summary).to_markdown(index=False))
    for block, table in tables:
        print(f"\n{block} ({PRESETS[block]}): perplexity, non-overlapping, 16384 tokens per length\n")
        print(table.to_markdown())
    (results / "block_measure.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
