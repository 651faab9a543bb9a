"""Benchmark of the positional encodings: training throughput relative to RoPE, and peak
memory of one evaluation batch at 1x and 8x the training length.

From the repository root, with posx installed (``pip install -e .``):

    python -m benchmarks.bench_encodings                  # tiny preset, CPU, all encodings
    python -m benchmarks.bench_encodings --threads 1       # steadier ratios on a loaded CPU
    python -m benchmarks.bench_encodings --variants        # also RoPE with each newer option
    python -m benchmarks.bench_encodings --device cuda --model small --context 512
    python -m benchmarks.bench_encodings --device cuda --model small --context 512 --attention flex

Throughput: every encoding trains the same model on random tokens (speed does not depend on
the data) with posx's own ``train_step``, in interleaved rounds with the order shuffled each
round (``benchmarks.harness.interleaved``), so a noisy shared machine affects all encodings
alike. The figure is the median over rounds of tokens/s, and the ratio is the median of the
per-round ratios to RoPE.

Memory: each (encoding, factor) case builds the model, makes one evaluation batch
(eval.batch_tokens tokens as windows of L = factor x T, as posx.evaluate does), then scores it
with the real ``evaluate.window_nll``. On the CPU each case runs in a fresh subprocess; on CUDA
all run in this process, where the allocator's peak resets exactly and the compiled
FlexAttention is reused (four fresh processes, each compiling it, outran the GPU check's two
minutes). On the CPU the figure is the
process's peak resident memory during that call minus its resident memory just before:
the peak (VmHWM) is reset through /proc/self/clear_refs first, so memory touched while
importing torch does not hide a smaller peak, and a warm-up call on a single window first
pages in the code and thread pools, which would otherwise count ~100 MiB to whichever case
runs first. The subprocess runs with MALLOC_MMAP_THRESHOLD_=65536, so glibc serves every
block of 64 KiB or more by mmap and returns it on free: the peak then follows the live
tensors (run to run within 0.1 MiB) instead of glibc's heap reuse (about +-20 MiB of noise).
It counts everything the call touches (torch's allocator, oneDNN scratch, the cached ALiBi
mask), which is what a user's machine has to hold.
On CUDA it is torch.cuda.max_memory_allocated minus the allocation before the call.
Learned absolute is measured past its table with eval.absolute_beyond=clamp.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import torch
from omegaconf import OmegaConf

from benchmarks.harness import interleaved, repeat, stepper, summary
from posx.configure.compose import typed
from posx.eval.extrapolate import window_nll
from posx.model.encodings import ENCODINGS
from posx.model.gpt import GPT
from posx.model.spec import ModelSpec
from posx.schema.config import BYTES, Config

REPO = Path(__file__).resolve().parents[1]  # where ``python -m benchmarks.bench_encodings`` runs

PRESETS = {"tiny": {"n_layer": 4, "n_head": 4, "d_model": 128}, "small": {"n_layer": 8, "n_head": 8, "d_model": 512}}
# --variants: RoPE with each of the newer options, timed beside the encodings (name -> overrides).
VARIANTS = {
    "rope-p0.25": {"pos.rotary_fraction": 0.25},
    "rope-logn": {"model.attn_scale": "logn"},
    "rope-ssmax": {"model.attn_scale": "ssmax"},
    "rope-nope2": {"model.nope_every": 2},
    "rope-random": {"pos.randomized": True},
}


def config(pos: str, args, overrides: dict | None = None) -> Config:
    cfg = OmegaConf.structured(Config)
    cfg.pos.name = pos
    for key, value in (overrides or {}).items():
        OmegaConf.update(cfg, key, value, merge=False)
    cfg.train.context_length = args.context
    cfg.train.batch_size = args.batch_size
    for key, value in PRESETS[args.model].items():
        cfg.model[key] = value
    cfg.model.attention = args.attention
    return typed(cfg)


def train_throughput(args) -> dict[str, dict]:
    device = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (args.batch_size, args.context + 1), generator=gen).to(device)
    steps = {}
    cases = {pos: (pos, {}) for pos in args.encodings}
    cases.update({name: ("rope", overrides) for name, overrides in VARIANTS.items()} if args.variants else {})
    for name, (pos, overrides) in cases.items():
        cfg = config(pos, args, overrides)
        torch.manual_seed(0)
        model = GPT(ModelSpec.from_config(cfg, BYTES)).to(device).train()
        steps[name] = stepper(model, cfg, x[:, :-1], x[:, 1:], device)
    interleaved(steps, 2, device, order="fixed")  # warm-up: first-call allocations and kernel choice
    cases = {pos: partial(repeat, step, args.steps) for pos, step in steps.items()}
    times = interleaved(cases, args.rounds, device, order="shuffle")
    return {
        pos: {
            "tokens_per_s": r["per_s"],
            "vs_rope": r["vs_ref"],
            "ratio_min": r["ratio_min"],
            "ratio_max": r["ratio_max"],
        }
        for pos, r in summary(times, "rope", args.steps * args.batch_size * args.context).items()
    }


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def element_bytes(device: torch.device) -> int:
    """Bytes of one mask or score value: evaluation runs under posx.core.device.autocast, bf16
    on CUDA, float32 on the CPU."""
    return (torch.bfloat16 if device.type == "cuda" else torch.float32).itemsize


def memory_case(pos: str, factor: int, args) -> dict:
    """Runs inside the fresh subprocess: one evaluation batch at L = factor x T."""
    device = torch.device(args.device)
    cfg = config(pos, args)
    torch.manual_seed(0)
    model = GPT(ModelSpec.from_config(cfg, BYTES)).to(device).eval()
    if pos == "absolute":
        model.pos.set_beyond("clamp")
    L = factor * args.context
    n_windows = max(1, args.batch_tokens // L)
    tokens = torch.randint(0, 256, (n_windows * L + 1,), generator=torch.Generator().manual_seed(1))
    # Warm-up on one short window: pages in the code and thread pools the kernels use (on the
    # CPU the first call grows the RSS by tens of MiB whatever its size). Its ALiBi mask is
    # small, so replacing it does not hide the measured call's own mask.
    window_nll(model, tokens, max(2, L // 8), 1, args.batch_tokens, device)
    if device.type == "cuda" and args.attention == "flex":
        # compiled FlexAttention: compiled here, at the measured call's own shape (batch and
        # length), so the timing holds no compile; flex keeps no mask, so this hides nothing
        window_nll(model, tokens, L, n_windows, args.batch_tokens, device)
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        before = _status_kib("VmRSS") * 1024
        if _status_kib("VmHWM") * 1024 > before + (1 << 20):
            raise RuntimeError("could not reset the peak RSS (/proc/self/clear_refs); no honest figure")
    t0 = time.perf_counter()
    window_nll(model, tokens, L, n_windows, args.batch_tokens, device)
    seconds = time.perf_counter() - t0
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - before
    else:
        peak = _status_kib("VmHWM") * 1024 - before
    H = model.config.model.n_head
    element = element_bytes(device)
    # a (1, H, L, L) mask exists where the encoding builds one for SDPA (the bias encodings)
    masked = args.attention == "sdpa" and model.pos.attn_masks(2, 1, torch.float32, device)[0] is not None
    return {
        "pos": pos,
        "factor": factor,
        "length": L,
        "batch": n_windows,
        "peak_bytes": peak,
        "seconds": seconds,
        "mask_bytes": H * L * L * element if masked else 0,
        "per_batch_scores_bytes": n_windows * H * L * L * element,
    }


def memory(args) -> list[dict]:
    """Every (encoding, factor) case, each printed to stderr as it ends. On CUDA all in this
    process (the allocator's peak is reset per case, and the compiled FlexAttention is shared);
    elsewhere each in a fresh subprocess (the peak RSS is per process)."""
    rows = []
    for pos in args.encodings:
        for factor in args.factors:
            t0 = time.perf_counter()
            row = memory_case(pos, factor, args) if args.device == "cuda" else memory_subprocess(pos, factor, args)
            rows.append(row)
            mib = row["peak_bytes"] / 2**20
            print(f"  {pos} {factor}x: peak {mib:.1f} MiB ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return rows


def memory_subprocess(pos: str, factor: int, args) -> dict:
    """``memory_case`` in a fresh interpreter, with glibc returning large blocks on free."""
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.bench_encodings",
        "--memory-case",
        pos,
        str(factor),
        "--device",
        args.device,
        *(["--threads", str(args.threads)] if args.threads else []),
        "--model",
        args.model,
        "--context",
        str(args.context),
        "--attention",
        args.attention,
        "--batch-tokens",
        str(args.batch_tokens),
    ]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"memory case {pos} {factor}x failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def parser() -> argparse.ArgumentParser:
    """The command line: model and lengths, rounds and steps, factors, encodings, output."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--context", type=int, default=128, help="training length T")
    p.add_argument("--batch-size", type=int, default=32, help="training batch (train.batch_size)")
    p.add_argument("--batch-tokens", type=int, default=16384, help="eval.batch_tokens")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--steps", type=int, default=1, help="training steps per encoding per round")
    p.add_argument("--factors", type=int, nargs="+", default=[1, 8])
    p.add_argument(
        "--attention",
        choices=["sdpa", "flex"],
        default="sdpa",
        help="model.attention (flex: FlexAttention for alibi, t5, kerple and fire, compiled on CUDA)",
    )
    p.add_argument("--encodings", nargs="+", choices=list(ENCODINGS), default=list(ENCODINGS))
    p.add_argument("--out", default=None, help="write the memory rows (and throughput) as JSON here")
    p.add_argument("--memory-case", nargs=2, metavar=("POS", "FACTOR"), help=argparse.SUPPRESS)
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--variants", action="store_true", help="also time RoPE with each newer option (VARIANTS)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: torch's); 1 is steadier on a loaded shared CPU",
    )
    return p


