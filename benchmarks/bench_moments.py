"""What the moment statistics (Lemmas 7 to 10) add to a null law: their share of the sampler's time.

The null law of a Gaussian head draws, per sample, the Bartlett spectra
(``nulls.bartlett_spectra``: one triangular product and one 2n x 2n eigvalsh)
and turns them into statistics (``statistics.spectra_statistic_columns``). The
columns lobe_imbalance, lobe_overlap, moment_O, moment_E and moment_R come
from the same eigenvalues (``moments.lobe_moments``, O(n) per sample). This
prints, for MiniLM's shape (32, 384) and a 7B shape (128, 4096), the minimum
over ``--repeats`` rounds of: the spectra, all the statistics from them, and
the moments alone, and the moments' share of the whole, all measured in this
run. Nothing is asserted.

Run:  python benchmarks/bench_moments.py [--samples 1000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

from qkenergy.math import nulls
from qkenergy.math.moments import lobe_moments
from qkenergy.math.spectrum import lobes
from qkenergy.math.statistics import STATISTICS, spectra_statistic_columns


def _best(work: object, repeats: int) -> float:
    assert callable(work)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def _shape(n: int, N: int, samples: int, repeats: int) -> None:
    """One line of the table: the three minima and the moments' share, for heads (n, N)."""
    spectra = nulls.bartlett_spectra(np.random.default_rng(0), n, N, samples)
    drawing = _best(lambda: nulls.bartlett_spectra(np.random.default_rng(0), n, N, samples), repeats)
    columns = _best(lambda: spectra_statistic_columns(spectra, N, STATISTICS), repeats)
    eigs = spectra["eigs"]
    assert eigs is not None
    alpha, beta = lobes(eigs, length=n)
    alone = _best(lambda: lobe_moments(eigs, alpha, beta), repeats)
    share = alone / (drawing + columns)
    print(f"{n:>4} {N:>5} {drawing:>10.3f} {columns:>13.3f} {alone:>10.4f} {share:>13.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1000, help="null draws per shape")
    parser.add_argument("--repeats", type=int, default=5, help="rounds; the minimum is printed")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.samples} draws, minimum of {args.repeats} rounds")
    print(f"{'n':>4} {'N':>5} {'spectra s':>10} {'statistics s':>13} {'moments s':>10} {'moments share':>14}")
    with threadpool_limits(1):
        for n, N in ((32, 384), (128, 4096)):
            _shape(n, N, args.samples, args.repeats)


if __name__ == "__main__":
    main()
