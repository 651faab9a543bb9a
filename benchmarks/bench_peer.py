"""posx against what a researcher would otherwise use: a transformers LlamaForCausalLM.

From the repository root:

    pip install -e '.[bench]'                                        # posx and transformers
    python -m benchmarks.bench_peer --steps 40                       # tiny preset, CPU
    python -m benchmarks.bench_peer --block llama --profile 3        # posx's llama block; where time goes
    python -m benchmarks.bench_peer --device cuda --model small --context 512 --compile --out peer.json

Both models have the same width, depth and heads and parameter counts within 1% (Llama's
SwiGLU hidden size is chosen to match posx's GELU MLP; RMSNorm has no biases; both tie their
embeddings). They train in one process on the same batches (posx's ``get_batch`` on the
stdlib corpus), with the same AdamW (decay on matrices only), warmup-cosine schedule
(``posx.train.steps.lr_at``), clipping and loss code (each step is posx's ``train_step``),
alternating which model steps first every step (``benchmarks.harness.interleaved``), so a noisy
machine affects both alike. posx runs with its own defaults: ``--block`` (gpt2, or llama: the
peer's own architecture) and ``--posx-compile`` (auto: ``train.compile=auto``'s rule,
``posx.train.compiling``, for ``--steps`` steps; ``--compile`` compiles both sides instead).
``--profile N`` profiles N more steps of each side and splits their CPU time into attention,
MLP, norm, embedding, loss, optimizer and other (``benchmarks.step_split``). Reported: median
tokens/s of each and the median of the per-step ratios; the wall time each side takes to reach
the same training loss (``benchmarks.harness.to_equal_loss``: the higher of the two final
losses, each a trailing mean of ``--loss-window`` steps; every step counts, compiling too); the
peak CUDA memory of each model's steps, MFU on CUDA (6N + 12·L·H·Q·T FLOPs per token for both,
against ``posx.core.device.BF16_PEAK``).

Then both are scored at 1x-8x the training length with posx's own scoring
(``posx.eval.scoring.score``, the non-overlapping protocol ``posx eval-extrapolate`` uses),
each with its own RoPE rescaling: posx's methods none / pi / dynamic_ntk / yarn against
transformers' ``rope_parameters`` default / linear / dynamic / yarn (a fresh
``LlamaRotaryEmbedding`` per method); evaluation tokens/s of each side over all cells.
No weights are downloaded: the Llama is built from a config. The figures go to stdout as JSON
(and to ``--out``), and their headline, three lines, to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch
from omegaconf import OmegaConf

from benchmarks import step_split
from benchmarks.harness import interleaved, speedups, synchronize, to_equal_loss
from posx.configure.compose import typed
from posx.core.device import bf16_peak_flops, use_tf32
from posx.data import corpus as data_mod
from posx.data import store
from posx.eval import scoring
from posx.model.gpt import GPT, lm_loss
from posx.model.rescale import method_frequencies, rescaled
from posx.model.spec import ModelSpec
from posx.schema.config import BYTES, Config
from posx.train.compiling import decide_compile
from posx.train.steps import lr_at, set_lr, train_step

try:
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
except ImportError:  # pragma: no cover - the message is the point
    sys.exit("benchmarks.bench_peer needs transformers: pip install -e '.[bench]'")

REPO = Path(__file__).resolve().parents[1]

PRESETS = {"tiny": {"n_layer": 4, "n_head": 4, "d_model": 128}, "small": {"n_layer": 8, "n_head": 8, "d_model": 512}}
# posx method -> transformers rope_type (the same rescaling, each side's implementation)
PAIRS = {"none": "default", "pi": "linear", "dynamic_ntk": "dynamic", "yarn": "yarn"}


def run_config(args) -> Config:
    cfg = OmegaConf.structured(Config)
    cfg.pos.name = "rope"
    cfg.train.context_length, cfg.train.batch_size, cfg.train.steps = args.context, args.batch_size, args.steps
    cfg.train.warmup_steps = max(1, args.steps // 10)
    for key, value in PRESETS[args.model].items():
        cfg.model[key] = value
    cfg.model.block = args.block
    return typed(cfg)


def llama_config(cfg, hidden: int, rope_type: str = "default", factor: float = 1.0) -> LlamaConfig:
    m, T = cfg.model, cfg.train.context_length
    rope = {"rope_type": rope_type, "rope_theta": float(cfg.pos.base)}
    if rope_type != "default":
        rope["factor"] = float(factor)
    if rope_type == "yarn":
        rope["original_max_position_embeddings"] = T
    return LlamaConfig(
        vocab_size=BYTES,
        hidden_size=m.d_model,
        intermediate_size=hidden,
        num_hidden_layers=m.n_layer,
        num_attention_heads=m.n_head,
        num_key_value_heads=m.n_head,
        max_position_embeddings=T,
        rope_parameters=rope,
        tie_word_embeddings=True,
        use_cache=False,
        attn_implementation="sdpa",
    )


def matched_llama(cfg, target: int) -> tuple[LlamaForCausalLM, int]:
    """The Llama whose SwiGLU hidden size brings its parameter count nearest posx's."""
    d, L = cfg.model.d_model, cfg.model.n_layer
    base = LlamaForCausalLM(llama_config(cfg, 1)).num_parameters() - 3 * d * L  # hidden = 1
    hidden = max(1, round((target - base) / (3 * d * L)))
    model = LlamaForCausalLM(llama_config(cfg, hidden))
    return model, hidden


