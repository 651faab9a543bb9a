"""What posx computes does not move unnoticed: tiny runs of the study's encodings and blocks
give the losses and perplexities recorded in ``fixtures/numbers.json``.

The reference study (``results/reference/``) takes hours to make again, so a change that moved
its numbers would otherwise show only at the next study. Here each of its configurations trains
for 150 steps on a generated corpus (the same on every Python) and is evaluated at 1x and 2x;
every training loss, the validation loss and every perplexity must match the record within
``RTOL``. Float32 kernels round differently on other CPUs, so the match is close, not exact:
scalar kernels in place of AVX2 ones (``ATEN_CPU_CAPABILITY=default
MKL_ENABLE_INSTRUCTIONS=SSE4_2``) moved no number by more than 2.5e-5. What it catches is a change
of more than ``RTOL`` anywhere: a formula, a frequency, an epsilon, an initialisation, the
batches. Even the tanh approximation of GELU in place of erf, which moved these numbers by up to
4.4e-4, fails it; a change smaller still in a model this size would pass.

A change meant to alter the numbers (a new initialisation, a different formula) rewrites the
record with ``POSX_RECORD_NUMBERS=1 python -m pytest tests/test_numbers_guard.py`` and says why
in its commit; then ``python -m scripts.study.reference --only rope-s0 --check`` tells whether
the committed study still holds.

Each configuration trains in its own test, so CI's workers share them. The fast set (a plain
``pytest``) runs the two RoPE cases, the gpt2 and llama blocks under every rescaling method; the
other five train with the slow tests (CI, or this file named).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_posx

RECORD = Path(__file__).parent / "fixtures" / "numbers.json"
RTOL = 2e-4  # relative: 8x the most that scalar kernels in place of AVX2 ones moved a number
WRITE = os.environ.get("POSX_RECORD_NUMBERS") == "1"
EVAL = ["eval.after_train=true", "eval.factors=[1,2]", "eval.passkey.enabled=false", "eval.tasks=[]"]
LONGER = [
    "train.steps=150",
    "train.eval_every=75",
    "train.warmup_steps=10",
    "train.lr=3e-3",
]  # enough to learn positions
# case -> overrides: the study's six encodings (gpt2 block) and RoPE on the llama block
CASES = {
    "rope": ["pos=rope", "eval.methods=[none,pi,ntk,yarn,abf]"],
    "llama-rope": ["pos=rope", "model.block=llama", "eval.methods=[none,yarn]"],
    "absolute": ["pos=absolute", "eval.methods=[none]", "eval.absolute_beyond=clamp"],
    "sinusoidal": ["pos=sinusoidal", "eval.methods=[none]"],
    "alibi": ["pos=alibi", "eval.methods=[none]"],
    "t5": ["pos=t5", "eval.methods=[none]"],
    "nope": ["pos=nope", "eval.methods=[none]"],
}


def numbers(run: Path) -> dict:
    """Every training loss, the last validation loss and each scored cell's perplexity."""
    metrics = pd.read_csv(run / "metrics.csv")
    table = pd.read_csv(run / "extrapolation.csv")
    scored = table[table["status"] == "ok"]
    return {
        "train_loss": [float(x) for x in metrics["train_loss"]],
        "val_loss": float(metrics["val_loss"].dropna().iloc[-1]),
        "ppl": {f"{m}@{f:g}": float(p) for m, f, p in zip(scored["method"], scored["factor"], scored["ppl"])},
    }


def mismatches(got: dict, want: dict) -> list[str]:
    """Where ``got`` differs from ``want`` by more than RTOL, or has other steps or cells."""
    out = []
    if len(got["train_loss"]) != len(want["train_loss"]) or set(got["ppl"]) != set(want["ppl"]):
        return [f"steps {len(got['train_loss'])} / {len(want['train_loss'])}, cells {sorted(got['ppl'])}"]
    pairs = [(f"train_loss[{i}]", a, b) for i, (a, b) in enumerate(zip(got["train_loss"], want["train_loss"]))]
    pairs += [("val_loss", got["val_loss"], want["val_loss"])]
    pairs += [(f"ppl {cell}", got["ppl"][cell], want["ppl"][cell]) for cell in sorted(want["ppl"])]
    for name, a, b in pairs:
        if not math.isclose(a, b, rel_tol=RTOL):
            out.append(f"{name}: {a!r}, recorded {b!r} ({a / b - 1:+.2e})")
    return out


FAST = ("rope", "llama-rope")  # in the fast set


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("guard")


@pytest.fixture
def made(work, tiny_args, case) -> dict:
    """``case`` trained and evaluated: its numbers (written into the record under
    ``POSX_RECORD_NUMBERS=1``)."""
    run_posx("train", *tiny_args, *LONGER, *CASES[case], *EVAL, f"name={case}", "seed=0", cwd=work)
    got = numbers(work / "results" / "runs" / case)
    if WRITE:
        record = {**(json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.exists() else {}), case: got}
        record = {name: record[name] for name in CASES if name in record}  # in the order of CASES
        RECORD.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return got


@pytest.mark.parametrize("case", [c if c in FAST else pytest.param(c, marks=pytest.mark.slow) for c in CASES])
def test_a_tiny_run_gives_the_recorded_numbers(made, case):
    recorded = json.loads(RECORD.read_text(encoding="utf-8"))
    assert case in recorded, f"{case} has no record: POSX_RECORD_NUMBERS=1 python -m pytest {__file__}"
    wrong = mismatches(made, recorded[case])
    assert not wrong, f"{case} computes other numbers than recorded:\n" + "\n".join(wrong)


def test_the_comparison_sees_a_small_change():
    base = {"train_loss": [5.0, 4.0], "val_loss": 4.1, "ppl": {"none@1": 60.0}}
    assert mismatches(base, base) == []
    moved = {**base, "ppl": {"none@1": 60.0 * (1 + 2 * RTOL)}}
    assert mismatches(moved, base) == [f"ppl none@1: {60.0 * (1 + 2 * RTOL)!r}, recorded 60.0 ({2 * RTOL:+.2e})"]
    assert mismatches({**base, "ppl": {"none@1": 60.0 * (1 + RTOL / 2)}}, base) == []
    assert mismatches({**base, "train_loss": [5.0]}, base)[0].startswith("steps 1 / 2")
