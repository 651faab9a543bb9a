"""A small pre-norm GPT whose positional encoding is one pluggable component: the block calls
the encoding's hooks (``posx.model.positional``) and never asks which encoding it has; attention
through ``posx.model.attention``, norms and MLP by ``model.block`` (``posx.model.blocks``)."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posx.core.device import compute_dtype
from posx.core.errors import unknown
from posx.model import blocks, scaling, windowed
from posx.model.attention import ATTENTION, FlexBias, attend, causal_block_mask, flex_applies
from posx.model.encodings import build_encoding
from posx.model.learnedrecord import LearnedScalars
from posx.model.positional import PositionalEncoding, PositionOutOfRange
from posx.model.randomized import pose_positions, random_positions
from posx.model.spec import ModelSpec
from posx.schema.config import ModelConfig


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=False)
        self.dropout = config.dropout
        self.positional = not scaling.is_nope_layer(layer, config.nope_every)  # False: no rotation, no bias
        self.logit_scale = None  # or model.attn_scale's query scale
        if config.attn_scale != "none":
            self.logit_scale = scaling.LogitScale(config.attn_scale, config.n_head, config.attn_scale_length)

    def forward(self, x: Tensor, pos: PositionalEncoding, positions: Tensor, mask: Tensor | FlexBias | None) -> Tensor:
        """mask: None (plain causal), the (1, H, T, T) mask of ``pos.attn_masks``, or a ``FlexBias``."""
        B, T, C = x.shape
        # q, k, v: (B, H, T, hd) each
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        dropout = self.dropout if self.training else 0.0
        if self.positional and pos.window is not None:  # a windowed method (posx.model.windowed), set by an evaluation
            y = windowed.attend(q, k, v, positions, pos.window, pos.rotate_at, self.logit_scale)
        elif self.positional and pos.contextual:  # CoPE: positions from the logits (posx.model.cope)
            y = pos.attend(self.layer, q if self.logit_scale is None else self.logit_scale(q), k, v, dropout)
        else:
            if self.positional:
                q, k = pos.rotate(q, k, positions)
            if self.logit_scale is not None:
                q = self.logit_scale(q)
            y = attend(q, k, v, mask, dropout)  # (B, H, T, hd)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return F.dropout(self.proj(y), dropout, self.training)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.up = nn.Linear(config.d_model, config.mlp_ratio * config.d_model, bias=False)
        self.down = nn.Linear(config.mlp_ratio * config.d_model, config.d_model, bias=False)
        self.dropout = config.dropout

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(self.down(F.gelu(self.up(x))), self.dropout, self.training)


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.ln1 = blocks.make_norm(config.block, config.d_model)
        self.conv = blocks.ShortConv(config.d_model, config.short_conv) if config.short_conv else None
        self.attn = CausalSelfAttention(config, layer)
        self.ln2 = blocks.make_norm(config.block, config.d_model)
        if config.block == "llama":
            hidden = blocks.swiglu_hidden(config.d_model, config.mlp_ratio, config.multiple_of)
            self.mlp = blocks.SwiGLU(config.d_model, hidden, config.dropout)
        else:
            self.mlp = MLP(config)

    def forward(self, x: Tensor, pos: PositionalEncoding, positions: Tensor, mask: Tensor | FlexBias | None) -> Tensor:
        h = self.ln1(x)  # (B, T, C)
        if self.conv is not None:  # model.short_conv: each position mixes in its last few tokens first
            h = self.conv(h)
        x = x + self.attn(h, pos, positions, mask)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    supports_windowed = True  # RoPE models attend with a windowed method when one is installed

    def __init__(self, config: ModelSpec):
        super().__init__()
        self.config, m = config, config.model
        self.sampled_positions = False  # pos.randomized: sampled in eval mode too (randomized.sampled_at_test)
        if m.attention not in ATTENTION:
            raise unknown("attention", m.attention, ATTENTION)
        self.tok_emb = nn.Embedding(config.vocab_size, m.d_model)
        self.pos = build_encoding(config)
        self.blocks = nn.ModuleList(Block(m, i) for i in range(m.n_layer))
        self.ln_f = blocks.make_norm(m.block, m.d_model)
        self.lm_head = nn.Linear(m.d_model, config.vocab_size, bias=False)
        if m.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self.apply(self._init_weights)
        # GPT-2: scale the residual projections by 1/sqrt(2 * n_layer)
        for name, p in self.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.down.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * m.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def learned_scalars(self) -> LearnedScalars | None:
        """The encoding's and ssmax's learned scalars as plain floats for model.json; None: none."""
        scales = [block.attn.logit_scale for block in self.blocks if block.attn.logit_scale is not None]
        per_layer = [s for s in (scale.learned_s() for scale in scales) if s is not None]
        found = replace(self.pos.learned_scalars(), ssmax_s=per_layer or None)
        return None if found.empty else found

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # tied weights counted once

    def flops_per_token(self, length: int) -> float:
        """Training FLOPs per token at sequence length T: 6N + 12·L·H·Q·T (PaLM, appendix B;
        nanoGPT's estimate_mfu), N the parameters that multiply (the output matmul counts, the
        input lookup and the encoding's tables do not), Q the head dim."""
        c = self.config.model
        n = self.num_params() - sum(p.numel() for p in self.pos.parameters())
        if not c.tie_embeddings:  # an untied input embedding is a lookup, not a matmul
            n -= self.tok_emb.weight.numel()
        return 6.0 * n + 12.0 * c.n_layer * c.n_head * self.config.head_dim * length

    def _biases(self, T: int, dtype: torch.dtype, device: torch.device) -> list:
        """Per layer: None, the SDPA mask, or a FlexBias (flex, a bias encoding, ``flex_applies``)."""
        n = len(self.blocks)
        dropout = self.config.model.dropout if self.training else 0.0
        if self.config.model.attention == "flex" and flex_applies(device, dropout):
            mods = [self.pos.score_mod(layer) for layer in range(n)]
            if mods[0] is not None:
                block_mask = causal_block_mask(T, device)
                return [FlexBias(mod, block_mask, self.pos.flex_kernel_options) for mod in mods]
        return self.pos.attn_masks(T, n, dtype, device)

    def forward(self, idx: Tensor, targets: Tensor | None = None, offset: int = 0) -> tuple[Tensor, Tensor | None]:
        """idx: (B, T) token ids at positions offset..offset+T-1 -> (logits (B, T, vocab), loss): the
        float32 mean cross-entropy against ``targets`` (B, T), None without them (as nanoGPT's)."""
        B, T = idx.shape
        limit = self.pos.max_length()  # a Python int: checked without reading the device
        if limit is not None and offset + T > limit:
            raise PositionOutOfRange(f"position {offset + T - 1} is past the learned table of {limit} rows")
        positions = torch.arange(offset, offset + T, device=idx.device)  # (T,)
        if self.config.pos.randomized and (self.training or self.sampled_positions):  # posx.model.randomized
            positions = random_positions(T, self.config.pos.randomized_max, idx.device)
        elif self.training and self.config.pos.pose_length:
            positions = pose_positions(T, self.config.pos.pose_length, idx.device)
        x = self.pos.embed(self.tok_emb(idx), positions)  # (B, T, C)
        # Bias masks are built once per forward (ALiBi: once per length) and shared by layers.
        masks = self._biases(T, compute_dtype(x), x.device)
        for block, mask in zip(self.blocks, masks):
            x = block(x, self.pos, positions, mask if block.attn.positional else None)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab)
        return logits, None if targets is None else lm_loss(logits, targets)


def lm_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean next-token cross-entropy of logits (B, T, vocab) against targets (B, T), in float32."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
