"""posx.train.memory: the warning a run too large for the machine prints before its first step,
and where the free memory is read from. How close the estimate comes to a measured peak is in
docs/measurements.md, not here."""

from __future__ import annotations

import torch

from posx.train import memory

from helpers.cli import run_posx
from helpers.model import spec

CPU = torch.device("cpu")


def test_the_estimate_grows_with_the_tokens_of_a_pass_and_the_width():
    config = spec()
    one, two = (memory.estimate_bytes(config, t, 1000, CPU) for t in (4096, 8192))
    state = memory.estimate_bytes(config, 0, 1000, CPU)
    assert state == 16 * 1000 and two - state == 2 * (one - state)
    wider = spec(d_model=256, n_head=4)
    assert memory.activation_elements(wider.model) == 2 * memory.activation_elements(config.model)
    assert memory.estimate_bytes(config, 4096, 0, torch.device("cuda")) < one  # bf16 activations


def test_a_warning_only_when_the_estimate_exceeds_what_is_free(monkeypatch):
    config = spec()
    need = memory.estimate_bytes(config, 32 * 4096, 10, CPU)
    monkeypatch.setattr(memory, "available_bytes", lambda device: need)
    assert memory.warning(config, 32, 4096, 10, CPU) is None
    monkeypatch.setattr(memory, "available_bytes", lambda device: need - 1)
    line = memory.warning(config, 32, 4096, 10, CPU)
    assert "32 x 4096 tokens" in line and "train.micro_batch_size" in line and "\n" not in line
    monkeypatch.setattr(memory, "available_bytes", lambda device: None)  # unknown: no guess
    assert memory.warning(config, 32, 4096, 10, CPU) is None


def test_free_memory_is_the_smaller_of_the_machine_and_its_cgroup(tmp_path, monkeypatch):
    meminfo, cgroup = tmp_path / "meminfo", tmp_path / "cgroup"
    cgroup.mkdir()
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   20000000 kB\n")
    monkeypatch.setattr(memory, "MEMINFO", meminfo)
    monkeypatch.setattr(memory, "CGROUP", cgroup)
    assert memory.available_bytes(CPU) == 20000000 * 1024  # no cgroup files
    (cgroup / "memory.max").write_text("max\n")
    (cgroup / "memory.current").write_text("1000\n")
    assert memory.available_bytes(CPU) == 20000000 * 1024  # no limit
    (cgroup / "memory.max").write_text(f"{8 * 1024**3}\n")
    assert memory.available_bytes(CPU) == 8 * 1024**3 - 1000
    meminfo.write_text("MemTotal: garbage\n")
    assert memory.available_bytes(CPU) == 8 * 1024**3 - 1000
    (cgroup / "memory.max").unlink()
    assert memory.available_bytes(CPU) is None


def test_posx_train_warns_and_trains_on(tmp_path, monkeypatch, tiny_args):
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1024)
    proc = run_posx("train", *tiny_args, "train.steps=2", "name=w", cwd=tmp_path)
    assert "warning: this run needs about" in proc.stdout and "the machine has 0.0 GiB free" in proc.stdout
    assert (tmp_path / "results" / "runs" / "w" / "model.safetensors").is_file()
