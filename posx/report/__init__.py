"""Reports: what posx makes of runs once they are written (no model is loaded).

* ``summary``: ``posx report`` from end to end: read the runs, group their seeds, write the
  tables, draw the figures, write ``summary.md``.
* ``store/``: what a report knows of each run and where it keeps it: each run's digest (its
  seed, identity and tables), which runs are seeds of one group, ``--where``, the scan of every
  run's tables into Parquet, the report cache (``.cache/`` beside the reports, e.g.
  ``results/reports/.cache/``) and the numbers as SQL over it.
* ``figures/``: every figure of a report, the tables written beside them (tasks, extension), and
  what they share: colours, markers, axes, facets, which groups are drawn, PNG and PDF output.
* ``tables/``: the words of a report: ``summary.md``, the terminal table, Markdown tables.
* ``compare/``: runs side by side: ``posx runs``, ``posx compare`` and its comparison over seeds.
* ``stats``: the one statistical rule behind every verdict (``posx compare`` over seeds, the
  studies' claims): a difference of means with its 95% interval, from scipy.stats.
"""
