"""Corpora: the bytes posx trains and evaluates on, cached and fingerprinted."""
