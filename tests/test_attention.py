"""FlexAttention (model.attention=flex) against the SDPA mask path, its reference: the same
logits and the same gradients (T5's table included) at 1x-8x the training length, with head
counts that are not powers of two and lengths that are not multiples of 128. Eager
FlexAttention on the CPU; the fused CUDA kernel is checked by the ``cuda`` tests.

PyTorch's public ``flex_attention`` refuses backward on the CPU (a device guard,
``_validate_device``), so posx trains through SDPA there. To compare gradients on the CPU the
test lifts that guard and lets posx take flex with gradients on: the backward then is
PyTorch's dense (unfused) flex backward, the one eager FlexAttention uses on CUDA too."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.attention.flex_attention as torch_flex

from posx.core.errors import PosxError
from posx.model import attention
from posx.model.encodings import ALiBi
from posx.model.gpt import GPT

from helpers.model import changed, spec

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

T = 40  # training length of the tiny models, not a multiple of 128
FACTORS = (1, 2, 4, 8)
# The fast set keeps one case (T5 per layer: a learned table's gradient, 3 heads, 1x-8x);
# eager flex on the CPU costs seconds per case, so the others are in the slow set.
CASES = [
    pytest.param("alibi", 3, False, marks=pytest.mark.slow),
    pytest.param("alibi", 5, False, marks=pytest.mark.slow),
    pytest.param("t5", 3, False, marks=pytest.mark.slow),
    ("t5", 3, True),
]


def pair(pos: str, n_head: int, per_layer: bool, device: str = "cpu") -> tuple[GPT, GPT]:
    """The same weights twice: once attending through SDPA, once through FlexAttention."""
    torch.manual_seed(0)
    cfg = spec(
        n_layer=2,
        n_head=n_head,
        d_model=16 * n_head,  # head dim 16: Triton's tl.dot wants every dimension >= 16
        pos=pos,
        max_positions=T,
        num_buckets=8,
        max_distance=24,
        per_layer=per_layer,
    )
    sdpa = GPT(cfg).to(device)
    if pos == "t5":  # a learned table is zero-free after training; give it structure to compare
        with torch.no_grad():
            for table in sdpa.pos.tables:
                table.weight.normal_(0.0, 1.0)
    flex = GPT(changed(cfg, attention="flex")).to(device)
    flex.load_state_dict(sdpa.state_dict())
    return sdpa, flex


def grads(model: GPT) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def check(pos: str, n_head: int, per_layer: bool, device: str, tol: float) -> None:
    sdpa, flex = pair(pos, n_head, per_layer, device)
    assert all(isinstance(m, attention.FlexBias) for m in flex._biases(T, torch.float32, torch.device(device)))
    gen = torch.Generator().manual_seed(1)
    for factor in FACTORS:
        L = factor * T
        x = torch.randint(0, 256, (2, L), generator=gen).to(device)
        outs = []
        for model in (sdpa, flex):
            model.zero_grad(set_to_none=True)
            logits, _ = model(x)
            logits.float().square().mean().backward()
            outs.append((logits.detach().float(), grads(model)))
        (a, ga), (b, gb) = outs
        assert torch.allclose(a, b, atol=tol, rtol=tol), f"{pos} H={n_head} L={L}: {(a - b).abs().max()}"
        assert ga.keys() == gb.keys()
        if pos == "t5":
            assert any(k.startswith("pos.tables") for k in gb), "the T5 table gets no gradient through flex"
        for name in ga:
            scale = ga[name].abs().max().clamp(min=1e-6)
            err = (ga[name] - gb[name]).abs().max() / scale
            assert err < tol, f"{pos} H={n_head} L={L} grad {name}: relative error {err}"


@pytest.fixture
def cpu_flex_backward(monkeypatch):
    monkeypatch.setattr(torch_flex, "_validate_device", lambda *tensors: None)
    monkeypatch.setattr(attention, "FLEX_GRAD_DEVICES", {"cuda", "cpu"})


@pytest.mark.parametrize("pos,n_head,per_layer", CASES)
def test_flex_matches_sdpa_on_cpu(pos, n_head, per_layer, cpu_flex_backward):
    check(pos, n_head, per_layer, "cpu", 1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("pos,n_head,per_layer", CASES)
def test_flex_matches_sdpa_on_cuda(pos, n_head, per_layer, ieee_fp32):
    """The compiled (fused) FlexAttention kernel against SDPA in float32 on the GPU."""
    check(pos, n_head, per_layer, "cuda", 2e-3)


def test_t5_flex_tiles_fit_torchs_rules():
    """T5's CUDA tile sizes must divide the BlockMask's blocks, and the backward's pairs must
    nest as torch's flex lowering requires, or every compiled T5 + flex run stops."""
    options = GPT(spec(n_layer=1, n_head=2, d_model=16, pos="t5", attention="flex")).pos.flex_kernel_options
    q_block, kv_block = attention.causal_block_mask(256, torch.device("cpu")).BLOCK_SIZE
    for key, block in (("BLOCK_M", q_block), ("BLOCK_N", kv_block), ("BLOCK_M1", q_block), ("BLOCK_N2", kv_block)):
        assert block % options[key] == 0, key
    assert options["BLOCK_N1"] % options["BLOCK_M1"] == 0 and options["BLOCK_M2"] % options["BLOCK_N2"] == 0


