"""Varied task layouts: counts and lengths drawn from ranges at every length, the harder MQAR
past T, digit distractors in the passkey, chance levels, and the validation set apart from the
evaluation's samples."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from posx.eval import history, suite
from posx.schema.config import EvalConfig
from posx.schema.tasks import TaskOptions
from posx.tasks import registry
from posx.tasks.chance import chance
from posx.tasks.mqar import pair_range, per_pair, scaled_range
from posx.tasks.registry import VALIDATION

REPO = Path(__file__).resolve().parents[1]
SIZES = dict(key_letters=2, digits=2, queries=2, span=12, cue=2, distractors=3)
VARIED = TaskOptions(layout="varied", min_pairs=8, pairs=16, base_length=128, **SIZES)
FIXED = TaskOptions(**SIZES)


@pytest.fixture(scope="module")
def val() -> torch.Tensor:
    text = "".join(f"def f{i}(x):\n    return x + {i}  # comment\n" for i in range(400)).encode()
    return torch.from_numpy(np.frombuffer(text, dtype=np.uint8).copy())


def draw(val, task, length, opts=VARIED, trials=200, seed=0):
    made = registry.make_samples(task, val, length, trials, opts, seed)
    assert len(made) == trials
    return made


def test_varied_mqar_draws_every_count_of_pairs_in_its_range_and_spreads_them(val):
    made = draw(val, "mqar", 128)
    counts = [len(s.needles) for s in made]
    assert set(counts) == set(range(8, 17))  # min_pairs .. pairs, each drawn
    first = [s.needles[0][0] for s in made]  # where the first pair starts: spread, not always at the end of a pad
    assert min(first) == 0 and max(first) > 40
    for s in made:  # the queried values are the pairs' values
        at = s.answer[0]
        value = s.tokens[at : at + 2]
        assert any(np.array_equal(n[1][3:5], value) for n in s.needles)


def test_a_longer_mqar_keeps_the_pairs_and_mqar_more_scales_them(val):
    longer = [len(s.needles) for s in draw(val, "mqar", 512)]
    assert set(longer) == set(range(8, 17))  # the same task, more filler
    assert scaled_range(128, VARIED) == pair_range(128, VARIED) == (8, 16)  # at T both are one task
    harder = [len(s.needles) for s in draw(val, "mqar_more", 512)]
    assert min(harder) >= 32 and max(harder) <= 64 and max(harder) > 48  # 4x the pairs at 4x the length
    distance = [len(s.tokens) - s.needles[0][0] for s in draw(val, "mqar", 512)]
    assert max(distance) > 400  # distances to the pairs reach far across the longer sequence


def old_posx(tmp_path: Path, script: str) -> str:
    """``script``'s stdout, run by posx as it was before the varied layout (git's copy of posx at
    the commit before the one that added posx/tasks/chance.py), in a child process."""
    if not (REPO / ".git").exists():
        pytest.skip("needs the git history of posx")
    old = tmp_path / "old"
    listing = subprocess.run(["git", "-C", str(REPO), "log", "--format=%H", "--", "posx/tasks/chance.py"],
                             capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    base = f"{listing[-1]}~1" if listing else "HEAD"
    archive = subprocess.run(["git", "-C", str(REPO), "archive", base, "posx"], capture_output=True, check=True)
    old.mkdir()
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    return subprocess.run([sys.executable, "-c", script], cwd=old, capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(old), "PATH": "/usr/bin:/bin"}).stdout  # fmt: skip


def test_the_fixed_layout_is_the_layout_the_committed_results_were_drawn_with(val, tmp_path):
    script = (
        "import sys, numpy as np, torch\n"
        "from omegaconf import OmegaConf\n"
        "from posx.schema import TaskOptions\n"  # the older posx's module
        "from posx.tasks import registry\n"
        "text = ''.join(f'def f{i}(x):\\n    return x + {i}  # comment\\n' for i in range(400)).encode()\n"
        "val = torch.from_numpy(np.frombuffer(text, dtype=np.uint8).copy())\n"
        f"opts = OmegaConf.structured(TaskOptions(**{SIZES!r}))\n"
        "for task in ('mqar', 'copy', 'niah_multikey', 'passkey'):\n"
        "    for s in registry.make_samples(task, val, 64, 16, opts, 5):\n"
        "        sys.stdout.write(task + ' ' + s.tokens.tobytes().hex() + ' ' + s.answer.tobytes().hex() + '\\n')\n"
    )
    now = [
        f"{task} {s.tokens.tobytes().hex()} {s.answer.tobytes().hex()}"
        for task in ("mqar", "copy", "niah_multikey", "passkey")
        for s in registry.make_samples(task, val, 64, 16, FIXED, 5)
    ]
    assert old_posx(tmp_path, script).splitlines() == now


def test_varied_copy_and_niah_draw_their_span_and_distractors(val):
    spans = {len(s.needles[0][1]) for s in draw(val, "copy", 128)}
    assert spans == set(range(3, 13))  # cue + 1 .. span letters
    needles = {len(s.needles) for s in draw(val, "niah_multikey", 128)}
    assert needles == {2, 3, 4}  # the needle and 1 .. 3 distractors
    assert {len(s.needles[0][1]) for s in draw(val, "copy", 128, FIXED)} == {12}


def test_the_varied_passkey_has_digit_distractors_and_the_suite_scores_it(val):
    for s in draw(val, "passkey", 64, trials=32):
        key = bytes(s.tokens[s.answer].astype(np.uint8)).decode()
        planted = [bytes(ids.astype(np.uint8)).decode().strip() for _, ids in s.needles]
        others = [p for p in planted if "passkey" not in p]  # the key's statement is planted at its depth
        assert len(others) == 3 and all(o.isdigit() and len(o) == 2 and o != key for o in others)
    ev = EvalConfig(tasks=["passkey"], task_options=TaskOptions(layout="varied", **SIZES))
    assert not suite.shares_passkey(ev)  # passkey.csv's trials have no distractors: the suite draws its own
    made = suite.samples_of("passkey", val, 64, ev.task_options, None)
    assert all(len(s.needles) == 4 for s in made)


@pytest.mark.slow  # draws thousands of samples; the chance rules' own tests stay fast
def test_chance_levels_match_what_the_generators_draw(val):
    for task, length in (("mqar", 128), ("mqar", 512), ("mqar_more", 512), ("niah_multikey", 128)):
        made = draw(val, task, length, trials=2000)
        candidates = np.array([len(s.needles) for s in made], dtype=float)
        picked = np.mean(candidates ** -float(VARIED.queries if task.startswith("mqar") else 1))
        assert chance(task, VARIED, length) == pytest.approx(picked, rel=0.1)
    assert chance("passkey", VARIED, 128) == pytest.approx(1 / 4) and chance("passkey", FIXED, 128) == 1.0
    assert chance("copy", FIXED, 128) == pytest.approx(26.0**-10)
    fixed_pairs = 64 // per_pair(FIXED) - FIXED.queries  # as many as fit
    assert chance("mqar", FIXED, 64) == pytest.approx(fixed_pairs**-2.0)
    assert math.isnan(chance("variable_tracking", VARIED, 128)) and math.isnan(chance("mqar", VARIED, 16))


def test_the_validation_set_is_never_the_evaluations_samples(val):
    for task in ("mqar", "copy", "niah_multikey", "passkey"):
        test = {s.tokens.tobytes() for s in registry.make_samples(task, val, 128, 64, VARIED, 0)}
        valid = {s.tokens.tobytes() for s in registry.make_samples(task, val, 128, 64, VARIED, 0, stream=VALIDATION)}
        assert not test & valid


def test_min_pairs_above_pairs_is_refused_in_one_line():
    assert "min_pairs=9 is more than pairs=8" in TaskOptions(min_pairs=9, pairs=8).check()


def test_the_new_evaluation_settings_at_their_old_behaviour_keep_an_evaluations_id(tmp_path):
    script = (
        "from omegaconf import OmegaConf\n"
        "from posx.eval import history\n"
        "from posx.schema import EvalConfig\n"  # the older posx's module
        "print(history.eval_id(history.settings_of(OmegaConf.structured(EvalConfig()))))\n"
    )
    old = history.settings_of(EvalConfig())
    assert old_posx(tmp_path, script).strip() == history.eval_id(old)  # the id an older posx gave
    ev = EvalConfig(randomized_positions="sampled", task_options=TaskOptions(layout="varied"))
    new = history.settings_of(ev)
    assert new["randomized_positions"] == "sampled" and new["task_options"]["layout"] == "varied"
    assert history.eval_id(new) != history.eval_id(old)
