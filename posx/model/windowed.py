"""Windowed attention at evaluation, without training: keys nearer than a window W meet the
query at their exact RoPE positions, farther keys at remapped positions that keep the distance
inside the trained context (or, for LM-Infinite and StreamingLLM, most of them not at all).
Each method is a few branches, each a pair of position maps for queries and keys, and a rule
choosing the branch of every (query, key) pair; the chosen logits go into one float32 softmax.

Self-Extend (Jin et al., ICML 2024, arXiv 2401.01325; datamllab/LongLM): ``Grouping``.
ReRoPE and Leaky ReRoPE (Su 2023; bojone/rerope): ``Rectified``.
LM-Infinite (Han et al., NAACL 2024, arXiv 2308.16137; Glaciohound/LM-Infinite): ``Lambda``.
Dual Chunk Attention (An et al., ICML 2024, arXiv 2402.17463; HKUNLP/ChunkLlama): ``DualChunk``.
StreamingLLM (Xiao et al., ICLR 2024, arXiv 2309.17453; mit-han-lab/streaming-llm): ``Sinks``.
Decisions: Self-Extend's shift W - W/G stays fractional and its optional query log scale is left
out, as in the authors' code; ReRoPE's log-n query scale is on, as in both of the author's
patches; LM-Infinite's distance limit is W; DCA's query against earlier chunks sits at
min(2c - 1, s), as the authors' code sets it; every default is the authors' but Self-Extend's
G = 16, W = T/2 (posx's, reaching 8x T). The position maps in full: docs/encodings.md, "How the
windowed methods place positions".
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
    """Queries at W, keys at 0 (float32, shape of ``positions``): ReRoPE's and LM-Infinite's far branch."""
    return torch.full(positions.shape, float(window), device=positions.device), torch.zeros_like(positions).float()


class Windowed(Protocol):
    """What ``attend`` needs of a method: its branches' position maps and each pair's branch."""

    widen: str  # the parameter that extends the reach, named when a length passes it

    def branches(self, positions: Tensor) -> list[tuple[Tensor, Tensor]]: ...
    def select(self, q_positions: Tensor, k_positions: Tensor) -> Tensor: ...
    def scale_query(self, q: Tensor, positions: Tensor) -> Tensor: ...
    def reach(self, train_context: int) -> int | None: ...
    def describe(self) -> str: ...


class Unscaled:
    """A method that leaves the query's scale alone (all but ReRoPE's log-n scaling) and has no
    reach (None: no distance passes the trained context at any length)."""

    def scale_query(self, q: Tensor, positions: Tensor) -> Tensor:
        return q

    def reach(self, train_context: int) -> int | None:
        return None


class NearFar(Unscaled):
    """Keys nearer than W exact (branch 0), farther ones at ``far_positions`` (1) or masked (``far_keys``)."""

    window: int

    def far_positions(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def far_keys(self, length: int, device: torch.device) -> Tensor | None:
        return None  # every key past the window takes part, at its far position

    def branches(self, positions: Tensor) -> list[tuple[Tensor, Tensor]]:
        return [(positions, positions), self.far_positions(positions)]

    def select(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """(rows, keys) branch per pair, -1 where masked; ``k_positions`` from the first token on."""
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
        """``window`` None: T / 2 (posx's default: with G = 16 it reaches 8x T)."""
        return cls(int(group), int(window) if window is not None else max(1, train_context // 2))

    def reach(self, train_context: int) -> int:
        """The longest sequence whose grouped distances stay inside T: (T - W) * G + W."""
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
        """``window`` None: T / 4 (the author's published runs)."""
        k = None if leak_factor is None else float(leak_factor)
        W = int(window) if window is not None else max(1, train_context // 4)
        return cls(W, k, int(train_context) if log_scale else None)

    def reach(self, train_context: int) -> int | None:
        """ReRoPE: None (no distance passes W); Leaky: (T - W) * k + W rounded up."""
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

    def branches(self, positions: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Exact positions, and the sinks' branch: the query at S + R, each key at its index."""
        index = torch.arange(positions.shape[0], device=positions.device).float()
        return [(positions, positions), (torch.full_like(index, float(self.sinks + self.recent)), index)]

    def select(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """0: a key still in the cache, at its exact distance; 1: a sink after the first eviction;
        -1: evicted. Indices count from the first key."""
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
        """None: the authors' 3T/4 and T/16; s <= T (no distance passes s) and w < s."""
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

    def branches(self, positions: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Intra, successive and inter query positions, each against keys at j mod c."""
        c, s = self.chunk, self.chunk_size
        local = torch.remainder(positions, c).float()
        successive = (local + c).clamp(max=s)
        inter = torch.full_like(local, float(min(2 * c - 1, s)))
        return [(local, local), (successive, local), (inter, local)]

    def select(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """0 for a key in the query's chunk, 1 in the chunk before, 2 further back (rows, keys)."""
        q_chunk, k_chunk = (torch.div(p, self.chunk, rounding_mode="floor") for p in (q_positions, k_positions))
        return (q_chunk[:, None] - k_chunk).clamp(0, 2)  # a key after the query is masked by attend

    def describe(self) -> str:
        return f"s={self.chunk_size}, w={self.local_window}"


def attend(
    q: Tensor, k: Tensor, v: Tensor, positions: Tensor, method: Windowed, rotate_at: RotateAt,
    query_scale: QueryScale | None = None,
) -> Tensor:  # fmt: skip
    """Causal windowed attention of unrotated q, k and v (B, H, L, hd) at ``positions`` (L,) ->
    (B, H, L, hd). ``query_scale``, the model's own per-row logit scale, applies to q before the
    method's and before rotating (a scale per query row commutes with its rotation)."""
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
    """Write one branch's q k^T into ``logits`` (B, H, rows, keys) where ``chosen`` and not ``masked``,
    computed over the columns it owns; only columns another branch shares merge with ``where``."""
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
    """(first, last + 1) of the columns where ``chosen`` (rows, keys) holds in some row, or (0, 0)."""
    columns = chosen.any(dim=0).nonzero()
    if columns.numel() == 0:
        return 0, 0
    return int(columns[0]), int(columns[-1]) + 1
