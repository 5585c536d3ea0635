"""Analysis of checkpoints against the null laws, reports, plots and verification."""
