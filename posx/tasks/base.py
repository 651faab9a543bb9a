"""What every task generator shares: a sample, the text it is built from, and how it is assembled.

A sample is a sequence of exactly L token ids assembled from pieces, each encoded on its own
(as the passkey does, ``posx.eval.passkey``): haystack text cut from a token split, needles
planted into it at chosen depths, and a tail that asks the question and holds the answer.
Encoding each piece on its own makes the answer's token positions exact with any tokenizer (a
BPE cannot merge an answer with the text around it), at the price of a tokenisation the
tokenizer would not choose for the whole string; the needle and the answer are tokenised alike.

Layout (``eval.task_options.layout``): ``fixed`` gives every sample of a length the same
counts and lengths (the number of MQAR pairs, the copied span, the distractors), so only the
needle's depth varies; ``varied`` draws them from ranges at every length, so a model trained at
T sees the distances up to T, and a longer sequence is the same task with more filler (each
generator's docstring says what it draws).

Depth is the share of the haystack before the needle a sample is about (0: at the start of the
sequence, farthest from the question; near 1: right before it). Samples are stratified over
``depth_buckets`` equal depth ranges, as the passkey trials are. Every random choice comes from
a numpy generator seeded by (seed, length, task), so every method at a length sees the same
samples, and a training batch drawn at (seed, step) is the same on every run of that seed.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass
from typing import Callable

import numpy as np

from posx.core.errors import PosxError

Encode = Callable[[str], np.ndarray]  # text -> (n,) int64 ids
LETTERS = np.array(list(string.ascii_lowercase))
LAYOUTS = ("fixed", "varied")  # eval.task_options.layout (posx.schema.tasks.TaskOptions)


def varied(opts) -> bool:
    """Whether ``opts`` asks for the varied layout: the counts and lengths of a sample drawn from
    ranges at every length (docs/tasks.md), instead of one layout per length (``fixed``)."""
    return str(opts.layout) == "varied"


@dataclass
class Sample:
    tokens: np.ndarray  # (L,) int64 ids of the whole sequence
    answer: np.ndarray  # (k,) int64 indices into tokens of the scored answer tokens, ascending, all >= 1
    depth: float  # share of the haystack before the needle the sample is about, in [0, 1)
    depth_bucket: int  # 0 .. depth_buckets - 1
    needles: list  # (start, ids) of every planted needle, in sequence order (tests check them)
    asked: tuple = ()  # where the answers to later questions start (MQAR): decoding is given each question


@dataclass
class Context:
    """What a generator draws from: the haystack split, the encoder and the random generator."""

    source: np.ndarray  # token ids of the haystack split (held-out for evaluation, training for the mix)
    encode: Encode
    rng: np.random.Generator


def byte_encode(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)


def encoder(tokenizer) -> Encode:
    """The pieces' encoder: bytes when ``tokenizer`` is None, else its ``encode``."""
    return byte_encode if tokenizer is None else tokenizer.encode


# The keys a task's message names, per group the user set them in: an evaluation's, or a training mix's.
KEYS = {"eval.": {"options": "eval.task_options", "tasks": "eval.tasks"},
        "data.": {"options": "data.task_options", "tasks": "data.mix_tasks"}}  # fmt: skip


class TaskError(PosxError):
    """A task that cannot be made with the sizes or the data given. ``said`` names its keys as
    ``{options}`` and ``{tasks}``, filled with those of ``group`` (``eval.`` by default, as an
    evaluation's generators are told; the training mix's callers re-raise it ``of("data.")``)."""

    def __init__(self, said: str, group: str = "eval."):
        self.said = said
        super().__init__(said.format(**KEYS[group]))

    def of(self, group: str) -> "TaskError":
        return TaskError(self.said, group)


def too_few(needed: int, what: str, option: str) -> TaskError:
    """More distinct keys or values asked for than ``option`` allows."""
    return TaskError(f"a task needs {needed} distinct {what}, more than there are; raise {{options}}.{option}")


def _more_than(n: int, base: int, places: int) -> bool:
    """Whether ``n`` > base ** places, without the power when it is certainly larger (its cost
    stays that of a small number, whatever ``places`` is)."""
    return places * math.log2(base) < 64 and n > base**places


def words(rng: np.random.Generator, n: int, letters: int) -> list[str]:
    """``n`` distinct random lowercase words of ``letters`` letters."""
    if _more_than(n, len(LETTERS), letters):
        raise too_few(n, f"words of {letters} letters", "key_letters")
    out: dict[str, None] = {}
    while len(out) < n:
        out["".join(rng.choice(LETTERS, letters))] = None
    return list(out)


