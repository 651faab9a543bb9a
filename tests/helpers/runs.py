"""Tiny runs: the overrides that make a run take a second on a CPU, and a small corpus."""

from __future__ import annotations

from pathlib import Path

TINY = [
    "model.n_layer=2",
    "model.n_head=2",
    "model.d_model=32",
    "train.context_length=32",
    "train.steps=6",
    "train.batch_size=4",
    "train.eval_every=3",
    "train.eval_batches=1",
    "train.warmup_steps=2",
    "eval.tokens=512",
    "eval.batch_tokens=512",
    "device=cpu",
]


def write_text_corpus(root: Path, files: int = 40, lines: int = 30) -> Path:
    """A small deterministic UTF-8 corpus under ``root``: ``files`` files of Python-like text."""
    for i in range(files):
        text = [f"def f{i}_{j}(x):\n    return x * {j} + {i}  # line {j}\n" for j in range(lines)]
        (root / f"mod{i:02d}.py").write_text("".join(text), encoding="utf-8")
    return root


# The evaluation settings the fixtures' old posx used (tests/fixtures/): re-evaluating an old run
# with them gives the numbers it wrote.
OLD_EVAL = ["device=cpu", "eval.tokens=128", "eval.batch_tokens=128", "eval.passkey.trials=4"]
