"""Configuring a command: composing its config and checking it before any work.

``compose`` composes a config from ``configs/`` and the overrides onto the schema
(``posx.schema``, which holds every key, default and bound) and writes the YAML a run keeps;
``command_line`` reads Hydra's command line once; ``checks``, ``taskchecks`` and ``inert`` check a
composed config against the schema's rules and against what only the registries of the model, the
evaluation and the tasks can tell; ``resume``, ``evalsettings`` and ``applies`` build the config of
a resumed run or an evaluation and refuse overrides that would not apply; ``sweep_dir`` looks at a
sweep's directory before Hydra writes into it; ``reference`` renders the configuration reference.
Named for what it does (it configures), not for what it holds: the schema is ``posx.schema``. It
sits above the packages whose registries it checks against (model, eval, runs, tasks).
"""
