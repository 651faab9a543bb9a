"""What a report knows of each run, and the cache that keeps it: ``digest``,
``groups``, ``selection`` (``--where``), ``runtables``, ``scan`` and ``literal``, ``cache``,
``queries`` (the numbers as SQL)."""
