"""The model: its config, the positional encodings, the GPT, and RoPE rescaling applied to it."""