def report_train(args, train: dict[str, dict]) -> None:
    """Prints the training throughput table: tokens/s and the ratio to RoPE of each encoding."""
    print(
        f"\ntrain throughput: batch {args.batch_size} x T={args.context}, {args.rounds} rounds x "
        f"{args.steps} steps, interleaved"
    )
    print(f"{'encoding':>12} {'tokens/s':>10} {'vs rope':>8} {'(min..max)':>14}")
    for pos, r in train.items():
        print(
            f"{pos:>12} {r['tokens_per_s']:>10,.0f} {r['vs_rope']:>8.3f} ({r['ratio_min']:.2f}..{r['ratio_max']:.2f})"
        )


def memory_header(batch_tokens: int, device: str) -> None:
    """Prints the title and the column heads of the memory table (before its cases run)."""
    where = "one process, peak reset per case" if device == "cuda" else "fresh process each"
    print(f"\nevaluation peak memory: one batch of eval.batch_tokens={batch_tokens}, {where}")
    print(
        f"{'encoding':>11} {'factor':>6} {'L':>6} {'B':>4} {'peak MiB':>9} {'seconds':>8} "
        f"{'mask MiB':>9} {'(B,H,L,L) MiB':>14}"
    )


def report_memory(rows: list[dict]) -> None:
    """Prints one line of the memory table per (encoding, factor) case."""
    mib = 1 << 20
    for r in rows:
        print(
            f"{r['pos']:>11} {r['factor']:>5}x {r['length']:>6} {r['batch']:>4} {r['peak_bytes'] / mib:>9.1f} "
            f"{r['seconds']:>8.2f} {r['mask_bytes'] / mib:>9.1f} {r['per_batch_scores_bytes'] / mib:>14.1f}"
        )


def main() -> None:
    args = parser().parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_case:
        print(json.dumps(memory_case(args.memory_case[0], int(args.memory_case[1]), args)))
        return

    print(
        f"torch {torch.__version__}, device {args.device}, threads {torch.get_num_threads()}, "
        f"model {args.model} {PRESETS[args.model]}, T={args.context}, attention {args.attention}"
    )
    result = {"torch": torch.__version__, "device": args.device, "attention": args.attention}
    if not args.skip_train:
        result["train"] = train_throughput(args)
        report_train(args, result["train"])
    memory_header(args.batch_tokens, args.device)
    result["memory"] = memory(args)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    report_memory(result["memory"])


if __name__ == "__main__":
    main()
