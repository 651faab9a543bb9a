"""Windowed attention (posx.model.windowed) against transcriptions of the authors' attention,
computed here in float64 with a complex-number rotation that shares no code with posx:
Self-Extend (datamllab/LongLM, self_extend_patch/Llama.py: two sets of logits merged by a
neighbour mask built with tril, one softmax) and ReRoPE / Leaky ReRoPE (bojone/rerope,
rerope_patch.py and leaky_rerope_patch.py: the log-n query scale, the far query at W or at
(i + W(k - 1)) / k, the far key unrotated or at j / k, a mask |i - j| < W) and LM-Infinite
(Glaciohound/LM-Infinite, models/lambda_attention.py: blocks of W queries against their own and
the previous block of keys, the first keys at distance W, one softmax). And their
invariants: nothing changes inside the window, G = 1 or k = 1 is plain RoPE, chunking changes
nothing, and a shift of every position by a multiple of G (any shift, for ReRoPE) changes nothing."""

from __future__ import annotations

import io
import math

import pytest
import torch
from omegaconf import OmegaConf
from rich.console import Console

from posx import rope
from posx.core.errors import PosxError
from posx.eval.extrapolate import cell_key, evaluate
from posx.model import attention
from posx.model.gpt import GPT
from posx.model.rescale import method_window, windowed_attention
from posx.model.rotary import Rotary, XPos
from posx.model.windowed import DualChunk, Grouping, Lambda, Rectified, Sinks
from posx.runs.lineage import check_method
from posx.runs.records import RunMeta
from posx.schema.config import EvalConfig

from helpers.attention import BASE, HD, plain_attention, qkv, rotate_complex, windowed_attend
from helpers.model import spec


def authors_attention(q, k, v, group: int, window: int) -> torch.Tensor:
    """Self-Extend as the authors' patch computes it for a prompt (q_len == kv_len)."""
    L = q.shape[-2]
    pos = torch.arange(L, dtype=torch.float64)
    group_q = torch.div(pos, group, rounding_mode="floor") + window - window / group
    group_k = torch.div(pos, group, rounding_mode="floor")
    scale = math.sqrt(HD)
    neighbor = rotate_complex(q, pos) @ rotate_complex(k, pos).transpose(-1, -2) / scale
    grouped = rotate_complex(q, group_q) @ rotate_complex(k, group_k).transpose(-1, -2) / scale
    causal = torch.full((L, L), float("-inf"), dtype=torch.float64).triu(1)
    neighbor_mask = torch.tril(torch.ones(L, L))
    if L - window > 0:
        neighbor_mask[window:, :-window] -= torch.tril(torch.ones(L - window, L - window))
    logits = torch.where(neighbor_mask.bool(), neighbor + causal, grouped + causal)
    return torch.softmax(logits, dim=-1) @ v.double()


