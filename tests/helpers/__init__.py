"""Shared test helpers: the environment tests run in, the ``posx`` command in process and as a
process, and the tiny runs the tests train."""
