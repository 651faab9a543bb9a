"""benchmarks/bench_peer.py compares like with like: the Llama has posx's width, depth and heads
and a parameter count within 1%, and each transformers rope_type it pairs with a posx method
computes the same frequencies as that method (so the perplexity columns compare rescalings,
not two readings of a paper)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from benchmarks import bench_peer, step_split  # the repository root is on pytest's pythonpath (pyproject.toml)
from posx.model.gpt import GPT
from posx.model.rescale import method_frequencies
from posx.model.spec import ModelSpec
from posx.schema.config import BYTES


@pytest.fixture(scope="module")
def bench():
    return bench_peer


def args(model: str, context: int):
    return type("Args", (), {"model": model, "context": context, "batch_size": 4, "steps": 10, "block": "gpt2"})()


@pytest.mark.parametrize("preset,context", [("tiny", 128), pytest.param("small", 512, marks=pytest.mark.slow)])
def test_llama_matches_posx_within_one_percent(bench, preset, context):
    cfg = bench.run_config(args(preset, context))
    posx = GPT(ModelSpec.from_config(cfg, BYTES))
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


@pytest.mark.parametrize("block", ["gpt2", "llama"])
def test_step_split_gives_every_op_one_part_on_both_sides(bench, block):
    """The parts of a profiled step add up to all its ops' self time, and the labelled modules
    (attention, MLP, norm), their backward included, outweigh what is left unlabelled."""
    a = args("tiny", 32)
    a.block = block
    cfg = bench.run_config(a)
    posx = GPT(ModelSpec.from_config(cfg, BYTES))
    hf, _ = bench.matched_llama(cfg, posx.num_params())
    x = torch.randint(0, 256, (2, 32))
    for model, call in ((posx, posx), (hf, bench.Logits(hf))):
        handles = step_split.label_modules(model)
        opt = torch.optim.AdamW(model.parameters())
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            call(x, x)[1].backward()
            opt.step()
        for h in handles:
            h.remove()
        parts = step_split.split(prof)
        ops = [e for e in prof.events() if not e.name.startswith(step_split.PREFIX)]
        assert sum(parts.values()) == pytest.approx(sum(e.self_cpu_time_total for e in ops) / 1e6)
        assert {"attention", "mlp", "norm", "optimizer", "loss"} <= set(parts)
        assert parts["attention"] + parts["mlp"] + parts["norm"] > parts["other"]


def test_the_headline_reads_the_figures_it_names(bench):
    side = {"tokens_per_s": 15000.0, "final_loss": 2.9}
    result = {
        "train": {
            "posx": {**side, "tokens_per_s": 16530.4},
            "transformers": side,
            "ratio_posx_over_transformers": 1.0832,
            "ratio_min": 0.886,
            "ratio_max": 1.333,
            "posx_compiled": False,
            "to_equal_loss": {
                "target_loss": 2.9372,
                "posx": {"steps": 49, "seconds": 6.42},
                "transformers": {"steps": 39, "seconds": 5.46},
                "speedup": 0.85,
            },
        },
        "eval": {"eval_ratio_posx_over_transformers": 1.0577},
    }
    lines = bench.headline(result).splitlines()
    assert lines[0] == "train tokens/s: posx 16,530, transformers 15,000: 1.08x (per step 0.89 to 1.33; posx eager)"
    assert "posx 49 steps (6.4 s), transformers 39 (5.5 s): posx 0.85x as fast" in lines[1]
    assert lines[2] == "evaluation tokens/s: 1.06x"
