"""The model: what it is built from (``spec.ModelSpec``: the schema's ``model`` and ``pos``
sections resolved against T, and the vocabulary; the sections themselves are ``posx.schema``'s),
the positional encodings, the GPT, and RoPE rescaling applied to it."""
