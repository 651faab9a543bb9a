"""Reports: what posx makes of runs once they are written (no model is loaded).

``summary`` (``posx report`` from end to end), ``store/`` (what a report knows of each run: digests,
groups, ``--where``, the scan and cache of every run's tables, the numbers as SQL), ``figures/``,
``tables/`` (``summary.md``, the terminal table), ``compare/`` (``posx runs``, ``posx compare``) and
``stats`` (the one statistical rule behind every verdict: a difference of means with its 95%
interval, from scipy.stats). See docs/evaluation.md.
"""
