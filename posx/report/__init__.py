"""Reports: summaries over seeds, plots, the RoPE frequency table, sweep tables."""