@pytest.mark.parametrize("group, window", [(4, 8), (3, 10), (2, 1), (16, 5)])
def test_matches_the_authors_attention(group, window):
    q, k, v = qkv(40)
    ours = windowed_attend(q, k, v, Grouping(group, window))
    torch.testing.assert_close(ours.double(), authors_attention(q, k, v, group, window), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("encoding", [Rotary(HD, BASE), XPos(HD, BASE)], ids=["rope", "xpos"])
def test_no_grouping_inside_the_window_or_with_groups_of_one(encoding):
    """W >= L, or G = 1 (grouped positions equal the ordinary ones), is the encoding's own attention."""
    q, k, v = qkv(24)
    plain = plain_attention(q, k, v, encoding)
    for grouping in (Grouping(4, 24), Grouping(4, 100), Grouping(1, 3)):
        torch.testing.assert_close(windowed_attend(q, k, v, grouping, encoding), plain, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("encoding", [Rotary(HD, BASE), XPos(HD, BASE)], ids=["rope", "xpos"])
def test_a_shift_by_whole_groups_changes_nothing(encoding):
    """Every grouped distance depends on i // G - j // G, so positions moved by c * G give the same output."""
    q, k, v = qkv(30, seed=1)
    grouping = Grouping(4, 6)
    torch.testing.assert_close(
        windowed_attend(q, k, v, grouping, encoding, offset=12),
        windowed_attend(q, k, v, grouping, encoding),
        atol=1e-5,
        rtol=1e-4,
    )


@pytest.mark.parametrize(
    "method", [Grouping(4, 5), Rectified(6, 2.5, 20), Lambda(7, 3), DualChunk(9, 2), Sinks(4, 6)], ids=repr
)
def test_chunks_of_query_rows_change_nothing(method, monkeypatch):
    q, k, v = qkv(33, seed=2)
    whole = windowed_attend(q, k, v, method)
    monkeypatch.setattr(attention, "CPU_CHUNK_ELEMENTS", 2 * 3 * 33 * 5)  # 5 query rows at a time
    torch.testing.assert_close(windowed_attend(q, k, v, method), whole, atol=1e-6, rtol=1e-6)


def test_reach_is_the_papers_bound():
    """The largest grouped distance at the reach, (T - W) * G + W, is T - 1 when G divides W."""
    T, g = 128, Grouping(16, 64)
    L = g.reach(T)
    q_pos, k_pos = g.branches(torch.arange(L))[1]
    assert L == 1088 and float(q_pos[-1] - k_pos[0]) == T - 1
    assert Grouping.resolve(16, None, T) == g and Grouping.resolve(8, 10, T) == Grouping(8, 10)


# ---------------------------------------------------------------- ReRoPE and Leaky ReRoPE


def authors_rerope(q, k, v, window: int, leak_factor: float | None, log_context: int | None) -> torch.Tensor:
    """ReRoPE (leak_factor None) or Leaky ReRoPE as the author's patches compute a prompt."""
    L = q.shape[-2]
    pos = torch.arange(L, dtype=torch.float64)
    q = q.double()
    if log_context is not None:
        q = q * ((pos + 1).log() / math.log(log_context)).clip(1)[:, None]
    if leak_factor is None:  # rerope_patch.py: the query at W, the key unrotated
        far_q, far_k = rotate_complex(q, pos * 0 + window), k.double()
    else:  # leaky_rerope_patch.py: linear scaling by k, the query offset by W * (k - 1)
        offset = window * (leak_factor - 1)
        far_q, far_k = rotate_complex(q, (pos + offset) / leak_factor), rotate_complex(k, pos / leak_factor)
    scale = math.sqrt(HD)
    near = rotate_complex(q, pos) @ rotate_complex(k, pos).transpose(-1, -2) / scale
    far = far_q @ far_k.transpose(-1, -2) / scale
    rectified = (pos[:, None] - pos[None, :]).abs() < window
    causal = torch.full((L, L), float("-inf"), dtype=torch.float64).triu(1)
    return torch.softmax(torch.where(rectified, near, far) + causal, dim=-1) @ v.double()


@pytest.mark.parametrize(
    "window, leak_factor, log_context",
    [(8, None, 16), (5, 16.0, 16), (3, 2.5, None), (1, None, None), (6, 3.0, 40)],
)
def test_rerope_matches_the_authors_attention(window, leak_factor, log_context):
    q, k, v = qkv(40, seed=3)
    ours = windowed_attend(q, k, v, Rectified(window, leak_factor, log_context))
    reference = authors_rerope(q, k, v, window, leak_factor, log_context)
    torch.testing.assert_close(ours.double(), reference, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("encoding", [Rotary(HD, BASE), XPos(HD, BASE)], ids=["rope", "xpos"])
def test_rerope_inside_its_window_or_with_no_leak_is_plain_attention(encoding):
    """W >= L, or k = 1 (the far distance equals the near one), without the log scale: the
    encoding's own attention; the log scale changes nothing while every position is below T."""
    q, k, v = qkv(24)
    plain = plain_attention(q, k, v, encoding)
    for method in (
        Rectified(24, None, None),
        Rectified(100, 4.0, None),
        Rectified(3, 1.0, None),
        Rectified(3, 1.0, 24),
    ):
        torch.testing.assert_close(windowed_attend(q, k, v, method, encoding), plain, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("leak_factor", [None, 2.5])
def test_rerope_without_the_log_scale_depends_only_on_distances(leak_factor):
    q, k, v = qkv(30, seed=4)
    method = Rectified(6, leak_factor, None)
    torch.testing.assert_close(
        windowed_attend(q, k, v, method, offset=7), windowed_attend(q, k, v, method), atol=1e-5, rtol=1e-4
    )


def test_rerope_reach_and_defaults():
    """At Leaky ReRoPE's reach, (T - W) * k + W rounded up, the largest distance is still below
    T, one token more reaches it; ReRoPE has no bound."""
    T = 128
    for leaky, reach in (
        (Rectified(64, 16.0, None), 1088),
        (Rectified(64, 2.5, None), 224),
        (Rectified(5, 3.3, 7), 411),
    ):
        q_pos, k_pos = leaky.far_positions(torch.arange(reach + 1).double())
        assert leaky.reach(T) == reach, leaky
        assert float(q_pos[-2] - k_pos[0]) < T <= float(q_pos[-1] - k_pos[0]) + 1e-9, leaky
    assert Rectified(32, None, 128).reach(T) is None
    assert Rectified.resolve(None, None, True, T) == Rectified(32, None, 128)
    assert Rectified.resolve(10, 4, False, T) == Rectified(10, 4.0, None)
    ev = OmegaConf.structured(EvalConfig)
    assert method_window("rerope", ev, 128) == Rectified(32, None, 128)
    ev.rerope.leak_factor, ev.rerope.log_scale = 16, False
    assert method_window("rerope", ev, 128) == Rectified(32, 16.0, None)
    inv, att = rope.frequencies("rerope", HD, base=BASE, window=32, leak_factor=16.0, log_scale=False)
    assert torch.equal(inv, rope.base_inv_freq(HD, BASE)) and att == 1.0
    assert cell_key(256, 256, inv, att, Rectified(32, 16.0, None)) != cell_key(256, 256, inv, att)


@pytest.mark.parametrize(
    "params",
    [{"window": 0}, {"window": 2.0}, {"leak_factor": 0.5}, {"leak_factor": float("nan")}, {"log_scale": 1}],
)
def test_bad_rerope_parameters_are_refused(params):
    with pytest.raises(PosxError, match="rerope"):
        rope.check_params("rerope", **params)


# ---------------------------------------------------------------- LM-Infinite


def authors_lambda(q, k, v, local: int, n_global: int) -> torch.Tensor:
    """LM-Infinite's Lambda_Attention_Matrix for a prompt (key_length == query_length), in float64."""
    L, inf = q.shape[-2], float("-inf")
    pos = torch.arange(L, dtype=torch.float64)
    rot_q, rot_k, v = rotate_complex(q, pos), rotate_complex(k, pos), v.double()
    stationary_q, stationary_k = rotate_complex(q, pos * 0 + min(local, L - 1)), k.double()
    scale = math.sqrt(HD)
    stationary = stationary_q @ stationary_k[..., :n_global, :].transpose(-1, -2) / scale
    stationary = stationary.masked_fill(torch.ones(L, n_global, dtype=torch.bool).triu(-local + 1), inf)
    if L <= local:  # "short_seq"
        attn = (rot_q @ rot_k.transpose(-1, -2) / scale).masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), inf)
        attn[..., :n_global] = torch.where(stationary > inf, stationary, attn[..., :n_global])
        return attn.softmax(-1) @ v
    pad = (-L) % local  # "long_seq"

    def blockwise(x):
        x = torch.cat((x, x.new_zeros(*x.shape[:-2], pad, x.shape[-1])), -2)
        return x.view(*x.shape[:-2], -1, local, x.shape[-1])

    def shift_and_pair(b):
        return torch.cat((torch.cat((b[..., -1:, :, :], b[..., :-1, :, :]), -3), b), -2)

    rot = blockwise(rot_q) @ shift_and_pair(blockwise(rot_k)).transpose(-1, -2) / scale  # (B, H, blocks, W, 2W)
    keep = torch.ones(local, 2 * local, dtype=torch.bool).triu(1).tril(local)
    rot = rot.masked_fill(~keep, inf)
    rot[..., 0, :, :local] = inf
    if pad:
        rot[..., -1, -pad:, :] = inf
        rot[..., -1, :, -pad:] = inf
    rot = rot.reshape(*rot.shape[:-3], -1, 2 * local)
    stationary = torch.cat((stationary, stationary.new_full((*stationary.shape[:-2], pad, n_global), inf)), -2)
    attn = torch.cat((stationary, rot), -1).softmax(-1)
    out_stationary = attn[..., :L, :n_global] @ v[..., :n_global, :]
    blocks = attn[..., n_global:].reshape(*attn.shape[:-2], -1, local, 2 * local)
    out_rot = (blocks @ shift_and_pair(blockwise(v))).reshape(*attn.shape[:-2], L + pad, -1)
    return out_stationary + out_rot[..., :L, :]


@pytest.mark.parametrize("local, n_global", [(8, 3), (7, 3), (6, 0), (5, 12), (50, 3)])
def test_lm_infinite_matches_the_authors_attention(local, n_global):
    q, k, v = qkv(40, seed=5)
    ours = windowed_attend(q, k, v, Lambda(local, n_global))
    torch.testing.assert_close(ours.double(), authors_lambda(q, k, v, local, n_global), atol=2e-5, rtol=1e-5)


def test_lm_infinite_defaults_and_a_window_over_the_whole_sequence():
    q, k, v = qkv(24)
    plain = plain_attention(q, k, v, Rotary(HD, BASE))
    torch.testing.assert_close(windowed_attend(q, k, v, Lambda(24, 10)), plain, atol=1e-5, rtol=1e-5)
    ev = OmegaConf.structured(EvalConfig)
    assert method_window("lm_infinite", ev, 128) == Lambda(128, 10) and Lambda(128, 10).reach(128) is None
    ev.lm_infinite.window, ev.lm_infinite.global_tokens = 64, 4
    assert method_window("lm_infinite", ev, 128) == Lambda(64, 4)


@pytest.mark.parametrize("params", [{"window": 0}, {"global_tokens": -1}, {"global_tokens": 2.0}])
def test_bad_lm_infinite_parameters_are_refused(params):
    with pytest.raises(PosxError, match="lm_infinite"):
        rope.check_params("lm_infinite", **params)


def _model(pos: str = "rope") -> GPT:
    torch.manual_seed(0)
    return GPT(spec(vocab_size=32, n_layer=2, n_head=2, d_model=16, pos=pos)).eval()


def test_the_model_attends_grouped_only_inside_the_block():
    model, idx = _model(), torch.randint(0, 32, (2, 48))
    with torch.no_grad():
        for block in model.blocks:  # sharp attention: at init it is near uniform, whatever the positions
            block.attn.qkv.weight.mul_(30)
        plain = model(idx)[0]
        with windowed_attention(model, Grouping(4, 8)):
            grouped = model(idx)[0]
        with windowed_attention(model, Grouping(4, 48)):  # the window covers every distance
            wide = model(idx)[0]
        with pytest.raises(RuntimeError), windowed_attention(model, Grouping(4, 8)):
            raise RuntimeError("a failed cell")
        after = model(idx)[0]
    assert not torch.allclose(grouped, plain, atol=1e-4)
    torch.testing.assert_close(wide, plain, atol=1e-5, rtol=1e-5)
    assert model.pos.window is None and torch.equal(after, plain)


def test_a_model_without_rope_is_left_alone():
    model = _model("alibi")
    with windowed_attention(model, Grouping(4, 8)):
        assert model.pos.window is None


def test_the_evaluation_reads_the_config_and_keys_cells_apart():
    ev = OmegaConf.structured(EvalConfig)
    assert method_window("self_extend", ev, 128) == Grouping(16, 64)
    assert method_window("yarn", ev, 128) is None
    ev.self_extend.window = 32
    assert method_window("self_extend", ev, 128) == Grouping(16, 32)
    inv, att = rope.frequencies("self_extend", HD, base=BASE, group=16, window=32)
    assert torch.equal(inv, rope.base_inv_freq(HD, BASE)) and att == 1.0
    assert cell_key(256, 256, inv, att, Grouping(16, 32)) != cell_key(256, 256, inv, att)


def _evaluation_note(group: int, leak_factor: float | None = None) -> str:
    model, out = _model(), io.StringIO()
    meta = RunMeta(model=model.config, train_context=8, data={}, step=0)
    ev = OmegaConf.structured(EvalConfig(factors=[1, 4], methods=["none", "self_extend", "rerope"], tokens=32))
    ev.self_extend.group, ev.self_extend.window = group, 4
    ev.rerope.window, ev.rerope.leak_factor = 4, leak_factor
    df = evaluate(model, meta, torch.randint(0, 32, (200,), dtype=torch.uint8), ev, torch.device("cpu"), "r",
                  Console(file=out, width=200)).table  # fmt: skip
    assert (df["status"] == "ok").all() and model.pos.window is None
    return out.getvalue()


def test_an_evaluation_past_the_reach_says_so():
    """(T - W) * G + W: 12 tokens at T = 8, W = 4, G = 2, short of 4x (32); 68 with G = 16.
    Leaky ReRoPE's (T - W) * k + W alike; ReRoPE has no reach."""
    note = _evaluation_note(2, leak_factor=2.5)
    assert "self_extend reaches 12 tokens with G=2, W=4" in note and "raise eval.self_extend.group" in note
    assert "at 32 its distances pass T=8" in note
    assert "rerope reaches 14 tokens with k=2.5, W=4" in note and "raise eval.rerope.leak_factor" in note
    assert "reaches" not in _evaluation_note(16)


@pytest.mark.parametrize("params", [{"group": 0}, {"group": 2.5}, {"window": 0}, {"window": True}])
def test_bad_parameters_are_refused(params):
    with pytest.raises(PosxError, match="self_extend"):
        rope.check_params("self_extend", **params)


@pytest.mark.parametrize("method", ["self_extend", "rerope", "lm_infinite", "dca", "streaming_llm"])
def test_extend_refuses_windowed_methods(method):
    with pytest.raises(PosxError, match="changes attention at evaluation"):
        check_method(method, "rope", "run r")


@pytest.mark.cuda
@pytest.mark.parametrize(
    "method",
    [
        Grouping(8, 32),
        Rectified(32, None, 128),
        Rectified(32, 4.0, 128),
        Lambda(64, 10),
        DualChunk(96, 8),
        Sinks(4, 123),
    ],
)
def test_bf16_on_cuda_follows_float32_on_the_cpu(method):
    """Under CUDA's bf16 autocast (how an evaluation runs there) the output stays close to the
    CPU's float32: the angles are float32, and the merge and softmax run in float32."""
    model, idx = _model(), torch.randint(0, 32, (2, 300))
    with torch.no_grad(), windowed_attention(model, method):
        for block in model.blocks:  # sharp attention, so the grouping shows in the logits
            block.attn.qkv.weight.mul_(30)
        cpu = model(idx)[0]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            gpu = model.cuda()(idx.cuda())[0].float().cpu()
    torch.testing.assert_close(gpu, cpu, atol=5e-2, rtol=5e-2)
