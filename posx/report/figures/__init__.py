"""The figures of a report: ``plots`` (which are drawn) and ``drawing`` (each family a job), the
families (``ppl_figures``, ``position_figures``, ``task_figures``, ``learning``, ``extension``) and
what they share (``facets``, ``shown``, ``axes``, ``looks``, ``palette``, ``output``)."""
