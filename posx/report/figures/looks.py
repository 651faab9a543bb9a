"""How a line of a report figure looks: colour the encoding (a shade per group where a panel holds
several groups of one encoding), hollow marker the method (``palette.marker_of``), line style the
stage (``STAGE_STYLES``). ``looks`` guarantees no two lines of a panel look alike: a repeat takes
the next ``SPARE_STYLES`` dash pattern.
"""

from __future__ import annotations

from matplotlib.colors import to_hex, to_rgb

from posx.report.figures.palette import color_of, marker_of

STAGE_STYLES = {"": "-", "extended": "--", "zero-shot": ":"}
SPARE_STYLES = [(0, (3, 1, 1, 1)), (0, (5, 2)), (0, (1, 1)), (0, (6, 2, 1, 2, 1, 2)), (0, (8, 3)), (0, (2, 4))]
SHADE_SPAN = 0.9  # darkest (-0.45: mixed with black) to lightest (+0.45: mixed with white)


def split_method(method: str) -> tuple[str, str]:
    """("yarn", "extended") for ``yarn (extended)``; (method, "") without a stage."""
    base, _, stage = str(method).partition(" (")
    return base, stage.rstrip(")")


def shade(color, i: int, n: int) -> str:
    """The ``i``-th of ``n`` shades of ``color`` (``n`` = 1: the colour itself), darker first."""
    if n < 2:
        return to_hex(color)
    t = SHADE_SPAN * (i / (n - 1) - 0.5)
    rgb = to_rgb(color)
    mixed = [c * (1 + t) for c in rgb] if t < 0 else [c + (1 - c) * t for c in rgb]
    return to_hex(mixed)


def looks(lines: list[tuple[str, object, str]], size: float = 5.5) -> list[dict]:
    """``Axes.plot`` keywords for each line (encoding, group, method) of one panel (module docstring)."""
    shades: dict[str, list] = {}
    for encoding, group, _method in lines:
        mine = shades.setdefault(encoding, [])
        if group not in mine:
            mine.append(group)
    out, seen = [], set()
    stages = list(dict.fromkeys(split_method(m)[1] for _e, _g, m in lines))
    for encoding, group, method in lines:
        base, stage = split_method(method)
        mine = shades[encoding]
        look = {
            "color": shade(color_of(encoding), mine.index(group), len(mine)),
            "marker": marker_of(base),
            "linestyle": STAGE_STYLES.get(stage, SPARE_STYLES[stages.index(stage) % len(SPARE_STYLES)]),
        }
        spare = 0
        while _key(look) in seen:
            look["linestyle"] = SPARE_STYLES[spare % len(SPARE_STYLES)]
            spare += 1
            if spare > len(SPARE_STYLES):  # every dash taken: a shade of its own
                look["color"] = shade(look["color"], spare, 2 * spare + 1)
        seen.add(_key(look))
        out.append({**look, "markersize": size, "markerfacecolor": "none", "markeredgewidth": 1.2})
    return out


def _key(look: dict) -> tuple:
    return (look["color"], look["marker"], str(look["linestyle"]))
