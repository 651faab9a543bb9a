"""transformers interop: export a llama-block run as a LlamaForCausalLM, evaluate a local checkpoint."""
