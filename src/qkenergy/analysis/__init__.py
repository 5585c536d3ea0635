"""Analysis of models against the null laws: per-head analysis, significance, null cache, comparison, summary."""
