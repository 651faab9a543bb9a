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
METHODS_REASONS = {
    "the T5 bias": "with five seeds the means still order the paper's way at 8x in both protocols (8.40 against "
    "11.95 non-overlapping), but RoPE's spread at 8x is wide (± 1.81 over five seeds: how far past T a seed's "
    "rotary pairs wrap varies with training), so the gap of 3.54 stays just inside 2 sigma (3.79). Two more "
    "seeds did not call it; the spread, not the mean, is the obstacle.",
    "zero-shot YaRN beats NTK": "five seeds call YaRN's lead at 4x and 8x (and at every length with sliding "
    "windows), but at 2x NTK is level with YaRN or slightly ahead (4.13 against 4.18), on both blocks. With "
    "head_dim 32 only 16 rotary pairs exist and at T = 128 few of them turn fewer than beta_slow times over T, "
    "so at s = 2 NTK's base change and YaRN's ramp move nearly the same pairs, and YaRN's attention "
    "temperature (1.07 at s = 2) costs a little. On the llama block, with three seeds, NTK's spread (± 0.55 at "
    "4x) hides the lead the gpt2 block shows.",
    "sinusoidal": "under the sliding protocol every scored token sees at least half a window of context, so plain "
    "RoPE also meets unseen distances on every token and blows up too (20.4 ± 5.7 at 8x); both are far above "
    "their 1x values and the seeds spread widely, so the gap between them stays inside 2 sigma.",
    "FIRE beats ALiBi": "FIRE is better than ALiBi at T (4.28 against 4.44) and beats the T5 bias far out, but "
    "past T it climbs (4.95 at 8x) while ALiBi stays flat. FIRE divides every distance by the query's own "
    "position, psi(i - j) / psi(max(L, i)): at 8x a key 128 tokens back gets the bias a key about 34 back "
    "got at the end of a training window (c near its initial 0.1), so local order blurs as it does under PI. "
    "The paper's lead over ALiBi is for T = 2048 on C4 with much larger models, where the learned function "
    "had seen far more distinct normalised distances.",
    "KERPLE": "the means order the paper's way at every length past T (4.25 against 4.33 at 8x), but the gap is "
    "inside 2 sigma with three seeds (0.19): both biases keep the loss flat here, and the log kernel's edge is "
    "small at T = 128.",
    "xPos": "xPos beats RoPE clearly at 4x and 8x; at 2x the gap (4.10 against 4.74) sits just inside 2 sigma "
    "(0.68), because both models' spreads over three seeds grow fast past T.",
    "RoPE rotating a fraction": "with a quarter of its pairs rotating the model is worse at T (4.08 against "
    "3.92, beyond 2 sigma): at head_dim 32 that leaves 4 rotating pairs, too few to carry position at this "
    "size. At 8x its mean is lower (10.2 against 11.9) but inside RoPE's wide spread. Barbero et al. measured "
    "Gemma-scale models with head_dim 256.",
    "log-n scaling": "log-n scaling sharpens attention past T, but RoPE's loss at 8x comes from rotation angles "
    "it never saw, which sharper attention does not undo: 12.4 ± 2.1 against 11.9 ± 1.8. Its claim is about "
    "attention dilution over long inputs, which a 4-layer byte model at 8 x 128 tokens barely suffers.",
    "Scalable-Softmax": "as for log-n scaling: the mean at 8x is lower (10.9 against 11.9) but inside the spread; "
    "scaling the softmax does not remove the unseen rotation angles that dominate RoPE's loss past T.",
    "NoPE every 2 layers": "with 4 layers, half of them still rotate and meet unseen angles past T exactly as "
    "before (12.7 ± 0.7 at 8x against 11.9 ± 1.8); Yang et al.'s gain is for 8B models trained on long "
    "contexts, where the NoPE layers do the long-range retrieval.",
    "Dual Chunk Attention": "DCA holds far better than plain RoPE (4.25 against 11.9 at 8x) but not at T's "
    "level (3.92): queries in later chunks see every earlier chunk at one shared position (the chunk size, "
    "3T/4 by default), which flattens the order of everything beyond the local window.",
    "a short fine-tune": "as in the first edition: 200 steps take PI from 12.99 to 4.44 at 4x, but not to "
    "within 10% of the parent at T (4.31): interpolation squeezes positions 4x, and a byte-level model leans "
    "on fine positional resolution over short distances, which it has to relearn. The PI paper fine-tuned "
    "for 1000 steps on 7B-65B models.",
    "fine-tuned YaRN": "YaRN beats fine-tuned PI clearly (3.75 against 4.44), but with five seeds it is still "
    "level, within 2 sigma, with ABF (3.77) and with plain continued training at 512 (3.79): at this scale 200 "
    "steps at the new length are enough for any method that does not compress positions.",
    "Resonance improves YaRN": "fine-tuned, Resonance YaRN and YaRN are level (3.743 against 3.750, three "
    "seeds): Resonance rounds the wavelengths of the pairs that turn within the training length to whole "
    "tokens, and with 16 rotary pairs at T = 128 that moves few pairs by little.",
    "ReRoPE": "ReRoPE caps every distance past its window (T/4 = 32 by default) at the window, so it is already "
    "a little worse at T (3.95 against 3.92); the byte-level tiny model gains only about 0.06 from twice the "
    "context (StreamingLLM at 2x: 3.85), so ReRoPE at 2x (3.92) lands level with RoPE at T, inside 2 sigma.",
}
REASONS = {"first": FIRST_REASONS, "methods": METHODS_REASONS}
SEEDS = {  # how many seeds each grid trains (scripts/study_grids.py)
    "first": "3 seeds each",
    "methods": "3 seeds each (5 for RoPE, the T5 bias and RoPE's four main extensions)",
}
