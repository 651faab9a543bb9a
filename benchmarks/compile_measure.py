"""What ``torch.compile`` costs and gains for posx's training step on this machine.

For each block (gpt2, llama) and model size, one process builds two copies of the same model
(same weights, same batch, posx's ``train_step`` and AdamW), compiles one (inductor) and times
its first step (the compile), then times eager and compiled steps in interleaved rounds (who
goes first alternates). Printed as JSON per case: compile seconds, median eager and compiled
step seconds, median per-round speed-up. These numbers feed the CPU rule of
``train.compile=auto`` (``posx.train.compiling``). From the repository root:

    python -m benchmarks.compile_measure --threads 2 --rounds 20
    python -m benchmarks.compile_measure --forward     # evaluation: forward passes, no_grad
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
from omegaconf import OmegaConf

from benchmarks.harness import interleaved, speedups
from posx.configure.compose import typed
from posx.model.gpt import GPT
from posx.model.spec import ModelSpec
from posx.schema.config import BYTES, Config
from posx.train.steps import make_optimizer, train_step

SIZES = {"quick": (2, 4, 64, 64), "tiny": (4, 4, 128, 128)}  # n_layer, n_head, d_model, T


def case_config(block: str, size: str, batch: int):
    cfg = OmegaConf.structured(Config)
    n_layer, n_head, d_model, T = SIZES[size]
    cfg.model.block, cfg.model.n_layer, cfg.model.n_head, cfg.model.d_model = block, n_layer, n_head, d_model
    cfg.train.context_length, cfg.train.batch_size = T, batch
    return typed(cfg)


def stepper(model, cfg, fwd, x, y, forward_only: bool):
    """One round's work: a training step (or, ``forward_only``, a no-grad forward)."""
    device = torch.device("cpu")
    if forward_only:
        model.eval()

        def run(_round):
            with torch.no_grad():
                return fwd(x, y)

        return run
    optimizer = make_optimizer(model, cfg, device)
    return lambda _round: train_step(model, optimizer, x, y, device, grad_clip=1.0, fwd=fwd)


def measure(block: str, size: str, args) -> dict:
    cfg = case_config(block, size, args.batch_size)
    torch.manual_seed(0)
    eager = GPT(ModelSpec.from_config(cfg, BYTES))
    other = copy.deepcopy(eager)
    T = cfg.train.context_length
    x = torch.randint(0, BYTES, (args.batch_size, T))
    y = torch.randint(0, BYTES, (args.batch_size, T))
    cases = {
        "eager": stepper(eager, cfg, eager, x, y, args.forward),
        "compiled": stepper(other, cfg, torch.compile(other), x, y, args.forward),
    }
    cases["eager"](0)
    start = time.perf_counter()
    cases["compiled"](0)  # traces and compiles
    first = time.perf_counter() - start
    times = interleaved(cases, args.rounds, torch.device("cpu"), order="alternate")
    eager_s = statistics.median(times["eager"][2:])
    return {
        "block": block,
        "size": size,
        "params": eager.num_params(),
        "tokens_per_step": args.batch_size * T,
        "compile_s": first - eager_s,
        "eager_step_s": eager_s,
        "compiled_step_s": statistics.median(times["compiled"][2:]),
        "speedup": statistics.median(speedups(times, "compiled", "eager", 2)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", nargs="+", default=["gpt2", "llama"])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--forward", action="store_true", help="no-grad forward passes (evaluation)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    for size in args.sizes:
        for block in args.blocks:
            torch.compiler.reset()
            print(json.dumps(measure(block, size, args)), flush=True)


if __name__ == "__main__":
    main()
