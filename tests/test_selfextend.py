"""Self-Extend (posx.model.selfextend) against a transcription of the authors' attention
(datamllab/LongLM, self_extend_patch/Llama.py: two sets of logits merged by a neighbour mask
built with tril, one softmax), computed here in float64 with a complex-number rotation that
shares no code with posx; and its invariants: no grouping inside the window, G = 1 is plain
RoPE, chunking changes nothing, and a shift of every position by a multiple of G changes nothing."""

from __future__ import annotations

import io
import math

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from rich.console import Console

from posx import rope
from posx.config.schema import EvalConfig
from posx.core.errors import PosxError
from posx.eval.extrapolate import cell_key, evaluate
from posx.model import selfextend
from posx.model.config import GPTConfig
from posx.model.gpt import GPT
from posx.model.rescale import method_grouping, self_extended
from posx.model.rotary import Rotary, XPos
from posx.model.selfextend import Grouping
from posx.runs.lineage import check_method
from posx.runs.records import RunMeta

HD, BASE = 8, 10000.0


def _qkv(L: int, seed: int = 0, B: int = 2, H: int = 3) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, L, HD, generator=g) for _ in range(3))


def _rotate_complex(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """RoFormer's rotation of interleaved pairs as a complex product, in float64."""
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    theta = BASE ** (-torch.arange(0, HD, 2, dtype=torch.float64) / HD)
    angles = positions.double()[:, None] * theta[None, :]  # (L, hd/2)
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


def authors_attention(q, k, v, group: int, window: int) -> torch.Tensor:
    """Self-Extend as the authors' patch computes it for a prompt (q_len == kv_len)."""
    L = q.shape[-2]
    pos = torch.arange(L, dtype=torch.float64)
    group_q = torch.div(pos, group, rounding_mode="floor") + window - window / group
    group_k = torch.div(pos, group, rounding_mode="floor")
    scale = math.sqrt(HD)
    neighbor = _rotate_complex(q, pos) @ _rotate_complex(k, pos).transpose(-1, -2) / scale
    grouped = _rotate_complex(q, group_q) @ _rotate_complex(k, group_k).transpose(-1, -2) / scale
    causal = torch.full((L, L), float("-inf"), dtype=torch.float64).triu(1)
    neighbor_mask = torch.tril(torch.ones(L, L))
    if L - window > 0:
        neighbor_mask[window:, :-window] -= torch.tril(torch.ones(L - window, L - window))
    logits = torch.where(neighbor_mask.bool(), neighbor + causal, grouped + causal)
    return torch.softmax(logits, dim=-1) @ v.double()


def _posx(q, k, v, grouping: Grouping, encoding=None, offset: int = 0) -> torch.Tensor:
    encoding = encoding or Rotary(HD, BASE)
    positions = torch.arange(offset, offset + q.shape[-2])
    return selfextend.attend(q, k, v, positions, grouping, encoding.rotate_at)


@pytest.mark.parametrize("group, window", [(4, 8), (3, 10), (2, 1), (16, 5)])
def test_matches_the_authors_attention(group, window):
    q, k, v = _qkv(40)
    ours = _posx(q, k, v, Grouping(group, window))
    torch.testing.assert_close(ours.double(), authors_attention(q, k, v, group, window), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("encoding", [Rotary(HD, BASE), XPos(HD, BASE)], ids=["rope", "xpos"])
def test_no_grouping_inside_the_window_or_with_groups_of_one(encoding):
    """W >= L, or G = 1 (grouped positions equal the ordinary ones), is the encoding's own attention."""
    q, k, v = _qkv(24)
    positions = torch.arange(24)
    rq, rk = encoding.rotate(q, k, positions)
    plain = F.scaled_dot_product_attention(rq, rk, v, is_causal=True)
    for grouping in (Grouping(4, 24), Grouping(4, 100), Grouping(1, 3)):
        torch.testing.assert_close(_posx(q, k, v, grouping, encoding), plain, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("encoding", [Rotary(HD, BASE), XPos(HD, BASE)], ids=["rope", "xpos"])
def test_a_shift_by_whole_groups_changes_nothing(encoding):
    """Every grouped distance depends on i // G - j // G, so positions moved by c * G give the same output."""
    q, k, v = _qkv(30, seed=1)
    grouping = Grouping(4, 6)
    torch.testing.assert_close(
        _posx(q, k, v, grouping, encoding, offset=12), _posx(q, k, v, grouping, encoding), atol=1e-5, rtol=1e-4
    )


def test_chunks_of_query_rows_change_nothing(monkeypatch):
    q, k, v = _qkv(33, seed=2)
    whole = _posx(q, k, v, Grouping(4, 5))
    monkeypatch.setattr(selfextend, "CHUNK_ELEMENTS", 2 * 3 * 33 * 5)  # 5 query rows at a time
    torch.testing.assert_close(_posx(q, k, v, Grouping(4, 5)), whole, atol=1e-6, rtol=1e-6)


def test_reach_is_the_papers_bound():
    """The largest grouped distance at the reach, (T - W) * G + W, is T - 1 when G divides W."""
    T, g = 128, Grouping(16, 64)
    L = g.reach(T)
    q_pos, k_pos = selfextend.grouped_positions(torch.arange(L), g)
    assert L == 1088 and float(q_pos[-1] - k_pos[0]) == T - 1
    assert Grouping.resolve(16, None, T) == g and Grouping.resolve(8, 10, T) == Grouping(8, 10)


def _model(pos: str = "rope") -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=32, n_layer=2, n_head=2, d_model=16, pos=pos)).eval()


def test_the_model_attends_grouped_only_inside_the_block():
    model, idx = _model(), torch.randint(0, 32, (2, 48))
    with torch.no_grad():
        for block in model.blocks:  # sharp attention: at init it is near uniform, whatever the positions
            block.attn.qkv.weight.mul_(30)
        plain = model(idx)[0]
        with self_extended(model, Grouping(4, 8)):
            grouped = model(idx)[0]
        with self_extended(model, Grouping(4, 48)):  # the window covers every distance
            wide = model(idx)[0]
        with pytest.raises(RuntimeError), self_extended(model, Grouping(4, 8)):
            raise RuntimeError("a failed cell")
        after = model(idx)[0]
    assert not torch.allclose(grouped, plain, atol=1e-4)
    torch.testing.assert_close(wide, plain, atol=1e-5, rtol=1e-5)
    assert model.pos.grouping is None and torch.equal(after, plain)


def test_a_model_without_rope_is_left_alone():
    model = _model("alibi")
    with self_extended(model, Grouping(4, 8)):
        assert model.pos.grouping is None


def test_the_evaluation_reads_the_config_and_keys_cells_apart():
    ev = OmegaConf.structured(EvalConfig)
    assert method_grouping("self_extend", ev, 128) == Grouping(16, 64)
    assert method_grouping("yarn", ev, 128) is None
    ev.self_extend.window = 32
    assert method_grouping("self_extend", ev, 128) == Grouping(16, 32)
    inv, att = rope.frequencies("self_extend", HD, base=BASE, group=16, window=32)
    assert torch.equal(inv, rope.base_inv_freq(HD, BASE)) and att == 1.0
    assert cell_key(256, 256, inv, att, Grouping(16, 32)) != cell_key(256, 256, inv, att)


def _evaluation_note(group: int) -> str:
    model, out = _model(), io.StringIO()
    meta = RunMeta(model=model.config, train_context=8, data={}, step=0)
    ev = OmegaConf.structured(EvalConfig(factors=[1, 4], methods=["none", "self_extend"], tokens=32))
    ev.self_extend.group, ev.self_extend.window = group, 4
    df = evaluate(model, meta, torch.randint(0, 32, (200,), dtype=torch.uint8), ev, torch.device("cpu"), "r",
                  Console(file=out, width=200)).table  # fmt: skip
    assert (df["status"] == "ok").all() and model.pos.grouping is None
    return out.getvalue()


def test_an_evaluation_past_the_reach_says_so():
    """(T - W) * G + W: 12 tokens at T = 8, W = 4, G = 2, short of 4x (32); 68 with G = 16."""
    assert "self_extend reaches 12 tokens with G=2, W=4" in _evaluation_note(2)
    assert "at 32 its grouped distances pass T=8" in _evaluation_note(2)
    assert "self_extend reaches" not in _evaluation_note(16)


@pytest.mark.parametrize("params", [{"group": 0}, {"group": 2.5}, {"window": 0}, {"window": True}])
def test_bad_parameters_are_refused(params):
    with pytest.raises(PosxError, match="self_extend"):
        rope.check_params("self_extend", **params)


def test_extend_refuses_self_extend():
    with pytest.raises(PosxError, match="changes attention at evaluation"):
        check_method("self_extend", "rope", "run r")


@pytest.mark.cuda
def test_bf16_on_cuda_follows_float32_on_the_cpu():
    """Under CUDA's bf16 autocast (how an evaluation runs there) the output stays close to the
    CPU's float32: the angles are float32, and the merge and softmax run in float32."""
    model, idx = _model(), torch.randint(0, 32, (2, 300))
    with torch.no_grad(), self_extended(model, Grouping(8, 32)):
        for block in model.blocks:  # sharp attention, so the grouping shows in the logits
            block.attn.qkv.weight.mul_(30)
        cpu = model(idx)[0]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            gpu = model.cuda()(idx.cuda())[0].float().cpu()
    torch.testing.assert_close(gpu, cpu, atol=5e-2, rtol=5e-2)
