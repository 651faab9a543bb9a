"""Benchmark: what the evaluation options cost, relative to perplexity alone.

Times ``posx.eval.extrapolate.evaluate`` on a model of the default size (random weights: the
cost does not depend on them) with the default eval config, in rounds that interleave the
variants (``benchmarks.harness.interleaved``) so a busy machine slows them alike, and prints
seconds and ratios to the perplexity-only time. From the repository root, with posx installed
(``pip install -e .``):

    python -m benchmarks.bench_eval [--rounds 2] [OVERRIDES...]
"""

from __future__ import annotations

import argparse
import statistics
from functools import partial

import torch

from benchmarks.harness import interleaved
from posx.configure.compose import compose, typed
from posx.data import store
from posx.eval.extrapolate import evaluate
from posx.model.gpt import GPT
from posx.model.spec import ModelSpec
from posx.runs.records import RunMeta
from posx.schema.config import BYTES
from posx.schema.fields import plain

# Passkey off means the task suite off too: its default, [passkey], scores the prompt trials itself
# when passkey.csv is not written.
OFF = ["eval.passkey.enabled=false", "eval.tasks=[]"]
PERPLEXITY_ONLY = "perplexity only (passkey off)"
VARIANTS = {
    PERPLEXITY_ONLY: OFF,
    "default (perplexity + passkey)": [],
    "sliding, stride T/2, passkey off": ["eval.protocol=sliding", *OFF],
    "none alone, passkey off": ["eval.methods=[none]", *OFF],
    "self_extend alone, passkey off": ["eval.methods=[self_extend]", *OFF],  # attention in chunks, no fused kernel
    "rerope alone, passkey off": ["eval.methods=[rerope]", *OFF],  # the same two-branch attention
    "lm_infinite alone, passkey off": ["eval.methods=[lm_infinite]", *OFF],  # the same, far keys masked
    "dca alone, passkey off": ["eval.methods=[dca]", *OFF],  # three sets of logits
    "streaming_llm alone, passkey off": ["eval.methods=[streaming_llm]", *OFF],  # two, evicted keys masked
}
CPU = torch.device("cpu")


def evaluate_once(model, meta: RunMeta, val, ev, _round: int) -> None:
    evaluate(model, meta, val, ev, CPU, "bench", long_tables=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--skip-sliding", action="store_true", help="leave out the sliding protocol (the longest variant)"
    )
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    base = typed(compose(["device=cpu", *args.overrides]))
    torch.manual_seed(0)
    model = GPT(ModelSpec.from_config(base, BYTES)).eval()
    meta = RunMeta(model.config, base.train.context_length, {}, 0)
    val = store.load(base.data, base.data.cache_dir).val
    print(
        f"torch threads {torch.get_num_threads()}, T={meta.train_context}, "
        f"methods {','.join(base.eval.methods)}, factors {list(base.eval.factors)}"
    )
    cases = {}
    for name, overrides in VARIANTS.items():
        if args.skip_sliding and "eval.protocol=sliding" in overrides:
            continue
        ev = typed(compose(["device=cpu", *args.overrides, *overrides])).eval
        cases[name] = partial(evaluate_once, model, meta, val, ev)
    times = interleaved(cases, args.rounds, CPU, order="fixed")
    ref = statistics.median(times[PERPLEXITY_ONLY])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:36s} median {med:7.2f} s  x{med / ref:5.2f}  ({', '.join(f'{t:.1f}' for t in ts)})")
    print("config:", plain(base.eval.passkey))


if __name__ == "__main__":
    main()
