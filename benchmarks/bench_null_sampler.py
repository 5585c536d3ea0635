"""Null sampling of a Gaussian head: Bartlett-Wishart G against direct C C^T.

Direct: draw W_K, W_Q (n x N, iid normal), C = [W_K; W_Q], G = C C^T, O(n^2 N)
per sample and 2nN normals. Bartlett: G = U U^T with U upper triangular (chi
diagonal, normal above), formed in place by LAPACK dlauum, O(n^3) per sample
and n(2n+1) random numbers, independent of N. Prints samples per second for
both at (n, N) = (64, 768) and (128, 4096), their ratio measured in this run,
the "normals only" ceiling of the Bartlett route (samples/s if it did nothing
but draw its n(2n+1) normals; that over direct/s bounds the ratio), and a
two-sample KS p-value on the symmetric energy s = 1/2 + tr(L^2)/(2||L||^2)
computed from G (the two routes must be indistinguishable).

Run:  python benchmarks/bench_null_sampler.py [--quick] [--threads T]

BLAS runs single-threaded by default (--threads 1): a per-core comparison that
stays meaningful on a shared machine, where a multi-threaded BLAS is slowed
down by orders of magnitude on the many small products of the Bartlett route.
--threads 0 leaves the BLAS default.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time


def _threads_from_argv(argv: list[str]) -> int:
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--threads="):
            return int(arg.split("=", 1)[1])
    return 1


# BLAS reads its thread count when numpy is first imported.
_THREADS = _threads_from_argv(sys.argv[1:])
if _THREADS > 0:
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = str(_THREADS)

import numpy as np  # noqa: E402
import scipy  # noqa: E402
from scipy import stats  # noqa: E402

from qkenergy.math.nulls import bartlett_gram, direct_gram  # noqa: E402


def symmetric_energy(G: np.ndarray, n: int) -> np.ndarray:
    """s from G: ||L||^2 = sum G_KK * G_QQ, tr L^2 = sum G_QK * G_QK^T, G_QK = G[n:, :n]."""
    gkk, gqq, gqk = G[:, :n, :n], G[:, n:, n:], G[:, n:, :n]
    norm_l = np.einsum("bij,bij->b", gkk, gqq)
    tr_l2 = np.einsum("bij,bji->b", gqk, gqk)
    return 0.5 + tr_l2 / (2 * norm_l)


def timed(sampler, n: int, N: int, size: int, seed: int, min_time: float) -> tuple[float, np.ndarray]:
    """Samples per second of ``sampler`` alone (wall clock, at least ``min_time`` seconds in it).

    The symmetric energy of every draw is kept for the KS test but computed
    outside the timed calls.
    """
    rng = np.random.default_rng(seed)
    sampler(rng, n, N, min(size, 4))  # warm-up: BLAS threads, page faults of the first buffers
    draws = []
    count, elapsed = 0, 0.0
    while elapsed < min_time:
        start = time.perf_counter()
        G = sampler(rng, n, N, size)
        elapsed += time.perf_counter() - start
        draws.append(symmetric_energy(G, n))
        count += size
    return count / elapsed, np.concatenate(draws)


def normals_ceiling(n: int, size: int, seed: int, min_time: float) -> float:
    """Bartlett samples/s if the route did nothing but draw its n(2n+1) normals per sample."""
    rng = np.random.default_rng(seed)
    buffer = np.empty((size, n * (2 * n + 1)))
    rng.standard_normal(out=buffer)
    count, start = 0, time.perf_counter()
    while True:
        rng.standard_normal(out=buffer)
        count += size
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (about 1/4 of the time)")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (0: library default)")
    args = parser.parse_args()
    min_time = 2.0 if args.quick else 8.0

    print("command:", shlex.join([os.path.basename(sys.executable), *sys.argv]))
    threads = "library default" if args.threads <= 0 else str(args.threads)
    print(
        f"numpy {np.__version__}, scipy {scipy.__version__}, python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, BLAS threads: {threads}, "
        f"load average {os.getloadavg()[0]:.1f} (start)"
    )
    print(
        f"{'(n, N)':>12} {'bartlett/s':>11} {'direct/s':>9} {'ratio':>6} "
        f"{'normals-only/s':>14} {'cap':>6} {'K bart':>7} {'K dir':>6} {'KS p (s)':>9}  "
        f"mean s (exact (N+1)/2N)"
    )
    for n, N, bsize, dsize in [(64, 768, 256, 16), (128, 4096, 64, 4)]:
        rate_b, s_b = timed(bartlett_gram, n, N, bsize, seed=1, min_time=min_time)
        rate_d, s_d = timed(direct_gram, n, N, dsize, seed=2, min_time=min_time)
        ceiling = normals_ceiling(n, bsize, seed=3, min_time=min_time / 4)
        p = stats.ks_2samp(s_b, s_d).pvalue
        print(
            f"{(n, N)!s:>12} {rate_b:11.1f} {rate_d:9.2f} {rate_b / rate_d:5.1f}x "
            f"{ceiling:14.1f} {ceiling / rate_d:5.1f}x {s_b.size:7d} {s_d.size:6d} {p:9.3f}  "
            f"{s_b.mean():.6f} / {s_d.mean():.6f} ({(N + 1) / (2 * N):.6f})"
        )
    print(f"load average {os.getloadavg()[0]:.1f} (end)")


if __name__ == "__main__":
    main()
