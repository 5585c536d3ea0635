"""The defaults of the null laws and of the head-type rule, each written once.

A module without numpy, so that the command line's options read them without loading
the mathematics.
"""

from __future__ import annotations

__all__ = ["EDGE_CUT", "IMBALANCE_CUT", "RADIUS", "SAMPLES"]

SAMPLES = 2000
"""Draws of the Gaussian null law per head shape (n, N); its smallest empirical p is 2/(SAMPLES + 1)."""
IMBALANCE_CUT = 0.20
"""Type I+ above it, I- below minus it (the imbalance rule of math.head_types)."""
EDGE_CUT = 0.01
"""Type II whenever c + d is at most this (the imbalance rule)."""
RADIUS = 0.02
"""Type II when c_sym + d_sym is at most this (the radius rule)."""
