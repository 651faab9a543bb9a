"""The model: its spec, the positional encodings, the GPT, and RoPE rescaling applied to it."""
