"""The reference study notes' prose: figure captions, and per edition why a claim may not hold.

A reason is written from the edition's own numbers after its runs end; ``study_notes.py`` prints
it under a claim that was not reproduced (matched by the start of the claim's text).
"""

from __future__ import annotations

CAPTIONS = {
    "encodings.png": "Perplexity against evaluation length (log-log; T = the training length, dashed), one row "
    "per block (gpt2, llama) and protocol (non-overlapping windows; sliding windows, every token scored "
    "with at least half a window of context). Left: each encoding on its own (learned absolute past its "
    "table with clamp and interpolate, each with its marker; plain absolute cannot score past T). Right: "
    "the RoPE models with each rescaling method, zero-shot. Mean over seeds, band ± std over seeds.",
    "positions_by_encoding.png": "Mean loss by token position inside windows of 8 T (non-overlapping), moving mean "
    "over 3 buckets of T/8 positions; where each encoding's loss starts to climb past T. "
    "Band ± std over seeds.",
    "passkey.png": "Passkey retrieval by evaluation length: exact-match accuracy (top) and the mean NLL of the key "
    "digits (bottom; chance is ln 10), for the prompt and copy variants, mean ± std over seeds.",
    "extension.png": "Perplexity at the new length (4 T) against fine-tuning steps of `posx extend` for PI, YaRN, "
    "ABF and plain continued training. Step 0 (hollow) is the zero-shot evaluation; later points "
    "are the validation estimates logged during training. Mean, band ± std over the 3 parent seeds.",
    "ppl_vs_length.png": "Every line of the summary, one panel per block and protocol (posx report's default figure).",
    "positions.png": "Loss by position, one panel per group (posx report's default figure).",
    "training.png": "Training and validation loss of every run.",
}
# Why a claim may not hold here, per grid (each edition's numbers); printed only under a claim not reproduced.
FIRST_REASONS = {
    "sinusoidal": "under the sliding protocol every scored token sees at least half a window of context, so plain "
    "RoPE also meets unseen distances on every token and blows up too; both are far above their 1x "
    "values and the seeds spread widely at 8x, so the gap between them stays inside 2 sigma.",
    "the T5 bias": "the ordering holds in the means at 4x and 8x in both protocols, but RoPE's spread over three "
    "seeds at 8x is wide (± 1.9 non-overlapping), so the gap to T5 sits just inside 2 sigma "
    "(4.03 against 4.08 non-overlapping). More seeds would likely call it.",
    "zero-shot YaRN beats NTK": "at 2x NTK is level with YaRN. The tiny model has head_dim 32, so 16 rotary pairs, "
    "and at T = 128 only a few of them turn fewer than beta_slow times over T. At "
    "small s, NTK's base change and YaRN's ramp then move nearly the same pairs, and "
    "YaRN's attention temperature (1.07 at s = 2) costs a little. YaRN's lead grows "
    "with s: it is called at 8x non-overlapping and at 4x sliding, but NTK's seed "
    "spread hides it elsewhere. This is scale and T, not byte tokens.",
    "a short fine-tune": "200 steps take PI from 12.96 to 4.46 at 4x, but not to within 10% of the parent at T "
    "(4.33), and PI also loses accuracy at T (4.59 against 3.94). Interpolation squeezes "
    "positions 4x, and a byte-level model leans on fine positional resolution over short "
    "distances, which it has to relearn. The PI paper fine-tuned for 1000 steps on 7B-65B "
    "models; posx's own extend measurement needed about 140 steps to come within 10% on the "
    "validation estimator, so PI is slow rather than broken here.",
    "fine-tuned YaRN": "YaRN beats fine-tuned PI clearly. It is level, within 2 sigma, with ABF and with plain "
    "continued training at 512: at this scale 200 steps at the new length are enough for any "
    "method that does not compress positions. The paper's advantage comes from 7B/13B models "
    "fine-tuned on a small share of their training tokens.",
}
METHODS_REASONS: dict[str, str] = {}
REASONS = {"first": FIRST_REASONS, "methods": METHODS_REASONS}
SEEDS = {  # how many seeds each grid trains (scripts/study_grids.py)
    "first": "3 seeds each",
    "methods": "3 seeds each (5 for RoPE, the T5 bias and RoPE's four main extensions)",
}
