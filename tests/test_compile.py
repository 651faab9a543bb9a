"""torch.compile of the model: no recompiles from Python-number state, and the same numbers.

A counting backend (no code generation, so it runs in seconds on the CPU) records every graph
dynamo hands over. Training at one length takes one graph; evaluation at one length takes one
more (no grad, eval mode) whichever RoPE method is installed (the attention factor and the
frequencies are buffers changed in place); ALiBi's mask is traced, not cached, inside a graph.
The inductor path itself (code generation, the fused FlexAttention kernel) is the GPU check's.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from torch._dynamo.utils import counters

from posx import rope
from posx.config.compose import compose
from posx.core.device import BF16_PEAK, bf16_peak_flops, use_compile
from posx.core.errors import PosxError
from posx.model.config import GPTConfig
from posx.model.gpt import GPT
from posx.model.rescale import rescaled
from posx.train import loop, state, steps
from tests.conftest import TINY

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


class Counting:
    """A torch.compile backend that runs the captured graph as is and counts the graphs."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def graphs() -> int:
    return counters["stats"]["unique_graphs"]


def check_graphs(pos: str, attention: str, device: str, backend, atol: float) -> None:
    """Train 3 steps at T through the compiled model (one graph), then evaluate at 2T under
    five RoPE methods: one more graph at most, none per method, and the eager numbers."""
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=3, d_model=48, pos=pos, attention=attention)).to(device)
    fwd = torch.compile(model, backend=backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    T = 24
    for _ in range(3):
        x = torch.randint(0, 256, (2, T), device=device)
        loss = fwd(x)[0].float().square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert graphs() == 1, "training recompiled"
    model.eval()
    x = torch.randint(0, 256, (2, 2 * T), device=device)
    with torch.no_grad():
        fwd(x)
        after_first = graphs()
        for method in ("none", "pi", "yarn", "dynamic_ntk", "longrope"):
            extra = {"length": 2 * T} if method in ("dynamic_ntk", "longrope") else {}
            inv_freq, attn = rope.frequencies(
                method, model.config.head_dim, base=10000.0, factor=2.0, original_context=T, **extra
            )
            with rescaled(model, inv_freq.to(device), attn):
                got, _ = fwd(x)
                want, _ = model(x)  # the eager module, same state
            assert torch.allclose(got, want, atol=atol), method
    assert graphs() == after_first, f"{pos}: a RoPE method change recompiled"


@pytest.mark.parametrize(
    "pos", ["rope", pytest.param("alibi", marks=pytest.mark.slow), pytest.param("t5", marks=pytest.mark.slow)]
)
def test_one_graph_for_training_and_one_per_eval_length_whatever_the_method(pos):
    check_graphs(pos, "sdpa", "cpu", "eager", 1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("pos,attention", [("rope", "sdpa"), ("alibi", "flex"), ("t5", "flex"), ("t5", "sdpa")])
def test_inductor_on_cuda_compiles_once_per_length(pos, attention):
    """The real backend (inductor, fused FlexAttention) in float32 without TF32."""
    torch.backends.cuda.matmul.allow_tf32 = False
    check_graphs(pos, attention, "cuda", "inductor", 2e-3)


@pytest.mark.slow
def test_compiled_flex_graph_on_cpu():
    """A flex model's forward (no grad) traces through dynamo: block mask and score_mods."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=3, d_model=24, pos="t5", attention="flex")).eval()
    backend = Counting()
    fwd = torch.compile(model, backend=backend)
    x = torch.randint(0, 256, (1, 40))
    with torch.no_grad():
        assert torch.allclose(fwd(x)[0], model(x)[0], atol=1e-5)
        fwd(x)
    assert backend.graphs == 1


def test_train_compile_setting():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert use_compile("auto", cuda) and not use_compile("auto", cpu)
    assert use_compile(True, cpu) and not use_compile("False", cuda)
    with pytest.raises(PosxError, match="train.compile=sometimes is unknown"):
        use_compile("sometimes", cpu)
    with pytest.raises(PosxError, match="train.compile=maybe is unknown"):
        compose([*TINY, "train.compile=maybe"])
    with pytest.raises(PosxError, match="model.attention=dense is unknown"):
        compose([*TINY, "model.attention=dense"])


def test_mfu_formula_and_peaks():
    model = GPT(GPTConfig(n_layer=4, n_head=4, d_model=128, pos="t5"))
    n = model.num_params() - sum(p.numel() for p in model.pos.parameters())
    assert model.flops_per_token(128) == 6 * n + 12 * 4 * 4 * 32 * 128
    assert steps.mfu(1000.0, 1e9, 4e12) == pytest.approx(0.25)
    assert steps.mfu(1000.0, 1e9, None) is None
    assert bf16_peak_flops(torch.device("cpu")) is None
    names = [k for k, _ in BF16_PEAK]
    assert names.index("H100 PCIe") < names.index("H100") and {"H200", "H100", "A100"} <= set(names)


@pytest.mark.slow
def test_train_with_compile_on_the_cpu(tmp_path, text_corpus, monkeypatch):
    """train.compile=true through the real loop (counting backend): same loss as eager to
    rounding, the run saved without compile's prefixes, mfu empty on the CPU."""
    monkeypatch.setattr(loop, "COMPILE_BACKEND", Counting())
    torch._dynamo.reset()
    runs = {}
    for setting in ("false", "true"):
        cfg = compose(
            [
                *TINY,
                "data=text",
                f"data.path={text_corpus}",
                f"results_dir={tmp_path}",
                "pos=alibi",
                f"train.compile={setting}",
                "train.steps=4",
            ]
        )
        run = tmp_path / setting
        run.mkdir()
        loop.train(cfg, run, state.Fresh())
        runs[setting] = pd.read_csv(run / "metrics.csv")
    a, b = runs["false"], runs["true"]
    assert list(b.columns) == steps.COLUMNS and b["mfu"].isna().all()
    assert all(math.isclose(x, y, rel_tol=1e-4) for x, y in zip(a["train_loss"], b["train_loss"]))
    assert loop.COMPILE_BACKEND.graphs >= 1
    saved = load_file(str(tmp_path / "true" / "model.safetensors"))
    assert saved.keys() == load_file(str(tmp_path / "false" / "model.safetensors")).keys()
