"""Configuring a command: composing its config onto the schema (``posx.schema``), checking it before
any work, and the config of a resumed run, an evaluation or a sweep's directory."""
