"""Runs side by side: ``collection`` (``posx runs`` lists runs, ``posx compare`` sets their tables
side by side) and ``seed_compare`` (``posx compare`` over seeds: groups compared by their means,
under the one rule of ``posx.report.stats``)."""
