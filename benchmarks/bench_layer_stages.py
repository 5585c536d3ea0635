"""Where one layer's per-head statistics spend their time, step by step, on one core.

For one layer of a checkpoint, each step of head_statistics is timed on its
own (best of ``--repeats``, warm caches), summed over the layer's pieces:
the Gram products (piece_gram), their rescaling, the Cholesky factor, the
blocks Z = A^T [B, D], the symmetric core, the core's eigenvalues, ||T||^2,
Z Z^T and its eigenvalues (the singular values of L), and the statistics
from the spectra; then the whole head_statistics call. The floor of a layer
is its Gram products plus one 2n x 2n eigvalsh per head; everything else is
overhead above it. Prints milliseconds per layer and shares of the whole,
with the load average; asserts nothing. Run it pinned to one core with one
BLAS thread:

    OPENBLAS_NUM_THREADS=1 taskset -c 0 python benchmarks/bench_layer_stages.py MODEL [--layer 1] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from qkenergy.base.parallel import single_threaded_blas
from qkenergy.math import gram, spectrum, statistics
from qkenergy.weights.architecture import architecture
from qkenergy.weights.checkpoint import open_model
from qkenergy.weights.reading import LayerWeights, read_layer


def best_ms(step: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """(best wall-clock milliseconds of ``repeats`` calls, the last result)."""
    best, result = np.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        result = step()
        best = min(best, time.perf_counter() - start)
    return 1e3 * best, result


def time_piece(weights: LayerWeights, piece: np.ndarray, repeats: int, times: dict[str, float]) -> None:
    """Add each step's best time on the query heads ``piece`` to ``times``."""
    w_query, w_key, kv_head = weights.w_query, weights.w_key, weights.kv_head
    n, N = w_query.shape[-2:]

    def timed(name: str, step: Callable[[], Any]) -> Any:
        ms, result = best_ms(step, repeats)
        times[name] = times.get(name, 0.0) + ms
        return result

    G = timed("Gram products (piece_gram)", lambda: gram.piece_gram(w_query, w_key, kv_head, piece))
    G, reason = timed("rescale, failed heads (_prepare_gram)", lambda: statistics._prepare_gram(G))
    V = timed("Cholesky factor", lambda: spectrum.psd_factor_lower(np.swapaxes(G, -1, -2))[0])
    X, Y, Z = timed("Z = A^T [B, D]", lambda: spectrum.triangular_blocks(V))
    core = timed("symmetric core", lambda: spectrum.block_symmetric_core(X, Y, upper_only=True))
    eigs = timed("eigenvalues of the core", lambda: np.linalg.eigvalsh(core, UPLO="U"))
    norm_t = timed("||T||^2 from the blocks", lambda: spectrum.block_skew_energy(X, Y))
    zz = timed("Z Z^T", lambda: Z @ np.swapaxes(Z, -1, -2))
    timed("eigenvalues of Z Z^T (h)", lambda: np.linalg.eigvalsh(zz))
    top_left, top_right = core[..., :n, :n], core[..., :n, n:]
    norm_s = np.sum(top_left * top_left, axis=(-2, -1)) + 2.0 * np.sum(top_right**2, axis=(-2, -1))
    spectra = {"eigs": eigs, "norm_s_sq": norm_s, "norm_t_sq": norm_t, "h": spectrum.block_singular_values(Z)}
    timed(
        "statistics from the spectra",
        lambda: statistics._statistics_from_spectra(
            **spectra,
            norm_l_sq=norm_s + norm_t,
            trace_l=gram.gram_trace(G),
            N=N,
            lobe_length=n,
            reason=reason,
            radius=0.02,
            zero_tol=1e-9,
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--layer", type=int, default=1, help="a layer after the first (its warm-up)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with open_model(args.model) as source:
        arch = architecture(source.config)
        weights = read_layer(source.tensors, arch, args.layer)
    w_query, w_key, kv_head = weights.w_query, weights.w_key, weights.kv_head
    n, N = w_query.shape[-2:]
    pieces = gram.query_pieces(kv_head, n, N)
    times: dict[str, float] = {}
    with single_threaded_blas():
        for piece in pieces:
            time_piece(weights, piece, args.repeats, times)
        whole, _ = best_ms(
            lambda: statistics.head_statistics(
                w_query, w_key, kv_head=kv_head, heads=np.arange(len(kv_head))
            ),
            args.repeats,
        )
    print(
        f"{args.model}: layer {args.layer}, {len(kv_head)} heads ({w_key.shape[0]} kv), n={n}, N={N}, "
        f"{len(pieces)} pieces, {w_query.dtype} (load average {os.getloadavg()[0]:.1f})"
    )
    for name, ms in times.items():
        print(f"   {name:40s} {ms:8.2f} ms  {100 * ms / whole:5.1f}%")
    print(f"   {'head_statistics, the whole layer':40s} {whole:8.2f} ms")


if __name__ == "__main__":
    main()