class Logits(torch.nn.Module):
    """transformers' model called as posx calls a model: (token ids, targets) -> (logits, loss),
    the loss posx's own (``lm_loss``; None without targets)."""

    def __init__(self, hf: LlamaForCausalLM):
        super().__init__()
        self.hf = hf

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = self.hf(input_ids=idx).logits
        return logits, None if targets is None else lm_loss(logits, targets)


@dataclass
class Side:
    """One of the two models under training: what steps, what it calls, what it measured."""

    module: torch.nn.Module
    call: torch.nn.Module  # (idx, targets) -> (logits, loss)
    flops_per_token: float
    optimizer: torch.optim.Optimizer | None = None
    losses: list[torch.Tensor] = field(default_factory=list)
    peak: int = 0  # peak CUDA memory of its steps (bytes)


def matrix_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """posx's AdamW grouping (``make_optimizer``): decay on matrices, none on vectors."""
    params = list(model.parameters())
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def flops_per_token(n_params: int, cfg) -> float:
    m = cfg.model
    return 6.0 * n_params + 12.0 * m.n_layer * m.n_head * (m.d_model // m.n_head) * cfg.train.context_length


def side_step(cfg, side: Side, fwd, batches: list, device: torch.device, step: int) -> None:
    """One training step of ``side`` (posx's ``train_step``) on the step's shared batch."""
    x, y = batches[step]
    set_lr(side.optimizer, lr_at(step, cfg))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    side.losses.append(train_step(side.module, side.optimizer, x, y, device, grad_clip=cfg.train.grad_clip, fwd=fwd))
    if device.type == "cuda":
        side.peak = max(side.peak, torch.cuda.max_memory_allocated())


def calls(cfg, sides: dict[str, Side], device: torch.device, args) -> dict:
    """What each side steps through: both compiled with ``--compile``; else the transformers model
    eager and posx as ``--posx-compile`` decides (auto: posx's rule for this run's steps)."""
    if args.compile:
        return {name: torch.compile(side.call) for name, side in sides.items()}
    posx = sides["posx"].module
    work = (cfg.train.batch_size * cfg.train.context_length, cfg.train.steps)
    on = decide_compile(args.posx_compile, device, cfg.model.block, cfg.model.n_layer, posx.num_params(), work)
    return {"posx": torch.compile(posx) if on else posx, "transformers": sides["transformers"].call}


def train_both(cfg, sides: dict[str, Side], train: torch.Tensor, device: torch.device, args) -> dict:
    t = cfg.train
    # the same AdamW for both: fused on CUDA, foreach (the same numbers as the loop) on the CPU
    fused = {"fused": True} if device.type == "cuda" else {"foreach": True}
    for side in sides.values():
        side.optimizer = torch.optim.AdamW(
            matrix_groups(side.module, t.weight_decay), lr=t.lr, betas=(t.beta1, t.beta2), **fused
        )
    gen = torch.Generator().manual_seed(args.seed)
    batches = [
        tuple(b.to(device) for b in data_mod.get_batch(train, t.batch_size, t.context_length, gen))
        for _ in range(t.steps)
    ]
    fwds = calls(cfg, sides, device, args)
    cases = {name: partial(side_step, cfg, side, fwds[name], batches, device) for name, side in sides.items()}
    times = interleaved(cases, t.steps, device, order="alternate")  # who steps first alternates
    skip = min(args.warmup, t.steps - 1)  # first steps: allocation, autotuning, compilation
    tokens = t.batch_size * t.context_length
    ratios = speedups(times, "posx", "transformers", skip)
    losses = {name: [loss.item() for loss in side.losses] for name, side in sides.items()}
    peak = bf16_peak_flops(device)
    out = {
        "ratio_posx_over_transformers": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "timed_steps": len(ratios),
        "posx_compiled": fwds["posx"] is not sides["posx"].module,
        "to_equal_loss": to_equal_loss(times, losses, "posx", "transformers", args.loss_window),
    }
    for name, side in sides.items():
        tok_s = tokens / statistics.median(times[name][skip:])
        out[name] = {
            "tokens_per_s": tok_s,
            "final_loss": side.losses[-1].item(),
            "peak_memory_mib": side.peak / 2**20 if device.type == "cuda" else None,
            "mfu": None if peak is None else tok_s * side.flops_per_token / peak,
        }
    if args.profile:  # after the figures above: these steps go on training
        out["profile"] = {n: profile_side(cfg, s, fwds[n], batches, device, args.profile) for n, s in sides.items()}
    return out


def profile_side(cfg, side: Side, fwd, batches: list, device: torch.device, steps: int) -> dict:
    """Share of each part in ``steps`` more training steps of ``side`` (``benchmarks.step_split``)
    and the profiled milliseconds per step (the profiler adds its own overhead)."""
    handles = step_split.label_modules(side.module)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for step in range(steps):
            side_step(cfg, side, fwd, batches, device, step % len(batches))
    for handle in handles:
        handle.remove()
    seconds = step_split.split(prof)
    total = sum(seconds.values())
    shares = {part: round(s / total, 4) for part, s in sorted(seconds.items(), key=lambda kv: -kv[1])}
    return {"ms_per_step": 1e3 * total / steps, "shares": shares}


def evaluate_both(
    cfg, posx_model: GPT, hf: LlamaForCausalLM, hidden: int, val: torch.Tensor, device: torch.device, args
) -> dict:
    T = cfg.train.context_length
    lengths = [f * T for f in args.factors]
    n_tokens = scoring.tokens_for("nonoverlapping", args.eval_tokens, lengths, lengths)
    rows, seconds = [], {"posx": 0.0, "transformers": 0.0}
    posx_model.eval()
    hf.eval()
    original_rotary = hf.model.rotary_emb
    for method, rope_type in PAIRS.items():
        for L in lengths:
            s = L / T
            inv_freq, attn = method_frequencies(method, cfg.eval, posx_model.config.head_dim, cfg.pos.base, T, s, L)
            row = {"posx_method": method, "transformers_rope_type": rope_type, "length": L, "factor": s}
            for name in ("posx", "transformers"):
                if name == "transformers":
                    hf.model.rotary_emb = LlamaRotaryEmbedding(llama_config(cfg, hidden, rope_type, s)).to(device)
                    model = Logits(hf)
                    ctx = rescaled(posx_model, None)
                else:
                    model, ctx = posx_model, rescaled(posx_model, inv_freq.to(device), attn)
                synchronize(device)
                t0 = time.perf_counter()
                with ctx:
                    scores = scoring.score(model, val, L, L, n_tokens, args.batch_tokens, device)
                synchronize(device)
                seconds[name] += time.perf_counter() - t0
                row[f"{name}_ppl"] = math.exp(scores.total / scores.tokens)
            rows.append(row)
    hf.model.rotary_emb = original_rotary
    cells = len(rows)
    return {
        "rows": rows,
        "tokens_per_cell": n_tokens,
        "eval_tokens_per_s": {n: cells * n_tokens / sec for n, sec in seconds.items()},
        "eval_ratio_posx_over_transformers": seconds["transformers"] / seconds["posx"],
    }


def parser() -> argparse.ArgumentParser:
    """The command line: model and lengths, steps and timing, compilation, profiling, evaluation, output."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5, help="first steps left out of the timing")
    parser.add_argument("--compile", action="store_true", help="torch.compile both models (same settings)")
    parser.add_argument("--block", choices=["gpt2", "llama"], default="gpt2", help="posx's model.block")
    parser.add_argument(
        "--posx-compile", default="auto", choices=["auto", "true", "false"], help="posx's train.compile (not --compile)"
    )
    parser.add_argument(
        "--loss-window", type=int, default=20, help="steps in the trailing mean of the time-to-equal-loss figure"
    )
    parser.add_argument("--profile", type=int, default=0, help="profile this many more steps of each side")
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--eval-tokens", type=int, default=8192)
    parser.add_argument("--batch-tokens", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0, help="both models' initialisation and the batches")
    parser.add_argument("--cache-dir", default=str(REPO / "results" / "cache"))
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    return parser


def both_models(cfg, seed: int, device: torch.device) -> tuple[GPT, LlamaForCausalLM, int]:
    """posx's model and the Llama of its size, each initialised from ``seed``, and the Llama's
    SwiGLU hidden size."""
    torch.manual_seed(seed)
    posx_model = GPT(ModelSpec.from_config(cfg, BYTES)).to(device)
    torch.manual_seed(seed)
    hf, hidden = matched_llama(cfg, posx_model.num_params())
    return posx_model, hf.to(device), hidden


def description(args, device: torch.device, n_posx: int, n_hf: int, hidden: int) -> dict:
    """The head of the result: the machine, torch, threads, the arguments and both parameter counts."""
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "args": vars(args),
        "params": {
            "posx": n_posx,
            "transformers": n_hf,
            "llama_intermediate_size": hidden,
            "relative_difference": n_hf / n_posx - 1,
        },
    }


def headline(result: dict) -> str:
    """The figures a reader looks for first, in three lines (the JSON has the rest)."""
    train, ev = result["train"], result["eval"]
    rate = {side: train[side]["tokens_per_s"] for side in ("posx", "transformers")}
    equal = train["to_equal_loss"]
    lines = [
        f"train tokens/s: posx {rate['posx']:,.0f}, transformers {rate['transformers']:,.0f}: "
        f"{train['ratio_posx_over_transformers']:.2f}x (per step {train['ratio_min']:.2f} to {train['ratio_max']:.2f}; "
        f"posx {'compiled' if train['posx_compiled'] else 'eager'})",
        f"to the training loss {equal['target_loss']:.3f}: posx {equal['posx']['steps']} steps "
        f"({equal['posx']['seconds']:.1f} s), transformers {equal['transformers']['steps']} "
        f"({equal['transformers']['seconds']:.1f} s): posx {equal['speedup']:.2f}x as fast",
        f"evaluation tokens/s: {ev['eval_ratio_posx_over_transformers']:.2f}x",
    ]
    return "\n".join(lines)


def main() -> None:
    args = parser().parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    use_tf32(device, True)
    cfg = run_config(args)
    corpus = store.load({"source": "stdlib", "val_fraction": cfg.data.val_fraction}, args.cache_dir)

    posx_model, hf, hidden = both_models(cfg, args.seed, device)
    n_posx, n_hf = posx_model.num_params(), hf.num_parameters()
    assert abs(n_hf - n_posx) <= 0.01 * n_posx, (n_hf, n_posx)
    sides = {
        "posx": Side(posx_model, posx_model, posx_model.flops_per_token(args.context)),
        "transformers": Side(hf, Logits(hf), flops_per_token(n_hf, cfg)),
    }
    result = description(args, device, n_posx, n_hf, hidden)
    result["train"] = train_both(cfg, sides, corpus.train, device, args)
    result["eval"] = evaluate_both(cfg, posx_model, hf, hidden, corpus.val, device, args)
    print(json.dumps(result, indent=1))
    print(headline(result), file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
