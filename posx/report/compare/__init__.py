"""Runs side by side: ``collection`` (``posx runs``, ``posx compare``) and ``seed_compare``."""
