"""KERPLE's log kernel (posx.model.encodings.KerpleLog) against a float64 transcription of the
authors' ``ParallelKerpleLog.forward`` (chijames/KERPLE, megatron/mpu/layers.py: the distance
matrix tril(i - j), the bias -p * log(1 + a * diff) added to the scaled scores, p and a clamped
in place to at least 0.01 first), through SDPA's mask and through FlexAttention's score_mod;
and the projection onto the floor, which posx runs after every optimizer step."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch.nn.attention.flex_attention import flex_attention

from posx.configure.compose import compose, typed
from posx.core.errors import PosxError
from posx.model.attention import causal_block_mask
from posx.model.encodings import KERPLE_EPS, KerpleLog
from posx.model.gpt import GPT
from posx.runs.lineage import check_method
from posx.train import loop, state

from helpers.attention import qkv
from helpers.model import spec
from helpers.runs import TINY


def authors_bias(p: torch.Tensor, a: torch.Tensor, L: int) -> torch.Tensor:
    """(H, L, L) float64: the authors' bias, their projection of p and a included."""
    p, a = p.double().clamp(min=KERPLE_EPS)[:, None, None], a.double().clamp(min=KERPLE_EPS)[:, None, None]
    diff = torch.tril(torch.arange(L).view(L, 1).repeat(1, L) + torch.arange(0, -L, -1)).double()
    return -p * torch.log(1 + a * diff)


def authors_attention(q, k, v, p, a) -> torch.Tensor:
    L, hd = q.shape[-2], q.shape[-1]
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(hd) + authors_bias(p, a, L)
    scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v.double()


def _kernel(seed: int = 0, H: int = 3) -> KerpleLog:
    torch.manual_seed(seed)
    return KerpleLog(H)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_sdpa_mask_gives_the_authors_attention(seed):
    kerple, (q, k, v) = _kernel(seed), qkv(37, seed=seed)
    with torch.no_grad():
        kerple.p[0], kerple.a[1] = -0.5, 0.0  # below the floor, as a step may leave them
        kerple.project_()  # what training does after the step; the authors, before the next use
        (mask,) = kerple.attn_masks(37, 1, torch.float32, torch.device("cpu"))[:1]
        ours = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert kerple.p[0] == KERPLE_EPS and kerple.a[1] == KERPLE_EPS
    torch.testing.assert_close(ours.double(), authors_attention(q, k, v, kerple.p, kerple.a), atol=2e-5, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_the_flex_score_mod_equals_the_sdpa_mask():
    kerple, (q, k, v) = _kernel(2), qkv(40, seed=3)
    with torch.no_grad():
        (mask,) = kerple.attn_masks(40, 1, torch.float32, torch.device("cpu"))[:1]
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        flex = flex_attention(q, k, v, score_mod=kerple.score_mod(0), block_mask=causal_block_mask(40, q.device))
    torch.testing.assert_close(flex, sdpa, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_training_projects_the_kernel_after_every_step(tmp_path, text_corpus, monkeypatch):
    """A step that leaves p below 0.01 (here forced after each real step) is followed by the
    projection, so the next forward and the saved weights see 0.01, as the authors' clamp gives."""
    real_step, pushed = loop.train_step, []

    def step_then_push_below(model, *args, **kwargs):
        loss = real_step(model, *args, **kwargs)
        with torch.no_grad():
            model.pos.p[1] = -3.0
        pushed.append(model.pos.p.grad[1].item())  # the gradient it had: the parameter is live
        return loss

    monkeypatch.setattr(loop, "train_step", step_then_push_below)
    cfg = typed(compose([*TINY, "data=text", f"data.path={text_corpus}", f"results_dir={tmp_path}", "pos=kerple"]))
    loop.train(cfg, tmp_path, state.Fresh())
    saved = load_file(str(tmp_path / "model.safetensors"))
    kernel = {k: v for k, v in saved.items() if k.startswith("pos.")}
    assert kernel["pos.p"][1] == KERPLE_EPS and (kernel["pos.a"] >= KERPLE_EPS).all()
    assert len(pushed) == 6 and all(g != 0 for g in pushed)


def test_a_value_below_the_floor_is_projected_and_keeps_its_gradient():
    kerple = _kernel()
    with torch.no_grad():
        kerple.p[1] = -3.0
    kerple.project_()
    kerple.distance_bias(0, 16).sum().backward()
    assert kerple.p[1] == KERPLE_EPS and kerple.p.grad[1] != 0 and (kerple.a.grad != 0).all()


def test_the_authors_initialisation_and_one_kernel_for_every_layer():
    torch.manual_seed(0)
    model = GPT(spec(n_layer=3, n_head=64, d_model=128, pos="kerple"))
    p, a = model.pos.p.detach(), model.pos.a.detach()
    assert p.shape == a.shape == (64,) and 0 <= p.min() and p.max() < 2 and 0 <= a.min() and a.max() < 1
    assert p.max() > 1 and a.max() > 0.5  # spread over U(0, 2) and U(0, 1)
    masks = model.pos.attn_masks(8, 3, torch.float32, torch.device("cpu"))
    assert masks[0] is masks[1] is masks[2] and not model.pos.bias_per_layer


def test_training_moves_the_kernel_and_extend_refuses_it():
    torch.manual_seed(0)
    model = GPT(spec(vocab_size=32, n_layer=2, n_head=2, d_model=16, pos="kerple"))
    before = model.pos.p.detach().clone()
    idx = torch.randint(0, 32, (4, 24))
    _, loss = model(idx, idx)
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    assert not torch.equal(model.pos.p.detach(), before)
    with pytest.raises(PosxError, match="kerple positions, which have nothing posx extend can rescale"):
        check_method("yarn", "kerple", "run r")


@pytest.mark.cuda
def test_compiled_flex_on_cuda_trains_the_kernel_as_sdpa_does():
    """FlexAttention's backward (CUDA only) carries the gradient of p and a out of the score_mod."""
    torch.manual_seed(0)
    model = GPT(spec(vocab_size=64, n_layer=2, n_head=4, d_model=64, pos="kerple")).cuda()
    twin = GPT(spec(vocab_size=64, n_layer=2, n_head=4, d_model=64, pos="kerple", attention="flex")).cuda()
    twin.load_state_dict(model.state_dict())
    idx = torch.randint(0, 64, (2, 256), device="cuda")
    for m in (model, torch.compile(twin)):
        m(idx, idx)[1].backward()
    torch.testing.assert_close(twin.pos.p.grad, model.pos.p.grad, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(twin.pos.a.grad, model.pos.a.grad, atol=1e-4, rtol=1e-3)
