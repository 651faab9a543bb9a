"""scripts/study/judge.py: bad input is one line and exit 2 before any work; its plan trains RoPE,
ALiBi and the user's encoding per seed and evaluates the user's method beside PI and YaRN; its
comparison follows the study's rule (scripts/study/judge_stats.py, scipy.stats)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from scripts.study import judge, judge_stats

REPO = Path(__file__).resolve().parents[2]

ENC, METHOD = "examples.alibi_encoding:ALiBi", "examples.partial_pi:partial_pi"


def run_judge(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "scripts.study.judge", *args]  # found through PYTHONPATH, run in tmp_path
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    "args,needle",
    [
        ((), "name what to judge"),
        (("--method", "no_such_module_x:f"), "no module 'no_such_module_x'"),
        (("--encoding", ENC, "--encoding-params", "{max_bias: -1}"), "pos.params.max_bias must be positive"),
        (("--method", METHOD, "--method-params", "[1]"), "is not a mapping"),
        (("--method", METHOD, "--encoding-params", "{a: 1}"), "--encoding-params goes with --encoding"),
        (("--bogus",), "unrecognized arguments: --bogus"),
    ],
)
def test_bad_input_is_one_line_exit_2_before_any_work(tmp_path, monkeypatch, capsys, args, needle):
    monkeypatch.setattr(sys, "argv", ["judge.py", *args, "--work", str(tmp_path / "work")])
    with pytest.raises(SystemExit) as exited:
        judge.check_code(judge.parse_args())
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], lines
    assert not (tmp_path / "work").exists()


@pytest.mark.slow
def test_the_script_itself_answers_bad_input_in_one_line(tmp_path):
    result = run_judge("--method", "no_such_module_x:f", "--work", str(tmp_path / "work"), tmp_path=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no module 'no_such_module_x'" in lines[0], result.stderr
    assert not (tmp_path / "work").exists()


def test_the_plan_trains_each_arm_per_seed_and_scores_the_method_beside_the_baselines(tmp_path):
    args = judge.parse_args(["--encoding", ENC, "--method", METHOD, "--seeds", "0", "1", "--work", str(tmp_path)])
    tasks = judge.plan(args)
    trained = sorted(t.key for t in tasks if t.phase == 1)
    assert trained == sorted(f"train-{arm}-s{s}" for arm in ("rope", "alibi", "mine") for s in (0, 1))
    rope_eval = next(t for t in tasks if t.key == "eval-rope-s0").args
    assert f"eval.methods=[none,pi,yarn,{METHOD}]" in rope_eval and "eval.factors=[1,2,4,8]" in rope_eval
    mine = next(t for t in tasks if t.key == "train-mine-s0").args
    assert "pos=custom" in mine and f"pos.impl={ENC}" in mine and "seed=0" in mine


def test_the_comparison_is_the_paired_t_test_on_shared_seeds_and_welch_otherwise():
    yours, base = {0: 10.0, 1: 11.0, 2: 12.5}, {0: 11.0, 1: 12.2, 2: 13.1}
    call = judge_stats.compare_arms(yours, base)
    expected = stats.ttest_rel(list(yours.values()), list(base.values())).confidence_interval(0.95)
    assert call["test"] == "paired t" and call["call"] == "supported"
    assert (call["lo"], call["hi"]) == pytest.approx((expected.low, expected.high))
    assert call["diff"] == pytest.approx(sum(yours.values()) / 3 - sum(base.values()) / 3)
    other = judge_stats.compare_arms(yours, {3: 11.0, 4: 12.2, 5: 13.1})
    welch = stats.ttest_ind(list(yours.values()), [11.0, 12.2, 13.1], equal_var=False).confidence_interval(0.95)
    assert other["test"] == "Welch t" and (other["lo"], other["hi"]) == pytest.approx((welch.low, welch.high))
    assert other["call"] == "inconclusive"  # the interval holds 0 without the seeds' pairing


def test_one_seed_is_not_checked_and_a_constant_difference_is_called_by_its_sign():
    assert judge_stats.compare_arms({0: 1.0}, {0: 2.0})["call"] == "not checked"
    shifted = judge_stats.compare_arms({0: 1.0, 1: 2.0}, {0: 1.5, 1: 2.5})  # every seed 0.5 lower
    assert shifted["call"] == "supported" and shifted["lo"] == shifted["hi"] == pytest.approx(-0.5)
    same = judge_stats.compare_arms({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0})
    assert same["call"] == "inconclusive" and math.isclose(same["diff"], 0.0)


def test_the_page_corrects_its_calls_for_their_number_by_holm():
    calls = pd.DataFrame({"call": ["supported", "supported", "contradicted"], "p": [0.03, 0.04, 0.001]})
    held = judge_stats.with_holm(calls)
    assert list(held["p_holm"]) == pytest.approx([0.06, 0.06, 0.003])  # 2 x 0.03, then max(0.06, 1 x 0.04)
    assert list(held["holm"]) == ["inconclusive", "inconclusive", "contradicted"]