def numbers(rng: np.random.Generator, n: int, digits: int, distinct: bool = True) -> list[str]:
    """``n`` random numbers of ``digits`` digits (leading zeros allowed), distinct unless not ``distinct``."""
    if not distinct:
        return ["".join(str(d) for d in rng.integers(0, 10, digits)) for _ in range(n)]
    if _more_than(n, 10, digits):
        raise too_few(n, f"values of {digits} digits", "digits")
    out: dict[str, None] = {}
    while len(out) < n:
        out["".join(str(d) for d in rng.integers(0, 10, digits))] = None
    return list(out)


def depth_of(rng: np.random.Generator, trial: int, buckets: int) -> tuple[float, int]:
    """The stratified depth of trial ``trial``: uniform inside bucket ``trial % buckets``."""
    bucket = trial % buckets
    return (bucket + rng.random()) / buckets, bucket


def later_depths(rng: np.random.Generator, first: float, n: int) -> list[float]:
    """``n`` depths drawn uniformly in [first, 1), ascending: needles that come after the first."""
    return sorted(float(d) for d in first + (1 - first) * rng.random(n))


def scrub(filler: np.ndarray, avoid: tuple) -> np.ndarray:
    """``filler`` with every occurrence of a marker in ``avoid`` broken: the occurrence's first id
    becomes the filler's most frequent id that is in no marker (so no new occurrence can form).
    A filler that holds none comes back as it is; one made only of marker ids is refused."""
    hits = [(i, len(m)) for m in avoid for i in starts(filler, np.asarray(m))]
    if not hits:
        return filler
    banned = np.unique(np.concatenate([np.asarray(m, dtype=np.int64) for m in avoid]))
    ids, counts = np.unique(filler[~np.isin(filler, banned)], return_counts=True)
    if len(ids) == 0:
        raise PosxError(
            f"the haystack split offers {len(filler)} tokens made only of the marks the task plants, "
            "so none could be unique; use other data"
        )
    out = filler.copy()
    out[[i for i, _ in hits]] = ids[np.argmax(counts)]
    return out


def starts(haystack: np.ndarray, marker: np.ndarray) -> np.ndarray:
    """The indices at which the ids ``marker`` start a contiguous run in ``haystack``."""
    k = len(marker)
    if k == 0 or k > len(haystack):
        return np.zeros(0, dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(haystack, k)  # (n - k + 1, k)
    return np.flatnonzero((windows == marker).all(axis=1))


def haystack(ctx: Context, filler_len: int, avoid: tuple = ()) -> tuple[int, np.ndarray]:
    """(offset, ``filler_len`` ids) cut from the haystack split at a random offset, with every
    occurrence of a marker in ``avoid`` broken (``scrub``): a cue or mark the task plants is
    unique in its sequence. A window that holds none is unchanged, and no window is redrawn, so
    the random stream (and every later sample) is the same as without ``avoid``."""
    if len(ctx.source) < filler_len:
        raise TaskError(
            f"the haystack split has {len(ctx.source)} tokens, too few for {filler_len} tokens of filler; "
            "use more data or take the task out of {tasks}"
        )
    offset = int(ctx.rng.integers(0, len(ctx.source) - filler_len + 1))
    filler = np.asarray(ctx.source[offset : offset + filler_len], dtype=np.int64)
    return offset, scrub(filler, avoid)


def assemble(
    ctx: Context, length: int, needles: list, tail: list, avoid: tuple = ()
) -> tuple[np.ndarray, np.ndarray, list] | None:
    """Haystack with ``needles`` [(depth, ids)] planted in depth order, then ``tail`` [(ids, scored)].

    Returns (tokens (L,), answer indices, [(start, ids)] of the needles), or None when the needles
    and tail leave no room for haystack at this length. The haystack holds none of ``avoid``.
    """
    fixed = sum(len(ids) for _, ids in needles) + sum(len(ids) for ids, _ in tail)
    filler_len = length - fixed
    if filler_len < 1:
        return None
    _, filler = haystack(ctx, filler_len, avoid)
    parts, planted, at, prev = [], [], 0, 0
    for depth, ids in sorted(needles, key=lambda n: n[0]):  # stable: equal depths keep their order
        cut = min(filler_len, max(prev, int(depth * filler_len)))
        parts.append(filler[prev:cut])
        at += cut - prev
        planted.append((at, ids))
        parts.append(ids)
        at, prev = at + len(ids), cut
    parts.append(filler[prev:])
    at += filler_len - prev
    answer = []
    for ids, scored in tail:
        if scored:
            answer.extend(range(at, at + len(ids)))
        parts.append(ids)
        at += len(ids)
    tokens = np.concatenate(parts).astype(np.int64)
    assert len(tokens) == length, (len(tokens), length)
    return tokens, np.asarray(answer, dtype=np.int64), planted


def sample(
    ctx: Context, length: int, needles: list, tail: list, depth: float, bucket: int, avoid: tuple = ()
) -> Sample | None:
    """``assemble`` as a Sample (None when it does not fit)."""
    made = assemble(ctx, length, needles, tail, avoid)
    if made is None:
        return None
    tokens, answer, planted = made
    return Sample(tokens, answer, depth, bucket, planted)
