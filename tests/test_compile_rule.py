"""train.compile=auto's CPU rule (posx.train.compiling): its decisions, not its timings."""

from __future__ import annotations

import pytest
import torch

from posx.core.errors import PosxError
from posx.train import compiling

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
TINY = {"n_layer": 4, "params": 824_448}  # llama_tiny / tiny: 0.82M parameters
DEFAULT_STEP = 32 * 128  # train.batch_size x train.context_length


def auto(block: str, steps: int, device=CPU, n_layer=4, params=824_448, tokens=DEFAULT_STEP) -> bool:
    return compiling.decide_compile("auto", device, block, n_layer, params, (tokens, steps))


def test_a_long_llama_run_compiles_and_a_default_or_smoke_run_does_not():
    assert auto("llama", 10_000)  # a quarter of an hour of training gains more than a compile costs
    assert not auto("llama", 800)  # the default run: a few percent of three minutes, under the compile
    assert not auto("llama", 20)
    assert not auto("llama", 60, n_layer=2, params=117_056, tokens=32 * 64)  # experiment=quick


def test_gpt2_never_compiles_on_the_cpu_where_compile_gains_nothing():
    assert not auto("gpt2", 100_000)
    assert compiling.saved_seconds(compiling.CPU_TRAIN_SPEEDUP["gpt2"], 1e18) == 0.0


def test_the_rule_is_monotone_in_steps_and_the_break_even_is_where_saved_equals_cost():
    flips = [s for s in range(1, 5000, 10) if auto("llama", s) != auto("llama", s + 10)]
    assert len(flips) == 1  # off, then on from one number of steps on
    steps = flips[0] + 10
    flops = 6.0 * TINY["params"] * DEFAULT_STEP * steps
    saved = compiling.saved_seconds(compiling.CPU_TRAIN_SPEEDUP["llama"], flops)
    before = compiling.saved_seconds(compiling.CPU_TRAIN_SPEEDUP["llama"], flops * (steps - 10) / steps)
    assert saved > compiling.compile_seconds(4) >= before


def test_explicit_settings_and_cuda_are_not_the_rules_business():
    assert compiling.decide_compile("true", CPU, "gpt2", 4, 1, (1, 1))
    assert compiling.decide_compile(True, CPU, "gpt2", 4, 1, (1, 1))
    assert not compiling.decide_compile("false", CPU, "llama", 4, 10**9, (10**6, 10**6))
    assert compiling.decide_compile("auto", CUDA, "gpt2", 4, 1, (1, 1))
    with pytest.raises(PosxError, match="train.compile=sometimes"):
        compiling.decide_compile("sometimes", CPU, "gpt2", 4, 1, (1, 1))
