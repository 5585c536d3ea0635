"""The bottom layer: errors, number formatting, threads, signals, BLAS kernels; nothing of qkenergy above it."""
