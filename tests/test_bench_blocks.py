"""benchmarks/bench_blocks.py: every case runs at every block size, and the limit is restored."""

from __future__ import annotations

import sys

import pytest
import torch

from benchmarks import bench_blocks  # repository root on pythonpath
from posx.model import attention


@pytest.mark.parametrize("device, name", [("cpu", "CPU_CHUNK_ELEMENTS"), ("cuda", "CHUNK_ELEMENTS")])
def test_the_limit_is_set_for_the_call_and_restored(device, name):
    kept, seen = getattr(attention, name), []
    bench_blocks.with_limit(0.5, torch.device(device), lambda: seen.append(getattr(attention, name)), 0)
    assert seen == [(1 << 20) // 8] and getattr(attention, name) == kept
    with pytest.raises(RuntimeError):
        bench_blocks.with_limit(2, torch.device(device), lambda: (_ for _ in ()).throw(RuntimeError("x")), 0)
    assert getattr(attention, name) == kept


def test_a_tiny_run_times_every_method_at_every_size(monkeypatch, capsys):
    argv = "--context 16 --factor 2 --batch 2 --heads 2 --head-dim 8 --rounds 2 --sizes 1 0.0005 --threads 1"
    monkeypatch.setattr(sys, "argv", ["bench_blocks", *argv.split()])
    threads, kept = torch.get_num_threads(), attention.CPU_CHUNK_ELEMENTS
    try:
        bench_blocks.main()
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    for method in ["self_extend", "rerope", "lm_infinite", "dca", "streaming_llm", "cope"]:
        for size in ["1", "0.0005"]:
            assert f"{method} @ {size} MiB" in out, (method, size)
    assert "sdpa causal" in out and attention.CPU_CHUNK_ELEMENTS == kept
