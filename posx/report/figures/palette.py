"""One colour per encoding and per RoPE method, one marker per method, the same in every figure.

Colours are fixed by name, not by the order a figure meets its lines; a name outside the tables
gets a colour and marker from a hash of it, stable across figures. Method colours serve figures
whose lines are methods alone (``posx frequencies``, extension.png). Also: sideways offsets on a
log factor axis (``dodge``), staggered markers (``stagger``), wrapped labels (``wrap``, never cut).
"""

from __future__ import annotations

import hashlib
import math
import textwrap

from matplotlib import colormaps

# tab10 in its order: blue, orange, green, red, purple, brown, pink, grey, olive, cyan
ENCODING_COLORS = {
    "rope": "#1f77b4", "alibi": "#ff7f0e", "nope": "#2ca02c", "absolute": "#d62728", "sinusoidal": "#9467bd",
    "t5": "#8c564b", "xpos": "#e377c2", "fire": "#7f7f7f", "kerple": "#bcbd22", "cope": "#17becf",
}  # fmt: skip
# none: RoPE without rescaling, RoPE's blue; then pink, grey, olive, cyan, dark blue, dark olive, ochre, dark red,
# plum, dark green, dark orange, slate purple, mustard, jade, rose, lavender
METHOD_COLORS = {
    "none": ENCODING_COLORS["rope"], "pi": "#e377c2", "ntk": "#7f7f7f", "yarn": "#bcbd22", "abf": "#17becf",
    "dynamic_ntk": "#393b79", "dynamic_yarn": "#637939", "ntk_by_parts": "#8c6d31", "llama3": "#843c39",
    "longrope": "#7b4173", "self_extend": "#31a354", "rerope": "#e6550d", "lm_infinite": "#756bb1", "dca": "#e7ba52",
    "streaming_llm": "#17a768", "interpolate": "#e7969c", "clamp": "#9c9ede",
}  # fmt: skip
# A different marker for every encoding and method (none: RoPE's, like its colour; 7: a caret).
MARKER_OF = {
    "rope": "o", "alibi": "s", "nope": "^", "absolute": "D", "sinusoidal": "v", "t5": "P", "none": "o", "pi": "X",
    "ntk": "<", "yarn": ">", "abf": "*", "dynamic_ntk": "p", "dynamic_yarn": "h", "ntk_by_parts": "d", "llama3": "8",
    "longrope": "H", "self_extend": "2", "rerope": "3", "lm_infinite": "4", "dca": "x", "streaming_llm": "|",
    "resonance": "_", "resonance_yarn": 7, "interpolate": "1", "clamp": "+",
}  # fmt: skip
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*"]  # names outside MARKER_OF, by a hash
DODGE = 0.04  # sideways offset between neighbouring lines, as a share of the factor (log axis)
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


def distinct(n: int) -> list:
    """``n`` colours no two alike (tab10, tab20, then even hues), where no encoding colour applies."""
    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["hsv"](i / n) for i in range(n)]


def marker_of(name: str) -> str:
    """A marker per encoding or method, fixed like the colours."""
    key = _key(name)
    if key in MARKER_OF:
        return MARKER_OF[key]
    return MARKERS[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(MARKERS)]


def dodge_step(n: int, factors=()) -> float:
    """The sideways step between neighbouring lines of ``n``, in log units of the factor: ``DODGE``,
    or less so the outermost line stays within a quarter of the log-gap to the neighbouring factor
    (``factors``: the axis's): no point passes halfway to its neighbour's factor."""
    if n < 2:
        return 0.0
    ordered = sorted({float(f) for f in factors if f > 0})
    gaps = [math.log(b / a) for a, b in zip(ordered, ordered[1:])]
    reach = min(gaps, default=math.log(2)) / 4  # the farthest any line moves from its factor
    return min(math.log1p(DODGE), 2 * reach / (n - 1))


def dodge(x, i: int, n: int, factors=()):
    """Factors ``x`` of the ``i``-th of ``n`` lines moved ``dodge_step`` a line, centred on the true factor."""
    return x * math.exp(dodge_step(n, factors) * (i - (n - 1) / 2))


def dodge_note(n: int, factors=()) -> str:
    """What a caption says about ``dodge`` (empty for one line)."""
    if n < 2:
        return ""
    step = math.expm1(dodge_step(n, factors))
    return f"lines offset sideways by {step:.1%} of a factor each so equal values stay visible"


def stagger(i: int, n: int, points: int, marks: int = 8) -> tuple[int, int]:
    """``markevery`` for the ``i``-th of ``n`` dense lines: about ``marks`` markers, shifted between lines."""
    step = max(1, points // marks)
    return (i * step // max(n, 1)) % step, step


WRAP = 44  # characters per line of a legend entry or panel title; longer labels wrap, never cut


def wrap(label: str, width: int = WRAP) -> str:
    """``label`` in lines of at most ``width``, broken after commas, never cut (a cut hides a key)."""
    return "\n".join(textwrap.wrap(str(label), width, break_long_words=False, break_on_hyphens=False)) or str(label)


LEGEND_LINE = 0.16  # inches a legend text line takes at the report's legend font sizes


def legend_inches(labels: list[str], columns: int = 1) -> float:
    """The inches a legend of ``labels`` in ``columns`` takes: what a figure adds so the axes keep theirs."""
    rows = sum(len(wrap(label).split("\n")) for label in labels)
    return LEGEND_LINE * (-(-rows // columns) + 3)


def legend(target, handles: list, labels: list[str], title: str = "", **kwargs):
    """``target.legend`` (Axes or Figure) with every label and the ``title`` wrapped (``wrap``)."""
    if title:
        kwargs.update(title=wrap(title), title_fontsize=kwargs.get("fontsize"), alignment="left")
    return target.legend(handles, [wrap(label) for label in labels], **kwargs)
