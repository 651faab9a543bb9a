"""The schema, the ground floor of posx: every config key, its default, its bounds and its rules.

``fields`` holds the types the schema is made of (the choice Enums, the ``Bound`` of a number);
``methods`` declares each RoPE method once with the dataclass of its parameters (``eval.<method>``)
and the ``Method`` choice; ``tasks`` holds the synthetic tasks' and the passkey test's sections;
``config`` holds the root ``Config`` and its sections (``model``, ``pos``, ``data``, ``train``,
``eval``, ``logger``, ``extend``), which Hydra composes onto. These modules import nothing of posx
but each other, in that order, so every layer above may read their keys, defaults and choices.
"""
