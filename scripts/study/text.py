"""The reference study notes' prose: the figure captions, each number in them from the study's
own tables at write time (the extension's factor and seeds, the longest length evaluated).

Why a claim is not supported is no longer prose typed in here: ``study_verdicts.reason`` writes
it from the claim's rows of claims.csv.
"""

from __future__ import annotations

import pandas as pd

SMOOTH = 3  # posx report --smooth: the moving mean of the per-position figures, in buckets


def _extension_caption(ext: pd.DataFrame | None) -> str:
    """extension.png's caption: the new length and the seeds from the extension table."""
    if ext is None or ext.empty:
        return "Perplexity at the new length against fine-tuning steps of `posx extend`."
    factors = ", ".join(f"{f:g}" for f in sorted(set(ext["factor"])))
    seeds = sorted(set(ext["n_seeds"].astype(int)))
    per = " or ".join(map(str, seeds))
    methods = ", ".join(dict.fromkeys(ext["method"]))
    return (
        f"Perplexity at the new length ({factors} T) against fine-tuning steps of `posx extend` ({methods}). "
        "Step 0 (hollow) is the zero-shot evaluation; later points are the validation estimates logged during "
        f"training. Mean, band ± std over the parent seeds each experiment has ({per})."
    )


def captions(ext: pd.DataFrame | None, longest: float) -> dict[str, str]:
    """Each figure's caption, in the order STUDY.md shows them."""
    return {
        "encodings.png": "Perplexity against evaluation length (log-log; T = the training length, dashed), one row "
        "per block (gpt2, llama) and protocol (non-overlapping windows; sliding windows, every token scored "
        "with at least half a window of context). Left: each encoding on its own (learned absolute past its "
        "table with clamp and interpolate, each with its marker; plain absolute cannot score past T). Right: "
        "the RoPE models with each rescaling method, zero-shot. Mean over seeds, band ± std over seeds.",
        "positions_by_encoding.png": f"Mean loss by token position inside windows of {longest:g} T (non-overlapping), "
        f"moving mean over {SMOOTH} position buckets; where each encoding's loss starts to climb past T. "
        "Band ± std over seeds.",
        "passkey.png": "Passkey retrieval by evaluation length: exact-match accuracy (top) and the mean NLL of the "
        "key digits (bottom; chance is ln 10), for the prompt and copy variants, mean ± std over seeds.",
        "extension.png": _extension_caption(ext),
        "ppl_vs_length.png": "Every line of the summary, one panel per block and protocol (posx report's default "
        "figure).",
        "positions.png": "Loss by position, one panel per group (posx report's default figure).",
        "training.png": "Training and validation loss of every run.",
    }
