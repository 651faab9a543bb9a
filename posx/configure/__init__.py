"""Configuring a command: composing its config onto the schema (``posx.schema``) and checking it
before any work (``compose``, ``command_line``, ``checks``, ``taskchecks``), the config
of a resumed run or an evaluation (``resume``, ``evalsettings``, ``applies``), a sweep's directory
(``sweep_dir``) and the configuration reference (``reference``)."""
