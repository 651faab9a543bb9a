"""Which groups a figure may draw side by side, and what each of its lines is called.

Groups that differ in a ``FACET_KEYS`` key (T, model size, block, tokenizer) never share an axes:
each *facet* has its own panels or files. A line is one group (keyed by group label, parent,
encoding: columns every report table carries); its legend entry names the encoding, the method
and the keys that differ between the groups of its panel (``Facets.names``), a key's usual value
said once in the legend's title (``Facets.usual``). See docs/evaluation.md.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

import pandas as pd

from posx.report.figures.axes import legend_order
from posx.report.store.groups import COLUMN_KEYS, differences

FACET_KEYS = ("T", "model.n_layer", "model.n_head", "model.d_model", "model.block", "data.tokenizer", "data.vocab_size")
LINE = ["group", "parent", "encoding"]  # what names one group's line in every report table
MAX_LINES = 12  # lines on one axes a reader can tell apart; more split into further panels
MAX_PANELS = 6  # panels in one file; more split into further files


@dataclass(frozen=True)
class Facets:
    of: dict = field(default_factory=dict)  # (group, parent, encoding) -> facet label
    identities: dict = field(default_factory=dict)  # (group, parent, encoding) -> the group's identity
    keys: tuple = ()  # the facet keys that differ over the report
    context: tuple = ()  # the lines labels are told apart from (``among``); none: each panel's own

    def among(self, lines: list[tuple]) -> Facets:
        """These facets naming lines against all ``lines`` (a facet's): a group is called alike in every panel."""
        return replace(self, context=tuple(dict.fromkeys(tuple(line[:3]) for line in lines)))

    def facet(self, key: tuple) -> str:
        return self.of.get(tuple(key), "")

    def split(self, data: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
        """``data`` (columns ``LINE``) per facet, in a stable order (T ascending first)."""
        if data.empty:
            return []
        keys = [tuple(k) for k in data[LINE].fillna("").astype(str).itertuples(index=False)]
        labels = pd.Series([self.facet(k) for k in keys], index=data.index)
        order = sorted(set(labels), key=_facet_order)
        return [(f, data[labels == f]) for f in order]

    def _shown(self, keys: list[tuple]) -> tuple[list[str], dict[str, str]]:
        """The keys the groups ``keys`` differ in (but those said elsewhere), and the usual value of each."""
        pool = self.context or dict.fromkeys(tuple(k) for k in keys)
        known = [self.identities[k] for k in pool if k in self.identities]
        shown = [k for k in differences(known) if k not in COLUMN_KEYS and k not in self.keys]
        usual = {k: v for k in shown if (v := _usual([i[k] for i in known if k in i])) is not None}
        return shown, usual

    def names(self, keys: list[tuple]) -> dict[tuple, str]:
        """Per line key, ``k=v, ...`` of the keys its group differs in from the panel's, but ``usual`` ones;
        a group without a recorded identity is called by its label."""
        shown, usual = self._shown(keys)
        out = {}
        for key in dict.fromkeys(tuple(k) for k in keys):
            ident = self.identities.get(key)
            if ident is None:
                out[key] = "" if key[0] in ("", "-") else str(key[0])
            else:
                said = [k for k in shown if k in ident and (k not in usual or ident[k] != usual[k])]
                out[key] = ", ".join(f"{k}={ident[k]}" for k in said)
        return out

    def usual(self, keys: list[tuple]) -> str:
        """The legend title that says the values ``names`` leaves unsaid ("" when it leaves none)."""
        _, usual = self._shown(keys)
        return ("where a label does not say: " + ", ".join(f"{k}={v}" for k, v in usual.items())) if usual else ""


def _usual(values: list) -> object | None:
    """The value more of ``values`` hold than any other, if at least two hold it; else None."""
    counts = pd.Series(values, dtype=object).value_counts(sort=True)
    if len(counts) == 0 or counts.iloc[0] < 2 or (len(counts) > 1 and counts.iloc[1] == counts.iloc[0]):
        return None
    return counts.index[0]


def _facet_order(label: str) -> tuple:
    """Facets by T first (numerically), then by label."""
    first = label.split(", ")[0]
    if first.startswith("T="):
        try:
            return (0, float(first[2:]), label)
        except ValueError:
            pass
    return (1, 0.0, label)


def _value(ident: dict, key: str) -> str:
    """The identity's facet value; a BPE vocabulary size only where the tokenizer is BPE."""
    if key == "data.vocab_size" and ident.get("data.tokenizer", "byte") == "byte":
        return ""
    return str(ident.get(key, ""))


def facets_of(identities: dict[tuple, dict]) -> Facets:
    """``identities``: (group, parent, encoding) -> identity, one per group of the report."""
    values = {line: {k: _value(ident, k) for k in FACET_KEYS} for line, ident in identities.items()}
    varying = tuple(k for k in FACET_KEYS if len({v[k] for v in values.values()}) > 1)
    of = {line: ", ".join(f"{k}={v[k] or '—'}" for k in varying) for line, v in values.items()}
    return Facets(of, dict(identities), varying)


def pack(lines: list[tuple], size: int = MAX_LINES) -> list[list[tuple]]:
    """``lines`` in pieces of at most ``size``, a group's lines in one piece where they fit: a reader
    compares one group's methods inside one panel."""
    pieces: list[list[tuple]] = []
    for _, same in itertools.groupby(lines, key=lambda line: tuple(line[:3])):
        mine = list(same)
        if pieces and len(pieces[-1]) + len(mine) <= size:
            pieces[-1] += mine
        else:
            pieces += chunks(mine, size)
    return pieces


def pair_pieces(left: pd.DataFrame, right: pd.DataFrame, order) -> list[tuple]:
    """A row's two sides ``pack``ed (``order``: a side's lines) as (left, right) pieces, None where a side
    has fewer pieces than the other."""
    pieces = [pack(order(side)) if not side.empty else [] for side in (left, right)]
    n = max(map(len, pieces))
    return [
        tuple(rows_on(side, cut[i]) if i < len(cut) else None for side, cut in zip((left, right), pieces))
        for i in range(n)
    ]


def rows_on(data: pd.DataFrame, lines: list[tuple]) -> pd.DataFrame:
    """The rows of ``data`` on ``lines`` (``LINE`` + method, as text; a missing value as "")."""
    keys = pd.MultiIndex.from_frame(data[[*LINE, "method"]].fillna("").astype(str))
    return data[keys.isin([tuple(line) for line in lines])]


def chunks(items: list, size: int) -> list[list]:
    """``items`` in consecutive pieces of at most ``size``."""
    return [items[i : i + size] for i in range(0, len(items), size)] or [[]]


def file_names(name: str, n: int) -> list[str]:
    """``name``, then ``<stem>-2.<ext>``, ...: ``n`` files of one figure (bounded by ``--top``)."""
    stem, dot, ext = name.rpartition(".")
    return [name if i == 0 else f"{stem}-{i + 1}{dot}{ext}" for i in range(n)]


def panel_title(facet: str, part: int = 0, parts: int = 1) -> str:
    """A panel's facet, and which part of it when its lines were split over several panels."""
    split = f" (lines {part + 1} of {parts} panels)" if parts > 1 else ""
    return (facet or "all groups") + split


def line_labels(facets: Facets, lines: list[tuple]) -> list[str]:
    """Legend entries of one panel's ``lines``: encoding · method · parent · what differs (``names``)."""
    names = facets.names([line[:3] for line in lines])
    return [
        " · ".join(part for part in (f"{e} · {m}", f"from {p}" if p else "", names[(g, p, e)]) if part)
        for g, p, e, m in lines
    ]


def legend_texts(facets: Facets, lines: list[tuple]) -> list[str]:
    """Every text of a panel's legend, to size it by: its labels and its title (``usual``)."""
    usual = facets.usual([line[:3] for line in lines])
    return [*line_labels(facets, lines), *([usual] if usual else [])]


def band_name(seeds: list[int], one: str = "95% window interval (one seed)") -> str:
    """What a line's band is: ± std over its seeds, or for one seed ``one`` (its own interval)."""
    low, high = min(seeds), max(seeds)
    if high <= 1:
        return one
    return f"± std over {high} seeds" if low == high else f"± std over {low}–{high} seeds"


def one_band(bands: list[str]) -> str:
    """The band every line has (said once, by the caller), or "" when they differ (each label says its own)."""
    return bands[0] if len(set(bands)) == 1 else ""


def sorted_lines(data: pd.DataFrame) -> list[tuple]:
    """The lines (``LINE`` + method, as text; a missing value or column as "") of ``data``, by encoding and method."""
    keys = dict.fromkeys(
        data.reindex(columns=[*LINE, "method"], fill_value="").fillna("").astype(str).itertuples(index=False, name=None)
    )
    return sorted(keys, key=lambda k: (k[2], legend_order(k[3])))


def split_rows(data: pd.DataFrame, columns: list[str]) -> dict[tuple, pd.DataFrame]:
    """The rows of each key of ``columns`` (as text, a missing value as ""), from one pass over ``data``."""
    return dict(iter(data.groupby([data[c].fillna("").astype(str) for c in columns], sort=False)))


def rows_of(data: pd.DataFrame, columns: list[str], key: tuple) -> pd.DataFrame:
    """The rows of ``data`` whose ``columns`` (as text, a missing value as "") equal ``key``."""
    return data[(data[columns].fillna("").astype(str) == pd.Series(key, index=columns)).all(axis=1)]
