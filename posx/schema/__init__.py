"""The schema, posx's ground floor: every config key with its default, bounds and rules. ``fields``,
``methods``, ``tasks`` and ``config`` import nothing of posx but each other, in that order."""
