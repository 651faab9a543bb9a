"""benchmarks/bench_peer.py compares like with like: the Llama has posx's width, depth and heads
and a parameter count within 1%, and each transformers rope_type it pairs with a posx method
computes the same frequencies as that method (so the perplexity columns compare rescalings,
not two readings of a paper)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from benchmarks import bench_peer  # the repository root is on pytest's pythonpath (pyproject.toml)
from posx.model.gpt import GPT
from posx.model.rescale import method_frequencies
from posx.train.state import gpt_config


@pytest.fixture(scope="module")
def bench():
    return bench_peer


def args(model: str, context: int):
    return type("Args", (), {"model": model, "context": context, "batch_size": 4, "steps": 10})()


@pytest.mark.parametrize("preset,context", [("tiny", 128), pytest.param("small", 512, marks=pytest.mark.slow)])
def test_llama_matches_posx_within_one_percent(bench, preset, context):
    cfg = bench.run_config(args(preset, context))
    posx = GPT(gpt_config(cfg))
    hf, _ = bench.matched_llama(cfg, posx.num_params())
    c = hf.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads) == (
        cfg.model.d_model,
        cfg.model.n_layer,
        cfg.model.n_head,
    )
    assert abs(hf.num_parameters() / posx.num_params() - 1) < 0.01


@pytest.mark.parametrize("method", ["none", "pi", "yarn"])
def test_paired_rope_types_give_posx_frequencies(bench, method):
    cfg = bench.run_config(args("tiny", 128))
    T, L = 128, 512
    want, attn = method_frequencies(method, cfg.eval, 32, cfg.pos.base, T, L / T, L)
    rotary = bench.LlamaRotaryEmbedding(bench.llama_config(cfg, 8, bench.PAIRS[method], L / T))
    assert torch.allclose(rotary.inv_freq.float(), want.float(), rtol=1e-5)
    assert rotary.attention_scaling == pytest.approx(attn)