@pytest.mark.cuda
def test_t5_flex_trains_compiled_in_bf16_at_head_dim_64():
    """The shape that stopped compiled training on an H200 with torch's default tiles (T5's
    gathered table needed 272 KiB of shared memory): head dim 64, bf16 autocast, T = 512."""
    torch.manual_seed(0)
    model = GPT(spec(n_layer=2, n_head=8, d_model=512, pos="t5", attention="flex")).cuda()
    step = torch.compile(model)
    x = torch.randint(0, 256, (4, 513), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        _, loss = step(x[:, :-1], x[:, 1:])
    loss.backward()
    table = model.pos.tables[0].weight.grad
    assert torch.isfinite(loss) and table is not None and table.abs().sum() > 0


def test_flex_without_a_bias_is_sdpa():
    """Encodings without a bias attend through SDPA's causal path whatever model.attention says."""
    torch.manual_seed(0)
    cfg = spec(n_layer=1, n_head=3, d_model=24, pos="rope")
    a = GPT(cfg)
    b = GPT(changed(cfg, attention="flex"))
    b.load_state_dict(a.state_dict())
    x = torch.randint(0, 256, (1, 50))
    assert torch.equal(a(x)[0], b(x)[0])


def test_flex_with_dropout_trains_through_sdpa():
    """FlexAttention has no dropout: training with dropout falls back to the SDPA mask path."""
    model = GPT(spec(n_layer=1, n_head=2, d_model=16, pos="alibi", dropout=0.1, attention="flex"))
    cpu = torch.device("cpu")
    model.train()
    with torch.no_grad():
        assert not any(isinstance(m, attention.FlexBias) for m in model._biases(8, torch.float32, cpu))
    model.eval()
    with torch.no_grad():
        assert all(isinstance(m, attention.FlexBias) for m in model._biases(8, torch.float32, cpu))


def test_flex_on_the_cpu_trains_through_sdpa():
    """No flex backward on the CPU: with gradients on, the SDPA mask path; without, flex."""
    model = GPT(spec(n_layer=1, n_head=2, d_model=16, pos="t5", attention="flex"))
    cpu = torch.device("cpu")
    assert not any(isinstance(m, attention.FlexBias) for m in model._biases(8, torch.float32, cpu))
    with torch.inference_mode():
        assert all(isinstance(m, attention.FlexBias) for m in model._biases(8, torch.float32, cpu))


def test_unknown_attention_is_a_posx_error():
    with pytest.raises(PosxError, match="attention=dense is unknown"):
        GPT(spec(attention="dense"))


def test_a_deep_copy_attends_with_its_own_bias():
    """The score_mods are bound to their module: a deep copy's flex uses the copy's T5 table."""
    model = GPT(spec(n_layer=1, n_head=3, d_model=24, pos="t5", attention="flex")).eval()
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.pos.tables[0].weight.add_(1.0)
        x = torch.randint(0, 256, (1, 30))
        assert not torch.allclose(model(x)[0], twin(x)[0])
        ref = GPT(changed(twin.config, attention="sdpa")).eval()
        ref.load_state_dict(twin.state_dict())
        assert torch.allclose(twin(x)[0], ref(x)[0], atol=1e-5)


def test_a_failed_flex_compile_falls_back_to_eager_flex_loudly(monkeypatch):
    """Where compiled FlexAttention raises (past dynamo's recompile limit, with fullgraph), the
    eager flex runs instead and a FlexFallbackWarning names the shape and the cause."""

    def refuses(*args, **kwargs):
        raise RuntimeError("recompile limit reached\nmore detail")

    monkeypatch.setattr(attention, "_compiled", [refuses])
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
    block_mask = attention.causal_block_mask(8, torch.device("cpu"))
    alibi = ALiBi(2).score_mod(0)
    with pytest.warns(attention.FlexFallbackWarning, match=r"shape \(1, 2, 8, 4\) \(RuntimeError: recompile limit"):
        got = attention._compiled_or_loud(q, k, v, alibi, block_mask)
    torch.testing.assert_close(got, torch_flex.flex_attention(q, k, v, score_mod=alibi, block_mask=block_mask))


@pytest.mark.parametrize("device, limit", [("cpu", "CPU_CHUNK_ELEMENTS"), ("cuda", "CHUNK_ELEMENTS")])
def test_row_blocks_tile_the_rows_within_the_devices_limit(device, limit):
    cap = getattr(attention, limit)
    for B, H, L in [(16, 4, 1024), (1, 1, 7), (2, 3, 5000), (64, 16, 4096)]:
        blocks = list(attention.row_blocks(B, H, L, torch.device(device)))
        assert blocks[0][0] == 0 and blocks[-1][1] == L
        assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))  # contiguous, no row twice
        # Each block's logits fit in the limit, unless a single row is already past it.
        assert all((r1 - r0) * B * H * L <= max(cap, B * H * L) for r0, r1 in blocks)
        # As large as the limit allows: one more row would pass it (all blocks but the last).
        assert all((r1 - r0 + 1) * B * H * L > cap for r0, r1 in blocks[:-1])
