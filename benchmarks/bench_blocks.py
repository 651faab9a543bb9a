"""Benchmark: attention that materialises its logits, by the size of its blocks of query rows.

The windowed methods (``posx.model.windowed.attend``) and CoPE (``CoPE.attend``) compute their
logits a block of query rows at a time, at most ``posx.model.attention.CPU_CHUNK_ELEMENTS``
(the CPU) or ``CHUNK_ELEMENTS`` (any other device) float32 logits per block. This times one
attention call of each at the shape of an evaluation batch, with the block limit set to each of
``--sizes`` MiB in turn, against SDPA's causal kernel on the same q, k and v: the measurement
behind those two limits. The methods use the default eval config's parameters and a RoPE
rotation at the model's base; the numbers do not depend on the weights. From the repository
root, with posx installed (``pip install -e .``):

    python -m benchmarks.bench_blocks [--device cpu] [--threads 1] [--sizes 64 16 8 4 2]
"""

from __future__ import annotations

import argparse
import statistics
from functools import partial

import torch
import torch.nn.functional as F

from benchmarks.harness import interleaved
from posx.configure.compose import compose
from posx.model import attention
from posx.model.cope import CoPE
from posx.model.rescale import WINDOWED, method_window
from posx.model.rotary import Rotary
from posx.model.windowed import attend

MIB = 1 << 20


def limit_name(device: torch.device) -> str:
    """The module constant that caps a block's logits on ``device``."""
    return "CPU_CHUNK_ELEMENTS" if device.type == "cpu" else "CHUNK_ELEMENTS"


def with_limit(mib: float, device: torch.device, call, _round: int) -> None:
    """``call()`` with blocks of at most ``mib`` MiB of float32 logits, the limit restored after."""
    name = limit_name(device)
    kept = getattr(attention, name)
    setattr(attention, name, max(1, int(mib * MIB) // 4))
    try:
        with torch.no_grad():
            call()
    finally:
        setattr(attention, name, kept)


def cases(args, device: torch.device) -> dict:
    """{name: case} for SDPA, each windowed method and CoPE at each block size."""
    cfg = compose(["device=cpu"])
    T, hd = args.context, args.head_dim
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(args.batch, args.heads, args.factor * T, hd, generator=g).to(device) for _ in range(3))
    positions = torch.arange(args.factor * T, device=device)
    rotary = Rotary(hd, cfg.pos.base).to(device)
    cope = CoPE(1, hd, T + 1).to(device)
    with torch.no_grad():  # a trained-looking table: zeros (its initial value) would skip no work anyway
        cope.tables[0].copy_(torch.randn(cope.tables[0].shape, generator=g))
    rotated = rotary.rotate(q, k, positions)
    out = {"sdpa causal": lambda _round: F.scaled_dot_product_attention(*rotated, v, is_causal=True)}
    calls = {
        m: partial(attend, q, k, v, positions, method_window(m, cfg.eval, T), rotary.rotate_at)
        for m in args.methods
        if m != "cope"
    }
    if "cope" in args.methods:
        calls["cope"] = partial(cope.attend, 0, q, k, v, 0.0)
    for name, call in calls.items():
        for mib in args.sizes:
            out[f"{name} @ {mib:g} MiB"] = partial(with_limit, mib, device, call)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--batch", type=int, default=16, help="16 x 8T = the default 16,384 tokens at 8x")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--context", type=int, default=128, help="T")
    parser.add_argument("--factor", type=int, default=8, help="the length is factor x T")
    parser.add_argument("--sizes", type=float, nargs="+", default=[64, 16, 8, 4, 2], help="block limits in MiB")
    parser.add_argument(
        "--methods", nargs="+", default=[*sorted(WINDOWED), "cope"], choices=[*sorted(WINDOWED), "cope"]
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    L = args.factor * args.context
    print(
        f"device {device}, torch threads {torch.get_num_threads()}, batch {args.batch} x {args.heads} heads x "
        f"L={L} x head dim {args.head_dim}; {limit_name(device)} now {getattr(attention, limit_name(device)):,} "
        f"({getattr(attention, limit_name(device)) * 4 / MIB:g} MiB)"
    )
    times = interleaved(cases(args, device), args.rounds, device, order="fixed")
    ref = min(times["sdpa causal"][1:] or times["sdpa causal"])
    for name, ts in times.items():
        best = min(ts[1:] or ts)  # the first round warms up
        print(
            f"{name:28s} best {best * 1e3:8.1f} ms  x{best / ref:5.2f} sdpa  (median {statistics.median(ts) * 1e3:.1f})"
        )


if __name__ == "__main__":
    main()
