"""CoPE (posx.model.cope) against a float64 transcription of the authors' ``ContextPosSelfAttn``
(facebookresearch/RAM, projects/cope/src/cope/context_position.py, default flags: gates from
the logits' own keys, sigmoid(q.k / sqrt(d)) times the mask, positions as the reversed cumulative
sum clamped at npos - 1, q . e interpolated between floor and ceil, (q.k + that) / sqrt(d),
log of the mask added, softmax), with each head as one batch row as they fold it; and what
must hold of it inside posx's model."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posx.core.errors import PosxError
from posx.model import attention
from posx.model.cope import CoPE
from posx.model.gpt import GPT
from posx.runs.lineage import check_method

from helpers.attention import qkv
from helpers.model import spec


def authors_cope(query, key, val, pos_emb, npos: int) -> torch.Tensor:
    """ContextPosSelfAttn.forward in float64; query, key, val (B*H, L, hd), pos_emb (1, hd, npos)."""
    query, key, val, pos_emb = query.double(), key.double(), val.double(), pos_emb.double()
    L, hd = key.shape[-2], key.shape[-1]
    attn_mask = torch.ones(L, L, dtype=torch.float64).tril()  # 1 where key <= query
    gate_logits = torch.bmm(query, key.transpose(-1, -2))
    gates = torch.sigmoid(gate_logits / math.sqrt(hd)) * attn_mask
    positions = gates.flip(-1).cumsum(dim=-1).flip(-1).clamp(max=npos - 1)
    pos_logits_fixed = torch.matmul(query, pos_emb)
    ceil, floor = positions.ceil().long(), positions.floor().long()
    weight = positions - floor
    pos_logits = pos_logits_fixed.gather(-1, ceil) * weight + pos_logits_fixed.gather(-1, floor) * (1 - weight)
    attn_logits = (gate_logits + pos_logits) / math.sqrt(hd) + attn_mask.log()
    return torch.bmm(torch.softmax(attn_logits, dim=-1), val)


def _cope(npos: int, seed: int = 0, hd: int = 8) -> CoPE:
    torch.manual_seed(seed)
    encoding = CoPE(n_layer=2, head_dim=hd, npos=npos)
    with torch.no_grad():
        for table in encoding.tables:
            table.normal_()  # the authors start from zeros; a trained table is not
    return encoding


# npos: past every count (no clamp); the authors' T + 1 for a 16-token training; clamping from 6 on
@pytest.mark.parametrize("npos, L", [(64, 40), (17, 40), (6, 40)])
def test_matches_the_authors_attention(npos, L):
    encoding, (q, k, v) = _cope(npos), qkv(L, seed=4)
    ours = encoding.attend(1, q, k, v, dropout=0.0)
    B, H, _, hd = q.shape
    fold = lambda t: t.reshape(B * H, L, hd)  # noqa: E731
    reference = authors_cope(fold(q), fold(k), fold(v), encoding.tables[1].detach(), npos).reshape(B, H, L, hd)
    torch.testing.assert_close(ours.double(), reference, atol=2e-5, rtol=1e-5)


def test_blocks_of_query_rows_change_nothing(monkeypatch):
    encoding, (q, k, v) = _cope(10, seed=1), qkv(33, seed=5)
    whole = encoding.attend(0, q, k, v, dropout=0.0)
    monkeypatch.setattr(attention, "CPU_CHUNK_ELEMENTS", 2 * 3 * 33 * 5)  # 5 query rows at a time
    torch.testing.assert_close(encoding.attend(0, q, k, v, dropout=0.0), whole, atol=1e-6, rtol=1e-6)


def test_a_zero_table_is_attention_without_positions():
    """The authors' initialisation: e = 0 adds nothing, so CoPE starts as NoPE."""
    q, k, v = qkv(24, seed=6)
    ours = CoPE(n_layer=1, head_dim=8, npos=25).attend(0, q, k, v, dropout=0.0)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-5, rtol=1e-5)


def test_the_model_trains_every_table_and_defaults_to_t_plus_one(tmp_path):
    torch.manual_seed(0)
    config = spec(vocab_size=32, n_layer=2, n_head=2, d_model=16, pos="cope", cope_npos=33)
    model = GPT(config)
    idx = torch.randint(0, 32, (4, 32))
    _, loss = model(idx, idx)
    loss.backward()
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in model.pos.tables)
    assert model.pos.npos == 33 and len(model.pos.tables) == 2
    with pytest.raises(PosxError, match="cope positions, which have nothing posx extend can rescale"):
        check_method("yarn", "cope", "run r")
    with pytest.raises(PosxError, match="pos.cope_npos=1 must be at least 2"):
        CoPE(1, 8, 1)


@pytest.mark.cuda
def test_bf16_on_cuda_follows_float32_on_the_cpu():
    """Under CUDA's bf16 autocast the gates' counts are summed in float32, so the positions and
    the output stay close to the CPU's float32."""
    torch.manual_seed(0)
    model = GPT(spec(vocab_size=32, n_layer=2, n_head=2, d_model=16, pos="cope", cope_npos=65)).eval()
    with torch.no_grad():
        for table in model.pos.tables:
            table.normal_()
        idx = torch.randint(0, 32, (2, 300))
        cpu = model(idx)[0]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            gpu = model.cuda()(idx.cuda())[0].float().cpu()
    torch.testing.assert_close(gpu, cpu, atol=5e-2, rtol=5e-2)
