"""Reports: the comparison HTML page and every output of one analyze run."""
