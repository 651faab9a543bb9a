"""Evaluation: scoring protocols, passkey retrieval, the extrapolation of plain and extended runs, their tables."""
