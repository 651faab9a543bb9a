"""posx's own positional encodings and their registry, ``ENCODINGS`` (a new encoding: a subclass of
``posx.model.positional.PositionalEncoding`` plus one line there; one from outside posx:
``pos=custom``, ``posx.model.custom``). RoPE and xPos live in ``posx.model.rotary``, CoPE in
``posx.model.cope``. The bias encodings never build a per-batch (B, H, L, L) tensor: one additive
(1, H, L, L) Toeplitz mask per forward, shared by the batch (and the layers unless per layer),
ALiBi's kept until the length changes; 4-D on purpose, as torch's CPU flash kernel takes it and
a 3-D one sends SDPA down its math path. With ``model.attention=flex`` they give a ``score_mod``.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor, nn

from posx.core.errors import PosxError, choose, unknown
from posx.model import fire
from posx.model.cope import CoPE
from posx.model.custom import build_custom
from posx.model.learnedrecord import LearnedScalars
from posx.model.positional import PositionalEncoding
from posx.model.rotary import Rotary, XPos

BEYOND = ("none", "clamp", "interpolate")  # learned absolute past its table (eval.absolute_beyond)


class LearnedAbsolute(PositionalEncoding):
    """GPT-2's learned table of ``max_positions`` rows added to the token embeddings; past it,
    ``beyond`` (``eval.absolute_beyond``, docs/encodings.md). Sequences that fit are never changed."""

    kind = "absolute"

    def __init__(self, max_positions: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.table.weight, std=0.02)
        self.beyond = "none"

    def set_beyond(self, mode: str) -> None:
        if mode not in BEYOND:
            raise unknown("absolute_beyond", mode, BEYOND)
        self.beyond = mode

    def max_length(self) -> int | None:
        return self.table.num_embeddings if self.beyond == "none" else None

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """Tensor operations only: ``none``'s bound is checked against ``max_length`` before the forward."""
        rows = self.table.num_embeddings
        if self.beyond == "none":
            return x + self.table(positions)  # (B, T, C) + (T, C)
        if self.beyond == "clamp":
            return x + self.table(positions.clamp(max=rows - 1))
        # Positions 0..last onto rows 0..rows-1; inside the table the factor is exactly 1 and the
        # weight 0, so the plain lookup comes out unchanged.
        last = positions.max().clamp(min=rows - 1).double()
        scaled = positions.double() * ((rows - 1) / last)  # (T,) in [0, rows - 1]
        low = scaled.floor().long().clamp(max=rows - 1)
        high = (low + 1).clamp(max=rows - 1)
        w = (scaled - low).to(x.dtype).unsqueeze(-1)  # (T, 1)
        return x + (1 - w) * self.table(low) + w * self.table(high)  # (B, T, C) + (T, C)


class Sinusoidal(PositionalEncoding):
    """Vaswani et al.'s PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...), added to the
    token embeddings times sqrt(d_model) as in the paper (so the std 0.02 token signal is not
    drowned). Angles in float64, exact at any position; the table is cast to x's dtype at the end."""

    kind = "sinusoidal"

    def __init__(self, d_model: int, base: float = 10000.0):
        super().__init__()
        if d_model % 2:
            raise PosxError(f"sinusoidal positions need an even d_model, got {d_model}")
        self.scale = math.sqrt(d_model)
        inv = 1.0 / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        self.register_buffer("inv_freq", inv, persistent=False)  # (C/2,) float64

    def table(self, positions: Tensor) -> Tensor:
        angles = torch.outer(positions.double(), self.inv_freq)  # (T, C/2)
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2).float()  # (T, C)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x * self.scale + self.table(positions).to(x.dtype)  # (B, T, C)


def alibi_slopes(n_head: int) -> list[float]:
    """Press et al.'s head slopes: 2^(-8h/n) for n a power of two; otherwise the slopes of
    the nearest lower power of two p, then every other slope of the 2p set, n - p of them."""
    if n_head < 1:
        raise PosxError(f"ALiBi needs at least one head, got {n_head}")

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    p = 2 ** int(math.floor(math.log2(n_head)))
    return geometric(p) + geometric(2 * p)[0::2][: n_head - p]


