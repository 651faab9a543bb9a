"""Windowed attention at evaluation, without training: keys nearer than a window W meet the
query at their exact RoPE positions, farther keys at remapped positions chosen so the distance
stays inside the trained context (or, for LM-Infinite, most of them not at all). Each method is
a few branches, each a pair of position maps for queries and keys, and a rule choosing the
branch of every (query, key) pair; the chosen logits go into one softmax.

Self-Extend (Jin et al., "LLM Maybe LongLM: Self-Extend LLM Context Window Without Tuning",
ICML 2024, arXiv 2401.01325; the authors' code: github.com/datamllab/LongLM,
``self_extend_patch/Llama.py``), ``Grouping``: a query at i and a key at j, distance n = i - j.

* n < W: ordinary RoPE at positions i and j.
* n >= W: RoPE at the *grouped* positions, the query at i // G + W - W / G and the key at
  j // G, so distances grow G times slower past the window; the shift W - W / G makes the
  grouped distance continue from W where the window ends. The largest grouped distance at
  length L is (L - 1) // G + W - W / G, inside a trained context T while L <= (T - W) * G + W
  (the paper's bound on the extended window).

ReRoPE and Leaky ReRoPE (Su, "Rectified Rotary Position Embeddings", 2023; the author's code:
github.com/bojone/rerope, ``rerope_patch.py`` and ``leaky_rerope_patch.py``), ``Rectified``:

* n < W: ordinary RoPE, as above.
* n >= W, ReRoPE: every such distance becomes W (the query rotated at W, the key not at all).
* n >= W, Leaky ReRoPE with factor k: the distance becomes W + (n - W) / k (the query at
  i / k + W - W / k, the key at j / k): Self-Extend's map without the floor. It stays inside T
  while n < (T - W) * k + W; ReRoPE's never leaves it.
* The author's code also scales the query at position i by max(1, log(i + 1) / log(T)) (the
  "log n" scaling), in both patches; posx does too unless ``log_scale`` is off.

LM-Infinite (Han et al., "LM-Infinite: Zero-Shot Extreme Length Generalization for Large
Language Models", NAACL 2024, arXiv 2308.16137; the authors' code: github.com/Glaciohound/
LM-Infinite, ``models/llama.py`` and ``models/lambda_attention.py``), ``Lambda``: a
Lambda-shaped mask. A query attends to the keys nearer than W (the pretraining length T by
default, as the authors convert a model with ``convert_llama_model(model, 4096, 10)``) at their
exact positions, and to the first ``global_tokens`` keys of the sequence at the distance W
(the query rotated at W, the key not at all: ReRoPE's far branch); every other key is masked.

Dual Chunk Attention (An et al., "Training-Free Long-Context Scaling of Large Language Models",
ICML 2024, arXiv 2402.17463; the authors' code: github.com/HKUNLP/ChunkLlama,
``chunkllama_attn_replace.py``), ``DualChunk``: the sequence is cut into chunks of c = s - w
tokens (s the chunk size, w the local window; the authors' defaults s = 3T/4, w = T/16), and
every key sits at its position within its chunk, j mod c. The query at i takes one of three
positions, by how far back the key's chunk lies:

* the same chunk (intra): i mod c, so the distance is the exact i - j;
* the chunk before (successive): min(i mod c + c, s), so distances continue from the chunk
  boundary and stop growing at s;
* any earlier chunk (inter): min(2c - 1, s), the successive position of a chunk's last query,
  as the authors' code sets it.

Every distance stays at or below s <= T, at any length. The authors merge the three flash
attention calls by their log-sum-exps; one softmax over the chosen logits is the same.

StreamingLLM (Xiao et al., "Efficient Streaming Language Models with Attention Sinks", ICLR
2024, arXiv 2309.17453; the authors' code: github.com/mit-han-lab/streaming-llm,
``kv_cache.py``, ``pos_shift/modify_llama.py`` and ``examples/eval_long_ppl.py``), ``Sinks``: a
key-value cache that keeps the first S tokens (the attention sinks) and the latest R, with
every key rotated at its place in the cache. The authors score a text one token at a time;
token i then sees:

* while i <= S + R (nothing evicted yet): every earlier token, at its exact position;
* after that: the tokens up to R back at their exact distances (the query sits at S + R in
  the cache, the latest keys just below it), the S sinks at S + R - j, and nothing else.

S = 4 as the authors run it; R null fills the trained context, T - S - 1, so the query's
place in the cache, S + R, is the last position training saw.

Decisions: Self-Extend's W - W / G is a float when G does not divide W, as in the authors' code
(RoPE takes fractional positions); its optional log scale of the query (``scale_base``, off by
default there) is left out. The logits are merged and softmaxed in float32, as the Self-Extend
and ReRoPE code upcasts. LM-Infinite's distance limit is W, as in the authors' code (which
caps it at the length minus 1, a cap that only matters where no key is that far). The
frequencies are the model's own: these methods change which positions meet, not how they
rotate (``posx.rope`` lists them with theta_i, and checks their parameters). Scores
are materialised in blocks of query rows (no fused kernel takes several sets of logits), so this
path is for evaluation, not training; within a block each branch's scores are computed only
over the keys it scores for some row (the near branch's band along the diagonal, DCA's chunks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol

import torch
from torch import Tensor

from posx.core.errors import PosxError
from posx.model.attention import row_blocks

# rotate_at(q, k, q_positions, k_positions) -> (q, k) rotated: the encoding's RoPE at given positions
RotateAt = Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]
QueryScale = Callable[[Tensor], Tensor]


def query_at_window(positions: Tensor, window: int) -> tuple[Tensor, Tensor]:
    """Every query at position W, every key at 0 (float32, shape of ``positions``): the distance
    W for every pair, ReRoPE's and LM-Infinite's far branch."""
    return torch.full(positions.shape, float(window), device=positions.device), torch.zeros_like(positions).float()


class Windowed(Protocol):
    """What ``attend`` needs of a method: the position maps of its branches and which branch
    scores each (query, key) pair."""

    widen: str  # the parameter that extends the reach, named when a length passes it

    def branches(self, positions: Tensor) -> list[tuple[Tensor, Tensor]]: ...

    def select(self, q_positions: Tensor, k_positions: Tensor) -> Tensor: ...

    def scale_query(self, q: Tensor, positions: Tensor) -> Tensor: ...

    def reach(self, train_context: int) -> int | None: ...

    def describe(self) -> str: ...


class Unscaled:
    """A method that leaves the query's scale alone (all but ReRoPE's log-n scaling)."""

    def scale_query(self, q: Tensor, positions: Tensor) -> Tensor:
        return q


class NearFar(Unscaled):
    """Two branches split by a window W: keys nearer than W at their exact positions (branch 0),
    farther keys at the method's ``far_positions`` (branch 1), or masked where ``far_keys``
    leaves them out."""

    window: int

    def far_positions(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def far_keys(self, length: int, device: torch.device) -> Tensor | None:
        return None  # every key past the window takes part, at its far position

    def branches(self, positions: Tensor) -> list[tuple[Tensor, Tensor]]:
        return [(positions, positions), self.far_positions(positions)]

    def select(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """(rows, keys) branch index per pair, -1 where masked; ``k_positions`` are the keys from
        the sequence's first token on."""
        far = (q_positions[:, None] - k_positions[None, :]) >= self.window
        choice = far.long()
        kept = self.far_keys(k_positions.shape[0], k_positions.device)
        return choice if kept is None else choice.masked_fill(far & ~kept[None, :], -1)


