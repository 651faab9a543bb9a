"""The schema, the ground floor of posx: every config key, its default, its bounds and its rules.
``fields`` (the types: choice Enums, bounds), ``methods`` (each RoPE method and its parameters),
``tasks`` and ``config`` (the root ``Config``) import nothing of posx but each other, in that order.
"""
