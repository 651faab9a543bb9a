"""What a report knows of each run, and the cache that keeps it: ``digest`` (the small record
each run writes at the end of training and evaluation) and ``digestcheck`` (its fields checked,
its seal), ``groups`` (a run's identity; which runs are seeds of one group), ``selection``
(``--where``), ``runtables`` (what is read of each run), ``scan`` (every run's tables in one
DuckDB scan) and ``literal`` (every file DuckDB reads, by a plain name), ``cache`` (the report
cache of those scans, in ``.cache/`` beside the reports) and ``queries`` (the numbers as SQL)."""
