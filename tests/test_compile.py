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
from posx.configure.compose import compose, typed
from posx.core.device import BF16_PEAK, bf16_peak_flops, peak_for_name, use_compile, use_tf32
from posx.core.errors import PosxError
from posx.model.gpt import GPT
from posx.model.rescale import rescaled
from posx.train import loop, state, steps
from tests.conftest import TINY

from helpers.model import spec

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


class Counting:
    """A torch.compile backend that runs the captured graph as is and counts the graphs."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def graphs() -> int:
    """Graphs dynamo has compiled in this process. torch has no public counter for this;
    ``torch._dynamo.utils.counters`` is what its own tests read. It also counts the graph the
    eager ``flex_attention`` compiles for itself (and, on CUDA, posx's compiled flex under an
    eager model), so callers count only across the compiled model's calls (``Compiles``)."""
    return counters["stats"]["unique_graphs"]


class Compiles:
    """Graphs compiled inside ``with compiles:`` blocks only, summed over the blocks."""

    def __init__(self):
        self.count = 0

    def __enter__(self):
        self.before = graphs()

    def __exit__(self, *exc):
        self.count += graphs() - self.before


def check_graphs(pos: str, attention: str, device: str, backend, atol: float) -> None:
    """Train 3 steps at T through the compiled model (one graph), then evaluate at 2T under
    five RoPE methods: one more graph at most, none per method, and the eager numbers. Only
    graphs made during the compiled model's calls count (not the eager reference's)."""
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = GPT(spec(n_layer=2, n_head=3, d_model=48, pos=pos, attention=attention)).to(device)
    fwd = torch.compile(model, backend=backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiles = Compiles()
    T = 24
    for _ in range(3):
        x = torch.randint(0, 256, (2, T), device=device)
        with compiles:
            loss = fwd(x)[0].float().square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert compiles.count == 1, "training recompiled"
    model.eval()
    x = torch.randint(0, 256, (2, 2 * T), device=device)
    with torch.no_grad():
        with compiles:
            fwd(x)
        after_first = compiles.count
        for method in ("none", "pi", "yarn", "dynamic_ntk", "longrope"):
            extra = {"length": 2 * T} if method in ("dynamic_ntk", "longrope") else {}
            inv_freq, attn = rope.frequencies(
                method, model.config.head_dim, base=10000.0, factor=2.0, original_context=T, **extra
            )
            with rescaled(model, inv_freq.to(device), attn):
                with compiles:
                    got, _ = fwd(x)
                want, _ = model(x)  # the eager module, same state
            assert torch.allclose(got, want, atol=atol), method
    assert compiles.count == after_first, f"{pos}: a RoPE method change recompiled"


@pytest.mark.parametrize(
    "pos", ["rope", pytest.param("alibi", marks=pytest.mark.slow), pytest.param("t5", marks=pytest.mark.slow)]
)
def test_one_graph_for_training_and_one_per_eval_length_whatever_the_method(pos):
    check_graphs(pos, "sdpa", "cpu", "eager", 1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("pos,attention", [("rope", "sdpa"), ("alibi", "flex"), ("t5", "flex"), ("t5", "sdpa")])
def test_inductor_on_cuda_compiles_once_per_length(pos, attention, ieee_fp32):
    """The real backend (inductor, fused FlexAttention) in float32 without TF32."""
    check_graphs(pos, attention, "cuda", "inductor", 2e-3)


@pytest.mark.slow
def test_compiled_flex_graph_on_cpu():
    """A flex model's forward (no grad) traces through dynamo: block mask and score_mods."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = GPT(spec(n_layer=1, n_head=3, d_model=24, pos="t5", attention="flex")).eval()
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
    model = GPT(spec(n_layer=4, n_head=4, d_model=128, pos="t5"))
    n = model.num_params() - sum(p.numel() for p in model.pos.parameters())
    assert model.flops_per_token(128) == 6 * n + 12 * 4 * 4 * 32 * 128
    assert steps.mfu(1000.0, 1e9, 4e12) == pytest.approx(0.25)
    assert steps.mfu(1000.0, 1e9, None) is None
    assert bf16_peak_flops(torch.device("cpu")) is None


def test_mfu_under_ddp_divides_by_every_rank_s_peak():
    """The logged tokens/s are the global batch's: with 4 ranks the peak is 4 GPUs'."""
    one = steps.mfu(1000.0, 1e9, steps.run_peak(4e12, 1))
    assert steps.mfu(4000.0, 1e9, steps.run_peak(4e12, 4)) == pytest.approx(one) == pytest.approx(0.25)
    assert steps.run_peak(None, 8) is None


@pytest.mark.parametrize(
    "name,peak",
    [
        ("NVIDIA H200", BF16_PEAK["H200"]),
        ("NVIDIA H200 NVL", BF16_PEAK["H200 NVL"]),
        ("NVIDIA H100 80GB HBM3", BF16_PEAK["H100"]),
        ("NVIDIA H100 NVL", BF16_PEAK["H100 NVL"]),
        ("NVIDIA H100 PCIe", BF16_PEAK["H100 PCIe"]),
        ("NVIDIA A100-SXM4-80GB", BF16_PEAK["A100"]),
        ("NVIDIA L40S", BF16_PEAK["L40S"]),
        ("NVIDIA L40", BF16_PEAK["L40"]),
        ("NVIDIA L4", BF16_PEAK["L4"]),
        ("NVIDIA GeForce RTX 4090", None),  # not in the table: MFU unknown, not guessed
        ("NVIDIA H20", None),  # a different GPU that shares a prefix with H200
        ("NVIDIA L40 L4", None),  # two equally specific keys: ambiguous, so unknown
    ],
)
def test_bf16_peak_matches_whole_words_and_the_most_specific_name(name, peak):
    assert peak_for_name(name) == peak


@pytest.mark.slow
def test_train_with_compile_on_the_cpu(tmp_path, text_corpus, monkeypatch):
    """train.compile=true through the real loop (counting backend): same loss as eager to
    rounding, the run saved without compile's prefixes, mfu empty on the CPU."""
    monkeypatch.setattr(loop, "COMPILE_BACKEND", Counting())
    torch._dynamo.reset()
    runs = {}
    for setting in ("false", "true"):
        cfg = typed(
            compose(
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


def test_tf32_is_set_through_fp32_precision_and_restored(ieee_fp32):
    """use_tf32 writes the fp32_precision settings inductor reads (not the deprecated
    allow_tf32 flags, whose mixing with the new API torch refuses); setting them needs no GPU.
    The fixture puts the process-wide values back after the test."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    use_tf32(torch.device("cuda"), True)
    assert (matmul.fp32_precision, cudnn.conv.fp32_precision) == ("tf32", "tf32")
    use_tf32(torch.device("cuda"), False)
    assert (matmul.fp32_precision, cudnn.conv.fp32_precision) == ("ieee", "ieee")
    use_tf32(torch.device("cpu"), True)  # nothing on the CPU
    assert matmul.fp32_precision == "ieee"