class ALiBi(PositionalEncoding):
    """Head h adds -m_h * (i - j) to the logit of query i and key j <= i. The mask depends on the
    length alone, so the latest (length, dtype, device)'s is kept for every layer and forward."""

    kind = "alibi"

    def __init__(self, n_head: int):
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_head)), persistent=False)  # (H,)
        self._mask_key: tuple | None = None
        self._mask: Tensor | None = None
        # Bound once, here: a compiled graph must not be what creates it, and every call must
        # pass the same object (a bound method, so a deep copy binds to the copy).
        self._score_mod = self._alibi_score

    def distance_bias(self, layer: int, length: int) -> Tensor:
        distance = torch.arange(length, device=self.slopes.device, dtype=torch.float32)  # (L,)
        return -self.slopes.unsqueeze(1) * distance  # (H, L)

    def _alibi_score(self, score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score - (self.slopes[h] * (q_idx - kv_idx)).to(score.dtype)

    def attn_masks(self, length: int, n_layer: int, dtype: torch.dtype, device: torch.device) -> list[Tensor | None]:
        if torch.compiler.is_compiling():  # inside a graph the mask is traced, not cached
            return super().attn_masks(length, 1, dtype, device) * n_layer
        key = (length, dtype, str(device), torch.is_inference_mode_enabled())
        if key != self._mask_key:
            self._mask_key, self._mask = None, None  # free the old mask before building
            self._mask = super().attn_masks(length, 1, dtype, device)[0]
            self._mask_key = key
        return [self._mask] * n_layer


def check_t5_buckets(num_buckets: int, max_distance: int) -> None:
    """T5's buckets: at least 2, and log-spaced ones to reach (max_distance past the exact half)."""
    if num_buckets < 2:
        raise PosxError(f"pos.num_buckets={num_buckets} must be at least 2")
    if max_distance <= num_buckets // 2:
        raise PosxError(
            f"pos.max_distance={max_distance} must exceed pos.num_buckets / 2 "
            f"({num_buckets // 2}), where the log-spaced buckets start"
        )


def t5_buckets(distance: Tensor, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's causal buckets (Raffel et al. 2020) for distances n = query - key >= 0: n < num_buckets/2
    has its own, larger n are log-spaced up to max_distance, and farther ones share the last."""
    exact = num_buckets // 2
    n = distance.clamp(min=0)
    ratio = n.clamp(min=exact).double() / exact
    large = exact + (ratio.log() / math.log(max_distance / exact) * (num_buckets - exact)).long()
    return torch.where(n < exact, n, large.clamp(max=num_buckets - 1))


class T5Bias(PositionalEncoding):
    """A learned scalar per (bucket, head) on the logits; one table for all layers, or ``per_layer``."""

    kind = "t5"
    # torch's default H100/H200 tiles (128 x 128, 3 stages) asked 272 KiB of shared memory for this
    # score_mod's gather, past the GPU's 227 KiB (torch 2.11, H200). Half the tiles, no pipelining,
    # as torch itself uses for other shapes; each divides the BlockMask's 128-token blocks.
    flex_kernel_options = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_M1=32, BLOCK_N1=64, BLOCK_M2=64, BLOCK_N2=32, num_stages=1)

    def __init__(
        self, n_head: int, n_layer: int, num_buckets: int = 32, max_distance: int = 128, per_layer: bool = False
    ):
        super().__init__()
        check_t5_buckets(num_buckets, max_distance)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.bias_per_layer = per_layer
        self.tables = nn.ModuleList(nn.Embedding(num_buckets, n_head) for _ in range(n_layer if per_layer else 1))
        # Bucket of every distance 0 .. max_distance (longer ones share the last): every length's
        bucket_of = t5_buckets(torch.arange(max_distance + 1), num_buckets, max_distance)
        self.register_buffer("bucket_of", bucket_of, persistent=False)  # (max_distance + 1,)

    def score_mod(self, layer: int):
        """``t5_score`` bound to this layer's table and ``bucket_of``: graph inputs, not values computed in it."""
        return functools.partial(t5_score, self.tables[layer if self.bias_per_layer else 0].weight, self.bucket_of)

    def distance_bias(self, layer: int, length: int) -> Tensor:
        table = self.tables[layer if self.bias_per_layer else 0]
        distance = torch.arange(length, device=table.weight.device)  # (L,)
        buckets = t5_buckets(distance, self.num_buckets, self.max_distance)  # (L,)
        return table(buckets).T  # (L, H) -> (H, L)


def t5_score(
    table: Tensor, bucket_of: Tensor, score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor
) -> Tensor:
    """T5's score_mod: ``table`` (num_buckets, H) at the bucket of q - k (future pairs read 0)."""
    n = (q_idx - kv_idx).clamp(0, bucket_of.shape[0] - 1)
    return score + table[bucket_of[n], h].to(score.dtype)


class Fire(PositionalEncoding):
    """FIRE (``posx.model.fire``): its bias depends on the query position as well as the distance,
    so the (1, H, L, L) SDPA mask is built whole at every forward (learned: never cached)."""

    kind = "fire"

    def __init__(self, n_head: int, hidden: int, threshold: float):
        super().__init__()
        self.fire = fire.FireMLP(n_head, hidden, threshold)
        self._score_mod = self.fire.score  # bound once, as ALiBi's

    def attn_masks(self, length: int, n_layer: int, dtype: torch.dtype, device: torch.device) -> list[Tensor | None]:
        return [self.fire.causal_bias(length, device).to(dtype)] * n_layer

    def learned_scalars(self) -> LearnedScalars:
        f = self.fire
        return LearnedScalars(fire_c=f.c.item(), fire_threshold=f.limit().item(), fire_multiplier=f.multiplier.item())


KERPLE_EPS = 1e-2  # the authors' floor for p and a


class KerpleLog(PositionalEncoding):
    """KERPLE's log kernel (Chi et al., NeurIPS 2022, arXiv 2205.09921; chijames/KERPLE,
    ``ParallelKerpleLog``): head h adds -p_h * log(1 + a_h * (i - j)), p_h from U(0, 2) and a_h
    from U(0, 1) learned, one kernel for all layers. Both are kept >= 0.01 by clamping the
    parameters after every optimizer step (``project_``; the authors clamp before every use, the
    same), so a value below the floor stays trainable and no forward mutates a parameter."""

    kind = "kerple"

    def __init__(self, n_head: int):
        super().__init__()
        self.p = nn.Parameter(torch.rand(n_head) * 2)  # (H,) the kernel's scale
        self.a = nn.Parameter(torch.rand(n_head))  # (H,) the kernel's rate
        self.project_()
        self._score_mod = self._kerple_score  # bound once, as ALiBi's

    @torch.no_grad()
    def project_(self) -> None:
        """The authors' projection of p and a onto [KERPLE_EPS, inf), in place."""
        self.p.clamp_(min=KERPLE_EPS)
        self.a.clamp_(min=KERPLE_EPS)

    def distance_bias(self, layer: int, length: int) -> Tensor:
        distance = torch.arange(length, device=self.p.device, dtype=torch.float32)  # (L,)
        return -self.p.unsqueeze(1) * torch.log1p(self.a.unsqueeze(1) * distance)  # (H, L)

    def learned_scalars(self) -> LearnedScalars:
        return LearnedScalars(kerple_p=self.p.detach().tolist(), kerple_a=self.a.detach().tolist())

    def _kerple_score(self, score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        n = (q_idx - kv_idx).clamp(min=0)  # future pairs read distance 0; the causal mask drops them
        return score - (self.p[h] * torch.log1p(self.a[h] * n)).to(score.dtype)


# posx's own encodings: name -> maker of the component from the model's ``ModelSpec``.
ENCODINGS = {
    "absolute": lambda s: LearnedAbsolute(s.pos.max_positions, s.model.d_model),
    "rope": lambda s: Rotary(s.head_dim, s.pos.base, s.pos.rotary_fraction),
    "sinusoidal": lambda s: Sinusoidal(s.model.d_model),
    "alibi": lambda s: ALiBi(s.model.n_head),
    "t5": lambda s: T5Bias(s.model.n_head, s.model.n_layer, s.pos.num_buckets, s.pos.max_distance, s.pos.per_layer),
    "nope": lambda s: PositionalEncoding(),
    "xpos": lambda s: XPos(s.head_dim, s.pos.base, s.pos.rotary_fraction, s.pos.xpos_scale_base),
    "fire": lambda s: Fire(s.model.n_head, s.pos.fire_hidden, s.pos.fire_threshold),
    "kerple": lambda s: KerpleLog(s.model.n_head),
    "cope": lambda s: CoPE(s.model.n_layer, s.head_dim, s.pos.cope_npos),
}
CUSTOM = "custom"  # pos.name of a class from outside posx, named by pos.impl (posx.model.custom)


def encoding_names() -> tuple[str, ...]:
    """What pos.name accepts: posx's own encodings, then ``custom``."""
    return (*ENCODINGS, CUSTOM)


def build_encoding(spec) -> PositionalEncoding:
    """The encoding ``spec.pos.name`` names (a ``ModelSpec``): posx's own, or ``pos.impl``'s."""
    if spec.pos.name == CUSTOM:
        return build_custom(spec)
    if spec.pos.name not in ENCODINGS:
        raise PosxError(f"unknown positional encoding '{spec.pos.name}'; {choose(encoding_names())}")
    return ENCODINGS[spec.pos.name](spec)
