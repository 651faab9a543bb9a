"""Measurement scripts: throughput, memory and protocol measurements of posx, run from the
repository root against the installed package (``pip install -e .``), e.g.
``python -m benchmarks.bench_encodings``. They share ``benchmarks.harness``."""
