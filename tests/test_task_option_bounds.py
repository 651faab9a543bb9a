"""The task options (``data.task_options``, ``eval.task_options``, ``data.task_pool``) have upper
bounds that keep their cost bounded, checked before any work; the check itself costs the same
whatever the values (it never builds what it checks at the size asked for); and a mix setting
that cannot act is refused naming the key the user set."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from posx.configure import taskchecks
from posx.configure.checks import check_config, check_train_config
from posx.configure.compose import compose
from posx.core.errors import PosxError
from posx.schema.config import Config
from posx.schema.fields import MAX_POOL_TOKENS, MAX_SIZE, TASK_FIT_LENGTH
from posx.schema.tasks import TaskOptions
from posx.tasks import base
from posx.tasks.registry import GENERATORS

HUGE = [10**6, 10**9, 2**62]
OVER = [
    ("data.task_options.key_letters", 10**6),
    ("data.task_options.digits", 10**9),
    ("data.task_options.span", 10**7),
    ("data.task_options.queries", 10**6),
    ("data.task_options.hops", 10**6),
    ("data.task_options.trials", 10**8),
    ("eval.task_options.distractors", 10**6),
    ("eval.passkey.digits", 10**6),
    ("eval.passkey.trials", 10**9),
    ("data.task_pool", 10**9),
    ("data.task_options.seed", -1),
]


@pytest.mark.parametrize("key, value", OVER, ids=[f"{k}={v}" for k, v in OVER])
def test_a_size_past_its_bound_is_one_line_naming_the_key(key, value):
    mixed = ["data.task_mix=1", "data.mix_tasks=[niah]"] if key.startswith("data.") else []
    with pytest.raises(PosxError) as info:
        check_config(compose([*mixed, f"{key}={value}"]))
    assert "\n" not in str(info.value) and str(info.value).startswith(f"{key}={value} must be")


def test_a_long_separator_and_a_pool_past_its_tokens_are_refused():
    with pytest.raises(PosxError, match="data.task_options.separator has 9 characters; give at most 8"):
        check_config(compose(["data.task_mix=1", "data.mix_tasks=[mqar]", "data.task_options.separator=:::::::::"]))
    T = 4096
    pool = MAX_POOL_TOKENS // (T + 1) + 1
    args = ["data.task_mix=1", "data.mix_tasks=[niah]", f"train.context_length={T}", f"data.task_pool={pool}"]
    with pytest.raises(PosxError, match=f"set data.task_pool to at most {pool - 1},"):
        check_config(compose(args))


def test_too_few_keys_for_a_mix_names_the_data_key_the_user_set():
    args = ["data.task_mix=1", "data.mix_tasks=[niah_multikey]", "data.task_options.key_letters=1",
            "data.task_options.distractors=40", "train.context_length=1024"]  # fmt: skip
    with pytest.raises(PosxError, match=r"41 distinct words of 1 letters.*raise data\.task_options\.key_letters$"):
        check_config(compose(args))


MIX_ONLY = [
    "data.task_pool=100",
    "data.task_options.span=4",
    "data.task_options.seed=3",
    "data.mix_tasks=[copy]",
    "data.mix_loss=answers",
]


@pytest.mark.parametrize("override", MIX_ONLY)
def test_a_mix_setting_without_a_mix_is_refused_naming_it(override):
    with pytest.raises(PosxError) as info:
        check_train_config(compose([override]))
    said = str(info.value)
    assert said.startswith(f"{override} does nothing with data.task_mix=0: ") and "set data.task_mix above 0" in said
    check_train_config(compose(["data.task_mix=0.5", "data.task_options.span=4", "data.mix_tasks=[copy]", override]))


def test_a_count_check_never_raises_the_alphabet_to_the_letters():
    assert base._more_than(27, 26, 1) and not base._more_than(26, 26, 1)
    assert not base._more_than(10**6, 26, 10**12)  # would be a number of 10^12 digits: answered at once
    assert not base._more_than(2**63, 10, 10**15)


def _options(draw_int) -> dict:
    """Task options drawn across (and past) their bounds."""
    names = [f.name for f in dataclasses.fields(TaskOptions) if f.type in ("int", int)]  # the sizes, not choices
    return {n: draw_int for n in names}


VALUES = st.one_of(st.integers(-3, 80), st.sampled_from([1023, 1024, 1025, 4096, 4097, 65536, *HUGE]))


@settings(max_examples=60, deadline=None)
@given(
    options=st.fixed_dictionaries(_options(VALUES)),
    separator=st.text(":- ", max_size=12),
    T=st.one_of(st.integers(1, 4096), st.sampled_from([TASK_FIT_LENGTH, MAX_SIZE])),
    tasks=st.lists(st.sampled_from(sorted(GENERATORS)), min_size=1, max_size=3, unique=True),
)
def test_every_check_of_task_options_is_bounded_whatever_the_values(options, separator, T, tasks):
    """Ends in None or one line, and never generates past TASK_FIT_LENGTH tokens nor more than
    TRIES samples a task: its cost does not grow with the values (bounded by construction, not timed)."""
    cfg = OmegaConf.structured(Config)
    cfg.train.context_length = T
    cfg.data.task_mix, cfg.data.mix_tasks = 1.0, tasks
    for name, value in {**options, "separator": separator}.items():
        cfg.data.task_options[name] = value
    calls = []
    real = dict(GENERATORS)

    def counted(task):
        def generate(ctx, length, trial, opts, buckets):
            calls.append((task, length, len(ctx.source)))
            return real[task](ctx, length, trial, opts, buckets)

        return generate

    try:
        GENERATORS.update({t: counted(t) for t in real})
        check_config(cfg)
    except PosxError as exc:
        assert "\n" not in str(exc)
    finally:
        GENERATORS.update(real)
    assert all(length <= TASK_FIT_LENGTH and source <= TASK_FIT_LENGTH for _, length, source in calls)
    assert len(calls) <= taskchecks.TRIES * len(tasks)


def test_a_task_that_fits_a_length_fits_every_longer_one_at_the_largest_sizes():
    """What bounding the check rests on: at the schema's largest sizes every task fits
    TASK_FIT_LENGTH tokens (so a longer T is tried there)."""
    largest = {f.name: (f.metadata["bound"].hi if "bound" in f.metadata else f.default)
               for f in dataclasses.fields(TaskOptions)}  # fmt: skip
    opts = OmegaConf.structured(
        TaskOptions(**{**largest, "seed": 0, "trials": 4, "depth_buckets": 4, "separator": ":" * 8})
    )
    for task in GENERATORS:
        assert taskchecks.fits(task, TASK_FIT_LENGTH, opts), task
