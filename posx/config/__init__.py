"""Configuration: the typed schema (no posx imports), value checks, composition, resumed configs."""
