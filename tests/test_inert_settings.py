"""Settings that cannot act (posx.configure.checks): a new run refuses them before any work, in one
line naming the setting, the reason and the fix; a run already trained with one keeps resuming."""

from __future__ import annotations

import pytest

from posx.configure.checks import check_train_config
from posx.configure.compose import compose, to_yaml

from conftest import run_posx

CASES = [
    (["pos.num_buckets=64"], "pos.num_buckets=64 does nothing with pos=rope: only pos=t5 reads it; remove it, or"),
    (["pos=alibi", "pos.base=500000"], "pos.base=500000.0 does nothing with pos=alibi: only pos=rope or pos=xpos"),
    (["pos=rope", "pos.cope_npos=64"], "pos.cope_npos=64 does nothing with pos=rope: only pos=cope reads it"),
    (["pos=t5", "pos.xpos_scale_base=64"], "pos.xpos_scale_base=64.0 does nothing with pos=t5"),
    (["model.nope_every=3"], "model.nope_every=3 is more than model.n_layer=2, so no layer would attend without"),
    (["pos=nope", "model.nope_every=2"], "model.nope_every=2 does nothing with pos=nope"),
    (["model.attn_scale_length=64"], "model.attn_scale_length=64 does nothing with model.attn_scale=none; remove"),
    (["pos.randomized_max=512"], "pos.randomized_max=512 does nothing without pos.randomized=true; remove it"),
]


@pytest.mark.parametrize("overrides, needle", CASES, ids=[" ".join(o) for o, _ in CASES])
def test_a_setting_that_cannot_act_is_refused_before_any_work(tmp_path, tiny_args, overrides, needle):
    proc = run_posx("train", *tiny_args, *overrides, cwd=tmp_path, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {needle}"), lines[0]
    assert not (tmp_path / "results" / "runs").exists()  # nothing trained, no run directory


def test_a_sweep_is_refused_before_its_first_job(tmp_path, tiny_args):
    proc = run_posx("train", "-m", *tiny_args, "pos=rope,alibi", "pos.base=20000", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "pos.base=20000.0 does nothing with pos=alibi" in proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("overrides", [["model.nope_every=2"], ["pos=t5", "pos.num_buckets=64"], []])
def test_settings_that_act_pass(tiny_args, overrides):
    """nope_every equal to the layer count makes the last layer NoPE, so it acts."""
    check_train_config(compose([*tiny_args, *overrides]))


def test_a_run_trained_with_such_a_setting_still_resumes(tmp_path, tiny_args):
    """Only new training is checked: a run recorded before the check keeps resuming."""
    cfg = compose([*tiny_args, "pos=alibi", "pos.base=500000", "eval.after_train=false", "train.steps=2"])
    run = tmp_path / "results" / "runs" / "old"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(to_yaml(cfg), encoding="utf-8")
    run_posx("train", "--resume", "old", cwd=tmp_path)
    assert (run / "model.json").is_file()
