"""Evaluation: scoring protocols, passkey retrieval, the extrapolation of plain and extended runs,
their tables, and a sweep's one table of every job's (``sweep``)."""
