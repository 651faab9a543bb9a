"""The project's scripts, run from the repository root: shell scripts (``compat.sh``,
``gpu_check.sh``, ``wheelhouse.sh``), ``kill_resume_soak.py``, and the studies as one package
(``scripts.study``: ``python -m scripts.study.reference``). Not part of the library: ``posx``
imports nothing from here."""
