"""benchmarks/startup.py and the process timing it shares with report_scale: a command's peak
RSS is its own, not the benchmark's, and each checkout's rows are printed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from benchmarks import startup  # repository root on pythonpath
from benchmarks.report_scale import measure


def test_a_commands_peak_rss_is_its_own_not_the_benchmarks():
    held = bytearray(400 << 20)  # this process: 400 MB more than a bare interpreter
    held[:: 1 << 12] = b"x" * len(held[:: 1 << 12])  # touched, so resident
    wall, cpu, rss = measure([sys.executable, "-c", "pass"], dict(os.environ), Path.cwd())
    assert rss < 200, rss
    assert 0 < cpu <= wall + 0.5
    grown = measure(
        [sys.executable, "-c", "b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096])"],
        dict(os.environ),
        Path.cwd(),
    )
    assert grown[2] > rss + 250, (grown, rss)
    del held


def test_a_failing_command_stops_the_benchmark_with_its_error():
    with pytest.raises(SystemExit, match="the bad thing"):
        measure([sys.executable, "-c", "raise SystemExit('the bad thing')"], dict(os.environ), Path.cwd())


def test_both_checkouts_are_timed_and_compared(monkeypatch, capsys, tmp_path):
    here = Path(startup.__file__).resolve().parents[1]
    argv = ["startup", "--rounds", "1", "--command=--version", "--posx-path", str(here), "--cwd", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    startup.main()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `posx --version`")]
    assert [r.split(" | ")[1] for r in rows] == ["this checkout", "--posx-path"]
