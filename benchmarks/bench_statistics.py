"""Per-head statistics: Gram route (2n x 2n) against the dense route (N x N L).

For each head shape (n, N) = (64, 768) and (128, 4096), time every statistic
of a few Gaussian heads (float32 weights, as in checkpoints) by both routes,
starting from the weights: the Gram route is head_statistics (head_gram +
gram_statistics), the dense route forms L = W_K^T W_Q and runs
dense_statistics. Dense at (128, 4096) is slow (eigvalsh and an SVD of a
4096 x 4096 matrix), so it times one or two heads, once; the Gram route is
the best of three runs. Prints the per-head times and their ratio measured
in this run; asserts nothing about timing
(target: >= 10x at (128, 4096)).

    python benchmarks/bench_statistics.py [--dense-heads-large 1] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time

import numpy as np

from qkenergy.math.statistics import STATISTICS, dense_statistics, head_statistics


def dense_route(w_query: np.ndarray, w_key: np.ndarray):
    """The reference: form each N x N L = W_K^T W_Q in float64, then dense statistics."""
    L = np.swapaxes(w_key.astype(np.float64), -1, -2) @ w_query.astype(np.float64)
    return dense_statistics(L)


def per_head_seconds(route, w_query: np.ndarray, w_key: np.ndarray, repeats: int = 1):
    """Best of `repeats` wall-clock runs, divided by the number of heads."""
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        result = route(w_query, w_key)
        best = min(best, time.perf_counter() - start)
    return best / w_query.shape[0], result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dense-heads-large", type=int, default=1, help="dense heads timed at (128, 4096)")
    args = parser.parse_args()
    print("command:", shlex.join([os.path.basename(sys.executable), *sys.argv]))
    print(f"numpy {np.__version__}, python {platform.python_version()}, {os.cpu_count()} CPUs")

    rng = np.random.default_rng(args.seed)
    cases = [(64, 768, 12, 4), (128, 4096, 8, args.dense_heads_large)]

    header = ("n", "N", "gram heads", "gram s/head", "dense heads", "dense s/head", "ratio", "max |diff|")
    widths = (5, 6, 10, 12, 11, 13, 8, 10)
    print(" ".join(f"{title:>{width}}" for title, width in zip(header, widths)))
    for n, N, gram_heads, dense_heads in cases:
        w_query = (rng.standard_normal((gram_heads, n, N)) / np.sqrt(N)).astype(np.float32)
        w_key = (rng.standard_normal((gram_heads, n, N)) / np.sqrt(N)).astype(np.float32)
        # best of 3: the first call at a shape pays for page faults and LAPACK workspaces
        gram_time, via_gram = per_head_seconds(head_statistics, w_query, w_key, repeats=3)
        dense_time, via_dense = per_head_seconds(dense_route, w_query[:dense_heads], w_key[:dense_heads])
        # the two routes must agree on the heads both computed
        diff = max(
            float(np.nanmax(np.abs(getattr(via_gram, name)[:dense_heads] - getattr(via_dense, name))))
            for name in STATISTICS
        )
        print(
            f"{n:>5} {N:>6} {gram_heads:>10} {gram_time:>12.4f} {dense_heads:>11} "
            f"{dense_time:>13.3f} {dense_time / gram_time:>7.0f}x {diff:>10.1e}"
        )


if __name__ == "__main__":
    main()