@dataclass(frozen=True)
class Grouping(NearFar):
    """Self-Extend's two numbers, resolved for one model."""

    group: int  # G: past the window, G positions share one
    window: int  # W: keys closer than W keep their exact positions
    widen = "group"

    @classmethod
    def resolve(cls, group: int, window: int | None, train_context: int) -> "Grouping":
        """``window`` None: half the trained context (posx's default, with G = 16 it reaches 8x T)."""
        return cls(int(group), int(window) if window is not None else max(1, train_context // 2))

    def reach(self, train_context: int) -> int:
        """The longest sequence whose grouped distances stay inside ``train_context``: (T - W) * G + W."""
        return max(self.window, (train_context - self.window) * self.group + self.window)

    def far_positions(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """The group branch's query and key positions (float32, shape of ``positions``)."""
        G, W = self.group, self.window
        coarse = torch.div(positions, G, rounding_mode="floor").float()
        return coarse + (W - W / G), coarse

    def describe(self) -> str:
        return f"G={self.group}, W={self.window} ((T - W) * G + W)"


@dataclass(frozen=True)
class Rectified(NearFar):
    """ReRoPE's window, Leaky ReRoPE's factor and the log-n scaling, resolved for one model."""

    window: int  # W: distances below W are exact
    leak_factor: float | None  # k: past W distances grow 1/k as fast; None: they all become W (ReRoPE)
    log_context: int | None  # T of the query's max(1, log(i + 1) / log T) scaling; None: no scaling
    widen = "leak_factor"

    @classmethod
    def resolve(cls, window: int | None, leak_factor: float | None, log_scale: bool, train_context: int) -> "Rectified":
        """``window`` None: a quarter of the trained context (the author's published runs: W = 1024 at T = 4096)."""
        k = None if leak_factor is None else float(leak_factor)
        W = int(window) if window is not None else max(1, train_context // 4)
        return cls(W, k, int(train_context) if log_scale else None)

    def reach(self, train_context: int) -> int | None:
        """ReRoPE: None (no distance passes W). Leaky: the longest sequence whose distances stay
        below T, (T - W) * k + W rounded up."""
        if self.leak_factor is None:
            return None
        return max(self.window, math.ceil((train_context - self.window) * self.leak_factor + self.window))

    def far_positions(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """The rectified branch's query and key positions (float32, shape of ``positions``)."""
        W, k = self.window, self.leak_factor
        if k is None:
            return query_at_window(positions, W)
        scaled = positions.float() / k
        return scaled + (W - W / k), scaled

    def scale_query(self, q: Tensor, positions: Tensor) -> Tensor:
        """q (B, H, L, hd) times max(1, log(i + 1) / log T) per query position i."""
        if self.log_context is None or self.log_context < 2:
            return q
        factor = (positions.double() + 1).log().div(math.log(self.log_context)).clamp(min=1.0)  # (L,)
        return q * factor.to(q.dtype)[:, None]

    def describe(self) -> str:
        return f"k={self.leak_factor:g}, W={self.window} ((T - W) * k + W)"


@dataclass(frozen=True)
class Lambda(NearFar):
    """LM-Infinite's local window and number of global (starting) tokens, resolved for one model."""

    window: int  # W: keys nearer than W attend at their exact positions; W is also the distance limit
    global_tokens: int  # the first keys of the sequence, attended at distance W from farther queries
    widen = "window"

    @classmethod
    def resolve(cls, window: int | None, global_tokens: int, train_context: int) -> "Lambda":
        """``window`` None: the trained context T (the authors' L_pretrain)."""
        return cls(int(window) if window is not None else int(train_context), int(global_tokens))

    def reach(self, train_context: int) -> None:
        return None  # no distance passes W

    def far_positions(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """The global branch's query and key positions: the query at W, the key at 0."""
        return query_at_window(positions, self.window)

    def far_keys(self, length: int, device: torch.device) -> Tensor:
        """(length,) True for the keys a query past the window still attends: the first ``global_tokens``."""
        return torch.arange(length, device=device) < self.global_tokens

    def describe(self) -> str:
        return f"W={self.window}, {self.global_tokens} global tokens"


@dataclass(frozen=True)
class Sinks(Unscaled):
    """StreamingLLM's attention sinks and recent tokens, resolved for one model."""

    sinks: int  # S: the first tokens, never evicted
    recent: int  # R: the latest tokens kept besides the current one
    widen = "recent"

    @classmethod
    def resolve(cls, sinks: int, recent: int | None, train_context: int) -> "Sinks":
        """``recent`` None: T - S - 1. The cache's last place, S + R, must be inside T."""
        S = int(sinks)
        R = int(recent) if recent is not None else train_context - S - 1
        if R < 1 or S + R >= train_context:
            raise PosxError(
                f"eval.streaming_llm keeps {S} sinks and {R} recent tokens, which does not fit the trained "
                f"context T={train_context}: sinks + recent must be from {S + 1} to {train_context - 1} "
                f"(recent null: T - sinks - 1)"
            )
        return cls(S, R)

    def reach(self, train_context: int) -> None:
        return None  # no place in the cache passes S + R

    def branches(self, positions: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Exact positions, and the sinks' branch: the query at S + R, each key at its index."""
        index = torch.arange(positions.shape[0], device=positions.device).float()
        return [(positions, positions), (torch.full_like(index, float(self.sinks + self.recent)), index)]

    def select(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """0 for a key still in the cache at its exact distance, 1 for a sink after the first
        eviction, -1 for an evicted key; indices count from the first key."""
        k = torch.arange(k_positions.shape[0], device=k_positions.device)
        q = (q_positions - k_positions[0])[:, None]
        exact = (q - k[None, :] <= self.recent) | (q <= self.sinks + self.recent)
        sink = (k < self.sinks)[None, :].expand_as(exact)
        return torch.where(exact, 0, torch.where(sink, 1, -1))

    def describe(self) -> str:
        return f"{self.sinks} sinks, {self.recent} recent"


@dataclass(frozen=True)
class DualChunk(Unscaled):
    """Dual Chunk Attention's chunk size and local window, resolved for one model."""

    chunk_size: int  # s: the largest distance any pair is given
    local_window: int  # w: chunks hold c = s - w tokens
    widen = "chunk_size"

    @classmethod
    def resolve(cls, chunk_size: int | None, local_window: int | None, train_context: int) -> "DualChunk":
        """None: the authors' 3T/4 and T/16. s must fit in T (every distance is at most s) and
        leave chunks of at least one token."""
        s = int(chunk_size) if chunk_size is not None else max(1, train_context * 3 // 4)
        w = int(local_window) if local_window is not None else train_context // 16
        if s > train_context:
            raise PosxError(
                f"eval.dca.chunk_size {s} is past the trained context T={train_context}; DCA keeps every "
                f"distance at or below it, so set it at most {train_context} (null: 3T/4)"
            )
        if w >= s:
            raise PosxError(
                f"eval.dca.local_window {w} must be below eval.dca.chunk_size {s} (chunks hold s - w tokens); "
                f"lower it (null: T/16)"
            )
        return cls(s, w)

    @property
    def chunk(self) -> int:
        return self.chunk_size - self.local_window  # c: tokens per chunk

    def reach(self, train_context: int) -> None:
        return None  # no distance passes s

    def branches(self, positions: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Intra, successive and inter query positions, each against keys at j mod c."""
        c, s = self.chunk, self.chunk_size
        local = torch.remainder(positions, c).float()
        successive = (local + c).clamp(max=s)
        inter = torch.full_like(local, float(min(2 * c - 1, s)))
        return [(local, local), (successive, local), (inter, local)]

    def select(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """0 for a key in the query's chunk, 1 in the chunk before, 2 further back (rows, keys)."""
        c = self.chunk
        back = torch.div(q_positions, c, rounding_mode="floor")[:, None] - torch.div(
            k_positions, c, rounding_mode="floor"
        )
        return back.clamp(0, 2)  # a key after the query (back < 0) is masked by attend

    def describe(self) -> str:
        return f"s={self.chunk_size}, w={self.local_window}"


def attend(
    q: Tensor, k: Tensor, v: Tensor, positions: Tensor, method: Windowed, rotate_at: RotateAt,
    query_scale: QueryScale | None = None,
) -> Tensor:  # fmt: skip
    """Causal windowed attention of unrotated q, k and v (B, H, L, hd) -> (B, H, L, hd).

    ``positions`` (L,) are the tokens' positions; ``query_scale`` the model's own per-row logit
    scale, applied to q before the method's and before rotating (a scale per query row
    commutes with its rotation)."""
    if query_scale is not None:
        q = query_scale(q)
    q = method.scale_query(q, positions)
    rotated = [rotate_at(q, k, q_pos, k_pos) for q_pos, k_pos in method.branches(positions)]
    B, H, L, hd = q.shape
    scale = 1.0 / math.sqrt(hd)
    out = torch.empty_like(v)
    for r0, r1 in row_blocks(B, H, L, q.device):
        choice = method.select(positions[r0:r1], positions[:r1])  # (rows, r1): a branch, or -1
        masked = (choice < 0) | (positions[r0:r1, None] < positions[None, :r1])  # -inf whatever is written
        logits = q.new_empty((B, H, r1 - r0, r1), dtype=torch.float32)  # every unmasked entry is written
        for b, (branch_q, branch_k) in enumerate(rotated):
            _write_branch(logits, branch_q[:, :, r0:r1], branch_k, choice == b, masked)
        logits.mul_(scale).masked_fill_(masked, float("-inf"))
        weights = torch.softmax(logits, dim=-1).to(v.dtype)
        out[:, :, r0:r1] = weights @ v[:, :, :r1]  # (B, H, rows, hd)
    return out


def _write_branch(logits: Tensor, q: Tensor, k: Tensor, chosen: Tensor, masked: Tensor) -> None:
    """Write one branch's logits q k^T into ``logits`` (B, H, rows, keys) where ``chosen`` and
    not ``masked``. Only the columns the branch owns for some row are computed (the near
    branch's are a band along the diagonal; DCA's branches lie chunks apart), and only the
    columns another branch shares are merged with ``where``; the rest are copied."""
    owned = chosen & ~masked
    c0, c1 = _span(owned)
    if c0 == c1:
        return
    scores = (q @ k[:, :, c0:c1].transpose(-1, -2)).float()  # (B, H, rows, c1 - c0)
    m0, m1 = _span(~(chosen | masked)[:, c0:c1])  # the span of columns another branch also owns
    if m0 == m1:
        m0 = m1 = c1 - c0
    logits[..., c0 : c0 + m0] = scores[..., :m0]
    logits[..., c0 + m1 : c1] = scores[..., m1:]
    shared = logits[..., c0 + m0 : c0 + m1]
    shared.copy_(torch.where(owned[:, c0 + m0 : c0 + m1], scores[..., m0:m1], shared))


def _span(chosen: Tensor) -> tuple[int, int]:
    """(first, last + 1) of the columns where ``chosen`` (rows, keys) holds in some row; (0, 0)
    for none."""
    columns = chosen.any(dim=0).nonzero()
    if columns.numel() == 0:
        return 0, 0
    return int(columns[0]), int(columns[-1]) + 1
