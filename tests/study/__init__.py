"""Tests of the studies (``scripts.study``): the papers' claims, the notes, the study drivers and
their state files. A package, so its test files may share a name with one in ``tests/``."""
