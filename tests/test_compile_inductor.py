"""The inductor path on the CPU: what a GPU run compiles, caught where no GPU is.

Every encoding (SDPA, and FlexAttention for the bias encodings: its CPU kernel is generated
by inductor too) is compiled with inductor, whole graph, and evaluated at 1x, 2x, 4x and 8x the
training length with two batch sizes. It must compile at most one graph per length, plus one
at the first length where the second batch size makes the batch dimension symbolic (dynamo's
automatic dynamic shapes; the length becomes symbolic too where the graph allows it), so the
count stays below dynamo's recompile limit at any number of lengths. It must never break the
graph, and never fall back to eager: ``fullgraph=True`` turns a graph break or a
recompile past dynamo's limit into an error instead of an eager run. The compiled logits match
the eager model's. Graphs are counted with ``tests/test_compile.py``'s counter.

A T5 + flex training step under CPU bf16 autocast runs the path a GPU run trains through (on
the CPU the backward goes through SDPA: PyTorch's flex backward is CUDA-only) and evaluates
through flex under autocast.
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch.nn.attention.flex_attention import flex_attention

from posx.model.attention import FlexFallbackWarning, causal_block_mask
from posx.model.encodings import ENCODINGS, T5Bias
from posx.model.gpt import GPT
from tests.test_compile import Compiles

from helpers.model import spec

T = 16
FACTORS = (1, 2, 4, 8)
BATCHES = (2, 3)  # not 1: dynamo always specialises a size of 1
FLEX = [pos for pos in ENCODINGS if GPT(spec(n_layer=1, n_head=2, d_model=16, pos=pos)).pos.score_mod(0)]
ALL_CASES = [(pos, "sdpa") for pos in ENCODINGS] + [(pos, "flex") for pos in FLEX]
# Each case compiles for minutes on a 2-core CPU, so the suite runs one of each kind: RoPE (the
# frequencies), learned absolute (its table bound) and T5 through flex (a per-layer table in a
# score_mod). POSX_COMPILE_ALL=1 runs every encoding with each attention it has.
SAMPLE = [("rope", "sdpa"), ("absolute", "sdpa"), ("t5", "flex")]
CASES = ALL_CASES if os.environ.get("POSX_COMPILE_ALL") == "1" else SAMPLE


def tiny(pos: str, attention: str) -> GPT:
    torch.manual_seed(0)
    config = spec(n_layer=1, n_head=2, d_model=32, pos=pos, attention=attention, max_positions=T * max(FACTORS))
    return GPT(config).eval()


@pytest.mark.slow
@pytest.mark.parametrize("pos,attention", CASES)
def test_inductor_compiles_at_most_one_graph_per_length_and_never_falls_back(pos, attention):
    torch._dynamo.reset()
    model = tiny(pos, attention)
    fwd = torch.compile(model, backend="inductor", fullgraph=True)
    per_length = []
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FlexFallbackWarning)
        for factor in FACTORS:
            compiles = Compiles()
            for batch in BATCHES:
                idx = torch.randint(0, 256, (batch, factor * T))
                with compiles:
                    got, _ = fwd(idx)
                torch.testing.assert_close(got, model(idx)[0], atol=1e-4, rtol=1e-4)
            per_length.append(compiles.count)
    assert per_length[0] <= 2 and all(n <= 1 for n in per_length[1:]), f"{pos}/{attention}: graphs {per_length}"


@pytest.mark.slow
def test_t5_flex_trains_a_step_under_cpu_bf16_autocast_and_evaluates_through_flex():
    model = tiny("t5", "flex").train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    idx = torch.randint(0, 256, (2, T + 1))
    before = [p.detach().clone() for p in model.parameters()]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = model(idx[:, :-1], idx[:, 1:])
    loss.backward()
    assert model.pos.tables[0].weight.grad.abs().sum() > 0  # the bias table learns
    opt.step()
    assert torch.isfinite(loss) and all(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        flex, _ = model(idx[:, :-1])
        model.config.model.attention = "sdpa"  # the reference path, same weights
        sdpa, _ = model(idx[:, :-1])
    assert flex.dtype == torch.bfloat16
    torch.testing.assert_close(flex.float(), sdpa.float(), atol=3e-2, rtol=3e-2)


@pytest.mark.slow
def test_standalone_compiled_flex_shares_one_graph_across_t5_layers():
    """What posx compiles on CUDA outside a compiled model (posx.model.attention._flex_fn):
    ``flex_attention`` compiled once, fullgraph. Per-layer T5 tables at three lengths and two
    batch sizes take at most one graph per length: the layers' score_mods differ only in the
    tensors they hold (a score_mod bound to a Python layer number recompiled per layer and
    passed dynamo's recompile limit here)."""
    torch._dynamo.reset()
    enc = T5Bias(n_head=2, n_layer=3, per_layer=True)
    compiled = torch.compile(flex_attention, fullgraph=True)
    compiles = Compiles()
    lengths = (16, 32, 64)
    with torch.no_grad():
        for length in lengths:
            block_mask = causal_block_mask(length, torch.device("cpu"))
            for batch in BATCHES:
                q, k, v = (torch.randn(batch, 2, length, 16) for _ in range(3))
                for layer in range(3):
                    with compiles:
                        got = compiled(q, k, v, score_mod=enc.score_mod(layer), block_mask=block_mask)
                    want = flex_attention(q, k, v, score_mod=enc.score_mod(layer), block_mask=block_mask)
                    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert 1 <= compiles.count <= len(lengths), compiles.count
