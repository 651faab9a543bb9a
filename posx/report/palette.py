"""One colour per encoding and per RoPE method, the same in every figure of posx.

Colours are fixed by name, not by the order in which a figure meets its lines, so RoPE is the
same blue and YaRN the same olive in every figure of every report. A line named
``<encoding> · <method>`` takes its method's colour when it rescales (any method but ``none``)
and its encoding's otherwise (also when what follows the dot is no method, e.g. a group in the
training curves): ``rope · none`` is RoPE itself (learned absolute's ``clamp`` and
``interpolate`` past its table keep the encoding's colour; figures tell them by line style).
A name outside the tables (an encoding or method added later) gets a colour from a hash of the
name, stable across figures and runs, until it is given one here. Markers follow the same
rule, so lines that coincide stay visible by their markers.
"""

from __future__ import annotations

import hashlib

from matplotlib import colormaps

ENCODING_COLORS = {
    "rope": "#1f77b4",  # blue
    "alibi": "#ff7f0e",  # orange
    "nope": "#2ca02c",  # green
    "absolute": "#d62728",  # red
    "sinusoidal": "#9467bd",  # purple
    "t5": "#8c564b",  # brown
}
METHOD_COLORS = {
    "none": ENCODING_COLORS["rope"],  # RoPE without rescaling
    "pi": "#e377c2",  # pink
    "ntk": "#7f7f7f",  # grey
    "yarn": "#bcbd22",  # olive
    "abf": "#17becf",  # cyan
    "dynamic_ntk": "#393b79",  # dark blue
    "dynamic_yarn": "#637939",  # dark olive
    "ntk_by_parts": "#8c6d31",  # ochre
    "llama3": "#843c39",  # dark red
    "longrope": "#7b4173",  # plum
    "interpolate": "#e7969c",  # rose
    "clamp": "#9c9ede",  # lavender
}
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*"]
NATIVE = ("none", "clamp", "interpolate")  # an encoding on its own, not a RoPE rescaling


def _key(name: str) -> str:
    """The encoding or method a line name stands for (a group suffix `` (...)`` dropped)."""
    name = str(name).split(" (")[0]
    if " · " in name:
        encoding, method = name.split(" · ", 1)
        method = method.split(" ")[0]  # a stage suffix
        if method in METHOD_COLORS and method not in NATIVE:
            return method
        return encoding if encoding in ENCODING_COLORS or method in NATIVE else method
    return name


def color_of(name: str):
    """The colour of an encoding, a method, or a line ``<encoding> · <method>``."""
    key = _key(name)
    if key in ENCODING_COLORS:
        return ENCODING_COLORS[key]
    if key in METHOD_COLORS:
        return METHOD_COLORS[key]
    digest = int(hashlib.sha256(key.encode()).hexdigest(), 16)
    cmap = colormaps["tab20b"]
    return cmap(digest % cmap.N)


def colors_for(names) -> dict:
    """{name: colour} for every name (``color_of`` each)."""
    return {name: color_of(name) for name in dict.fromkeys(names)}


def marker_of(name: str) -> str:
    """A marker per encoding or method, fixed like the colours."""
    key = _key(name)
    order = [*ENCODING_COLORS, *METHOD_COLORS]
    index = order.index(key) if key in order else int(hashlib.sha256(key.encode()).hexdigest(), 16)
    return MARKERS[index % len(MARKERS)]
