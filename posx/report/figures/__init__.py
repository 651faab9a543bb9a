"""The figures of a report: ``plots`` (which are drawn) and ``drawing`` (each family a job, in
worker processes); the families ``ppl_figures`` (perplexity against length), ``position_figures``
(loss by position), ``task_figures`` (the task suite, with its summary table), ``learning``
(accuracy at T against training tokens) and ``extension`` (what ``posx extend`` bought, with its
table); what they share: ``facets`` (which groups share a panel, line labels), ``shown`` (which
groups are drawn past ``--top``), ``axes``, ``looks`` (colour = encoding, marker = method),
``palette`` (the colours and markers themselves) and ``output`` (PNG and PDF)."""
