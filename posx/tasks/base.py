"""What every task generator shares: a sample, the text it is built from, and how it is assembled.

A sample is L token ids: haystack, needles planted at depths (the share of the haystack before
them), and a tail that asks and answers. Each piece is encoded on its own, so the answer's token
positions are exact with any tokenizer. Draws are seeded by (seed, length, task) (docs/evaluation.md).
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
    """Whether ``opts`` draws a sample's counts and lengths from ranges at every length (not ``fixed``)."""
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
    """A task that cannot be made with the sizes or data given; ``said`` names its keys as ``{options}``
    and ``{tasks}`` of ``group`` (the training mix re-raises it ``of("data.")``)."""

    def __init__(self, said: str, group: str = "eval."):
        self.said = said
        super().__init__(said.format(**KEYS[group]))

    def of(self, group: str) -> "TaskError":
        return TaskError(self.said, group)


def too_few(needed: int, what: str, option: str) -> TaskError:
    """More distinct keys or values asked for than ``option`` allows."""
    return TaskError(f"a task needs {needed} distinct {what}, more than there are; raise {{options}}.{option}")


def _more_than(n: int, base: int, places: int) -> bool:
    """Whether ``n`` > base ** places, without computing a power that is certainly larger."""
    return places * math.log2(base) < 64 and n > base**places


def _distinct(n: int, draw: Callable[[], str]) -> list[str]:
    """``n`` distinct values of ``draw``, in the order first drawn."""
    out: dict[str, None] = {}
    while len(out) < n:
        out[draw()] = None
    return list(out)


def words(rng: np.random.Generator, n: int, letters: int) -> list[str]:
    """``n`` distinct random lowercase words of ``letters`` letters."""
    if _more_than(n, len(LETTERS), letters):
        raise too_few(n, f"words of {letters} letters", "key_letters")
    return _distinct(n, lambda: "".join(rng.choice(LETTERS, letters)))


def numbers(rng: np.random.Generator, n: int, digits: int, distinct: bool = True) -> list[str]:
    """``n`` random numbers of ``digits`` digits (leading zeros allowed), distinct unless not ``distinct``."""

    def draw() -> str:
        return "".join(str(d) for d in rng.integers(0, 10, digits))

    if not distinct:
        return [draw() for _ in range(n)]
    if _more_than(n, 10, digits):
        raise too_few(n, f"values of {digits} digits", "digits")
    return _distinct(n, draw)


def depth_of(rng: np.random.Generator, trial: int, buckets: int) -> tuple[float, int]:
    """The stratified depth of trial ``trial``: uniform inside bucket ``trial % buckets``."""
    bucket = trial % buckets
    return (bucket + rng.random()) / buckets, bucket


def later_depths(rng: np.random.Generator, first: float, n: int) -> list[float]:
    """``n`` depths drawn uniformly in [first, 1), ascending: needles that come after the first."""
    return sorted(float(d) for d in first + (1 - first) * rng.random(n))


def scrub(filler: np.ndarray, avoid: tuple) -> np.ndarray:
    """``filler`` with each occurrence of a marker in ``avoid`` broken by its most frequent unmarked id."""
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
    """(offset, ``filler_len`` ids) at a random offset of the haystack split, ``scrub``bed of ``avoid``;
    no window is redrawn, so the random stream is the same as without ``avoid``."""
    if len(ctx.source) < filler_len:
        raise TaskError(
            f"the haystack split has {len(ctx.source)} tokens, too few for {filler_len} tokens of filler; "
            "use more data or take the task out of {tasks}"
        )
    offset = int(ctx.rng.integers(0, len(ctx.source) - filler_len + 1))
    filler = np.asarray(ctx.source[offset : offset + filler_len], dtype=np.int64)
    return offset, scrub(filler, avoid)


def sample(
    ctx: Context, length: int, needles: list, tail: list, depth: float, bucket: int, avoid: tuple = ()
) -> Sample | None:
    """Haystack free of ``avoid`` with ``needles`` [(depth, ids)] planted in depth order, then ``tail``
    [(ids, scored)]; None when the needles and tail leave no room for haystack at this length."""
    filler_len = length - sum(len(ids) for _, ids in needles) - sum(len(ids) for ids, _ in tail)
    if filler_len < 1:
        return None
    _, filler = haystack(ctx, filler_len, avoid)
    parts, planted, at, prev = [], [], 0, 0
    for d, ids in sorted(needles, key=lambda n: n[0]):  # stable: equal depths keep their order
        cut = min(filler_len, max(prev, int(d * filler_len)))
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
    return Sample(tokens, np.asarray(answer, dtype=np.int64), depth, bucket, planted)


def answers(ctx: Context, question: np.ndarray, items: list[str], separator: str) -> list:
    """A tail: ``question`` (given), then ``items`` in order (scored), ``separator`` (given) between them."""
    tail = [(question, False)]
    for i, item in enumerate(items):
        if i:
            tail.append((ctx.encode(separator), False))
        tail.append((ctx.encode(item), True))
    return tail
