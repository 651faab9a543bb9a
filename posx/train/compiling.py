"""When ``torch.compile`` pays on the CPU, ``train.compile=auto``'s rule: the time saved, steps x
eager_step_s x (1 - 1 / speedup), eager_step_s = 6 x params x tokens_per_step / CPU_FLOPS, exceeds
the compile time. The constants come from ``benchmarks/compile_measure.py`` (docs/measurements.md),
rounded towards not compiling: a wrong "on" costs a wait the user sees, a wrong "off" a small gain.
"""

from __future__ import annotations

import torch

from posx.core.device import use_compile

# Median speed-up of a compiled CPU training step over eager, per model.block (rounded down;
# measured 1.045 to 1.09 for llama at 1 and 2 threads, 0.96 for gpt2).
CPU_TRAIN_SPEEDUP = {"gpt2": 1.0, "llama": 1.04}
CPU_FLOPS = 100e9  # float32 FLOP/s of an eager training step on the CPU (80 to 88 measured at 2 threads;
# rounded up: steps seem shorter)
COMPILE_BASE_S = 10.0  # seconds the first compiled step takes beyond an eager one, at least
COMPILE_PER_LAYER_S = 4.0  # and per layer (measured 15 to 18 s at 2 layers, 21 to 23 s at 4, cold cache)


def compile_seconds(n_layer: int) -> float:
    """Estimated seconds of compiling a model of ``n_layer`` blocks on the CPU."""
    return COMPILE_BASE_S + COMPILE_PER_LAYER_S * n_layer


def saved_seconds(speedup: float, flops: float) -> float:
    """Seconds a compile saves on work of ``flops`` FLOPs that compiled runs ``speedup`` times faster."""
    return flops / CPU_FLOPS * (1.0 - 1.0 / speedup) if speedup > 1.0 else 0.0


def decide_compile(setting: object, device: torch.device, block: str, n_layer: int, params: int, work: tuple) -> bool:
    """train.compile: ``auto`` compiles on CUDA, and on the CPU when it pays for ``work`` (tokens/step, steps)."""
    chosen = use_compile(setting, device)  # checks the setting; auto: CUDA only
    if str(setting).lower() != "auto" or device.type != "cpu":
        return chosen
    tokens_per_step, steps = work
    flops = 6.0 * params * tokens_per_step * steps
    return saved_seconds(CPU_TRAIN_SPEEDUP.get(block, 1.0), flops) > compile_seconds(n_layer)
